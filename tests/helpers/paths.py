"""Where things are, for tests in any subfolder of ``tests/``.

Test modules live one folder below ``tests/`` (``tests/store/``,
``tests/read/``, ...); they name files through these constants instead of
``Path(__file__)`` arithmetic, so moving a test between folders changes
nothing.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
HELPERS = TESTS / "helpers"
FIXTURES = TESTS / "fixtures"

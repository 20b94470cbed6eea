"""Property-based: every public method of MessageStore and Consumer (the read
methods included) called with edge integers (0, -1, 2**31, 2**63, 2**64, ...)
and odd types (None, str, float, bytes, list, dict) returns, or raises
ValueError/TypeError or a documented StoreError, and never takes the
process down.

The calls run in a subprocess (``tests/helpers/fuzz_api_child.py``, hypothesis
inside), so an abort or a segfault fails the test instead of killing the
test runner. The default run is bounded; ``-m slow`` runs a larger one.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import HELPERS

pytest.importorskip("hypothesis")
pytest.importorskip("pyarrow")

HELPER = HELPERS / "fuzz_api_child.py"


def _fuzz(tmp_path: Path, examples: int, seed: int) -> None:
    p = subprocess.run([sys.executable, str(HELPER), str(tmp_path / "store"), str(examples),
                        str(seed)], capture_output=True, text=True, timeout=1800)
    if p.returncode < 0:
        pytest.fail(f"the process died of {signal.Signals(-p.returncode).name}:\n"
                    f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert p.stdout.split() == ["ok", str(examples)], p.stdout


@pytest.mark.parametrize("seed", [1, 2])
def test_public_methods_survive_odd_arguments(tmp_path: Path, seed: int) -> None:
    _fuzz(tmp_path, 600, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 8))
def test_public_methods_survive_odd_arguments_long(tmp_path: Path, seed: int) -> None:
    _fuzz(tmp_path, 5000, seed)

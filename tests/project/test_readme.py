"""The README's Python examples run as written, on small stores in temporary
directories that are removed afterwards; they type-check under
``mypy --strict``; the disk use the README states is what they use."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers.paths import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as a script in ``cwd`` (a traceback then shows its lines)."""
    cwd.mkdir(exist_ok=True)
    script = cwd / "example.py"
    script.write_text(code)
    try:
        return subprocess.run(
            [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True,
            timeout=120, env={**os.environ, "PYTHONWARNINGS": "error::ResourceWarning"},
        )
    finally:
        script.unlink()


def _disk_use(root: Path) -> int:
    """Bytes allocated to ``root`` and everything below it (what ``du`` counts)."""
    return sum(p.stat().st_blocks * 512 for p in [root, *root.rglob("*")])


def test_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 2
    # The first commands of the README stay true: the demo exists, and the
    # test extras the second command installs exist.
    first = re.search(r"```bash\n(.*?)```", README, re.S)
    assert first is not None
    install, test = first.group(1).strip().splitlines()[:2]
    assert install == "pip install . && rocketstore demo"
    assert test.startswith("pip install -e '.[test]'") and "python -m pytest" in test
    # CI runs exactly the README's test command.
    assert test in (REPO / ".ci" / "run").read_text().splitlines()
    assert "test = [" in (REPO / "pyproject.toml").read_text()


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs_as_written(index: int) -> None:
    code = BLOCKS[index]
    with tempfile.TemporaryDirectory(prefix="rocketstore-readme-") as tmp:
        cwd = Path(tmp)
        # As written: the first example reads a message back by key right
        # after putting it, which the store's read-your-writes rule allows.
        result = _run(code, cwd)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        # Small stores only: nothing near a default 1 GiB segment.
        assert _disk_use(cwd) < 8 * 1024 * 1024
    assert not cwd.exists()


def test_readme_states_the_disk_the_quickstart_store_uses() -> None:
    claim = re.search(r"this store takes about ([\d.]+) MiB on disk", README)
    assert claim is not None
    stated = float(claim.group(1)) * 1024 * 1024
    code = BLOCKS[0]
    with tempfile.TemporaryDirectory(prefix="rocketstore-readme-") as tmp:
        result = _run(code, Path(tmp))
        assert result.returncode == 0, result.stderr
        used = _disk_use(Path(tmp) / "quickstart-store")
    assert abs(used - stated) <= 0.1 * 1024 * 1024, (used, stated)


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy not installed")
def test_readme_examples_pass_mypy_strict(tmp_path: Path) -> None:
    files = []
    for i, code in enumerate(BLOCKS):
        f = tmp_path / f"readme_block_{i}.py"
        f.write_text(code)
        files.append(str(f))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--cache-dir", os.devnull, *files],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_says_the_test_build_stays_installed_and_how_to_undo_it() -> None:
    from rocketstore import _native

    # Where the test command is explained, the README warns that the
    # fail-point build stays installed and gives the command that puts the
    # release build back, with a check that tells the two apart.
    start = README.index("The first line builds the package")
    note = README[start:README.index("## ", start)]
    assert "stays installed" in note
    assert "pip install --force-reinstall --no-deps ." in note
    check = re.search(r"hasattr\(n, '(\w+)'\)", note)
    assert check is not None
    # The check names a hook only the fail-point build has: this (test) build has it.
    assert hasattr(_native, check.group(1))
    # ... and the release build has not: it is compiled only with the feature.
    src = (REPO / "rust" / "src" / "python" / "mod.rs").read_text().splitlines()
    at = src.index(f'#[pyo3(name = "{check.group(1)}")]')
    assert '#[cfg(feature = "failpoints")]' in src[at - 3:at]

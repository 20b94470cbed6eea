"""Numbers the README states about the project itself stay true: the test
counts of each set are what pytest collects from this checkout, every
minimum PySpark version the docs name is the one ``pyproject.toml``
requires, and the default set does not depend on PySpark (so the README's
test command, which installs ``.[test]`` only, collects the count it
states)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from helpers.paths import REPO, TESTS

README = (REPO / "README.md").read_text(encoding="utf-8")
PYPROJECT = (REPO / "pyproject.toml").read_text(encoding="utf-8")

#: Counts every collected test by the sets of the README's table.
_COUNT = """
import json, sys
import pytest

class Count:
    def __init__(self):
        self.sets = {"default": 0, "slow": 0, "spark": 0, "all": 0}

    def pytest_collection_finish(self, session):
        for item in session.items:
            marks = {m.name for m in item.iter_markers()}
            self.sets["all"] += 1
            self.sets["slow"] += "slow" in marks
            self.sets["spark"] += "spark" in marks
            self.sets["default"] += not marks & {"slow", "spark"}

c = Count()
code = pytest.main(["--collect-only", "-q", "-m", "", "--basetemp", sys.argv[1]], plugins=[c])
print("COUNTS " + json.dumps(c.sets))
sys.exit(int(code))
"""


def _stated(command: str) -> int:
    """The first number in the README table's row for ``command``."""
    row = re.search(rf"^\s*\| `{re.escape(command)}` \|([^|]*)\|", README, re.M)
    assert row is not None, f"the README's test table has no row for {command}"
    n = re.search(r"\d[\d,]*", row.group(1))
    assert n is not None, row.group(0)
    return int(n.group(0).replace(",", ""))


def test_the_readme_test_counts_are_what_pytest_collects(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "python"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", _COUNT, str(tmp_path / "base")], cwd=REPO,
                       capture_output=True, text=True, timeout=240, env=env)
    line = next((x for x in r.stdout.splitlines() if x.startswith("COUNTS ")), None)
    assert r.returncode == 0 and line is not None, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(line[len("COUNTS "):])
    stated = {"default": _stated("python -m pytest"), "slow": _stated("python -m pytest -m slow"),
              "spark": _stated("python -m pytest -m spark"),
              "all": _stated('python -m pytest -m ""')}
    assert stated == got, f"README states {stated}; pytest collects {got}"


def _minimum_pyspark() -> str:
    m = re.search(r'"pyspark>=([\d.]+)', PYPROJECT)
    assert m is not None
    return m.group(1)


def test_one_minimum_pyspark_version_everywhere() -> None:
    want = _minimum_pyspark()
    texts = {"README.md": README}
    for p in [*(REPO / "docs").glob("*.md"), *(REPO / "python").rglob("*.py")]:
        texts[str(p.relative_to(REPO))] = p.read_text(encoding="utf-8")
    named = {(where, v) for where, text in texts.items()
             for v in re.findall(r"PySpark\W{0,3}(?:>=|≥)\s*([\d.]+)", text, re.I)}
    assert ("README.md", want) in named, "the README names no minimum PySpark version"
    assert {v for _, v in named} == {want}, sorted(named)


def test_modules_needing_pyspark_are_in_the_spark_set() -> None:
    """A default-set module that skips itself without PySpark would make the
    default set's count depend on the extras installed."""
    unmarked = []
    for p in TESTS.rglob("test_*.py"):
        text = p.read_text(encoding="utf-8")
        if re.search(r'^(?:pytest\.importorskip\("pyspark"\)|from pyspark|import pyspark)',
                     text, re.M) and "pytestmark = pytest.mark.spark" not in text:
            unmarked.append(str(p.relative_to(REPO)))
    assert unmarked == []

"""No test or benchmark names a file outside the repository: the static check
(``scripts/check_test_paths.py``, run by CI) passes on the repository and
finds each way a path can leave it; the audit hook of ``tests/conftest.py``
fails a test that opens such a file at run time."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from helpers.paths import REPO

SCRIPT = REPO / "scripts" / "check_test_paths.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_test_paths", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_repository_passes() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test paths ok" in done.stdout


BAD_PY = '''
import os
from pathlib import Path
from helpers.where import UP

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent.parent / "elsewhere" / "data"    # line 7: beside the repository
a = Path(__file__).parents[3] / "x"                          # line 8
b = open("../elsewhere/data/store.json")                     # line 9
c = Path("/srv/elsewhere/data")                              # line 10
d = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "..", "y")  # 11
e = UP / "z"                                                 # line 12: through an import
'''
GOOD_PY = '''
import os
from pathlib import Path
from helpers.where import TESTS

HERE = Path(__file__).resolve().parent
FIX = HERE.parent / "fixtures" / "store"
a = Path(__file__).parents[1] / "x"
b = open("/proc/self/status")
c = Path("/dev/shm") / "scratch"
topics = ["../x", "..", "a/b"]          # names, not paths
d = TESTS / "fixtures"
e = Path(os.path.dirname(__file__)) / ".." / "helpers"
'''
WHERE_PY = '''
from pathlib import Path
TESTS = Path(__file__).resolve().parents[1]
UP = TESTS.parent.parent
'''
BAD_RS = '''
const A: &[u8] = include_bytes!("../../../other/x.bin");     // line 2
fn f() { let _ = std::fs::read("/srv/elsewhere/y"); }        // line 3
fn g() { let _ = std::path::Path::new("../outside"); }        // line 4
'''
GOOD_RS = '''
const A: &[u8] = include_bytes!("../fixtures/x.bin");
fn f() { let _ = std::fs::read("/proc/self/maps"); }
fn g(d: &std::path::Path) { let _ = d.join("..").join("x"); }
'''


def test_every_way_out_is_found(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "tests" / "helpers").mkdir(parents=True)
    (root / "tests" / "unit").mkdir()
    (root / "benches").mkdir()
    (root / "tests" / "helpers" / "where.py").write_text(WHERE_PY)
    (root / "tests" / "unit" / "test_bad.py").write_text(BAD_PY)
    (root / "tests" / "unit" / "test_good.py").write_text(GOOD_PY)
    (root / "tests" / "bad.rs").write_text(BAD_RS)
    (root / "benches" / "good.rs").write_text(GOOD_RS)
    found = _load().check(root)
    lines = sorted((p.split(":")[0], int(p.split(":")[1])) for p in found)
    assert lines == [
        ("tests/bad.rs", 2), ("tests/bad.rs", 3), ("tests/bad.rs", 4),
        ("tests/helpers/where.py", 4),  # UP itself leaves the repository
        ("tests/unit/test_bad.py", 7), ("tests/unit/test_bad.py", 8),
        ("tests/unit/test_bad.py", 9), ("tests/unit/test_bad.py", 10),
        ("tests/unit/test_bad.py", 11), ("tests/unit/test_bad.py", 12),
    ], found
    assert any(str(tmp_path / "elsewhere" / "data") in p for p in found), found
    # The command line fails with the list.
    done = subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 1 and "tests/unit/test_bad.py:9:" in done.stdout, done.stdout


GUARDED = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import outside_guard
root, beside = sys.argv[2], sys.argv[3]
outside_guard.install(root)
seen = {}
for name, path in [("beside", beside), ("inside", os.path.join(root, "f.json")),
                   ("system", "/proc/self/status"), ("walk", os.path.join(root, "..", "x"))]:
    try:
        with open(path) as f:
            f.read()
        seen[name] = "read"
    except PermissionError as e:
        seen[name] = "refused: " + str(e)
    except FileNotFoundError:
        seen[name] = "missing"
try:
    os.listdir(os.path.dirname(root))
    seen["listdir"] = "read"
except PermissionError:
    seen["listdir"] = "refused"
seen["taken"] = outside_guard.take()
print(json.dumps(seen))
"""


def test_the_run_time_guard_refuses_a_file_beside_the_repository(tmp_path: Path) -> None:
    """The audit hook tests/conftest.py installs, in a process of its own with
    a repository in a temporary folder: a file beside it is refused (also
    through ``..`` and a listing of its parent), files inside it and system
    files are not, and refusals are kept for the test to fail."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "f.json").write_text("{}")
    beside = tmp_path / "shared.json"
    beside.write_text("{}")
    done = subprocess.run(
        [sys.executable, "-c", GUARDED, str(REPO / "tests" / "helpers"), str(root), str(beside)],
        capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["beside"].startswith("refused: ") and "outside the repository" in seen["beside"]
    assert seen["walk"].startswith("refused: "), seen
    assert seen["listdir"] == "refused"
    assert (seen["inside"], seen["system"]) == ("read", "read")
    assert seen["taken"] == [str(beside), str(tmp_path / "x"), str(tmp_path)]


def test_this_process_is_guarded() -> None:
    from helpers import outside_guard

    assert outside_guard.installed_root() == str(REPO)
    assert outside_guard.outside("/")
    assert not outside_guard.outside(str(REPO / "tests" / "fixtures"))

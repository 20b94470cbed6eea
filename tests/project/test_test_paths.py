"""No test or benchmark names a file outside the repository: the static check
(``scripts/check_test_paths.py``, run by CI) passes on the repository and
finds each way a path can leave it; the audit hook of ``tests/conftest.py``
(``tests/helpers/outside_guard.py``) fails a test that opens such a file at
run time. Both follow one rule, wherever the clone lives (under ``/tmp``,
under a path with spaces) and whatever ``TMPDIR`` said: outside the
repository only pytest's base temporary folder of the run and the
interpreter's and system's folders, never the repository's parent."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

from helpers import outside_guard
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


CLONE_PY = '''
from pathlib import Path
a = Path("/tmp/elsewhere/data")                  # line 3: /tmp is not a fixture folder
b = open("/var/tmp/store.json")                  # line 4
c = Path("{parent}") / "shared"                  # line 5: the repository's parent
d = Path("{root}") / "tests" / "fixtures"        # inside (with its space)
e = Path("/usr/share/zoneinfo/UTC")              # a system folder
f = open("/proc/self/status")
'''


def test_a_clone_under_tmp_with_a_space_in_its_path(tmp_path: Path) -> None:
    """The static check in a clone at ``.../tmp/rs clone``: ``/tmp`` and
    ``/var/tmp`` in general, and the clone's parent, are outside; the clone
    itself and the system's folders are not."""
    root = tmp_path / "tmp" / "rs clone"
    (root / "tests" / "unit").mkdir(parents=True)
    (root / "benches").mkdir()
    (root / "tests" / "unit" / "test_x.py").write_text(
        CLONE_PY.format(parent=root.parent, root=root))
    found = _load().check(root)
    assert [int(p.split(":")[1]) for p in found] == [3, 4, 5], found
    assert f"{root.parent}/shared is outside" in found[2], found


def test_the_static_check_shares_the_guards_rule() -> None:
    module = _load()
    assert module.ALLOWED_ABSOLUTE == outside_guard.SYSTEM_FOLDERS
    assert "/tmp" not in module.ALLOWED_ABSOLUTE and "/var/tmp" not in module.ALLOWED_ABSOLUTE
    # A system folder that holds the repository is not allowed either.
    assert module._allowed("/usr/share/x", "/srv/rs")
    assert not module._allowed("/usr/share/x", "/usr/src/rs")
    assert module._allowed("/usr/src/rs/tests/x", "/usr/src/rs")


def test_the_guards_folders_wherever_the_clone_lives() -> None:
    """``allowed_folders`` and ``allowed``, the rule itself, for a clone under
    /tmp with a space in its path and the run's base temporary folder
    beside it, and for a clone inside a system folder."""
    root, base = "/tmp/rs clone", "/tmp/pytest-of-u/pytest-7"
    folders = outside_guard.allowed_folders(root, base)
    assert base in folders
    assert not {"/tmp", "/var/tmp", "/tmp/pytest-of-u"} & set(folders)
    assert set(outside_guard.SYSTEM_FOLDERS) <= set(folders)

    def ok(path: str) -> bool:
        return bool(outside_guard.allowed(path, root, folders))

    assert ok("/tmp/rs clone/tests/fixtures/x") and ok(base + "/tmpdir/store/commitlog")
    assert ok("/proc/self/status") and ok(sys.prefix)
    for refused in ("/tmp", "/tmp/rs", "/tmp/rs clone2/x", "/tmp/shared.json",
                    "/tmp/pytest-of-u/pytest-6/x", "/var/tmp/x", "/"):
        assert not ok(refused), refused
    # A clone inside a folder that would be allowed: that folder no longer is.
    inside = outside_guard.allowed_folders("/usr/src/rs", base)
    assert "/usr" not in inside and "/proc" in inside
    assert not outside_guard.allowed("/usr/src/other", "/usr/src/rs", inside)
    held = outside_guard.allowed_folders(base + "/rs", base)
    assert base not in held


GUARDED = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import outside_guard
root, temp, probes = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
outside_guard.install(root, temp or None)
seen = {}
for name, path in probes.items():
    try:
        if name.startswith("list "):
            os.listdir(path)
        else:
            with open(path) as f:
                f.read()
        seen[name] = "read"
    except PermissionError as e:
        seen[name] = "refused: " + str(e)
    except (FileNotFoundError, NotADirectoryError):
        seen[name] = "missing"
seen["taken"] = outside_guard.take()
print(json.dumps(seen))
"""


def _guarded(root: Path, temp: Path | None, probes: dict[str, str]) -> dict[str, object]:
    """Runs ``probes`` (name -> path; a name starting "list " lists a folder)
    in a process of its own guarded for ``root`` and ``temp``."""
    done = subprocess.run(
        [sys.executable, "-c", GUARDED, str(REPO / "tests" / "helpers"), str(root),
         str(temp or ""), json.dumps(probes)],
        capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    seen: dict[str, object] = json.loads(done.stdout)
    return {k: v.split(":")[0] if isinstance(v, str) else v for k, v in seen.items()}


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
    seen = _guarded(root, None, {
        "beside": str(beside), "inside": str(root / "f.json"), "system": "/proc/self/status",
        "walk": f"{root}/../x", "list parent": str(tmp_path)})
    assert seen == {"beside": "refused", "inside": "read", "system": "read", "walk": "refused",
                    "list parent": "refused",
                    "taken": [str(beside), str(tmp_path / "x"), str(tmp_path)]}


def test_the_run_time_guard_in_a_clone_under_tmp(tmp_path: Path) -> None:
    """A clone at ``<tmp>/rs clone`` (a space in its path) with the run's base
    temporary folder at ``<tmp>/pytest-of-u/pytest-1``, as a clone under
    ``/tmp`` has: the clone and the base folder are open to the tests, their
    parent, the clone's siblings, another run's folder, ``/tmp`` and
    ``/var/tmp`` are not."""
    tmp = tmp_path / "tmp"
    root, base = tmp / "rs clone", tmp / "pytest-of-u" / "pytest-1"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "f.json").write_text("{}")
    (base / "tmpdir").mkdir(parents=True)
    (base / "tmpdir" / "store.json").write_text("{}")
    (tmp / "rs").mkdir()
    (tmp / "rs" / "f.json").write_text("{}")
    (tmp / "pytest-of-u" / "pytest-0").mkdir()
    seen = _guarded(root, base, {
        "inside": str(root / "tests" / "f.json"),
        "base temp": str(base / "tmpdir" / "store.json"),
        "list base temp": str(base),
        "system": "/proc/self/status",
        "sibling": str(tmp / "rs" / "f.json"),
        "list parent": str(tmp),
        "list runs": str(tmp / "pytest-of-u"),
        "another run": str(tmp / "pytest-of-u" / "pytest-0" / "x"),
        "walk": f"{root}/../rs/f.json",
        "tmp": "/tmp/rocketstore-guard-probe",
        "var tmp": "/var/tmp/rocketstore-guard-probe"})
    taken = seen.pop("taken")
    assert seen == {
        "inside": "read", "base temp": "read", "list base temp": "read", "system": "read",
        "sibling": "refused", "list parent": "refused", "list runs": "refused",
        "another run": "refused", "walk": "refused", "tmp": "refused", "var tmp": "refused"}
    assert isinstance(taken, list) and len(taken) == 7


def test_this_process_is_guarded(tmp_path_factory: pytest.TempPathFactory) -> None:
    """This run: the repository and its base temporary folder are open,
    ``TMPDIR`` and ``tempfile`` point into that folder, and nothing else
    outside the repository is, its parent included."""
    base = tmp_path_factory.getbasetemp()
    assert outside_guard.installed_root() == str(REPO)
    assert str(base) in outside_guard.allowed_now()
    temp = tempfile.gettempdir()
    assert os.environ["TMPDIR"] == temp and Path(temp).parent == base
    with tempfile.NamedTemporaryFile() as f:  # opens the file: allowed
        assert not outside_guard.outside(f.name)
    assert not outside_guard.outside(str(REPO / "tests" / "fixtures"))
    assert outside_guard.outside("/")
    # Built as strings: the static check refuses the parent as a path.
    assert outside_guard.outside(f"{REPO}/..")
    assert outside_guard.outside(f"{REPO}-beside")
    assert outside_guard.outside(str(base.parent / "pytest-another" / "x"))  # another run
    assert outside_guard.outside("/var/tmp/x")
    assert outside_guard.outside(f"/tmp/{REPO.name}-beside")


@pytest.mark.parametrize("tmpdir", [None, "elsewhere dir"])
def test_the_rules_hold_whatever_tmpdir_said(tmp_path: Path, tmpdir: str | None) -> None:
    """A run with ``TMPDIR`` unset, or pointing at a folder of its own (with a
    space in its name), sets up the same rules: the test above passes in it,
    and pytest's base folder lies where ``TMPDIR`` said."""
    env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
    if tmpdir is not None:
        (tmp_path / tmpdir).mkdir()
        env["TMPDIR"] = str(tmp_path / tmpdir)
    test = f"{Path(__file__).relative_to(REPO)}::test_this_process_is_guarded"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    if tmpdir is not None:
        # pytest removes a passing run's base folder; the user's folder above stays.
        assert len(list((tmp_path / tmpdir).glob("pytest-of-*"))) == 1

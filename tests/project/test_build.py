"""What the test build carries, and what the release checks rely on.

The test install (the README's test command) builds the engine with the
``failpoints`` cargo feature; release wheels are built without it and
``scripts/check_dist.py`` proves their absence by looking for the same
markers this file finds in the test build.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

from click.testing import CliRunner

from helpers.paths import REPO
from helpers.presets import FAILPOINTS_MISSING, POINTS
from rocketstore import _native
from rocketstore.cli import main

ROOT = REPO


def _load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_test_build_has_the_fail_points() -> None:
    assert hasattr(_native, "_set_fail_point"), FAILPOINTS_MISSING
    for p in POINTS:
        assert _native._set_fail_point(p, 0), f"the engine does not know fail point {p}"
    assert not _native._set_fail_point("no_such_point", 5)


def test_release_check_detects_fail_points_in_the_test_build() -> None:
    check_dist = _load_script("check_dist")
    data = Path(_native.__file__).read_bytes()
    found = check_dist.fail_point_markers(data)
    # Every marker is in a build with the feature, so a release wheel built
    # with it by mistake fails the check.
    assert sorted(found) == sorted(m.decode() for m in check_dist.FAIL_POINT_MARKERS), found
    assert check_dist.fail_point_markers(b"msync failed: os error 5") == []


def test_version_prints_package_and_engine_versions() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == (
        f"rocketstore {version('rocketstore')} (engine {_native.__version__}, "
        "store format RocketMQ 4.9.8, test build with fail points)\n"
    )


def test_importing_rocketstore_needs_no_extra(tmp_path: Path) -> None:
    """With every extra's module refused, import, the CLI and a put/get work."""
    code = f"""
import sys
sys.path.insert(0, {str(ROOT / "scripts")!r})
from smoke_test import EXTRA_MODULES, _Refuse
sys.meta_path.insert(0, _Refuse())
import rocketstore, rocketstore.cli
from rocketstore import MessageStore, StoreConfig
cfg = StoreConfig(store_path={str(tmp_path / "s")!r}, mapped_file_size_commit_log=65536,
                  mapped_file_size_consume_queue=2000, max_hash_slot_num=10, max_index_num=40)
with MessageStore(cfg) as store:
    r = store.put("t", b"x")
    print(store.look_message_by_offset(r.wrote_offset).body)
print(sorted(m for m in sys.modules if m.split(".")[0] in EXTRA_MODULES))
try:
    import pytest  # installed here: the guard must refuse it
except ImportError:
    print("guard works")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["b'x'", "[]", "guard works"], out.stdout


def test_the_engine_lints_and_surface_stay_strict() -> None:
    """`Cargo.toml` denies unwraps, undocumented `unsafe` and missing docs
    (tests may unwrap), and the crate root declares no public module but
    the hidden `internals`."""
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text(encoding="utf-8"))
    assert cargo["lints"]["rust"]["missing_docs"] == "deny"
    assert cargo["lints"]["clippy"]["unwrap_used"] == "deny"
    assert cargo["lints"]["clippy"]["undocumented_unsafe_blocks"] == "deny"
    clippy = tomllib.loads((ROOT / "clippy.toml").read_text(encoding="utf-8"))
    assert clippy["allow-unwrap-in-tests"] is True
    lib = (ROOT / "rust" / "src" / "lib.rs").read_text(encoding="utf-8")
    public = re.findall(r"^pub mod (\w+)", lib, flags=re.M)
    assert public == ["internals"], f"public modules at the crate root: {public}"

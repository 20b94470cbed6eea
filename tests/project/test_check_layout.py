"""scripts/check_layout.py: fails on an over-long file, an over-long function,
a module circle and a use of a higher layer, passes a clean tree, and holds
the repository to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import REPO

SCRIPT = REPO / "scripts" / "check_layout.py"


def run(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), *extra],
        capture_output=True,
        text=True,
        check=False,
    )


def fn(name: str, body_lines: int) -> str:
    body = "".join(f"    let x{i} = {i};\n" for i in range(body_lines))
    return f"pub fn {name}() {{\n{body}}}\n"


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def clean_tree(root: Path) -> Path:
    """Layers like the engine's: store -> log -> error, a folder with a facade."""
    return write(
        root,
        {
            "rust/src/lib.rs": "pub mod error;\npub mod log;\npub mod store;\n"
            "pub use error::Error;\n",
            "rust/src/error.rs": "pub struct Error;\n",
            # The facade re-exports its files' items; its files use the facade's.
            "rust/src/log/mod.rs": "//! Log.\nmod append;\nmod read;\n"
            "pub use append::Prepared;\npub use read::Found;\n"
            "pub struct Log;\n",
            "rust/src/log/append.rs": "use super::Log;\nuse crate::Error;\n"
            "pub struct Prepared;\n"
            "impl Log { pub fn put(&self) -> Result<(), Error> { Ok(()) } }\n",
            "rust/src/log/read.rs": "use super::{Log, Prepared};\npub struct Found;\n"
            "impl Log { pub fn get(&self, _p: &Prepared) {} }\n",
            "rust/src/store.rs": "use crate::log::{Log, Prepared};\n"
            "pub struct Store(Log);\n" + fn("small", 100),
            "python/pkg/__init__.py": "def f() -> int:\n    return 1\n",
        },
    )


def test_clean_tree_passes(tmp_path: Path) -> None:
    r = run(clean_tree(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "layout ok" in r.stdout


def test_long_rust_file_fails_and_test_modules_do_not_count(tmp_path: Path) -> None:
    root = clean_tree(tmp_path)
    filler = "".join(f"pub const C{i}: u32 = {i};\n" for i in range(790))
    tests = (
        "#[cfg(test)]\nmod tests {\n"
        + "".join(f"    const T{i}: u32 = {i};\n" for i in range(300))
        + '    fn s() { let _ = "}"; }\n}\n'
    )
    write(root, {"rust/src/error.rs": "pub struct Error;\n" + filler + tests})
    r = run(root)
    assert r.returncode == 0, r.stdout  # 791 counted lines + an excluded test module
    write(root, {"rust/src/error.rs": "pub struct Error;\n" + filler * 2 + tests})
    r = run(root)
    assert r.returncode == 1
    assert "rust/src/error.rs: 1581 lines" in r.stdout


def test_long_python_file_fails(tmp_path: Path) -> None:
    root = clean_tree(tmp_path)
    write(root, {"python/pkg/big.py": "".join(f"X{i} = {i}\n" for i in range(801))})
    r = run(root)
    assert r.returncode == 1
    assert "python/pkg/big.py: 801 lines" in r.stdout


@pytest.mark.parametrize("body", [118, 125])
def test_long_rust_function_fails(tmp_path: Path, body: int) -> None:
    root = clean_tree(tmp_path)
    # A brace in a string or comment does not end the function early.
    text = fn("long", body).replace("let x0 = 0;", 'let x0 = "}"; // }')
    write(root, {"rust/src/store.rs": "use crate::log::Log;\n" + text})
    r = run(root)
    if body + 2 > 120:
        assert r.returncode == 1
        assert f"rust/src/store.rs: fn long (line 2) has {body + 2} lines" in r.stdout
    else:
        assert r.returncode == 0, r.stdout


def test_long_python_function_fails(tmp_path: Path) -> None:
    root = clean_tree(tmp_path)
    body = "".join(f"        x{i} = {i}\n" for i in range(125))
    write(root, {"python/pkg/mod.py": f"class C:\n    def m(self) -> None:\n{body}"})
    r = run(root)
    assert r.returncode == 1
    assert "python/pkg/mod.py: def C.m (line 2) has 126 lines" in r.stdout


def test_circle_between_files_fails(tmp_path: Path) -> None:
    root = clean_tree(tmp_path)
    # log/read.rs -> store.rs -> log (re-export of read.rs's Found): a circle.
    write(
        root,
        {
            "rust/src/log/read.rs": "use super::{Log, Prepared};\npub struct Found;\n"
            "impl Log { pub fn get(&self, _p: &Prepared) -> Option<&crate::store::Store> "
            "{ None } }\n",
            "rust/src/store.rs": "use crate::log::{Found, Log};\npub struct Store(Log);\n",
        },
    )
    r = run(root)
    assert r.returncode == 1
    assert "module circle" in r.stdout
    assert "rust/src/log/read.rs -> rust/src/store.rs" in r.stdout
    assert "rust/src/store.rs -> rust/src/log/read.rs" in r.stdout


def test_circle_through_a_folder_facade_fails(tmp_path: Path) -> None:
    root = clean_tree(tmp_path)
    # The facade itself uses (not re-exports) a file that uses the facade.
    write(
        root,
        {
            "rust/src/log/mod.rs": "mod append;\nmod read;\nuse append::Prepared;\n"
            "pub use read::Found;\npub struct Log(Option<Prepared>);\n",
        },
    )
    r = run(root)
    assert r.returncode == 1
    assert "rust/src/log/append.rs -> rust/src/log/mod.rs" in r.stdout


def test_test_modules_are_not_in_the_graph(tmp_path: Path) -> None:
    root = clean_tree(tmp_path)
    write(
        root,
        {
            "rust/src/error.rs": "pub struct Error;\n#[cfg(test)]\nmod tests {\n"
            "    use crate::store::Store;\n}\n"
        },
    )
    assert run(root).returncode == 0


def test_use_of_a_higher_layer_fails(tmp_path: Path) -> None:
    root = clean_tree(tmp_path)
    # log (layer 1) naming store (layer 5), without a circle: store does not use it.
    write(
        root,
        {
            "rust/src/log/helper.rs": "pub fn open(_s: &crate::store::Store) {}\n",
            "rust/src/log/mod.rs": "//! Log.\nmod append;\nmod read;\npub mod helper;\n"
            "pub use append::Prepared;\npub use read::Found;\npub struct Log;\n",
        },
    )
    r = run(root)
    assert r.returncode == 1, r.stdout
    assert "module circle" not in r.stdout
    assert (
        "rust/src/log/helper.rs: layer log uses the higher layer store: "
        "rust/src/store.rs (crate::store::Store)"
    ) in r.stdout


@pytest.mark.parametrize(
    ("rel", "text"),
    [
        # A top-level module outside the table is the layer below all of them.
        ("rust/src/error.rs", "pub struct Error(crate::log::Log);\n"),
        # services (layer 3) above recovery (4).
        ("rust/src/services.rs", "pub fn step(_r: &crate::recovery::Report) {}\n"),
        # queue (layer 2) above services (3).
        ("rust/src/queue.rs", "pub fn wake(_s: &crate::services::Signal) {}\n"),
    ],
)
def test_each_layer_is_below_the_next(tmp_path: Path, rel: str, text: str) -> None:
    root = clean_tree(tmp_path)
    write(
        root,
        {
            "rust/src/lib.rs": "pub mod error;\npub mod log;\npub mod queue;\n"
            "pub mod recovery;\npub mod services;\npub mod store;\npub use error::Error;\n",
            "rust/src/queue.rs": "pub struct Queue(crate::log::Log);\n",
            "rust/src/services.rs": "pub struct Signal;\n"
            "pub fn run(_q: &crate::queue::Queue) {}\n",
            "rust/src/recovery.rs": "pub struct Report;\n"
            "pub fn recover(_s: &crate::services::Signal) {}\n",
        },
    )
    assert run(root).returncode == 0, run(root).stdout  # each uses only lower layers
    write(root, {rel: text})
    r = run(root)
    assert r.returncode == 1, r.stdout
    assert "uses the higher layer" in r.stdout


def test_the_service_thread_shape_is_in_the_base_layer(tmp_path: Path) -> None:
    """``services/service_thread.rs`` serves every layer and uses none above the base."""
    root = tmp_path
    tree = {
        "rust/src/lib.rs": "pub mod error;\npub mod log;\npub mod services;\n",
        "rust/src/error.rs": "pub struct Error;\n",
        "rust/src/services/mod.rs": "pub mod flush;\npub mod service_thread;\n",
        "rust/src/services/service_thread.rs": "pub struct ServiceThread;\n",
        "rust/src/services/flush.rs": "pub fn run(_l: &crate::log::Log) {}\n",
        "rust/src/log.rs": "pub struct Log(crate::services::service_thread::ServiceThread);\n",
    }
    write(root, tree)
    r = run(root)
    assert r.returncode == 0, r.stdout
    # Another file of services/ stays above log.
    write(root, {"rust/src/log.rs": "pub fn flush() { crate::services::flush::run }\n"})
    r = run(root)
    assert r.returncode == 1, r.stdout
    assert "layer log uses the higher layer services" in r.stdout
    # And the shape itself may not use a higher layer.
    write(
        root,
        {
            "rust/src/log.rs": "pub struct Log;\n",
            "rust/src/services/service_thread.rs": "pub struct ServiceThread(crate::log::Log);\n",
        },
    )
    r = run(root)
    assert r.returncode == 1, r.stdout
    assert "layer primitives uses the higher layer log" in r.stdout


def test_allow_list_reports_without_failing_and_must_shrink(tmp_path: Path) -> None:
    root = clean_tree(tmp_path)
    write(root, {"python/pkg/big.py": "".join(f"X{i} = {i}\n" for i in range(801))})
    allow = tmp_path / "allow.txt"
    allow.write_text("# today's offenders\npython/pkg/big.py\n", encoding="utf-8")
    r = run(root, "--allow", str(allow))
    assert r.returncode == 0, r.stdout
    assert "python/pkg/big.py: 801 lines > 800 (allow-listed)" in r.stdout
    (root / "python/pkg/big.py").unlink()
    r = run(root, "--allow", str(allow))
    assert r.returncode == 1
    assert "python/pkg/big.py is allow-listed but within the limits" in r.stdout


def test_repository_layout() -> None:
    """The repository itself passes (its allow list names what is left)."""
    r = run(REPO)
    assert r.returncode == 0, r.stdout + r.stderr

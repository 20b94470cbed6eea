"""Smoke test of an installed rocketstore (run by scripts/build-dist.sh).

Run it with the interpreter of a fresh venv that has only the wheel (and its
runtime dependencies) installed, from a directory outside the source tree.
Exits non-zero with a message on the first miss.

With ``ROCKETSTORE_SMOKE_JVM=1`` (a release wheel) the JVM connector's jar
must be there, and a JVM (``java`` on PATH) loads its native library and
reads the store the test wrote through it; otherwise (a wheel built from
the sdist) it must be absent and say why.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

#: Modules of the extras (and of the test tools): importing rocketstore needs none.
EXTRA_MODULES = frozenset(
    {"pyspark", "pyarrow", "persistqueue", "litequeue", "diskcache", "pytest", "hypothesis"}
)


class _Refuse(importlib.abc.MetaPathFinder):
    """Makes every extra's module unimportable, installed or not."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in EXTRA_MODULES:
            raise ImportError(f"{fullname} is an optional dependency (refused by the smoke test)")
        return None


#: Loads the jar's NativeLib in a JVM (single-file source launch) and reads
#: a store's queue end through it: the native library loads and answers.
JVM_CHECK = """
public class JvmCheck {
  public static void main(String[] a) {
    org.rocketstore.spark.NativeLib.ensureLoaded();
    long s = org.rocketstore.spark.NativeLib.open(a[0], null, null);
    long end = org.rocketstore.spark.NativeLib.queueAt(s, "smoke", 1, 1, 0);
    org.rocketstore.spark.NativeLib.close(s);
    System.out.println("jvm ok: " + end + " loaded from "
        + System.getProperty("rocketstore.native.loaded"));
  }
}
"""


def check_jvm_connector(store: str) -> str:
    """The JVM connector as this build should have it (see the module's text)."""
    from rocketstore.spark import _jvm

    why = _jvm.missing()
    if os.environ.get("ROCKETSTORE_SMOKE_JVM") != "1":
        assert why is not None and "built from source" in why, why
        return "no JVM connector (built from source)"
    assert why is None, why
    java = shutil.which("java")
    assert java, "java is not on PATH: the jar's native library cannot be tried"
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "JvmCheck.java"
        src.write_text(JVM_CHECK)
        out = subprocess.run([java, f"-Djava.io.tmpdir={d}", "-cp", str(_jvm.jar_path()),
                              str(src), store], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("jvm ok: 25 "), out.stdout
    return out.stdout.strip()


def main() -> None:
    sys.meta_path.insert(0, _Refuse())
    import rocketstore
    import rocketstore.cli
    from rocketstore import GetStatus, MessageStore, PutStatus, StoreConfig, _native

    where = Path(rocketstore.__file__).resolve()
    src = Path(__file__).resolve().parent.parent / "python"
    assert src not in where.parents, f"imported from the source tree: {where}"
    assert not hasattr(_native, "_set_fail_point"), "fail points are compiled into this build"

    with tempfile.TemporaryDirectory() as d:
        cfg = StoreConfig(store_path=d, mapped_file_size_commit_log=64 * 1024,
                          mapped_file_size_consume_queue=20 * 100,
                          max_hash_slot_num=100, max_index_num=400)
        with MessageStore(cfg) as store:
            results = [store.put("smoke", f"body {i}".encode(), queue_id=i % 2, tags="t",
                                 keys=[f"k{i}"]) for i in range(50)]
            assert all(r.status is PutStatus.PUT_OK for r in results), results
        with MessageStore(cfg) as store:
            g = store.get_message("g", "smoke", 1, 0, 100)
            assert g.status is GetStatus.FOUND, g.status
            bodies = [m.body for m in g.messages]
            assert bodies == [f"body {i}".encode() for i in range(1, 50, 2)], bodies
            [m] = store.query_message("smoke", "k7")
            assert m.body == b"body 7", m.body
        jvm = check_jvm_connector(d)

    # The console script the wheel installed next to the interpreter.
    exe = Path(sys.executable).with_name("rocketstore")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    want = f"rocketstore {rocketstore.__version__} (engine {_native.__version__},"
    assert out.stdout.startswith(want), (out.stdout, want)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in EXTRA_MODULES)
    assert not loaded, f"optional dependencies imported: {loaded}"
    print(f"smoke test ok: rocketstore {rocketstore.__version__} from {where.parent}, "
          f"Python {sys.version.split()[0]}; {out.stdout.strip()}; {jvm}")


if __name__ == "__main__":
    main()

"""The connector's native library loads once per JVM: in a JVM of its own
(no Spark), two class loaders each take the jar; the first extracts and
loads the library, the second does not try again and says why, and the
first loader's library still answers. One file is extracted, named by its
content's hash, and a second JVM reuses it.

Marked ``spark`` (it needs the connector's jar, ``scripts/build-jar.sh``,
and ``java`` on PATH; it starts no SparkSession).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rocketstore.spark._jvm import jar_path, missing

pytestmark = pytest.mark.spark

LOADERS = """
import java.lang.reflect.InvocationTargetException;
import java.net.URL;
import java.net.URLClassLoader;

public class Loaders {
  static Class<?> load(URL jar) throws Exception {
    ClassLoader l = new URLClassLoader(new URL[] {jar}, ClassLoader.getPlatformClassLoader());
    return Class.forName("org.rocketstore.spark.NativeLib", true, l);
  }

  public static void main(String[] a) throws Exception {
    URL jar = new java.io.File(a[0]).toURI().toURL();
    Class<?> first = load(jar);
    System.out.println("first: " + first.getMethod("openHandles").invoke(null));
    System.out.println("loaded: " + System.getProperty("rocketstore.native.loaded"));
    try {
      load(jar);
      System.out.println("second: loaded again");
    } catch (ExceptionInInitializerError e) {
      System.out.println("second: " + e.getCause().getMessage());
    }
    String cols = (String) first.getMethod("columns").invoke(null);
    System.out.println("first again: " + cols.split("\\t")[0]);
  }
}
"""


@pytest.fixture
def java() -> str:
    why = missing()
    if why is not None:
        pytest.skip(f"no JVM connector: {why}")
    exe = shutil.which("java")
    if exe is None:
        pytest.skip("no java on PATH")
    return exe


def _run(java: str, src: Path, tmp: Path) -> list[str]:
    out = subprocess.run([java, f"-Djava.io.tmpdir={tmp}", str(src), str(jar_path())],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines()


def test_a_second_class_loader_does_not_load_the_library_again(
        java: str, tmp_path: Path) -> None:
    src = tmp_path / "Loaders.java"
    src.write_text(LOADERS)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    lines = _run(java, src, tmp)
    assert lines[0] == "first: 0"
    assert lines[1].startswith(f"loaded: {tmp}/rocketstore-native/librocketstore_jni-")
    assert lines[2].startswith("second: the rocketstore native library is already loaded in "
                               "this JVM by another class loader")
    assert lines[3] == "first again: topic"
    files = sorted(p.name for p in (tmp / "rocketstore-native").iterdir())
    assert len(files) == 1 and files[0] == Path(lines[1].split(": ", 1)[1]).name, files
    # A second JVM finds the file of that content and loads it as it is.
    before = (tmp / "rocketstore-native" / files[0]).stat()
    assert _run(java, src, tmp)[1] == lines[1]
    after = (tmp / "rocketstore-native" / files[0]).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(p.name for p in (tmp / "rocketstore-native").iterdir()) == files

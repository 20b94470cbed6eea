"""The JVM connector as it ships: the wheel names its jar, the release
check (scripts/check_dist.py) finds what a jar lacks, every native method
Java declares has its entry point in the library, and an installation
without a usable jar says why and leaves a SparkSession builder alone.
None of it needs Spark or a JDK.
"""

from __future__ import annotations

import importlib.util
import io
import re
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from helpers.paths import REPO
from rocketstore.spark import _jvm


def _check_dist() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_dist", REPO / "scripts" / "check_dist.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_wheel_names_the_jar_where_the_package_looks_for_it() -> None:
    cd = _check_dist()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    include = pyproject["tool"]["maturin"]["include"]
    assert {"path": cd.JAR, "format": "wheel"} in include
    here = _jvm._jar_file().relative_to(REPO / "python").as_posix()
    assert here == cd.JAR
    java = (REPO / cd.NATIVE_LIB_SOURCE).read_text(encoding="utf-8")
    assert f'RESOURCE = "/{cd.JNI_LIB}"' in java
    assert _jvm._native_dir() + "librocketstore_jni.so" == cd.JNI_LIB


def test_every_native_method_has_its_entry_point_in_the_library() -> None:
    cd = _check_dist()
    declared = cd.native_methods((REPO / cd.NATIVE_LIB_SOURCE).read_text(encoding="utf-8"))
    defined = set()
    for f in (REPO / "rust" / "jni" / "src").glob("*.rs"):
        defined |= set(re.findall(r"fn " + cd.JNI_PREFIX + r"(\w+)",
                                  f.read_text(encoding="utf-8")))
    assert len(declared) > 20
    assert declared == defined, (sorted(declared - defined), sorted(defined - declared))


def _jar(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return buf.getvalue()


def _class(major: int) -> bytes:
    return b"\xca\xfe\xba\xbe\x00\x00" + major.to_bytes(2, "big") + b"\x00" * 8


def test_the_release_check_finds_what_a_jar_lacks() -> None:
    cd = _check_dist()
    c = cd.Checks()
    bad = _jar({"org/rocketstore/spark/NativeLib.class": _class(52),
                "native/linux-aarch64/librocketstore_jni.so": b"\x7fELF"})
    assert cd.check_jar_contents(c, bad) == b""
    failed = " | ".join(c.failed)
    for what in ("connector's classes", "Java 17", "DataSourceRegister", cd.JNI_LIB):
        assert what in failed, failed
    c = cd.Checks()
    good = _jar({"org/rocketstore/spark/NativeLib.class": _class(61),
                 cd.PROVIDER.replace(".", "/") + ".class": _class(61),
                 cd.SPARK_SERVICE: (cd.PROVIDER + "\n").encode(),
                 cd.JNI_LIB: b"\x7fELF lib"})
    assert cd.check_jar_contents(c, good) == b"\x7fELF lib"
    assert c.failed == []


def test_the_built_jar_holds_what_a_release_needs() -> None:
    try:
        jar = _jvm.jar_path()
    except FileNotFoundError:
        pytest.skip("the JVM connector's jar is not built (scripts/build-jar.sh)")
    cd = _check_dist()
    c = cd.Checks()
    assert cd.check_jar_contents(c, jar.read_bytes())
    assert c.failed == []


class _Builder:
    def __init__(self) -> None:
        self._options: dict[str, str] = {}

    def config(self, k: str, v: str) -> _Builder:
        self._options[k] = v
        return self


def test_without_a_jar_configure_says_why_and_leaves_the_builder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jvm, "_jar_file", lambda: tmp_path / "jars" / _jvm.JAR_NAME)
    with pytest.raises(FileNotFoundError, match=r"built from source without the JVM Spark "
                                                r"connector.*scripts/build-jar\.sh"):
        _jvm.jar_path()
    b = _Builder()
    with pytest.warns(RuntimeWarning, match="JVM connector is left out: .*built from source.*"
                                            "the format rocketstore is the Python source"):
        got: Any = _jvm.configure(b)
    assert got is b and b._options == {}


def test_a_jar_without_this_platforms_library_is_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jar = tmp_path / _jvm.JAR_NAME
    jar.write_bytes(_jar({"native/linux-riscv64/librocketstore_jni.so": b"\x7fELF"}))
    monkeypatch.setattr(_jvm, "_jar_file", lambda: jar)
    why = _jvm.missing()
    assert why is not None and "for linux-riscv64, not for this platform" in why
    b = _Builder()
    with pytest.warns(RuntimeWarning, match="not for this platform"):
        _jvm.configure(b)
    assert b._options == {}
    # With this platform's library it is added.
    jar.write_bytes(_jar({_jvm._native_dir() + "librocketstore_jni.so": b"\x7fELF"}))
    assert _jvm.missing() is None
    _jvm.configure(b)
    assert b._options == {"spark.jars": str(jar)}

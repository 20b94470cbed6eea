"""Checks a built rocketstore wheel or sdist before release.

    python scripts/check_dist.py wheel dist/rocketstore-*.whl
    python scripts/check_dist.py sdist dist/rocketstore-*.tar.gz

Run by ``scripts/build-dist.sh`` in its tools venv (``auditwheel`` brings
``pyelftools``, ``twine`` the readme renderer). Prints one line per check and
exits 1 if any failed.

Wheel: file name tags (abi3, manylinux2014 / manylinux_2_17 x86_64),
``auditwheel show`` (platform tag, highest glibc symbol version, no external
shared library), the ELF file itself (its NEEDED libraries, glibc symbol
versions, no debug sections, no libpython), no fail points compiled in, what
the archive holds (the package, its stub and ``py.typed``; nothing test- or
bench-only), the JVM connector's jar (:func:`check_jar`: its classes, its
service registration, and its native library held to the extension's ELF
rules and exporting every native method ``NativeLib.java`` declares), and
the metadata. Sdist: what it holds (sources, ``Cargo.lock``, the stub,
``py.typed``) and the same metadata.
"""

from __future__ import annotations

import email.message
import email.parser
import io
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

#: Bytes that exist in the extension only when the ``failpoints`` cargo
#: feature is compiled in: the binding's name and the point names (``msync``
#: is not one of them: it also names real I/O errors).
FAIL_POINT_MARKERS = (b"_set_fail_point", b"cq_put", b"create_file", b"map_new_file",
                      b"flush_hold")

#: Libraries a manylinux2014 wheel may load from the system (PEP 599).
MANYLINUX2014_LIBS = {
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libc.so.6",
    "libnsl.so.1",
    "libutil.so.1",
    "libpthread.so.0",
    "libresolv.so.2",
    "libX11.so.6",
    "libXext.so.6",
    "libXrender.so.1",
    "libICE.so.6",
    "libSM.so.6",
    "libGL.so.1",
    "libgobject-2.0.so.0",
    "libgthread-2.0.so.0",
    "libglib-2.0.so.0",
    "ld-linux-x86-64.so.2",
}
MAX_GLIBC = (2, 17)
PLATFORM_TAGS = {"manylinux2014_x86_64", "manylinux_2_17_x86_64"}

#: The JVM connector's jar in the wheel, and its native library in the jar
#: (python/rocketstore/spark/_jvm.py, NativeLib.RESOURCE).
JAR = "rocketstore/spark/jars/rocketstore-spark.jar"
JNI_LIB = "native/linux-x86_64/librocketstore_jni.so"
NATIVE_LIB_SOURCE = "java/src/org/rocketstore/spark/NativeLib.java"
JNI_PREFIX = "Java_org_rocketstore_spark_NativeLib_"
SPARK_SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
PROVIDER = "org.rocketstore.spark.RocketStoreProvider"
#: Class file major version of Java 17 (the connector's javac -target).
JAVA_17 = 61

RUNTIME_DEPS = {"click", "rich"}
EXTRAS = {"test", "bench", "spark", "lint"}
CLASSIFIERS = {
    "Operating System :: POSIX :: Linux",
    "Programming Language :: Python :: 3 :: Only",
    "Programming Language :: Rust",
    "Typing :: Typed",
}
#: Paths of the wheel: the package and its metadata only.
WHEEL_PACKAGE = re.compile(r"^rocketstore/|^rocketstore-[^/]+\.dist-info/")
#: Nothing test- or bench-only belongs in the wheel.
TEST_ONLY = re.compile(r"(^|/)(tests?|benches|helpers|conftest\.py|fixtures)(/|$)|(^|/)test_")
SDIST_REQUIRED = (
    "Cargo.toml",
    "Cargo.lock",
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "PKG-INFO",
    "rust/src/lib.rs",
    "rust/src/failpoint.rs",
    "rust/src/python/mod.rs",
    "python/rocketstore/__init__.py",
    "python/rocketstore/_native.pyi",
    "python/rocketstore/py.typed",
)


class Checks:
    """Collects pass/fail lines; ``ok`` is False once any check failed."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def check(self, cond: bool, what: str, detail: object = "") -> bool:
        mark = "ok  " if cond else "FAIL"
        print(f"  {mark} {what}" + (f": {detail}" if detail != "" else ""))
        if not cond:
            self.failed.append(what)
        return cond


def fail_point_markers(data: bytes) -> list[str]:
    """The fail-point markers found in an extension module's bytes."""
    return [m.decode() for m in FAIL_POINT_MARKERS if m in data]


def glibc_versions(names: Iterable[str]) -> list[tuple[int, ...]]:
    out = []
    for n in names:
        m = re.fullmatch(r"GLIBC_(\d+(?:\.\d+)*)", n)
        if m:
            out.append(tuple(int(x) for x in m.group(1).split(".")))
    return sorted(out)


def _elf_facts(data: bytes) -> tuple[list[str], list[str], list[str], int]:
    """(NEEDED libraries, required symbol versions, debug sections, symtab entries)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    elf = ELFFile(io.BytesIO(data))
    needed: list[str] = []
    versions: list[str] = []
    debug: list[str] = []
    symtab = 0
    for sec in elf.iter_sections():
        if isinstance(sec, DynamicSection):
            needed += [t.needed for t in sec.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
        elif isinstance(sec, GNUVerNeedSection):
            for _lib, auxes in sec.iter_versions():
                versions += [a.name for a in auxes]
        if sec.name.startswith((".debug_", ".zdebug_")):
            debug.append(sec.name)
        if sec.name == ".symtab":
            symtab = sec.num_symbols()
    return needed, versions, debug, symtab


def _elf_checks(c: Checks, data: bytes, what: str) -> None:
    """A shared library of the wheel: manylinux2014's libraries and glibc, no
    libpython, stripped, no fail points."""
    needed, versions, debug, symtab = _elf_facts(data)
    c.check(set(needed) <= MANYLINUX2014_LIBS,
            f"{what}: NEEDED only manylinux2014 system libraries", sorted(needed))
    c.check(not any("python" in n for n in needed), f"{what}: not linked to libpython")
    g = glibc_versions(versions)
    c.check(bool(g) and g[-1] <= MAX_GLIBC, f"{what}: highest GLIBC symbol version <= 2.17",
            ".".join(map(str, g[-1])) if g else "none")
    c.check(not debug and symtab == 0, f"{what}: stripped (no debug sections, no .symtab)",
            debug or symtab or "")
    found = fail_point_markers(data)
    c.check(not found, f"{what}: no fail points compiled in", found or "")


def native_methods(java: str) -> set[str]:
    """The names of the ``native`` methods a Java source declares."""
    mods = r"(?:(?:public|private|protected|static|final|synchronized)\s+)*"
    return set(re.findall(r"^\s*" + mods + r"native\s+[\w.<>\[\]]+\s+(\w+)\s*\(", java,
                          re.MULTILINE))


def jni_exports(data: bytes) -> set[str]:
    """The ``NativeLib`` JNI entry points an ELF library exports (dynamic
    symbols, defined), by method name."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    elf = ELFFile(io.BytesIO(data))
    out = set()
    sec = elf.get_section_by_name(".dynsym")
    if isinstance(sec, SymbolTableSection):
        for sym in sec.iter_symbols():
            if sym.name.startswith(JNI_PREFIX) and sym["st_shndx"] != "SHN_UNDEF":
                out.add(sym.name.removeprefix(JNI_PREFIX))
    return out


def check_jar(c: Checks, jar: bytes, java_source: str) -> None:
    """The JVM connector's jar: :func:`check_jar_contents`, then its native
    library held to the wheel's ELF rules, exporting every native method of
    ``java_source`` (NativeLib.java) and none it does not declare."""
    lib = check_jar_contents(c, jar)
    if not lib:
        return
    print(f"  size: jar {len(jar) / 1e6:.2f} MB, native library {len(lib) / 1e6:.2f} MB "
          "uncompressed")
    _elf_checks(c, lib, "jar's native library")
    want, have = native_methods(java_source), jni_exports(lib)
    c.check(bool(want) and want == have,
            "jar's native library: exports every native method of NativeLib.java",
            f"missing {sorted(want - have)}, extra {sorted(have - want)}"
            if want != have else len(want))


def check_jar_contents(c: Checks, jar: bytes) -> bytes:
    """What the jar holds: the connector's classes (Java 17), the provider
    registered as a Spark data source, one native library (linux-x86_64).
    Returns that library's bytes (empty: none)."""
    try:
        z = zipfile.ZipFile(io.BytesIO(jar))
    except zipfile.BadZipFile as e:
        c.check(False, "jar: a zip archive", e)
        return b""
    with z:
        names = set(z.namelist())
        classes = sorted(n for n in names if n.endswith(".class"))
        majors = {int.from_bytes(z.read(n)[6:8], "big") for n in classes}
        service = z.read(SPARK_SERVICE).decode() if SPARK_SERVICE in names else ""
        lib = z.read(JNI_LIB) if JNI_LIB in names else b""
    c.check("org/rocketstore/spark/NativeLib.class" in names
            and PROVIDER.replace(".", "/") + ".class" in names,
            "jar: has the connector's classes", len(classes))
    c.check(majors == {JAVA_17}, "jar: Java 17 class files", sorted(majors))
    c.check(PROVIDER in service.split(), f"jar: {SPARK_SERVICE} names {PROVIDER}",
            service.strip())
    natives = sorted(n for n in names if n.startswith("native/") and not n.endswith("/"))
    c.check(natives == [JNI_LIB], f"jar: the native library {JNI_LIB} (only)", natives)
    return lib


def _metadata(c: Checks, raw: str, where: str) -> None:
    md: email.message.Message = email.parser.Parser().parsestr(raw)
    c.check(md.get("Name") == "rocketstore", f"{where}: Name", md.get("Name"))
    c.check(md.get("Requires-Python") == ">=3.11", f"{where}: Requires-Python >=3.11",
            md.get("Requires-Python"))
    c.check(md.get("License-Expression") == "Apache-2.0", f"{where}: License-Expression",
            md.get("License-Expression"))
    c.check("LICENSE" in (md.get_all("License-File") or []), f"{where}: License-File LICENSE")
    classifiers = set(md.get_all("Classifier") or [])
    c.check(CLASSIFIERS <= classifiers, f"{where}: classifiers",
            sorted(CLASSIFIERS - classifiers) or len(classifiers))
    c.check(not any(x.startswith("License ::") for x in classifiers),
            f"{where}: no license classifier beside License-Expression")
    urls = md.get_all("Project-URL") or []
    c.check(bool(urls) and all(re.match(r"^[^,]+, https://\S+$", u) for u in urls),
            f"{where}: project URLs", urls)
    c.check((md.get("Description-Content-Type") or "").startswith("text/markdown"),
            f"{where}: readme is markdown", md.get("Description-Content-Type"))
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    payload = md.get_payload()
    c.check(isinstance(payload, str) and payload.strip() == readme.strip(),
            f"{where}: long description is README.md")
    reqs = md.get_all("Requires-Dist") or []
    plain = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower()
             for r in reqs if "extra ==" not in r}
    c.check(plain == RUNTIME_DEPS, f"{where}: runtime dependencies are only {sorted(RUNTIME_DEPS)}",
            sorted(plain))
    c.check(all(re.search(r"[<>=~]", r.split(";")[0]) for r in reqs),
            f"{where}: every dependency has a version range")
    extras = set(md.get_all("Provides-Extra") or [])
    c.check(EXTRAS <= extras, f"{where}: extras", sorted(extras))
    spark = sorted(r.split(">")[0].split("=")[0] for r in reqs if "extra == 'spark'" in r)
    c.check(spark == ["pyarrow", "pyspark"], f"{where}: spark extra is pyspark + pyarrow", spark)
    bench = sorted(r.split(">")[0].split("=")[0] for r in reqs if "extra == 'bench'" in r)
    c.check(bench == ["diskcache", "litequeue", "persist-queue"],
            f"{where}: bench extra is the peer queues", bench)


def check_wheel(c: Checks, path: Path) -> None:
    name = path.name
    tags = name.removesuffix(".whl").split("-")[-3:]
    c.check(tags[:2] == ["cp311", "abi3"], "wheel: cp311-abi3 (one wheel for CPython >= 3.11)",
            "-".join(tags))
    c.check(set(tags[2].split(".")) <= PLATFORM_TAGS and "manylinux2014_x86_64" in tags[2],
            "wheel: platform tag manylinux2014_x86_64", tags[2])

    shown = subprocess.run(["auditwheel", "show", str(path)], capture_output=True, text=True)
    print(shown.stdout.rstrip())
    out = subprocess.run(["auditwheel", "show", "--json", str(path)], capture_output=True,
                         text=True)
    c.check(shown.returncode == 0 and out.returncode == 0, "auditwheel show ran",
            (shown.stderr + out.stderr).strip())
    aw = json.loads(out.stdout or "{}")
    c.check(aw.get("overall_tag") == "manylinux_2_17_x86_64",
            "auditwheel: consistent with manylinux_2_17_x86_64", aw.get("overall_tag"))
    syms = [v for vs in aw.get("versioned_symbols", {}).values() for v in vs]
    seen = glibc_versions(syms)
    c.check(bool(seen) and seen[-1] <= MAX_GLIBC,
            "auditwheel: highest glibc symbol version <= 2.17",
            ".".join(map(str, seen[-1])) if seen else "none found")
    c.check(aw.get("external_libs") == {}, "auditwheel: no external shared library",
            aw.get("external_libs"))

    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        sos = [n for n in names if n.endswith(".so")]
        c.check(sos == ["rocketstore/_native.abi3.so"], "wheel: one abi3 extension module", sos)
        data = z.read(sos[0]) if sos else b""
        jar = z.read(JAR) if JAR in names else b""
        metadata = next((z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA")),
                        "")
        wheel_info = next((z.read(n).decode() for n in names if n.endswith(".dist-info/WHEEL")),
                          "")
    print(f"  size: wheel {path.stat().st_size / 1e6:.2f} MB, "
          f"extension {len(data) / 1e6:.2f} MB uncompressed")

    _elf_checks(c, data, "extension (abi3)")
    # A release wheel carries the JVM connector (scripts/build-dist.sh).
    if c.check(bool(jar), f"wheel: has the JVM connector's jar {JAR}"):
        source = (Path(__file__).resolve().parent.parent / NATIVE_LIB_SOURCE).read_text()
        check_jar(c, jar, source)

    c.check(all(WHEEL_PACKAGE.match(n) for n in names), "wheel: only the package and its metadata",
            [n for n in names if not WHEEL_PACKAGE.match(n)] or "")
    c.check(not [n for n in names if TEST_ONLY.search(n)], "wheel: nothing test- or bench-only",
            [n for n in names if TEST_ONLY.search(n)] or "")
    for need in ("rocketstore/_native.pyi", "rocketstore/py.typed", "rocketstore/cli/__init__.py"):
        c.check(need in names, f"wheel: has {need}")
    c.check(any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "wheel: has LICENSE")
    c.check("Root-Is-Purelib: false" in wheel_info, "wheel: platform wheel (not purelib)")
    _metadata(c, metadata, "wheel")


def check_sdist(c: Checks, path: Path) -> None:
    with tarfile.open(path) as t:
        members = t.getnames()
        top = members[0].split("/")[0]
        rel = {m.removeprefix(top + "/") for m in members}
        pkg_info = t.extractfile(f"{top}/PKG-INFO")
        raw = pkg_info.read().decode() if pkg_info else ""
    print(f"  size: sdist {path.stat().st_size / 1e6:.2f} MB, {len(members)} entries")
    for need in SDIST_REQUIRED:
        c.check(need in rel, f"sdist: has {need}")
    c.check(not [m for m in rel if m.startswith(("target/", ".git/", ".venv/"))],
            "sdist: no build outputs or VCS data")
    _metadata(c, raw, "sdist")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("wheel", "sdist"):
        print(__doc__, file=sys.stderr)
        return 2
    path = Path(argv[2])
    c = Checks()
    print(f"checking {path.name}")
    (check_wheel if argv[1] == "wheel" else check_sdist)(c, path)
    if c.failed:
        print(f"FAILED {len(c.failed)} check(s) of {path.name}: " + "; ".join(c.failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

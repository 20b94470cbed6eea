"""The JVM connector's jar: where it is, and how a SparkSession gets it.

The jar (docs/spark.md, "The JVM connector") holds the Java DataSource V2
connector and the engine's pyo3-free native library; release wheels carry
it (``scripts/build-dist.sh`` builds it first, with
``scripts/build-jar.sh --manylinux``), while a package built from source
(``pip install .``, the sdist) has it only when ``scripts/build-jar.sh`` ran
in the checkout. With it on Spark's class path the format ``rocketstore`` is
the JVM connector (Spark resolves a JVM short name before a Python data
source); the Python source answers to ``rocketstore_python`` either way.
"""

from __future__ import annotations

import logging
import platform
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

__all__ = ["JAR_NAME", "configure", "jar_path", "missing", "register"]

log = logging.getLogger("rocketstore")

JAR_NAME = "rocketstore-spark.jar"


def _jar_file() -> Path:
    return Path(__file__).resolve().parent / "jars" / JAR_NAME


def _native_dir() -> str:
    """The folder of this platform's native library in the jar (NativeLib.RESOURCE)."""
    arch = {"amd64": "x86_64"}.get(platform.machine().lower(), platform.machine().lower())
    return f"native/{sys.platform}-{arch}/"


def jar_path() -> Path:
    """The path of the JVM connector's jar inside the package.

    Raises:
        FileNotFoundError: the package was built without it (from source,
            without ``scripts/build-jar.sh``); the message says so.
    """
    p = _jar_file()
    if not p.is_file():
        raise FileNotFoundError(
            f"{p} does not exist: this rocketstore was built from source without the JVM Spark "
            "connector (release wheels carry it; in a checkout, scripts/build-jar.sh builds it "
            "and needs a JDK 17). The Python data source works without it.")
    return p


def missing() -> str | None:
    """Why this installation cannot add the JVM connector to a SparkSession
    (no jar, or none of its native libraries is for this platform); None
    when it can."""
    try:
        p = jar_path()
    except FileNotFoundError as e:
        return str(e)
    want = _native_dir()
    try:
        with zipfile.ZipFile(p) as z:
            have = sorted({n.split("/")[1] for n in z.namelist()
                           if n.startswith("native/") and n.endswith(".so")})
    except (OSError, zipfile.BadZipFile) as e:
        return f"{p} cannot be read as a jar: {e}"
    if want.split("/")[1] not in have:
        return (f"{p} holds the connector's native library for {', '.join(have) or 'nothing'}, "
                f"not for this platform ({want.split('/')[1]})")
    return None


def _jvm_running() -> bool:
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - pyspark absent
        return False
    return SparkContext._active_spark_context is not None


def configure(builder: Any) -> Any:
    """Adds the connector's jar to ``spark.jars`` of a ``SparkSession.builder``
    (kept with any jars already set there) and returns the builder.

    Without a connector for this platform (a package built from source
    without its jar; see :func:`missing`) it warns why, leaves the builder
    as it is and returns it: the format ``rocketstore`` is then the Python
    source. ``spark.jars`` is read when the JVM starts: when a SparkContext
    is already running in this process, this warns that the jar takes
    effect only in a new one."""
    why = missing()
    if why is not None:
        warnings.warn(f"rocketstore.spark.configure: the JVM connector is left out: {why}; "
                      "the format rocketstore is the Python source", RuntimeWarning,
                      stacklevel=2)
        return builder
    jar = str(jar_path())
    if _jvm_running():
        warnings.warn("rocketstore.spark.configure: a SparkContext is already running; "
                      "spark.jars is read at start-up, so the JVM connector is not added to it "
                      "(stop it first, or start Spark with --jars " + jar + ")",
                      RuntimeWarning, stacklevel=2)
    opts = getattr(builder, "_options", {})
    have = [j for j in str(opts.get("spark.jars", "")).split(",") if j]
    if jar not in have:
        have.append(jar)
    log.info("rocketstore: the JVM Spark connector %s is added to spark.jars", jar)
    return builder.config("spark.jars", ",".join(have))


def register(spark: Any) -> str:
    """Registers the Python source with ``spark`` as ``rocketstore_python``,
    and as ``rocketstore`` unless the JVM connector holds that name (Spark
    refuses a Python source under a JVM short name). Returns which one
    answers to ``rocketstore`` (``"jvm"`` or ``"python"``) and logs it."""
    from rocketstore.spark._source import RocketStoreDataSource, RocketStorePythonDataSource

    spark.dataSource.register(RocketStorePythonDataSource)
    try:
        spark.dataSource.register(RocketStoreDataSource)
    except Exception as exc:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise
        log.info("rocketstore: the format rocketstore is the JVM connector; the Python "
                 "source is rocketstore_python")
        return "jvm"
    log.info("rocketstore: the format rocketstore is the Python source (no JVM connector "
             "on the class path); also rocketstore_python")
    return "python"

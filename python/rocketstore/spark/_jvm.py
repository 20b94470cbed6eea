"""The JVM connector's jar: where it is, and how a SparkSession gets it.

The jar (``scripts/build-jar.sh``; docs/spark.md, "The JVM connector")
holds the Java DataSource V2 connector and the engine's pyo3-free native
library. With it on Spark's class path the format ``rocketstore`` is the JVM
connector (Spark resolves a JVM short name before a Python data source);
the Python source answers to ``rocketstore_python`` either way.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

__all__ = ["JAR_NAME", "configure", "jar_path", "register"]

log = logging.getLogger("rocketstore")

JAR_NAME = "rocketstore-spark.jar"


def jar_path() -> Path:
    """The path of the JVM connector's jar inside the package.

    Raises:
        FileNotFoundError: the package was built without it (no JDK at build
            time): ``scripts/build-jar.sh`` builds it.
    """
    p = Path(__file__).resolve().parent / "jars" / JAR_NAME
    if not p.is_file():
        raise FileNotFoundError(
            f"{p} does not exist: this rocketstore was built without the JVM Spark connector "
            "(it needs a JDK; run scripts/build-jar.sh). The Python data source works without it.")
    return p


def _jvm_running() -> bool:
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - pyspark absent
        return False
    return SparkContext._active_spark_context is not None


def configure(builder: Any) -> Any:
    """Adds the connector's jar to ``spark.jars`` of a ``SparkSession.builder``
    (kept with any jars already set there) and returns the builder.

    ``spark.jars`` is read when the JVM starts: when a SparkContext is already
    running in this process, this warns that the jar takes effect only in a
    new one."""
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

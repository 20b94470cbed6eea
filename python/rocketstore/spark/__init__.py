"""Apache Spark data sources for rocketstore stores.

Two connectors read the same stores with the same options, schema and rows:

- the JVM connector (a DataSource V2 connector in the jar
  :func:`jar_path` names, on the engine through JNI): with the jar on
  Spark's class path (:func:`configure`) it is the format ``rocketstore``;
- the Python source (PySpark >= 4.3 Python Data Source API), registered as
  ``rocketstore_python`` (:class:`RocketStorePythonDataSource`) and, without
  the jar, as ``rocketstore`` (:class:`RocketStoreDataSource`); Spark
  refuses a Python source under a JVM connector's name, so :func:`register`
  registers it under the names it can take.

>>> from rocketstore.spark import configure, register           # doctest: +SKIP
>>> spark = configure(SparkSession.builder).getOrCreate()       # doctest: +SKIP
>>> register(spark)            # the Python source: rocketstore_python  # doctest: +SKIP
'jvm'
>>> spark.read.format("rocketstore").option("path", "/var/lib/app/store").load()  # doctest: +SKIP

Needs ``pip install 'rocketstore[spark]'`` (pyspark and pyarrow). Importing
this package without them works; using the data source classes then raises an
``ImportError`` that says what to install.

Read options, streaming, the write path and the sink's exactly-once rule are
described on :class:`RocketStoreDataSource` and in the README ("Spark and
Arrow").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rocketstore.spark._jvm import configure, jar_path, register

if TYPE_CHECKING:
    from rocketstore.spark._source import RocketStoreDataSource, RocketStorePythonDataSource

__all__ = ["RocketStoreDataSource", "RocketStorePythonDataSource", "configure", "jar_path",
           "register"]


def __getattr__(name: str) -> Any:
    if name in ("RocketStoreDataSource", "RocketStorePythonDataSource"):
        try:
            from rocketstore.spark import _source
        except ImportError as exc:
            raise ImportError(
                "rocketstore.spark needs pyspark and pyarrow: "
                f"pip install 'rocketstore[spark]' ({exc})"
            ) from exc
        return getattr(_source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Apache Spark data source for rocketstore stores (PySpark >= 4.3 Python Data Source API).

>>> from rocketstore.spark import RocketStoreDataSource      # doctest: +SKIP
>>> spark.dataSource.register(RocketStoreDataSource)          # doctest: +SKIP
>>> spark.read.format("rocketstore").option("path", "/var/lib/app/store").load()  # doctest: +SKIP

Needs ``pip install 'rocketstore[spark]'`` (pyspark and pyarrow). Importing
this package without them works; using :class:`RocketStoreDataSource` then
raises an ``ImportError`` that says what to install.

Read options, streaming, the write path and the sink's exactly-once rule are
described on :class:`RocketStoreDataSource` and in the README ("Spark and
Arrow").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocketstore.spark._source import RocketStoreDataSource

__all__ = ["RocketStoreDataSource"]


def __getattr__(name: str) -> Any:
    if name == "RocketStoreDataSource":
        try:
            from rocketstore.spark._source import RocketStoreDataSource
        except ImportError as exc:
            raise ImportError(
                "rocketstore.spark needs pyspark and pyarrow: "
                f"pip install 'rocketstore[spark]' ({exc})"
            ) from exc
        return RocketStoreDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

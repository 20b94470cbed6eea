"""The store's configuration and the broker's config files.

* :mod:`~rocketstore.config.store_config`: :class:`StoreConfig`, RocketMQ's
  ``MessageStoreConfig`` as a frozen dataclass; its checks live in
  ``_checks.py`` and its RocketMQ properties form in ``_properties.py``.
* :mod:`~rocketstore.config.files`: the JSON files of ``<store>/config/``
  (``docs/format.md``, §13) and their ``.tmp`` / ``.bak`` protocol.

The public names are re-exported by :mod:`rocketstore`; they are also
reachable here, where configs pickled as ``rocketstore.config.StoreConfig``
look for them.
"""

from __future__ import annotations

from rocketstore.config.store_config import BrokerRole, FlushDiskType, StoreConfig

__all__ = ["BrokerRole", "FlushDiskType", "StoreConfig"]

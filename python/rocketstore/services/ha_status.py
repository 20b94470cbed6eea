"""Replication's state for other processes: ``config/haStatus.json``.

The connections live in the writer's process; a reader (``rocketstore
info``, ``rocketstore top``, ``stats()`` of a read-only store) cannot see
them. A writer whose replication is configured (a ``SLAVE``, or a master
with ``ha_listen_port``) writes its :meth:`~rocketstore.MessageStore.ha_status`
there every second (thread ``rocketstore-ha-status``) and once more at
close, as ``{"pid": ..., "written": <ms since the epoch>, "status":
{...}}`` (``docs/format.md`` §21.6). It is a view, not data: written by
rename without a sync; a writer without replication removes a stale one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocketstore import _native
from rocketstore.config.files import read_regular
from rocketstore.config.store_config import BrokerRole
from rocketstore.services.base import ServiceThread

if TYPE_CHECKING:
    from rocketstore.config.store_config import StoreConfig
    from rocketstore.store import MessageStore

__all__ = ["STATUS_FILE", "HaStatusService", "read_status", "replicating"]

log = logging.getLogger("rocketstore")

#: The file's name in ``config/``.
STATUS_FILE = _native.HA_STATUS_FILE


def replicating(cfg: StoreConfig) -> bool:
    """True when the store takes part in replication (a SLAVE, or a listening master)."""
    return cfg.broker_role is BrokerRole.SLAVE or cfg.ha_listen_port is not None


def _write(path: Path, status: dict[str, Any]) -> None:
    doc = {"pid": os.getpid(), "written": time.time_ns() // 1_000_000, "status": status}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + _native.TEMP_SUFFIX)
    tmp.write_text(json.dumps(doc, sort_keys=True))
    os.replace(tmp, path)


def read_status(config_dir: Path) -> dict[str, Any] | None:
    """The status a writer last wrote, with ``as_of`` (its time, seconds
    since the epoch) and ``writer_pid``; None when there is none or it
    cannot be read."""
    try:
        data = read_regular(config_dir / STATUS_FILE)
        doc = None if data is None else json.loads(data)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("status"), dict):
        return None
    status = dict(doc["status"])
    status["as_of"] = doc.get("written", 0) / 1000.0
    status["writer_pid"] = doc.get("pid")
    return status


class HaStatusService(ServiceThread):
    """Writes the writer's ``ha_status()`` to ``config/haStatus.json`` every second."""

    name = "ha-status"

    def __init__(self, store: MessageStore) -> None:
        super().__init__(interval=1.0)
        self._ref = weakref.ref(store)
        self._path = store.config.config_dir / STATUS_FILE
        self._failed: str | None = None

    def run_once(self) -> None:
        s = self._ref()
        n = None if s is None else s._native
        if n is None or n.closed:
            self._stop.set()
            return
        self.write(n.ha_status())

    def write(self, status: dict[str, Any]) -> None:
        """Write ``status`` now (a failure is logged once until it changes)."""
        try:
            _write(self._path, status)
            self._failed = None
        except OSError as e:
            if str(e) != self._failed:
                log.warning("cannot write %s: %s", self._path, e)
                self._failed = str(e)

    def on_shutdown(self) -> None:
        s = self._ref()
        n = None if s is None else s._native
        if n is not None and not n.closed:
            self.write(n.ha_status())


def start_status(store: MessageStore) -> HaStatusService | None:
    """Start the status file of a started writer (or remove a stale one)."""
    if not replicating(store.config):
        # A stale view is harmless (readers show it only while a writer
        # runs): a failure to remove it does not stop the open.
        with contextlib.suppress(OSError):
            (store.config.config_dir / STATUS_FILE).unlink()
        return None
    service = HaStatusService(store)
    service.write(store._n.ha_status())
    service.start()
    store._services.append(service)
    return service

"""Failover by hand (docs/format.md §21.8): a running slave becomes an ``ASYNC_MASTER``.

:func:`promote_store` asks the engine to promote (replication from the
master stops, the log is cut at the end of its last complete record with
the partial record saved aside, the queue-offset table comes from the
consume queues, the promotion marker is written, the listener starts when
``ha_listen_port`` is set), then starts delayed delivery from the delay
offsets in ``config/delayOffset.json`` and records the new role in the
store's config. Consumers keep reading: nothing they read changes.

:class:`PromoteWatchService` runs on every slave writer: it polls
``ha/promote.request`` (written by ``rocketstore promote PATH`` while the
store runs) and answers in ``ha/promote.result``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rocketstore import _native
from rocketstore.config.store_config import BrokerRole
from rocketstore.services.base import ServiceThread
from rocketstore.services.schedule import ScheduleService

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

__all__ = ["POLL_INTERVAL", "PromoteWatchService", "promote_store", "request_paths"]

log = logging.getLogger("rocketstore")

#: Seconds between two looks at the request file.
POLL_INTERVAL: Final = 0.2

# One promotion at a time in the process (the engine refuses a second one;
# this keeps two callers from both starting delayed delivery).
_PROMOTING = threading.Lock()


def request_paths(store_path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The request and result files of a running slave's promotion."""
    ha = Path(store_path) / _native.HA_DIR
    return ha / _native.PROMOTE_REQUEST_FILE, ha / _native.PROMOTE_RESULT_FILE


def promote_store(store: MessageStore) -> dict[str, Any]:
    """Promote the running slave ``store`` (see ``MessageStore.promote``)."""
    with _PROMOTING:
        result: dict[str, Any] = store._n.promote()
        store._config = store._config.replace(broker_role=BrokerRole.ASYNC_MASTER)
        if not any(isinstance(s, ScheduleService) for s in store._services):
            # Delayed delivery runs on a master, from the delay offsets on disk.
            schedule = ScheduleService.for_store(store)
            schedule.start()
            store._services.append(schedule)
    return result


def _write_result(path: Path, answer: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + _native.TEMP_SUFFIX)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(answer) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class PromoteWatchService(ServiceThread):
    """Promotes its slave store when ``ha/promote.request`` appears.

    The answer, ``ha/promote.result``, is one JSON object: ``{"ok": true,
    "offset", "tail_file", "tail_bytes", "port"}`` or ``{"ok": false,
    "error"}``; the request file is removed once answered.
    """

    name = "promote-watch"

    def __init__(self, store: MessageStore, interval: float = POLL_INTERVAL) -> None:
        super().__init__(interval=interval)
        self._ref = weakref.ref(store)
        self._request, self._result = request_paths(store.config.store_path)

    def run_once(self) -> None:
        if not self._request.exists():
            return
        store = self._ref()
        if store is None or store._native is None or store._native.closed:
            self._stop.set()
            return
        try:
            answer: dict[str, Any] = {"ok": True, **promote_store(store)}
        except Exception as e:  # answered, never raised in the thread
            log.error("HA: promotion asked by %s failed: %s", self._request, e)
            answer = {"ok": False, "error": str(e)}
        _write_result(self._result, answer)
        self._request.unlink(missing_ok=True)

"""The offsets sync: a rocketstore slave takes its master's consumer and delay offsets.

RocketMQ's broker copies them over its admin port every 10 s; that port is
not part of the store, so a rocketstore master serves them on a listener of
its own, ``ha_offsets_port`` (the HA port + 1 by default), which nothing of
RocketMQ's HA protocol touches (``docs/format.md`` §21.7). The engine owns
the listener, the fetch and the bytes; this service decides when:

* on a master it renews the snapshot served every ``ha_offsets_interval``
  ms (the consumer table as :meth:`ConsumerOffsets.current` shows it, the
  delay progress of the running schedule service), when it changed;
* on a slave it fetches the master's snapshot as often, waits until its own
  CommitLog holds the master's log up to where the snapshot was taken,
  flushes it, and then replaces its ``consumerOffset.json`` (through the
  journal's crash-safe rewrite, §13.3) and ``delayOffset.json`` (§13) with
  the master's tables. Offsets on a slave so never point past records it
  does not hold on disk.

A fetch that fails is logged by the engine once per reason (a RocketMQ
master has no such service: replication goes on without it).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING

from rocketstore.config.files import DelayOffsets, _parse_delay_offsets, atomic_write
from rocketstore.config.store_config import BrokerRole
from rocketstore.consumers.offset_table import OffsetTable
from rocketstore.services.base import ServiceThread
from rocketstore.services.schedule import ScheduleService

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

__all__ = ["OffsetsSyncService", "start_offsets_sync"]

log = logging.getLogger("rocketstore")

#: Longest a slave's round waits for its CommitLog to reach a snapshot, s.
_MAX_WAIT = 1.0


def _replace(table: OffsetTable, synced: OffsetTable) -> None:
    for key in list(table):
        if key not in synced:
            table.pop(key)
    for key in synced:
        table.replace(key, synced.offsets(key))


class OffsetsSyncService(ServiceThread):
    """Publishes (master) or fetches and applies (slave) the offsets
    snapshot every ``ha_offsets_interval`` ms (thread
    ``rocketstore-ha-offsets-sync``)."""

    name = "ha-offsets-sync"

    def __init__(self, store: MessageStore) -> None:
        cfg = store.config
        super().__init__(interval=cfg.ha_offsets_interval / 1000.0)
        self._ref = weakref.ref(store)
        self._slave = cfg.broker_role is BrokerRole.SLAVE
        self._timeout = min(cfg.ha_housekeeping_interval / 1000.0, 10.0)
        self._published: tuple[bytes, bytes] | None = None
        self._bad: str | None = None
        # Held while a snapshot is applied; a promotion takes it to end the
        # applying for good (see ``stop_applying``).
        self._applying = threading.Lock()
        #: Snapshots applied (slave) or published (master) since the start.
        self.rounds = 0

    def _store(self) -> MessageStore | None:
        s = self._ref()
        n = None if s is None else s._native
        if s is None or n is None or n.closed:
            self._stop.set()  # the store was dropped or closed: the thread ends
            return None
        return s

    def run_once(self) -> None:
        store = self._store()
        if store is None:
            return
        if self._slave:
            self._fetch(store)
        else:
            self.publish(store)

    # -- master -------------------------------------------------------------

    def publish(self, store: MessageStore) -> bool:
        """Serve the current tables from now on, if they changed; True if it did."""
        consumer = store._offsets.current().to_json().encode()
        schedule = next((s for s in store._services if isinstance(s, ScheduleService)), None)
        path = store.config.config_dir / DelayOffsets.FILE_NAME
        delay = (DelayOffsets(path, schedule.offsets()) if schedule is not None
                 else DelayOffsets.load(path)).to_json().encode()
        if self._published == (consumer, delay):
            return False
        if store._n.ha_offsets_publish(consumer, delay):
            self._published = (consumer, delay)
            self.rounds += 1
            return True
        return False

    # -- slave --------------------------------------------------------------

    def _fetch(self, store: MessageStore) -> None:
        n = store._n
        got = n.ha_offsets_fetch(self._timeout, min(self.interval, _MAX_WAIT))
        if got is None or got[0] != "ready":
            return  # none configured, failed (logged by the engine), or ahead
        _, end, taken_ms, consumer, delay = got
        try:
            self._apply(store, consumer, delay)
        except ValueError as e:
            why = f"the master's offsets snapshot is not valid: {e}"
            if why != self._bad:
                log.warning("HA: %s (the offsets here are kept)", why)
                self._bad = why
            return
        self._bad = None
        n.ha_offsets_applied(end, taken_ms)

    def stop_applying(self) -> None:
        """No snapshot is applied from now on (a promotion: this store's own
        commits begin); waits for one being applied."""
        with self._applying:
            self._slave = False

    def _apply(self, store: MessageStore, consumer: bytes, delay: bytes) -> None:
        """Replace this store's tables with the master's (unchanged: nothing written)."""
        with self._applying:
            if self._slave:
                self._apply_tables(store, consumer, delay)

    def _apply_tables(self, store: MessageStore, consumer: bytes, delay: bytes) -> None:
        synced = OffsetTable.from_json(consumer.decode())
        levels = _parse_delay_offsets(delay.decode())
        path = store.config.config_dir / DelayOffsets.FILE_NAME
        # The offsets count records this store holds: on disk before they are.
        store._n.flush_commit_log()
        if DelayOffsets.load(path).table() != levels:
            atomic_write(path, DelayOffsets(path, levels).to_json())
        store._offsets.update(lambda table: _replace(table, synced))
        self.rounds += 1


def start_offsets_sync(store: MessageStore) -> OffsetsSyncService | None:
    """Start the offsets sync of a started writer store, if replication is
    configured: a master's listener (its first snapshot published before it
    answers), or a slave's fetches. Returns the service started."""
    cfg = store.config
    n = store._n
    if cfg.broker_role is BrokerRole.SLAVE:
        if cfg.ha_master_address is None and cfg.ha_offsets_master_address is None:
            return None
        service = OffsetsSyncService(store)
    else:
        try:
            port = n.start_ha_offsets()
        except OSError as e:
            if cfg.ha_offsets_port is not None:
                raise  # a port set on purpose must be had
            # The default port (the HA port + 1) is taken: the store runs,
            # its slaves get no offsets.
            log.warning("HA: cannot serve offsets on the HA port + 1: %s; slaves get no "
                        "offsets (set ha_offsets_port to a free port)", e)
            return None
        if port is None:
            return None
        service = OffsetsSyncService(store)
        service.publish(store)
    service.start()
    store._services.append(service)
    return service

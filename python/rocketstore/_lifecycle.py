"""How a :class:`~rocketstore.MessageStore` opens and closes.

Opening (:func:`open_store`, behind ``start()``): take the engine store
(lock, load), recover through :class:`RecoveryService` (RocketMQ's named
steps), load the config files, start the flush threads, dispatch
(:class:`DispatchService`) and the Python services (retention, delayed
delivery). Closing (:func:`close_store`, behind ``shutdown()``): stop the
services in reverse order, dispatch what is left, write ``topics.json`` and
the committed offsets, close the engine store. A forked child disarms the
handles it inherited (:func:`disarm`), and the interpreter's exit keeps
daemon threads out of the GIL.
"""

from __future__ import annotations

import atexit
import os
import weakref
from typing import TYPE_CHECKING

from rocketstore import _native
from rocketstore._logging import ensure_log_pump, pump_now
from rocketstore._native import NativeStore
from rocketstore.config.files import TopicConfigs
from rocketstore.config.store_config import BrokerRole
from rocketstore.consumers.offset_table import OffsetTable
from rocketstore.consumers.offsets import ConsumerOffsets
from rocketstore.consumers.store_commits import OffsetCommits, OffsetsFoldService
from rocketstore.services.dispatch import DispatchService
from rocketstore.services.failover import PromoteWatchService
from rocketstore.services.recovery import RecoveryService
from rocketstore.services.retention import RetentionService
from rocketstore.services.schedule import ScheduleService

if TYPE_CHECKING:
    from rocketstore.services.base import ServiceThread
    from rocketstore.store import MessageStore

__all__ = ["FORKED_REASON", "close_store", "disarm", "open_store", "persist_config"]

# Live stores, so a forked child can disarm the handles it inherited.
_LIVE: weakref.WeakSet[MessageStore] = weakref.WeakSet()

FORKED_REASON = "store handles do not survive fork(); open the store again"


def _after_fork_in_child() -> None:
    # The child's copy of the engine store is closed already (the engine
    # notices the fork, and closed the child's copy of the lock descriptor
    # at fork); dropping it here touches no file and joins no thread.
    for store in list(_LIVE):
        disarm(store, FORKED_REASON)


os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    """Keep daemon threads out of the GIL once the interpreter finalizes.

    CPython ends a thread that takes the GIL back during finalization with
    ``pthread_exit``, whose forced unwind must not cross Rust frames (the
    process would abort). From here on, an engine call that released the GIL
    never takes it back (the thread waits for the process to end), and new
    calls keep the GIL; threads already taking it back are let through first.
    """
    _native._begin_exit()


atexit.register(_at_exit)


def open_store(store: MessageStore) -> None:
    """Lock, load, recover and start ``store`` (see ``MessageStore.start``)."""
    store._pid = os.getpid()
    cfg = store._config
    ensure_log_pump()
    # The engine reads the config field by field, checks the path, creates it.
    native = NativeStore(cfg, store._read_only, repair=store._repair,
                         wait_for_writer=store._wait_for_writer, create=store._create,
                         cut_at=store._cut_at)
    try:
        offsets = ConsumerOffsets.load(cfg.config_dir / ConsumerOffsets.FILE_NAME)
        report = RecoveryService(native).recover(
            cfg.check_crc_on_recover,
            cfg.on_corruption == "skip",
            consumer_offsets=None if store._read_only else offsets,
            whole=store._repair,
        )
        topic_configs = TopicConfigs.load(cfg.config_dir / _native.TOPICS_FILE)
        if not store._read_only:
            # Flush threads first: the abort file they create marks the
            # store as running from here on.
            native.start_flush()
    except BaseException:
        native.shutdown()
        pump_now()
        raise
    pump_now()
    store._config = cfg.replace(
        mapped_file_size_commit_log=native.commit_log_file_size,
        mapped_file_size_consume_queue=native.consume_queue_file_size,
        # A promoted store opens as a master whatever its config says (§21.8).
        broker_role=BrokerRole(native.ha_role),
    )
    store._recovery = report
    store._native = native
    store._dispatch = DispatchService(native)
    store._commits = OffsetCommits(offsets)
    store._topic_configs = topic_configs
    if not store._read_only:
        try:
            # A service may refuse to start (an unreadable progress file).
            services = _make_services(store)
        except BaseException:
            native.shutdown()
            pump_now()
            raise
        store._dispatch.start()
        for service in services:
            service.start()
            store._services.append(service)
        try:
            native.start_ha()
        except BaseException:
            close_store(store)
            raise
    store._attach(native)
    _LIVE.add(store)
    store._stats.reset(store)


def _make_services(store: MessageStore) -> list[ServiceThread]:
    """The Python services a writer runs (dispatch runs in the engine)."""
    # The service refers to the store weakly: a running thread must not
    # keep a dropped store (and its engine store) alive.
    ref = weakref.ref(store)

    def native() -> NativeStore | None:
        s = ref()
        return None if s is None else s._native

    def offsets() -> OffsetTable:
        s = ref()
        return OffsetTable() if s is None else s._offsets.current()

    def failed(reason: str) -> None:
        s = ref()
        if s is not None:
            s._service_failed(reason)

    def offsets_now() -> ConsumerOffsets | None:
        s = ref()
        return None if s is None else s._offsets

    store._retention = RetentionService(native, store._config, offsets=offsets, on_failure=failed)
    services: list[ServiceThread] = [store._retention, OffsetsFoldService(offsets_now, native)]
    if store._config.broker_role is not BrokerRole.SLAVE:
        # Delayed delivery runs on a master only (a slave copies its deliveries).
        services.insert(1, ScheduleService.for_store(store))
    else:
        # `rocketstore promote PATH` asks a running slave through a file.
        services.append(PromoteWatchService(store))
    return services


def disarm(store: MessageStore, why: str) -> None:
    """Make every call of ``store`` raise StoreClosedError (after fork in the child)."""
    store._native = None
    store._dispatch = None
    store._services = []  # their threads are the parent's
    store._closed_reason = why
    store._detach(why)
    store._threads.close(why, forked=True)


def close_store(store: MessageStore) -> None:
    """Dispatch what is left, flush, persist offsets and close (see ``MessageStore.shutdown``)."""
    n = store._native
    if n is None or n.closed:
        return
    if os.getpid() != store._pid:
        # A copy in a forked child (whatever forked it): the files, the
        # threads and the config files are the parent's; touch nothing.
        disarm(store, FORKED_REASON)
        return
    try:
        # Replication first: a slave appends nothing more while the store closes.
        n.stop_ha()
        while store._services:
            # Removed once stopped: an interrupted close stops it again.
            store._services[-1].shutdown()
            store._services.pop()
        if store._dispatch is not None:
            store._dispatch.shutdown()
        if not store._read_only:
            if n.poison_reason is None:
                # Dispatch what is left first, so topics.json lists every topic.
                n.drain_dispatch()
            persist_config(store)
        elif not store._no_write:
            store._offsets.persist(fold=True)
    except Exception:
        _close_native(store, n)
        raise
    except BaseException:
        # Interrupted (KeyboardInterrupt, SystemExit): the engine store
        # stays open, so a later close() does what is left (offsets and
        # topics committed so far are written then) instead of returning.
        pump_now()
        raise
    _close_native(store, n)


def _close_native(store: MessageStore, n: NativeStore) -> None:
    try:
        n.shutdown()
    finally:
        pump_now()
        # Async waits and puts, and open consumers' groups, end with the engine store.
        store._threads.close("store is closed")
        store._groups.release()


def persist_config(store: MessageStore) -> None:
    """Write ``topics.json`` (every queue written so far) and the committed offsets."""
    n = store._n
    for topic in n.topics():
        for qid in n.queue_ids(topic):
            store._topic_configs.ensure(topic, qid)
    store._topic_configs.persist()
    store._commits.persist(n, read_only=False, fold=True)

"""A service that fails poisons the store, whatever the language of its loop.

A panic injected into each of the engine's background loops (fail points
``panic_<service>``), and an exception raised in each Python service,
must leave the store refusing puts with ``SERVICE_NOT_AVAILABLE``, name
the reason in ``running_flags``, and keep reads working.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from helpers.fault_fixtures import fail_points  # noqa: F401  (fixture)
from helpers.presets import SMALL
from rocketstore import (
    FlushDiskType,
    GetStatus,
    MessageRefusedError,
    MessageStore,
    PoisonedError,
    PutStatus,
    StoreConfig,
)
from rocketstore.services.base import ServiceThread

FAST: dict[str, Any] = {
    "flush_interval_commit_log": 10,
    "commit_interval_commit_log": 10,
    "flush_interval_consume_queue": 10,
}

#: service -> (running flag it sets, extra config, puts that make it work)
RUST_SERVICES: dict[str, tuple[str, dict[str, Any], int]] = {
    "flush": ("FLUSH_FAILED", {}, 0),
    "group_commit": ("FLUSH_FAILED", {"flush_disk_type": FlushDiskType.SYNC_FLUSH}, 0),
    "commit": ("FLUSH_FAILED", {"transient_store_pool_enable": True}, 0),
    "cq_flush": ("FLUSH_FAILED", {}, 0),
    "dispatch": ("WRITE_LOGICS_QUEUE_ERROR", {}, 1),
    "allocate": ("NOT_WRITEABLE", {"warm_mapped_file_enable": True}, 0),
    "prefault": ("NOT_WRITEABLE", {}, 0),
    # 7 keys fill an index file; the roll hands it to the index flush service.
    "index_flush": ("WRITE_INDEX_FILE_ERROR", {"max_hash_slot_num": 16, "max_index_num": 8}, 20),
    "clock": ("NOT_WRITEABLE", {}, 0),
}


def _open(store_path: str, **cfg: Any) -> MessageStore:
    return MessageStore(StoreConfig(store_path=store_path, **{**SMALL, **FAST, **cfg})).start()


def _wait(what: str, ok: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _assert_poisoned(store: MessageStore, kept: int, flag: str, reason: str) -> None:
    end = store.max_phy_offset
    with pytest.raises(MessageRefusedError) as raised:
        store.put("T", b"refused", keys="refused")
    assert raised.value.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert reason in (raised.value.reason or ""), raised.value.reason
    assert store.max_phy_offset == end, "a refused put wrote"
    assert not store.is_writeable
    flags = store.running_flags
    assert any(f.startswith(f"{flag}: ") and reason in f for f in flags), flags
    # Reads keep working: by queue offset and by key.
    g = store.get_message("g", "T", 0, 0, kept)
    assert g.status is GetStatus.FOUND
    assert [m.body for m in g.messages] == [f"m{i}".encode() for i in range(kept)]
    assert [m.body for m in store.query_message("T", "k1")] == [b"m1"]


@pytest.mark.parametrize("service", sorted(RUST_SERVICES))
def test_a_panic_in_an_engine_service_poisons_the_store(
    store_path: str, fail_points: Callable[[str, int], None], service: str  # noqa: F811
) -> None:
    flag, cfg, work = RUST_SERVICES[service]
    store = _open(store_path, **cfg)
    try:
        for i in range(5):
            assert store.put("T", f"m{i}".encode(), keys=f"k{i}").status is PutStatus.PUT_OK
        store.flush()
        fail_points(f"panic_{service}", 1)
        i = 5

        def poisoned() -> bool:
            nonlocal i
            if i < 5 + work:
                # Refused once the panic poisoned the store: that is awaited.
                store.put("T", f"m{i}".encode(), keys=f"k{i}", check=False)
                i += 1
            return not store.is_writeable

        _wait(f"the {service} panic to poison the store", poisoned)
        fail_points(f"panic_{service}", 0)
        _assert_poisoned(
            store, 5, flag, f"{service} service panicked: fail point panic_{service}"
        )
        if service == "dispatch":
            assert store._dispatch is not None and not store._dispatch.running
    finally:
        # A store whose flushing failed says so when it is shut down.
        with contextlib.suppress(PoisonedError):
            store.shutdown()


@pytest.mark.parametrize("service", ["retention", "schedule"])
def test_an_exception_in_a_python_service_poisons_the_store(
    store_path: str, service: str
) -> None:
    store = _open(store_path)
    try:
        for i in range(5):
            assert store.put("T", f"m{i}".encode(), keys=f"k{i}").status is PutStatus.PUT_OK
        services = {s.name: s for s in store._services}
        svc: ServiceThread = services[service]
        assert svc.running

        def boom() -> None:
            raise RuntimeError("disk on fire")

        svc.run_once = boom  # type: ignore[method-assign]
        svc.wakeup()
        _wait(f"the {service} service to fail", lambda: not store.is_writeable)
        assert not svc.running
        why = f"{service} service failed: RuntimeError: disk on fire"
        assert svc.failure == why
        _assert_poisoned(store, 5, "NOT_WRITEABLE", why)
    finally:
        store.shutdown()


def test_the_dispatch_service_has_the_service_shape(store_path: str) -> None:
    store = _open(store_path)
    try:
        dispatch = store._dispatch
        assert dispatch is not None and dispatch.running and dispatch.failure is None
        r = store.put("T", b"m0", keys="k0")
        dispatch.wakeup()
        assert dispatch.shutdown(timeout=10.0) is True
        assert not dispatch.running
        # Stopped: a read dispatches what it needs itself.
        assert [m.body for m in store.get_message("g", "T", 0, 0, 1).messages] == [b"m0"]
        assert r.status is PutStatus.PUT_OK
        dispatch.start()
        assert dispatch.running
    finally:
        store.shutdown()

"""The Python services' common shape: rounds, wake-ups, shutdown, failure."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from helpers.presets import SMALL
from rocketstore import GetStatus, MessageStore, PutStatus, StoreConfig
from rocketstore.services.base import ServiceThread


class _Rounds(ServiceThread):
    name = "rounds"

    def __init__(self, fail_at: int | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.rounds = 0
        self.fail_at = fail_at
        self.reached = threading.Event()
        self.stopped_cleanly = False

    def run_once(self) -> None:
        self.rounds += 1
        if self.rounds == self.fail_at:
            raise RuntimeError("disk on fire")
        if self.rounds >= 2:
            self.reached.set()

    def on_shutdown(self) -> None:
        self.stopped_cleanly = True


def test_wakeup_runs_a_round_without_waiting_for_the_interval() -> None:
    svc = _Rounds(interval=3600.0)
    svc.start()
    try:
        svc.wakeup()
        svc.wakeup()
        for _ in range(50):
            svc.wakeup()
            if svc.reached.wait(0.1):
                break
        assert svc.rounds >= 2
    finally:
        assert svc.shutdown(timeout=10.0)
    assert svc.stopped_cleanly and not svc.running and svc.failure is None


def _started_to_fail(report: Callable[[str], None]) -> _Rounds:
    """A service whose first round fails, started; returns once it handed
    the failure to ``report``."""
    done = threading.Event()

    def failed(why: str) -> None:
        report(why)
        done.set()

    svc = _Rounds(fail_at=1, interval=0.01, on_failure=failed)
    svc.start()
    assert done.wait(10.0)
    return svc


def test_a_failing_round_stops_the_service_and_reports_once() -> None:
    reasons: list[str] = []
    svc = _started_to_fail(reasons.append)
    svc.shutdown(timeout=10.0)
    assert reasons == ["rounds service failed: RuntimeError: disk on fire"]
    assert svc.failure == reasons[0]
    assert svc.rounds == 1 and not svc.stopped_cleanly


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval"):
        _Rounds(interval=0)


def test_service_failure_refuses_puts_and_keeps_reads(store_path: str) -> None:
    store = MessageStore(StoreConfig(store_path=store_path, **SMALL)).start()
    try:
        before = store.put("orders", b"kept")
        assert before.status is PutStatus.PUT_OK
        svc = _started_to_fail(store._service_failed)
        r = store.put("orders", b"refused", check=False)
        assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert any("rounds service failed" in f for f in store.running_flags)
        g = store.get_message("g", "orders", 0, 0, 8)
        assert g.status is GetStatus.FOUND and [m.body for m in g.messages] == [b"kept"]
        svc.shutdown(timeout=10.0)
    finally:
        store.shutdown()

"""The dispatch service (RocketMQ's ``ReputMessageService``).

Dispatch turns CommitLog records into ConsumeQueue units and index entries.
Its loop runs in a Rust thread: a Python thread woken on every put would cap
puts far below the engine's rate, and a Python thread waiting for the GIL
behind a busy producer adds the interpreter's switch interval (~5 ms) to the
time a message takes to become visible. This class orchestrates that thread:
start and stop, the lag, failures, and the wake-ups consumers wait on. It
has the shape of every service (:class:`~rocketstore.services.base.Service`);
a panic in the engine's loop poisons the store with its message
(``WRITE_LOGICS_QUEUE_ERROR`` in ``store.running_flags``).
"""

from __future__ import annotations

import logging

from rocketstore._native import NativeStore
from rocketstore.services.base import Service

__all__ = ["DispatchService"]

log = logging.getLogger("rocketstore")


class DispatchService(Service):
    """Controls the engine's dispatch thread for one store.

    The dispatch offset itself is set by recovery (the largest CommitLog offset
    the consume queues already cover); recovery also dispatches whatever the
    queues were missing before this service starts.
    """

    name = "dispatch"

    def __init__(self, native: NativeStore) -> None:
        self._native = native

    def start(self) -> None:
        """Start dispatching new puts in the background (no-op if running)."""
        self._native.start_dispatch()

    def wakeup(self) -> None:
        """Dispatch what is written now instead of at the thread's next poll."""
        self._native.wakeup_dispatch()

    def shutdown(self, timeout: float | None = 10.0) -> bool:
        """Stop the thread; the step in progress completes first.

        True if the thread ended within ``timeout`` seconds (``None``: the
        engine's bound); one that did not is logged and left behind.
        """
        return self._native.stop_dispatch(timeout)

    @property
    def running(self) -> bool:
        """True while the engine's dispatch thread runs (False once it died)."""
        return self._native.dispatch_running

    @property
    def behind_bytes(self) -> int:
        """CommitLog bytes not yet dispatched."""
        return self._native.dispatch_behind_bytes()

    @property
    def failure(self) -> str | None:
        """Why dispatch stopped, if it failed (the store is then not writeable)."""
        return self._native.dispatch_failure

    @property
    def seq(self) -> int:
        """Changes whenever new messages become visible."""
        return self._native.dispatch_seq

    def wait(self, seen: int, timeout: float | None) -> int:
        """Block until :attr:`seq` differs from ``seen`` or ``timeout`` passes."""
        return self._native.wait_for_dispatch(seen, timeout)

"""One shape for the store's services (RocketMQ's ``ServiceThread``).

:class:`Service` is the shape every service has: ``start``, ``wakeup``,
``shutdown(timeout)``, ``running`` and ``failure``. The dispatch
service has it over the engine's dispatch thread (its loop runs in Rust);
the others are :class:`ServiceThread` subclasses.

A :class:`ServiceThread` is a loop on one daemon thread: wait ``interval`` seconds (or until
:meth:`ServiceThread.wakeup`), run one round, repeat until
:meth:`ServiceThread.shutdown`. Each round is a batch of engine work (the
engine releases the GIL while it works), so a service never runs Python per
message.

A round that raises does not die silently: the exception is logged with its
traceback, the service stops, and ``on_failure`` is called with a sentence
naming the service and the error. The store passes a callback that poisons
the engine, so puts are refused with ``SERVICE_NOT_AVAILABLE`` (reads keep
working) and ``store.running_flags`` says why.

>>> import threading
>>> class Counter(ServiceThread):
...     name = "counter"
...     def __init__(self) -> None:
...         super().__init__(interval=0.01)
...         self.rounds = 0
...         self.done = threading.Event()
...     def run_once(self) -> None:
...         self.rounds += 1
...         if self.rounds == 3:
...             self.done.set()
>>> svc = Counter()
>>> svc.start()
>>> svc.done.wait(5.0)
True
>>> svc.shutdown(timeout=5.0)
True
>>> svc.running
False
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["Service", "ServiceThread"]

log = logging.getLogger("rocketstore")


class Service:
    """The shape of a store service; subclasses implement every method.

    A service that fails does not die silently: it reports ``failure`` and
    the store is poisoned with the reason (puts refused with
    ``SERVICE_NOT_AVAILABLE``, reads kept working).
    """

    #: Name used for the thread and in log and failure messages.
    name: str = "service"

    def start(self) -> None:
        """Start the service (no-op if it is running)."""
        raise TypeError(f"{type(self).__name__} must override start()")

    def wakeup(self) -> None:
        """Run the next round now instead of at the end of the interval."""
        raise TypeError(f"{type(self).__name__} must override wakeup()")

    def shutdown(self, timeout: float | None = 10.0) -> bool:
        """Stop after the round in progress; True if it ended within ``timeout``."""
        raise TypeError(f"{type(self).__name__} must override shutdown()")

    @property
    def running(self) -> bool:
        """True while the service runs."""
        raise TypeError(f"{type(self).__name__} must override running")

    @property
    def failure(self) -> str | None:
        """Why the service stopped on its own, if it did."""
        raise TypeError(f"{type(self).__name__} must override failure")


class ServiceThread(Service):
    """Base class of the Python services: subclasses implement :meth:`run_once`.

    Args:
        interval: Seconds between rounds. A :meth:`wakeup` starts the next
            round at once.
        on_failure: Called once, with a one-line reason, when a round raises.
    """

    def __init__(
        self, *, interval: float, on_failure: Callable[[str], None] | None = None
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, not {interval!r}")
        self.interval = interval
        self._on_failure = on_failure
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: str | None = None

    # -- what subclasses provide ---------------------------------------------

    def run_once(self) -> None:
        """One round of work. Raising stops the service and reports the failure."""
        raise TypeError(f"{type(self).__name__} must override run_once()")

    def on_shutdown(self) -> None:
        """Called on the service thread after the last round (override to save state)."""

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Start the thread (no-op if it is running)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._wake.clear()
        self._thread = threading.Thread(
            target=self._loop, name=f"rocketstore-{self.name}", daemon=True
        )
        self._thread.start()

    def wakeup(self) -> None:
        """Run the next round now instead of at the end of the interval."""
        self._wake.set()

    def shutdown(self, timeout: float | None = 10.0) -> bool:
        """Stop after the round in progress; True if the thread ended within ``timeout``."""
        thread = self._thread
        if thread is None:
            return True
        self._stop.set()
        self._wake.set()
        if thread is threading.current_thread():
            return False
        thread.join(timeout)
        if thread.is_alive():
            log.warning("%s service did not stop within %s s", self.name, timeout)
            return False
        self._thread = None
        return True

    @property
    def running(self) -> bool:
        """True while the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def failure(self) -> str | None:
        """Why the service stopped on its own, if it did."""
        return self._failure

    # -- the loop ----------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._wake.wait(self.interval)
                self._wake.clear()
                if self._stop.is_set():
                    break
                self.run_once()
            self.on_shutdown()
        except BaseException as exc:
            self._failure = f"{self.name} service failed: {type(exc).__name__}: {exc}"
            log.error("%s", self._failure, exc_info=True)
            if self._on_failure is not None:
                try:
                    self._on_failure(self._failure)
                except Exception:  # pragma: no cover - the callback itself failed
                    log.exception("%s service: failure callback raised", self.name)

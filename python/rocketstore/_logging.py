"""Forwarding the engine's log records to Python ``logging``.

The Rust engine queues its records (its threads never take the GIL); a daemon
thread drains the queue into the ``rocketstore`` logger. :func:`pump_now`
drains synchronously, so records of an operation (recovery, shutdown) are
emitted before the call that caused them returns.
"""

from __future__ import annotations

import logging
import threading
import time

from rocketstore import _native

__all__ = ["ensure_log_pump", "pump_now"]

log = logging.getLogger("rocketstore")

# log::Level as u8 -> logging level
_LEVELS = {1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO, 4: logging.DEBUG, 5: 5}

_lock = threading.Lock()
_thread: threading.Thread | None = None


def _sync_level() -> None:
    level = log.getEffectiveLevel()
    if level <= 5:
        _native._set_log_level(5)
    elif level <= logging.DEBUG:
        _native._set_log_level(4)
    elif level <= logging.INFO:
        _native._set_log_level(3)
    elif level <= logging.WARNING:
        _native._set_log_level(2)
    else:
        _native._set_log_level(1)


def _emit(records: list[tuple[int, str, str]], dropped: int) -> None:
    for level, target, message in records:
        log.log(_LEVELS.get(level, logging.INFO), "%s", message, extra={"rust_target": target})
    if dropped:
        log.warning("%d engine log records were dropped (the log queue was full)", dropped)


def pump_now() -> None:
    """Emit every queued engine record now."""
    _sync_level()
    _emit(*_native._drain_logs(0.0))


def _run() -> None:
    # Polls with time.sleep rather than blocking inside the engine: a daemon
    # thread must not be in Rust code when the interpreter exits.
    while True:
        time.sleep(0.05)
        records, dropped = _native._drain_logs(0.0)
        try:
            _emit(records, dropped)
        except Exception:  # never let a broken handler kill the pump
            pass


def ensure_log_pump() -> None:
    """Start the daemon thread that forwards engine records (once per process)."""
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _sync_level()
            _thread = threading.Thread(target=_run, name="rocketstore-log", daemon=True)
            _thread.start()

"""The schedule service: delivers delayed messages when their level is due.

A put with ``delay_level`` (or a ``DELAY`` property) is parked in
``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``; its consume-queue tag code is
its deliver time (store time + the level's delay). This service keeps one
timer per level (``message_delay_level``, e.g. ``"1s 5s 10s ..."``): each
round it asks the engine, in one call with the GIL released, for a delivery
step of every due level, which re-puts that level's due messages into their
``REAL_TOPIC``/``REAL_QID`` in one batch and answers how far it got. Python only decides when and
keeps the progress; it never touches a message.

Progress is RocketMQ's ``config/delayOffset.json`` (level → next offset in
the level's queue), read on open and corrected into each queue's range, so a
store a RocketMQ broker wrote does not deliver again what the broker already
delivered. It is written every ``flush_delay_offset_interval`` ms and at
shutdown, always after the CommitLog was flushed past the copies it counts:
saved progress never runs ahead of durable copies. The price is
at-least-once on a crash: copies made after the last progress write are
made again after a restart (at most once more per crash), with the same
properties, so the same ``UNIQ_KEY``.

The clock is injectable (``clock=``, ms since the epoch), so tests move time
instead of sleeping; without one the service reads :func:`now_ms` at each
round.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from rocketstore import _native
from rocketstore._native import DeliverStep, NativeStore
from rocketstore.config.files import DelayOffsets

if TYPE_CHECKING:
    from rocketstore.config.store_config import StoreConfig
    from rocketstore.store import MessageStore

from rocketstore.services.base import ServiceThread

__all__ = ["SCHEDULE_TOPIC", "DeliverStep", "ScheduleService", "now_ms"]

log = logging.getLogger("rocketstore")

#: Where delayed messages wait (queue id = level - 1); the engine's name.
SCHEDULE_TOPIC: Final[str] = _native.SCHEDULE_TOPIC
#: Seconds between rounds: a level whose queue is drained is looked at again
#: this often (RocketMQ's ``DELAY_FOR_A_WHILE``, 100 ms).
ROUND_INTERVAL = 0.1
#: Seconds before a level whose copies could not be put is tried again
#: (RocketMQ's ``DELAY_FOR_A_PERIOD``, 10 s).
RETRY_AFTER = 10.0
#: Most copies one engine step puts.
BATCH = 256


def now_ms() -> int:
    """Wall-clock time in ms since the epoch (the default clock)."""
    return time.time_ns() // 1_000_000


class ScheduleService(ServiceThread):
    """Delivers delayed messages; one instance per writer.

    Args:
        native: the open engine store (a writer).
        config: the store's configuration (``message_delay_level``,
            ``flush_delay_offset_interval``, ``config_dir``).
        clock: ms since the epoch; ``None`` reads :func:`now_ms` each round.
        interval: seconds between rounds.
        on_failure: called with a sentence when a round raises.
        engine: how a round finds the engine store; ``None`` (or a closed
            store) ends the service. By default ``native`` itself;
            :meth:`for_store` passes a weak lookup, so a running service
            never keeps a dropped store open.
    """

    name = "schedule"

    def __init__(
        self,
        native: NativeStore,
        config: StoreConfig,
        *,
        clock: Callable[[], int] | None = None,
        interval: float = ROUND_INTERVAL,
        on_failure: Callable[[str], None] | None = None,
        engine: Callable[[], NativeStore | None] | None = None,
    ) -> None:
        super().__init__(interval=interval, on_failure=on_failure)
        self._engine: Callable[[], NativeStore | None] = engine or (lambda: native)
        self.clock = clock
        self._levels = config.delay_level_table()
        self._persist_every = config.flush_delay_offset_interval / 1000.0
        self._offsets = DelayOffsets.load(config.config_dir / DelayOffsets.FILE_NAME)
        # Per level: deliver time (clock ms) of its first waiting message; 0
        # when unknown (looked at every round).
        self._due_at: dict[int, int] = dict.fromkeys(self._levels, 0)
        # Per level: monotonic time before which a blocked level is not retried.
        self._retry_at: dict[int, float] = dict.fromkeys(self._levels, 0.0)
        self._blocked: str | None = None
        self._persisted_at = time.monotonic()
        #: Copies put and units passed over since the service started.
        self.delivered = 0
        self.dropped = 0
        #: Rounds completed (tests wait on it instead of sleeping).
        self.rounds = 0
        self._correct_offsets(native)

    @classmethod
    def for_store(cls, store: MessageStore) -> ScheduleService:
        """The service of a started writer store (held weakly: dropping the
        store shuts it down as before, and the service ends with it)."""
        native = store._native
        if native is None:
            raise ValueError("the store is not started")
        ref = weakref.ref(store)

        def engine() -> NativeStore | None:
            s = ref()
            return None if s is None else s._native

        def failed(why: str) -> None:
            s = ref()
            if s is not None:
                s._service_failed(why)

        return cls(native, store.config, on_failure=failed, engine=engine)

    def _live_engine(self) -> NativeStore | None:
        n = self._engine()
        return None if n is None or n.closed else n

    # -- progress ----------------------------------------------------------

    @staticmethod
    def _queue_range(n: NativeStore, level: int) -> tuple[int, int]:
        return (
            n.get_min_offset_in_queue(SCHEDULE_TOPIC, level - 1),
            n.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1),
        )

    def _correct_offsets(self, native: NativeStore) -> None:
        """Clamp each level's progress into its queue's range (RocketMQ's
        ``correctDelayOffset``): below the min (files expired) starts at the
        min; past the max (the file was ahead of the queue) falls back to the
        max, so messages put there later are delivered."""
        for level in self._levels:
            if not self._offsets.has(level):
                continue
            lo, hi = self._queue_range(native, level)
            old = self._offsets.get(level)
            new = min(max(old, lo), hi)
            if new != old:
                log.warning(
                    "delay level %d: progress %d is outside %s queue %d [%d, %d]; using %d",
                    level, old, SCHEDULE_TOPIC, level - 1, lo, hi, new,
                )
                self._offsets.set(level, new)

    def offsets(self) -> dict[int, int]:
        """The progress in memory: ``{level: next offset to deliver}``."""
        return self._offsets.table()

    def persist(self) -> bool:
        """Flush the CommitLog, then write ``delayOffset.json`` if progress moved.

        Returns True if the file was written. A failure (flush or write) is
        logged and the file is left as it was; the next round tries again.
        """
        self._persisted_at = time.monotonic()
        n = self._live_engine()
        if n is None:
            return False
        try:
            return self._offsets.persist(before_write=n.flush_commit_log)
        except Exception as exc:
            log.error("cannot save delayed-delivery progress to %s: %s",
                      self._offsets.path, exc)
            return False

    # -- rounds --------------------------------------------------------------

    def _now(self) -> int:
        clock = self.clock
        return clock() if clock is not None else now_ms()

    def run_once(self) -> None:
        native = self._live_engine()
        if native is None:  # the store was closed or dropped
            self._stop.set()
            return
        now = self._now()
        mono = time.monotonic()
        due = [
            level for level in self._levels
            if self._due_at[level] <= now and self._retry_at[level] <= mono
        ]
        # One engine call for every due level; again for the levels whose
        # batch was full.
        while due and not self._stop.is_set():
            steps = native.deliver_delayed(
                [(level, self._offsets.get(level)) for level in due], now, BATCH
            )
            due = [
                level for level, step in zip(due, steps, strict=True)
                if self._record(level, step, mono)
            ]
            self._persist_if_due()  # a long backlog still saves progress
        self._persist_if_due()
        self.rounds += 1

    def _persist_if_due(self) -> None:
        if time.monotonic() - self._persisted_at >= self._persist_every:
            self.persist()

    def _record(self, level: int, step: DeliverStep, mono: float) -> bool:
        """Take in one level's step; True when the level has more due now."""
        if step.next_offset != self._offsets.get(level):
            self._offsets.set(level, step.next_offset)
        self.delivered += step.delivered
        self.dropped += step.dropped
        if step.blocked is not None:
            if step.blocked != self._blocked:
                log.warning("delayed delivery of level %d waits %.0f s: %s",
                            level, RETRY_AFTER, step.blocked)
            self._blocked = step.blocked
            self._retry_at[level] = mono + RETRY_AFTER
            self._due_at[level] = 0
            return False
        if self._blocked is not None and step.delivered:
            log.info("delayed delivery resumed")
            self._blocked = None
        self._due_at[level] = max(step.due_at, 0)
        return step.more

    def on_shutdown(self) -> None:
        self.persist()

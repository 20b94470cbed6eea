"""Filter pushdown of the ``rocketstore`` Spark format.

Spark hands a batch reader the conjuncts of a query's ``WHERE``
(``DataSourceReader.pushFilters``, when
``spark.sql.python.filterPushdown.enabled`` is on). :func:`translate` turns them
into a :class:`Pushed` (what the store's own indexes can answer) and the
filters Spark must still evaluate; :func:`plan` turns a ``Pushed`` into the
ranges of one store to read:

- ``topic`` / ``queue_id`` ``=``, ``IN``: only those queues are read;
- ``queue_offset`` ranges: only those consume queue offsets;
- ``commit_log_offset`` ranges: a CommitLog range (no other filter), or per
  queue the offsets found by a binary search of the queue's CommitLog
  offsets (they grow with the queue offset);
- ``store_timestamp`` ranges: per queue, the first offset stored at or after
  the lower bound and the first one after the upper bound, by the consume
  queue's time search (RocketMQ's ``getOffsetInQueueByTime``, then corrected
  to the exact first offset), once the queue's store times were found never
  to decrease; the engine then keeps exactly the rows inside the bounds;
- ``tags`` ``=``, ``IN``: queue units whose tag hash code cannot match are
  skipped before the CommitLog is touched, then the TAGS are compared;
- ``msg_id`` ``=``, ``IN``: the CommitLog offset inside the id names the
  record (one record read per id);
- the ``key`` read option: the IndexFile's hash slots name the records
  (RocketMQ's ``queryMessage``); a store whose index does not cover its
  CommitLog is scanned instead (logged).

Each pushed path keeps the rows a scan keeps (damaged records skipped and
counted, offsets deleted by retention skipped), and nothing is answered
from an index it cannot trust: a queue whose store times decrease
somewhere, and system topics (``SCHEDULE_TOPIC_XXXX`` keeps delivery times
where tag hash codes go), are read whole with the exact filters.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from rocketstore._native import READ_COLUMNS, is_system_topic
from rocketstore.errors import StoreError
from rocketstore.store import MessageStore

__all__ = ["PlanPartition", "Pushed", "exact_filter", "plan", "pushdown_requested",
           "translate"]

log = logging.getLogger("rocketstore")

I64_MAX = (1 << 63) - 1
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

#: The Python type of the values of an Arrow type (of the columns pushed down).
_VALUE_TYPES: dict[str, type] = {"string": str, "int32": int, "int64": int}
#: Columns ``=`` / ``IN`` push down on, with the type of their values.
_SET_COLUMNS: dict[str, type] = {c.name: _VALUE_TYPES[c.arrow_type] for c in READ_COLUMNS
                                 if c.pushdown == "values"}
#: Columns ranges push down on.
_RANGE_COLUMNS = tuple(c.name for c in READ_COLUMNS if c.pushdown == "range")
#: Range columns of timestamps (compared as µs literals, held as ms).
_TIME_COLUMNS = frozenset(c.name for c in READ_COLUMNS if c.pushdown == "range"
                          and c.arrow_type.startswith("timestamp["))
#: Columns no row leaves null (``IS NOT NULL`` on them holds for every row).
_NEVER_NULL = frozenset(c.name for c in READ_COLUMNS if c.never_null)

Bounds = tuple[int | None, int | None]


@dataclasses.dataclass(frozen=True)
class Pushed:
    """What a read keeps, as the store's indexes can answer it. Sets are
    ``None`` for "no condition"; bounds are inclusive (``None``: open)."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    queue_offset: Bounds = (None, None)
    commit_log_offset: Bounds = (None, None)
    #: Store time bounds in ms.
    store_time: Bounds = (None, None)
    tags: frozenset[str] | None = None
    msg_ids: frozenset[str] | None = None
    #: The ``key`` read option: rows whose ``keys`` hold one of these.
    keys: tuple[str, ...] | None = None

    @property
    def empty(self) -> bool:
        """True when no row can pass (an empty set, or crossed bounds)."""
        if any(s is not None and not s for s in (self.topics, self.queue_ids, self.tags,
                                                  self.msg_ids, self.keys)):
            return True
        return any(lo is not None and hi is not None and lo > hi
                   for lo, hi in (self.queue_offset, self.commit_log_offset, self.store_time))

    @property
    def narrows(self) -> bool:
        """True when the read is narrower than the unfiltered one."""
        return self != Pushed()

    @property
    def queue_only(self) -> bool:
        """True when only a CommitLog offset range is asked for (a CommitLog
        range read answers it; every other condition needs the queues)."""
        return dataclasses.replace(self, commit_log_offset=(None, None)) == Pushed()

    def describe(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None or v == (None, None):
                continue
            if isinstance(v, frozenset):
                v = sorted(v)
            parts.append(f"{f.name}={v}")
        return ", ".join(parts) or "nothing"


#: The field of :class:`Pushed` the filters on each pushed-down column
#: narrow (the columns the registry marks for pushdown).
_PUSHED_AS: dict[str, str] = {
    "topic": "topics", "queue_id": "queue_ids", "queue_offset": "queue_offset",
    "commit_log_offset": "commit_log_offset", "msg_id": "msg_ids", "tags": "tags",
    "store_timestamp": "store_time",
}


# -- Spark filters -> Pushed ------------------------------------------------------------


def _column(f: Filter) -> str | None:
    attr = getattr(f, "attribute", None)
    if isinstance(attr, tuple) and len(attr) == 1 and isinstance(attr[0], str):
        return attr[0]
    return None


def _typed(v: Any, t: type) -> bool:
    return isinstance(v, t) and not isinstance(v, bool)


def _micros(v: Any) -> int | None:
    """A timestamp literal in µs since the epoch (Spark hands aware
    datetimes; a naive one is read as UTC)."""
    if not isinstance(v, datetime.datetime):
        return None
    if v.tzinfo is None:
        v = v.replace(tzinfo=datetime.UTC)
    return int((v - _EPOCH) // datetime.timedelta(microseconds=1))


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _bound(f: Filter, column: str) -> Bounds | None:
    """Inclusive integer bounds (ms for a timestamp: ``store_timestamp``) of one
    comparison, or None when it is not one this column pushes."""
    op = type(f)
    if op not in (EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, LessThan,
                  LessThanOrEqual):
        return None
    v = getattr(f, "value", None)
    if column in _TIME_COLUMNS:
        us = _micros(v)
        if us is None:
            return None
        # Rows hold whole ms: t_ms * 1000 compared with a µs literal.
        ge, le = _ceil_div(us, 1000), us // 1000   # t >= us, t <= us
        gt, lt = us // 1000 + 1, _ceil_div(us, 1000) - 1  # t > us, t < us
    else:
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        n = v
        ge, le, gt, lt = n, n, n + 1, n - 1
    return {EqualTo: (ge, le), EqualNullSafe: (ge, le), GreaterThan: (gt, None),
            GreaterThanOrEqual: (ge, None), LessThan: (None, lt),
            LessThanOrEqual: (None, le)}[op]


def _and(a: Bounds, b: Bounds) -> Bounds:
    lo = b[0] if a[0] is None else a[0] if b[0] is None else max(a[0], b[0])
    hi = b[1] if a[1] is None else a[1] if b[1] is None else min(a[1], b[1])
    return lo, hi


def _values(f: Filter, t: type) -> frozenset[Any] | None:
    """The values of ``col = v`` / ``col IN (...)`` (nulls never match), or None."""
    if isinstance(f, (EqualTo, EqualNullSafe)):
        vals = [f.value]
        if f.value is None:
            return None  # <=> NULL is true for null rows
    elif isinstance(f, In):
        vals = [v for v in f.value if v is not None]
    else:
        return None
    if not all(_typed(v, t) for v in vals):
        return None
    return frozenset(vals)


def translate(filters: Sequence[Filter], keys: Sequence[str] | None = None
              ) -> tuple[Pushed, list[Filter]]:
    """The conditions of ``filters`` (a conjunction) the store answers, and
    the filters Spark must still evaluate (the very objects it passed)."""
    fields: dict[str, Any] = {"keys": tuple(dict.fromkeys(keys)) if keys is not None else None}
    left: list[Filter] = []
    vals: frozenset[Any] | None
    for f in filters:
        col = _column(f)
        if col is None:
            left.append(f)
        elif isinstance(f, IsNotNull) and col in _NEVER_NULL:
            continue  # holds for every row
        elif col in _SET_COLUMNS and (vals := _values(f, _SET_COLUMNS[col])) is not None:
            name = _PUSHED_AS[col]
            prev = fields.get(name)
            fields[name] = vals if prev is None else prev & vals
        elif col in _RANGE_COLUMNS and (b := _bound(f, col)) is not None:
            name = _PUSHED_AS[col]
            fields[name] = _and(fields.get(name, (None, None)), b)
        elif col in _RANGE_COLUMNS and col not in _TIME_COLUMNS and isinstance(f, In):
            name = _PUSHED_AS[col]
            ints = [v for v in f.value if v is not None]
            if ints and all(_typed(v, int) for v in ints):
                # Narrowed to [min, max]; Spark still picks the values.
                fields[name] = _and(fields.get(name, (None, None)), (min(ints), max(ints)))
            elif not ints:
                fields[name] = (1, 0)  # IN (NULL): nothing
            left.append(f)
        else:
            left.append(f)
    return Pushed(**fields), left


# -- planning ---------------------------------------------------------------------


class PlanPartition(InputPartition):
    """Pushed-down ranges of one store: queue ranges ``(topic, queue_id,
    from, to)`` (logical offsets) and CommitLog ranges ``(from, to)``."""

    def __init__(self, path: str, store_name: str | None,
                 queue_ranges: list[tuple[str, int, int, int]],
                 commitlog_ranges: list[tuple[int, int]],
                 within: list[tuple[str, int, int, int]] | None = None,
                 min_store_timestamp: int | None = None) -> None:
        self.path = path
        self.store_name = store_name
        self.queue_ranges = queue_ranges
        self.commitlog_ranges = commitlog_ranges
        #: Rows of the CommitLog ranges are kept only inside these queue
        #: ranges (None: every row the scan keeps).
        self.within = within
        #: Rows stored before this time (ms) are left out (a scan's
        #: startingTimestamp).
        self.min_store_timestamp = min_store_timestamp

    def __repr__(self) -> str:
        q = self.queue_ranges
        head = ", ".join(f"{t}/{i}[{a},{b})" for t, i, a, b in q[:3])
        more = f" +{len(q) - 3} queue ranges" if len(q) > 3 else ""
        cl = f", CommitLog {self.commitlog_ranges}" if self.commitlog_ranges else ""
        return f"PlanPartition({self.path!r}, {head}{more}{cl})"


#: Per store and queue, how far its store times were walked: (offset
#: reached, last store time, CommitLog offset of the unit before that
#: offset, monotone so far). A planning process reused for later queries
#: walks only what was appended since (a queue whose walked part changed,
#: a store replaced at the same path, is walked again).
_MONOTONE: dict[tuple[str, str, int], tuple[int, int, int, bool]] = {}


def times_monotone(store: MessageStore, path: str, topic: str, qid: int) -> bool:
    """True when the queue's store times never decrease (a time search over
    it is exact)."""
    key = (os.path.realpath(path), topic, qid)
    first = store.get_min_offset_in_queue(topic, qid)
    start, prev = first, None
    known = _MONOTONE.get(key)
    if known is not None:
        end, last, phy, ok = known
        if first < end and store.get_commit_log_offset_in_queue(topic, qid, end - 1) == phy:
            if not ok:
                return False
            start, prev = end, last
    ok, end, last = store._n.queue_times_monotone(topic, qid, start, prev)
    phy = store.get_commit_log_offset_in_queue(topic, qid, end - 1) if end > 0 else -1
    _MONOTONE[key] = (end, last, phy, ok)
    return ok


def first_offset_by_time(store: MessageStore, topic: str, qid: int, lo: int, hi: int,
                         ts: int) -> int:
    """The first offset in ``[lo, hi)`` of a queue with monotone store times
    whose message was stored at or after ``ts`` (``hi`` when none): the
    consume queue's time search gives a starting point, a binary search
    between its neighbours makes it exact (messages share milliseconds)."""
    def time_at(o: int) -> int:
        return store.get_message_store_timestamp(topic, qid, o)

    if lo >= hi:
        return hi
    guess = min(max(store.get_offset_in_queue_by_time(topic, qid, ts), lo), hi - 1)
    if time_at(guess) >= ts:
        a, b = lo, guess          # the answer is at or before the guess
    else:
        a, b = guess + 1, hi      # after it
    while a < b:
        mid = (a + b) // 2
        t = time_at(mid)
        if t < 0:  # no readable record there (deleted, damaged): look right
            a = mid + 1
        elif t >= ts:
            b = mid
        else:
            a = mid + 1
    return a


def first_offset_by_phy(store: MessageStore, topic: str, qid: int, lo: int, hi: int,
                        phy: int) -> int:
    """The first offset in ``[lo, hi)`` whose message starts at or after
    CommitLog offset ``phy`` (``hi`` when none)."""
    a, b = lo, hi
    while a < b:
        mid = (a + b) // 2
        if store.get_commit_log_offset_in_queue(topic, qid, mid) >= phy:
            b = mid
        else:
            a = mid + 1
    return a


@dataclasses.dataclass
class PlanStats:
    """What planning one store cost and chose (for the log)."""

    records_read: int = 0
    damaged: int = 0
    fallbacks: list[str] = dataclasses.field(default_factory=list)


def _hits_by_index(store: MessageStore, topics: Iterable[str], keys: Sequence[str],
                   stats: PlanStats) -> tuple[list[tuple[str, int, int]], list[tuple[int, int]]]:
    """``(topic, queue_id, queue_offset)`` of the messages of ``topics``
    whose keys hold one of ``keys``, by the IndexFile, and the CommitLog
    ranges the index does not cover (to be scanned: no index, index files
    lost, or records not indexed yet)."""
    lo, hi = max(store.min_phy_offset, 0), store.max_phy_offset
    if lo >= hi:
        return [], []
    cover = store._n.index_coverage()
    if cover is None:
        stats.fallbacks.append("the store has no usable index: keys are found by a "
                               "CommitLog scan")
        return [], [(lo, hi)]
    uncovered = []
    if cover[0] > lo:
        uncovered.append((lo, min(cover[0], hi)))
    if cover[1] < hi:
        uncovered.append((max(cover[1], lo), hi))
    if uncovered:
        stats.fallbacks.append(f"the index covers CommitLog offsets [{cover[0]}, {cover[1]}) "
                               f"of [{lo}, {hi}): keys in {uncovered} are found by a scan")
    out: list[tuple[str, int, int]] = []
    for t in topics:
        for k in keys:
            got = store._n.key_hits(t, k)
            if got is None:
                stats.fallbacks.append("the index became unusable: keys are found by a scan")
                return [], [(lo, hi)]
            hits, damaged = got
            stats.records_read += len(hits) + damaged
            stats.damaged += damaged
            out.extend((t, q, o) for q, o in hits)
    return out, uncovered


def _hits_by_msg_id(store: MessageStore, msg_ids: Iterable[str], stats: PlanStats
                    ) -> list[tuple[str, int, int]]:
    """``(topic, queue_id, queue_offset)`` of the records the ids name (a
    damaged one is skipped and counted, as a scan does)."""
    out = []
    for mid in sorted(msg_ids):
        try:
            m = store.look_message_by_id(mid)
        except ValueError:
            continue  # not an offset message id: no row has it
        except StoreError:
            stats.damaged += 1
            continue
        stats.records_read += 1
        if m is not None:
            out.append((m.topic, m.queue_id, m.queue_offset))
    return out


def plan(pushed: Pushed, path: str, store: MessageStore, base: Sequence[tuple[str, int, int, int]],
         *, store_name: str | None, max_records: int, scan: bool = False,
         min_time: int | None = None) -> tuple[list[PlanPartition], PlanStats]:
    """The partitions reading what ``pushed`` keeps of ``base``: the queue
    ranges the read covers without pushdown. ``scan``: the read is a
    CommitLog scan (of those queues' messages), keeping those stored at or
    after ``min_time``."""
    stats = PlanStats()
    if pushed.empty:
        return [], stats
    if not scan:
        min_time = None
    if scan and pushed.queue_only:
        lo, hi = pushed.commit_log_offset
        a = max(store.min_phy_offset, 0, lo or 0)
        b = store.max_phy_offset if hi is None else min(store.max_phy_offset, hi + 1)
        seg = store.config.mapped_file_size_commit_log or 1
        return [PlanPartition(path, store_name, [], [(s, min(s - s % seg + seg, b))],
                              min_store_timestamp=min_time)
                for s in _starts(a, b, seg)], stats
    queues: dict[tuple[str, int], tuple[int, int]] = {}
    qlo, qhi = pushed.queue_offset
    for t, q, a, b in base:
        if pushed.topics is not None and t not in pushed.topics:
            continue
        if pushed.queue_ids is not None and q not in pushed.queue_ids:
            continue
        a = a if qlo is None else max(a, qlo)
        b = b if qhi is None else min(b, qhi + 1)
        if a < b:
            queues[(t, q)] = (a, b)
    if pushed.keys is not None or pushed.msg_ids is not None:
        return _plan_hits(pushed, path, store, queues, stats, store_name, max_records,
                          min_time), stats
    ranges: list[tuple[str, int, int, int]] = []
    plo, phi = pushed.commit_log_offset
    tlo, thi = _and(pushed.store_time, (min_time, None))
    for (t, q), (a, b) in sorted(queues.items()):
        if plo is not None:
            a = first_offset_by_phy(store, t, q, a, b, plo)
        if phi is not None:
            b = first_offset_by_phy(store, t, q, a, b, phi + 1)
        if (tlo is not None or thi is not None) and a < b:
            if is_system_topic(t):
                stats.fallbacks.append(f"{t}/{q}: a system topic: its time range is found "
                                       "by reading the queue")
            elif not times_monotone(store, path, t, q):
                stats.fallbacks.append(f"{t}/{q}: store times decrease somewhere in the "
                                       "queue: its time range is found by reading the queue")
            else:
                if tlo is not None:
                    a = first_offset_by_time(store, t, q, a, b, tlo)
                if thi is not None and thi < I64_MAX:
                    b = first_offset_by_time(store, t, q, a, b, thi + 1)
        if a < b:
            ranges.extend((t, q, x, y) for x, y in _chunks(a, b, max_records))
    return [PlanPartition(path, store_name, [r], [], min_store_timestamp=min_time)
            for r in ranges], stats


def _plan_hits(pushed: Pushed, path: str, store: MessageStore,
               queues: dict[tuple[str, int], tuple[int, int]], stats: PlanStats,
               store_name: str | None, max_records: int, min_time: int | None
               ) -> list[PlanPartition]:
    """Partitions reading the records the ids or the index name (one queue
    unit each), and the CommitLog ranges the index does not cover."""
    uncovered: list[tuple[int, int]] = []
    if pushed.msg_ids is not None:
        hits = _hits_by_msg_id(store, pushed.msg_ids, stats)
    else:
        assert pushed.keys is not None
        hits, uncovered = _hits_by_index(store, sorted({t for t, _ in queues}), pushed.keys,
                                         stats)
    ranges: list[tuple[str, int, int, int]] = []
    for t, q, o in sorted(set(hits)):
        r = queues.get((t, q))
        if r is not None and r[0] <= o < r[1]:
            ranges.append((t, q, o, o + 1))
    parts = [PlanPartition(path, store_name, ranges[i:i + max_records], [],
                           min_store_timestamp=min_time)
             for i in range(0, len(ranges), max_records)]
    if uncovered and queues:
        within = [(t, q, a, b) for (t, q), (a, b) in sorted(queues.items())]
        seg = store.config.mapped_file_size_commit_log or 1
        for a, b in uncovered:
            for s in _starts(a, b, seg):
                parts.append(PlanPartition(path, store_name, [], [(s, min(s - s % seg + seg, b))],
                                           within, min_store_timestamp=min_time))
    return parts


def _starts(a: int, b: int, seg: int) -> list[int]:
    out = []
    s = a
    while s < b:
        out.append(s)
        s = s - s % seg + seg
    return out


def _chunks(a: int, b: int, size: int) -> list[tuple[int, int]]:
    return [(x, min(x + size, b)) for x in range(a, b, size)]


def exact_filter(pushed: Pushed, batch: pa.RecordBatch) -> pa.RecordBatch:
    """Keeps the rows of ``batch`` that meet the conditions the ranges
    answer only approximately: ``msg_id``, ``key`` and ``commit_log_offset``
    (the rest is exact by construction, or done by the engine)."""
    mask = None

    def both(m: Any) -> None:
        nonlocal mask
        mask = m if mask is None else pc.and_(mask, m)

    if pushed.msg_ids is not None:
        both(pc.is_in(batch.column("msg_id"), value_set=pa.array(sorted(pushed.msg_ids),
                                                                  pa.string())))
    if pushed.keys is not None:
        keys = batch.column("keys")
        flat = pc.list_flatten(keys)
        parents = pc.list_parent_indices(keys)
        hit = pc.is_in(flat, value_set=pa.array(list(pushed.keys), pa.string()))
        rows = pc.unique(pc.filter(parents, pc.fill_null(hit, False)))
        both(pc.is_in(pa.array(range(batch.num_rows), pa.int64()),
                      value_set=pc.cast(rows, pa.int64())))
    lo, hi = pushed.commit_log_offset
    if lo is not None:
        both(pc.greater_equal(batch.column("commit_log_offset"), lo))
    if hi is not None:
        both(pc.less_equal(batch.column("commit_log_offset"), hi))
    if mask is None:
        return batch
    return batch.filter(pc.fill_null(mask, False))


def needs_exact_filter(pushed: Pushed) -> bool:
    return (pushed.msg_ids is not None or pushed.keys is not None
            or pushed.commit_log_offset != (None, None))


def with_filter_columns(columns: tuple[str, ...] | None, pushed: Pushed | None,
                       p: InputPartition) -> tuple[str, ...] | None:
    """``columns`` and the columns the exact filters of a partition's read
    need (``None``: every column)."""
    if columns is None or pushed is None:
        return columns
    need = exact_columns(pushed)
    if isinstance(p, PlanPartition) and p.within is not None:
        need += ["topic", "queue_id", "queue_offset"]
    return tuple(dict.fromkeys((*columns, *need)))


def exact_columns(pushed: Pushed) -> list[str]:
    """Columns :func:`exact_filter` reads."""
    out = []
    if pushed.msg_ids is not None:
        out.append("msg_id")
    if pushed.keys is not None:
        out.append("keys")
    if pushed.commit_log_offset != (None, None):
        out.append("commit_log_offset")
    return out


def within_filter(within: Sequence[tuple[str, int, int, int]], batch: pa.RecordBatch
                  ) -> pa.RecordBatch:
    """Keeps the rows of ``batch`` inside the queue ranges ``within`` (rows
    of a CommitLog range read standing in for queue reads; few rows reach
    this, after the exact filter)."""
    if batch.num_rows == 0:
        return batch
    ranges: dict[tuple[str, int], tuple[int, int]] = {(t, q): (a, b) for t, q, a, b in within}
    keep = []
    for t, q, o in zip(batch.column("topic").to_pylist(), batch.column("queue_id").to_pylist(),
                       batch.column("queue_offset").to_pylist(), strict=True):
        r = ranges.get((t, q))
        keep.append(r is not None and r[0] <= o < r[1])
    return batch.filter(pa.array(keep, pa.bool_()))


def plan_stream(store: MessageStore, opts: Any, p: PlanPartition, pushed: Pushed,
                store_name: str | None, columns: Sequence[str] | None = None) -> Any:
    """The engine's Arrow stream of a planned partition, with the store time
    and tag conditions applied in the engine."""
    lo, hi = _and(pushed.store_time, (p.min_store_timestamp, None))
    topics = sorted({t for t, _, _, _ in p.within}) if p.within is not None else None
    return store._n.read_arrow(
        p.queue_ranges or None, p.commitlog_ranges or None, topics=topics,
        include_system=opts.include_system, include_uncommitted=opts.include_uncommitted,
        min_store_timestamp=lo, max_store_timestamp=hi,
        tags=sorted(pushed.tags) if pushed.tags is not None else None,
        batch_size=opts.batch_size, store_name=store_name, threads=1,
        columns=list(columns) if columns is not None else None)


# -- the hook -------------------------------------------------------------------------


def pushdown_requested() -> bool:
    """True when Spark is asking for the reader to push filters down.

    PySpark refuses a reader that implements ``pushFilters`` when
    ``spark.sql.python.filterPushdown.enabled`` is false, and the reader
    cannot read that setting; but Spark creates it for pushdown in its own
    planning step (``pyspark.sql.worker.data_source_pushdown_filters``),
    which is on the stack then. Elsewhere the plain reader is used: reads
    work either way, with the same rows."""
    f = sys._getframe(1)
    while f is not None:
        if os.path.basename(f.f_code.co_filename) == "data_source_pushdown_filters.py":
            return True
        f = f.f_back  # type: ignore[assignment]
    return False


# -- read statistics ------------------------------------------------------------------


def report(metrics_file: str | None, partition: InputPartition, counters: Mapping[str, int]
           ) -> None:
    """Logs what reading one partition cost, and appends it as a JSON line to
    ``metrics_file`` (the ``metricsFile`` read option) when given."""
    log.info("rocketstore read %r: %s", partition,
             ", ".join(f"{k} {v}" for k, v in counters.items()))
    if metrics_file:
        line = json.dumps({"partition": repr(partition), **counters}) + "\n"
        # One write of a line under O_APPEND: lines of parallel tasks do not mix.
        fd = os.open(metrics_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

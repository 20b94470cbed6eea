"""The ``rocketstore`` Spark data source (PySpark Python Data Source API).

Reads decode whole ranges in the engine into Arrow batches that are handed to
Spark as they are (no per-row Python). Every task opens its store read-only
inside ``read()``; partitions and readers hold only plain values (paths,
offsets), never an open store, so they pickle safely.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from rocketstore._native import READ_COLUMNS
from rocketstore.errors import StoreError
from rocketstore.spark import _commit, _pushdown, _staging
from rocketstore.spark._options import (
    ReadOptions,
    WriteOptions,
    open_read_only,
    queue_key,
    split_key,
    store_config,
)
from rocketstore.store import MessageStore

__all__ = ["RocketStoreDataSource", "RocketStorePythonDataSource"]

log = logging.getLogger("rocketstore")

#: Spark's type (``DataType.simpleString()``, a DDL type) of each Arrow type
#: of the read schema: the type Spark derives from it and exchanges it as.
SPARK_TYPES: dict[str, str] = {
    "string": "string", "int32": "int", "int64": "bigint", "binary": "binary",
    "timestamp[us, tz=UTC]": "timestamp", "list<element: string>": "array<string>",
    "map<string, string>": "map<string,string>",
}

#: Spark's type of each column, in the schema's order (``store`` last), from
#: the engine's read schema.
COLUMN_TYPES: dict[str, str] = {c.name: SPARK_TYPES[c.arrow_type] for c in READ_COLUMNS}

#: The schema of a read of one store (every column but ``store``), as DDL.
SCHEMA_DDL = ", ".join(f"{n} {t}" for n, t in COLUMN_TYPES.items() if n != "store")


def _projection(schema: StructType, several: bool) -> tuple[str, ...] | None:
    """The columns a user-given schema asks for, in its order (None: every
    column, as :meth:`RocketStoreDataSource.schema` gives them). A column that
    does not exist or has another type is refused here, at planning."""
    names = tuple(f.name for f in schema.fields)
    full = tuple(c for c in COLUMN_TYPES if several or c != "store")
    if names == full:
        return None
    bad = []
    for f in schema.fields:
        want = COLUMN_TYPES.get(f.name)
        got = f.dataType.simpleString()
        if want is None:
            bad.append(f"{f.name} (no such column)")
        elif got != want:
            bad.append(f"{f.name} {got} (the column is {want})")
    if len(set(names)) != len(names):
        bad.append("a column named twice")
    if bad:
        cols = ", ".join(f"{n} {t}" for n, t in COLUMN_TYPES.items())
        raise ValueError(f"the schema given to the rocketstore format does not fit: "
                         f"{'; '.join(bad)}. Its columns (any subset, in any order): {cols}")
    return names


class RocketStoreDataSource(DataSource):
    """Spark format ``rocketstore``: read, stream, write and sink rocketstore stores.

    Read options: ``path`` (a store directory; a comma list, or ``paths``, reads
    several stores into one DataFrame with a ``store`` column), ``topic``
    (comma list; absent = every topic but system ones), ``queues`` (comma
    list of queue ids), ``startingOffsets`` / ``endingOffsets`` (``earliest``,
    ``latest`` or JSON ``{"topic/queue": offset}``), ``startingTimestamp``
    (ms: each queue starts at its first message stored at or after it; in a
    CommitLog scan, a filter on store time), ``includeSystemTopics``,
    ``includeUncommitted`` (transaction prepared/rolled-back records),
    ``maxRecordsPerPartition`` (queue ranges), ``maxBytesPerPartition``
    (CommitLog ranges; default one segment), ``batchSize`` (rows per Arrow
    batch), ``key`` (batch: rows whose keys hold one of these comma-separated
    keys, found by the index), ``metricsFile`` (each partition appends a JSON
    line of what it decoded), and any ``StoreConfig`` field under its
    snake_case name. Batch reads push filters down (see ``_pushdown``).
    Streaming adds ``maxOffsetsPerTrigger`` and ``failOnDataLoss`` (default
    true; a stream starts at ``latest`` unless told otherwise, and logs
    where). Write options: ``path``, ``stagingDir`` (default
    ``<path>.spark-staging``, on a file system the driver can read),
    ``jobTag`` (batch: the tag that makes a rerun complete a write cut
    short, and a finished one not append again; default a digest of the
    rows), ``sinkName`` (streaming: names the sink's batch tags).
    """

    @classmethod
    def name(cls) -> str:
        return "rocketstore"

    def schema(self) -> str:
        several = (ReadOptions.parse(self.options, streaming=None).several
                   if self._has_path() else False)
        return SCHEMA_DDL + (f", store {COLUMN_TYPES['store']}" if several else "")

    def _has_path(self) -> bool:
        return any(k.lower() in ("path", "paths") for k in self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = ReadOptions.parse(self.options)
        # A reader with pushFilters only when Spark plans a pushdown (PySpark
        # refuses one when spark.sql.python.filterPushdown.enabled is off).
        cls = _PushdownReader if _pushdown.pushdown_requested() else _BatchReader
        return cls(opts, schema, _projection(schema, opts.several))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = ReadOptions.parse(self.options, streaming=True)
        return _StreamReader(opts, schema, _projection(schema, opts.several))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _check_write(schema, overwrite)
        return _BatchWriter(WriteOptions.parse(self.options))

    def streamWriter(
        self, schema: StructType, overwrite: bool
    ) -> DataSourceStreamWriter:
        _check_write(schema, overwrite)
        return _StreamWriter(WriteOptions.parse(self.options, streaming=True))


class RocketStorePythonDataSource(RocketStoreDataSource):
    """The Python source under the name ``rocketstore_python``: the name that
    picks it when the JVM connector's jar is on Spark's class path (then
    ``rocketstore`` is the JVM connector)."""

    @classmethod
    def name(cls) -> str:
        return "rocketstore_python"


def _check_write(schema: StructType, overwrite: bool) -> None:
    if overwrite:
        raise ValueError("a rocketstore is append-only: use mode('append')")
    _commit.check_write_schema(schema.fieldNames())


# -- partitions ---------------------------------------------------------------


class QueuePartition(InputPartition):
    """Messages of one queue at logical offsets ``[start, end)``."""

    def __init__(self, path: str, store_name: str | None, topic: str, queue_id: int,
                 start: int, end: int) -> None:
        self.path = path
        self.store_name = store_name
        self.topic = topic
        self.queue_id = queue_id
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return (f"QueuePartition({self.path!r}, {self.topic}/{self.queue_id}, "
                f"[{self.start}, {self.end}))")


class SegmentPartition(InputPartition):
    """CommitLog records starting in ``[start, end)`` (physical offsets)."""

    def __init__(self, path: str, store_name: str | None, start: int, end: int) -> None:
        self.path = path
        self.store_name = store_name
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"SegmentPartition({self.path!r}, [{self.start}, {self.end}))"


def _split(lo: int, hi: int, size: int) -> list[tuple[int, int]]:
    return [(a, min(a + size, hi)) for a in range(lo, hi, size)]


def _segment_partitions(opts: ReadOptions, path: str, store: MessageStore) -> list[InputPartition]:
    seg = store.config.mapped_file_size_commit_log or 1
    size = opts.max_bytes_per_partition or seg
    lo, hi = max(store.min_phy_offset, 0), store.max_phy_offset
    out: list[InputPartition] = []
    first = lo - lo % seg
    for s in range(first, hi, seg):
        for a, b in _split(max(s, lo), min(s + seg, hi), size):
            out.append(SegmentPartition(path, opts.store_name(path), a, b))
    return out


def _read_partition(opts: ReadOptions, columns: tuple[str, ...] | None, p: InputPartition,
                    *, stream: bool = False, pushed: _pushdown.Pushed | None = None
                    ) -> Iterator[pa.RecordBatch]:
    """Open the store read-only here (on the executor) and yield its batches
    (only ``columns``, in that order, decoded by the engine, when a schema
    was given; only the rows ``pushed`` keeps).

    A partition of none of this format's kinds is PySpark's own
    ``InputPartition(None)``, which it hands a reader that planned no
    partition (an empty store, a topic or key nothing matches, a filter that
    excludes everything): it reads no rows."""
    if not isinstance(p, (QueuePartition, SegmentPartition, _pushdown.PlanPartition)):
        return
    store = open_read_only(p.path, opts.fields)
    name = p.store_name
    if columns is not None and "store" in columns and name is None:
        name = p.path
    # Columns the pushed-down filters read, decoded too (then dropped).
    read_cols = _pushdown.with_filter_columns(columns, pushed, p)
    try:
        if isinstance(p, _pushdown.PlanPartition):
            s = _pushdown.plan_stream(store, opts, p, pushed or _pushdown.Pushed(), name,
                                      read_cols)
        elif isinstance(p, QueuePartition):
            s = store._arrow_stream(p.topic, p.queue_id, p.start, p.end, opts.batch_size,
                                    store_name=name, columns=read_cols)
        else:
            s = store._arrow_stream(None, None, p.start, p.end, opts.batch_size,
                                    include_system=opts.include_system,
                                    include_uncommitted=opts.include_uncommitted,
                                    min_store_timestamp=opts.starting_timestamp,
                                    store_name=name, columns=read_cols)
        exact = pushed is not None and _pushdown.needs_exact_filter(pushed)
        within = p.within if isinstance(p, _pushdown.PlanPartition) else None
        # The engine decodes only ``read_cols``, in their order.
        if not exact and within is None:
            yield from pa.RecordBatchReader.from_stream(s)
        else:
            for b in pa.RecordBatchReader.from_stream(s):
                if exact and pushed is not None:
                    b = _pushdown.exact_filter(pushed, b)
                if within is not None:
                    b = _pushdown.within_filter(within, b)
                yield b if read_cols == columns else b.select(list(columns or ()))
        _pushdown.report(opts.metrics_file, p, {
            "decoded": s.decoded, "rows": s.rows, "filtered": s.filtered,
            "damaged": s.skipped_corrupt, "lost": s.lost})
        if s.skipped_corrupt:
            log.warning("rocketstore %s: %d damaged records skipped in %r",
                        p.path, s.skipped_corrupt, p)
        if s.lost and isinstance(p, QueuePartition):
            msg = (f"{p.topic}/{p.queue_id}: {s.lost} messages in offsets "
                   f"[{p.start}, {p.end}) were deleted by retention before they were read")
            if stream and opts.fail_on_data_loss:
                raise StoreError(msg + " (set failOnDataLoss=false to skip them)")
            log.warning("rocketstore %s: %s", p.path, msg)
    finally:
        store.shutdown()


# -- batch read -----------------------------------------------------------------


class _BatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType,
                 columns: tuple[str, ...] | None) -> None:
        self.opts = opts
        self.schema = schema
        self.columns = columns
        #: What the read keeps beyond its options, answered by the indexes.
        self.pushed = _pushdown.Pushed(keys=opts.keys)

    def _scan(self) -> bool:
        """True when the read is a CommitLog scan (no topic, queue or offset option)."""
        o = self.opts
        return o.topics is None and o.queues is None and (
            o.starting == "earliest" and o.ending == "latest")

    def partitions(self) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        o = self.opts
        log.info("rocketstore: the Python source reads %s", ", ".join(o.paths))
        for path in o.paths:
            store = open_read_only(path, o.fields)
            try:
                if self.pushed.narrows and not (self._scan() and o.include_uncommitted):
                    out.extend(self._planned(path, store))
                    continue
                if self._scan():
                    out.extend(_segment_partitions(o, path, store))
                    continue
                for t, q in o.queues_of(store):
                    lo, hi = o.start_of(store, t, q), o.end_of(store, t, q)
                    for a, b in _split(lo, hi, o.max_records_per_partition):
                        out.append(QueuePartition(path, o.store_name(path), t, q, a, b))
            finally:
                store.shutdown()
        return out

    def _planned(self, path: str, store: MessageStore) -> list[InputPartition]:
        o = self.opts
        scan = self._scan()
        if scan:
            base = [(t, q, store.get_min_offset_in_queue(t, q),
                     store.get_max_offset_in_queue(t, q)) for t, q in o.queues_of(store)]
        else:
            base = [(t, q, o.start_of(store, t, q), o.end_of(store, t, q))
                    for t, q in o.queues_of(store)]
        parts, stats = _pushdown.plan(self.pushed, path, store, base,
                                      store_name=o.store_name(path),
                                      max_records=o.max_records_per_partition, scan=scan,
                                      min_time=o.starting_timestamp)
        for why in stats.fallbacks:
            log.warning("rocketstore %s: %s", path, why)
        log.info("rocketstore %s: pushed down %s: %d partitions, %d records read to plan, "
                 "%d damaged", path, self.pushed.describe(), len(parts), stats.records_read,
                 stats.damaged)
        if stats.damaged:
            log.warning("rocketstore %s: %d damaged records skipped while planning",
                        path, stats.damaged)
        return list(parts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.opts, self.columns, partition, pushed=self.pushed)


class _PushdownReader(_BatchReader):
    """The batch reader Spark hands its filters (``pushFilters``)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        if self._scan() and self.opts.include_uncommitted:
            # Uncommitted records are only in the CommitLog: nothing pushes.
            return filters
        pushed, left = _pushdown.translate(filters, self.opts.keys)
        self.pushed = pushed
        return left


# -- streaming read ---------------------------------------------------------------

# Read-only stores the driver keeps open between triggers (never pickled:
# readers hold only their key).
_DRIVER_STORES: dict[tuple[str, tuple[tuple[str, str], ...]], MessageStore] = {}


def _driver_store(path: str, fields: dict[str, str]) -> MessageStore:
    key = (path, tuple(sorted(fields.items())))
    s = _DRIVER_STORES.get(key)
    if s is None or s._native is None or s._native.closed:
        s = open_read_only(path, fields)
        _DRIVER_STORES[key] = s
    else:
        s.refresh()
    return s


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"topic/queue": next offset}`` (several stores:
    ``{"<path>|topic/queue": ...}``)."""

    def __init__(self, opts: ReadOptions, schema: StructType,
                 columns: tuple[str, ...] | None) -> None:
        self.opts = opts
        self.schema = schema
        self.columns = columns
        self._target: dict[str, int] | None = None

    def _key(self, path: str, topic: str, qid: int) -> str:
        k = queue_key(topic, qid)
        return f"{path}|{k}" if self.opts.several else k

    def _unkey(self, key: str) -> tuple[str, str, int]:
        if self.opts.several:
            path, _, k = key.partition("|")
        else:
            path, k = self.opts.paths[0], key
        t, q = split_key(k)
        return path, t, q

    def _sort(self, offsets: dict[str, int]) -> dict[str, int]:
        def order(k: str) -> tuple[str, str, int]:
            return self._unkey(k)
        return {k: offsets[k] for k in sorted(offsets, key=order)}

    def _ends(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for path in self.opts.paths:
            store = _driver_store(path, self.opts.fields)
            for t, q in self.opts.queues_of(store):
                out[self._key(path, t, q)] = store.get_max_offset_in_queue(t, q)
        return out

    def initialOffset(self) -> dict[str, int]:
        """Where a new query starts (a query resuming from its checkpoint
        never asks): logged at INFO, with what chose it."""
        out: dict[str, int] = {}
        for path in self.opts.paths:
            store = _driver_store(path, self.opts.fields)
            for t, q in self.opts.queues_of(store):
                out[self._key(path, t, q)] = self.opts.start_of(store, t, q)
        out = self._sort(out)
        log.info("rocketstore streaming read of %s starts at %s (%s)",
                 ", ".join(self.opts.paths), json.dumps(out), self._start_reason())
        return out

    def _start_reason(self) -> str:
        o = self.opts
        if o.starting_timestamp is not None:
            return f"startingTimestamp={o.starting_timestamp}"
        if o.starting_given:
            spec = o.starting if isinstance(o.starting, str) else json.dumps(o.starting)
            return f"startingOffsets={spec}"
        return ("the latest offsets, the default: only messages put from now on are read; "
                "set startingOffsets=earliest to read what the store holds")

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ends()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, int], limit: ReadLimit
    ) -> dict[str, int]:
        ends = self._ends()
        if self._target is not None:
            ends = {k: min(v, self._target[k]) for k, v in ends.items() if k in self._target}
        start = start or {}
        merged = {**start}
        for k, v in ends.items():
            merged[k] = max(v, start.get(k, 0)) if k in start else v
        if isinstance(limit, ReadMaxRows):
            merged = self._admit(start, merged, int(limit.max_rows))
        return self._sort(merged)

    def _admit(self, start: dict[str, int], ends: dict[str, int], budget: int) -> dict[str, int]:
        """At most ``budget`` new offsets in total, shared fairly between queues."""
        begin = {k: start.get(k, self._begin_of_new(k)) for k in ends}
        want = {k: max(0, ends[k] - begin[k]) for k in ends}
        out = dict(begin)
        pending = [k for k in ends if want[k] > 0]
        while budget > 0 and pending:
            share = max(1, budget // len(pending))
            nxt = []
            for k in pending:
                take = min(share, want[k], budget)
                out[k] += take
                want[k] -= take
                budget -= take
                if want[k] > 0:
                    nxt.append(k)
                if budget == 0:
                    break
            pending = nxt
        return out

    def _begin_of_new(self, key: str) -> int:
        """Where a queue that appeared after the query started begins."""
        path, t, q = self._unkey(key)
        return _driver_store(path, self.opts.fields).get_min_offset_in_queue(t, q)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        for key, hi in end.items():
            path, t, q = self._unkey(key)
            lo = start.get(key)
            store = _driver_store(path, self.opts.fields)
            first = store.get_min_offset_in_queue(t, q)
            if lo is None:
                lo = first
            if lo < first and hi > lo:
                msg = (f"{t}/{q}: offsets [{lo}, {min(first, hi)}) of {path} were deleted by "
                       f"retention before they were read")
                if self.opts.fail_on_data_loss:
                    raise StoreError(msg + " (set failOnDataLoss=false to skip them)")
                log.warning("rocketstore: %s; skipping them", msg)
                lo = min(first, hi)
            for a, b in _split(lo, hi, self.opts.max_records_per_partition):
                out.append(QueuePartition(path, self.opts.store_name(path), t, q, a, b))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.opts, self.columns, partition, stream=True)

    def commit(self, end: dict[str, int]) -> None:
        pass

    def stop(self) -> None:
        for key in [k for k in _DRIVER_STORES if k[0] in self.opts.paths]:
            _DRIVER_STORES.pop(key).shutdown()


# -- write -------------------------------------------------------------------------


class _Staged(WriterCommitMessage):
    def __init__(self, staged: _commit.StagedFile) -> None:
        self.staged = staged


def _task_partition() -> int:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None:
            return int(ctx.partitionId())
    except Exception:  # pragma: no cover - outside a task
        pass
    return os.getpid()


def _task_batch_id() -> str:
    """The micro-batch a streaming write task belongs to (Spark's local
    property ``streaming.sql.batchId``)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    v = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    if v is None or not v.isdigit():
        raise RuntimeError("a rocketstore streaming write task without a micro-batch id")
    return v


def _files(messages: Sequence[WriterCommitMessage | None]) -> list[_commit.StagedFile]:
    return [m.staged for m in messages if isinstance(m, _Staged)]


class _BatchWriter(DataSourceArrowWriter):
    """Tasks stage Arrow files in a job directory the driver made at
    planning; the driver's commit appends them (one writer)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.job_dir = _staging.make_job_dir(opts.staging_dir)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _Staged(_commit.stage_batches(iterator, self.job_dir, _task_partition()))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        n = _commit.append_staged(self.opts, self.job_dir, _files(messages))
        log.info("rocketstore: appended %d rows to %s", n, self.opts.path)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _staging.remove_dir(self.opts.staging_dir, self.job_dir)


class _StreamWriter(DataSourceStreamArrowWriter):
    """A micro-batch is appended once per (sinkName, batch id): see ``_commit``."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        store_config(opts.path, opts.fields)
        # Made on the driver (query start and each commit): tasks record it.
        self.owner = _staging.owner_record()
        _staging.reclaim(opts.staging_dir)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        d = _staging.batch_dir_of_stream(self.opts.staging_dir, self.opts.sink_name,
                                         _task_batch_id(), self.owner)
        return _Staged(_commit.stage_batches(iterator, d, _task_partition()))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _commit.append_stream_batch(self.opts, _files(messages), batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _commit.remove_stream_staging(self.opts, _files(messages), batchId)

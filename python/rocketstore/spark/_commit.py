"""The write path's two halves: tasks stage Arrow files, the driver appends them.

The single-writer rule holds because only the driver's commit opens the store
for writing. Executors write their rows to Arrow IPC files in a staging
directory (see ``_staging`` for its layout and cleanup); the commit appends
those files, in partition order, with batch puts, then deletes them. A job
that fails before its commit deletes its staging directory (abort) and leaves
the store untouched. A failure during the commit leaves a prefix of the rows
in the store, and the error says how many.

The streaming sink tags every message it appends with the property
:data:`SINK_BATCH_PROPERTY` = ``"<sink name>:<batch id>"``. Before appending a
micro-batch it looks for messages carrying that batch's tag (from the position
recorded after its last commit to the end of the CommitLog), so a replayed
batch is not appended twice, even after a crash between the append and the
record of progress; a batch whose append was cut short is completed from
where it stopped (the replay must carry the same rows in the same order, as
Spark's replays of a deterministic query do).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocketstore import _native
from rocketstore.enums import PutStatus
from rocketstore.spark import _staging
from rocketstore.spark._options import WriteOptions, store_config
from rocketstore.store import MessageStore

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SINK_BATCH_PROPERTY", "CommitError", "StagedFile", "append_staged",
           "append_stream_batch", "stage_batches"]

log = logging.getLogger("rocketstore")

#: Property the streaming sink puts on every message it appends.
SINK_BATCH_PROPERTY = "SPARK_SINK_BATCH"
#: Where the sink records its progress (a hint; the data is the truth).
SINK_STATE_FILE = "sparkSink.json"
WRITE_COLUMNS = ("topic", "body", "queue_id", "tags", "keys", "properties")


class CommitError(RuntimeError):
    """The driver's append stopped part-way; ``appended`` rows are in the store."""

    def __init__(self, message: str, appended: int, total: int) -> None:
        super().__init__(message)
        self.appended = appended
        self.total = total


@dataclass(frozen=True)
class StagedFile:
    """A task's staged rows (a commit message)."""

    path: str
    partition: int
    rows: int


def check_write_schema(names: Sequence[str]) -> None:
    """A DataFrame to write needs ``topic`` and ``body`` columns."""
    missing = [c for c in ("topic", "body") if c not in names]
    if missing:
        raise ValueError(
            f"writing to a rocketstore needs columns topic and body (missing: "
            f"{', '.join(missing)}); optional: queue_id, tags, keys, properties"
        )


def stage_batches(batches: Iterable[pa.RecordBatch], d: str, partition: int) -> StagedFile:
    """Write a task's batches to one Arrow file in staging directory ``d``
    (which the task does not make: gone means the job was aborted)."""
    import pyarrow as pa

    path = os.path.join(d, f"part-{partition:05d}-{uuid.uuid4().hex}.arrow")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileNotFoundError:
        raise RuntimeError(f"the staging directory {d} is gone: the write was aborted "
                           "or its staging removed") from None
    rows = 0
    writer: pa.ipc.RecordBatchFileWriter | None = None
    try:
        with open(fd, "wb") as f:
            for b in batches:
                cols = [n for n in WRITE_COLUMNS if n in b.schema.names]
                b = b.select(cols)
                if writer is None:
                    writer = pa.ipc.new_file(f, b.schema)
                writer.write_batch(b)
                rows += b.num_rows
            if writer is not None:
                writer.close()
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    return StagedFile(path=path, partition=partition, rows=rows)


def _read_staged(files: Sequence[StagedFile]) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    for sf in sorted(files, key=lambda s: s.partition):
        if sf.rows == 0:
            continue
        with pa.memory_map(sf.path) as src:
            reader = pa.ipc.open_file(src)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


_COLUMN_TYPES = (("topic", "string"), ("body", "binary"), ("queue_id", "int32"),
                 ("tags", "string"))


def _normalize(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Cast the scalar columns to the types the engine's Arrow append takes
    (``keys`` and ``properties`` are taken as they are)."""
    import pyarrow as pa

    names = batch.schema.names
    cols = []
    for name in names:
        c = batch.column(name)
        for want_name, want in _COLUMN_TYPES:
            if name == want_name and str(c.type) != want:
                c = c.cast(getattr(pa, want)())
        cols.append(c)
    return pa.RecordBatch.from_arrays(cols, names=names)


def _put_all(
    store: MessageStore, batches: Iterable[pa.RecordBatch], total: int, skip: int,
    extra: dict[str, str] | None,
) -> int:
    """Append every row after the first ``skip``, in order, through the
    engine's Arrow append (no per-row Python); returns rows appended."""
    import pyarrow as pa

    def rest() -> Iterator[pa.RecordBatch]:
        seen = 0
        for b in batches:
            if seen + b.num_rows <= skip:
                seen += b.num_rows
                continue
            if seen < skip:
                b = b.slice(skip - seen)
                seen = skip
            seen += b.num_rows
            yield _normalize(b)

    todo = total - skip
    it = rest()
    first = next(it, None)
    if first is None:
        return 0
    reader = pa.RecordBatchReader.from_batches(first.schema, _chain(first, it))
    try:
        done, refused = store._n.put_arrow(reader, list((extra or {}).items()) or None)
    except Exception as exc:
        raise CommitError(
            f"rocketstore commit failed part-way ({exc}); see the store for the rows appended "
            f"before the failure", -1, todo) from exc
    if refused is not None:
        row, status, why = refused
        raise CommitError(
            f"rocketstore commit stopped: {done} of {todo} rows appended; row {row} was "
            f"refused ({PutStatus(status).name}: {why}); the rows before it are in the store, "
            f"and rows after it in the same batch may be too", done, todo)
    return int(done)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def append_staged(opts: WriteOptions, job_dir: str, files: Sequence[StagedFile]) -> int:
    """The driver's commit of a batch write: append staged rows, then delete
    them. Returns the rows appended."""
    total = sum(f.rows for f in files)
    try:
        with MessageStore(store_config(opts.path, opts.fields)) as store:
            n = _put_all(store, _read_staged(files), total, 0, None)
            store.flush()
        return n
    finally:
        _staging.remove_dir(opts.staging_dir, job_dir)


def _sink_state(store: MessageStore) -> dict[str, Any]:
    p = store.config.config_dir / SINK_STATE_FILE
    try:
        with open(p, encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
            return data
    except (OSError, ValueError):
        return {}


def _save_sink_state(store: MessageStore, state: dict[str, Any]) -> None:
    p = store.config.config_dir / SINK_STATE_FILE
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(_native.TEMP_SUFFIX)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)


def _already_appended(store: MessageStore, tag: str, since: int) -> int:
    """How many messages tagged ``tag`` lie in the CommitLog from ``since``."""
    import pyarrow.compute as pc

    count = 0
    for b in store.read_arrow(start=since, include_system=True):
        vals = pc.map_lookup(b.column("properties"), SINK_BATCH_PROPERTY, "last")
        count += pc.sum(pc.equal(vals, tag)).as_py() or 0
    return count


def append_stream_batch(opts: WriteOptions, files: Sequence[StagedFile], batch_id: int) -> int:
    """The streaming sink's commit of micro-batch ``batch_id``: exactly once
    per (sink name, batch id). Returns rows appended now."""
    total = sum(f.rows for f in files)
    tag = f"{opts.sink_name}:{batch_id}"
    try:
        with MessageStore(store_config(opts.path, opts.fields)) as store:
            state = _sink_state(store)
            mine = state.get(opts.sink_name, {})
            since = int(mine.get("offset", store.min_phy_offset))
            since = max(since, store.min_phy_offset, 0)
            present = _already_appended(store, tag, since)
            if present >= total and total > 0:
                log.info("rocketstore sink %s: batch %d already appended; skipped",
                         opts.sink_name, batch_id)
                n = 0
            else:
                if present:
                    log.warning("rocketstore sink %s: batch %d was cut short at %d of %d rows; "
                                "appending the rest", opts.sink_name, batch_id, present, total)
                start = store.max_phy_offset
                n = _put_all(store, _read_staged(files), total, present,
                             {SINK_BATCH_PROPERTY: tag})
                store.flush()
                state[opts.sink_name] = {"batch": batch_id, "offset": start}
                _save_sink_state(store, state)
        return n
    finally:
        remove_stream_staging(opts, files, batch_id)


def remove_stream_staging(opts: WriteOptions, files: Sequence[StagedFile], batch_id: int) -> None:
    """Delete a micro-batch's staging (and that of older ones, done or replayed)."""
    root = opts.staging_dir
    for d in sorted({os.path.dirname(f.path) for f in files}):
        _staging.remove_dir(root, d)
    _staging.remove_stream_batches(root, opts.sink_name, batch_id)

"""The write path's two halves: tasks stage Arrow files, the driver appends them.

The single-writer rule holds because only the driver's commit opens the store
for writing. Executors write their rows to Arrow IPC files in a staging
directory; the commit appends those files, in partition order, with batch
puts, then deletes them. A job that fails before its commit deletes its
staging directory (abort) and leaves the store untouched. A failure during the
commit leaves a prefix of the rows in the store, and the error says how many.

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
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocketstore._native import Message
from rocketstore.enums import PutStatus
from rocketstore.spark._options import WriteOptions, store_config
from rocketstore.store import MessageStore

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SINK_BATCH_PROPERTY", "CommitError", "StagedFile", "append_staged",
           "remove_staging", "stage_batches"]

log = logging.getLogger("rocketstore")

#: Property the streaming sink puts on every message it appends.
SINK_BATCH_PROPERTY = "SPARK_SINK_BATCH"
#: Where the sink records its progress (a hint; the data is the truth).
SINK_STATE_FILE = "sparkSink.json"
#: Rows put per call during a commit.
PUT_CHUNK = 4096

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


def job_dir(opts: WriteOptions, job_id: str) -> str:
    return os.path.join(opts.staging_dir, job_id)


def new_job_id() -> str:
    return uuid.uuid4().hex


def check_write_schema(names: Sequence[str]) -> None:
    """A DataFrame to write needs ``topic`` and ``body`` columns."""
    missing = [c for c in ("topic", "body") if c not in names]
    if missing:
        raise ValueError(
            f"writing to a rocketstore needs columns topic and body (missing: "
            f"{', '.join(missing)}); optional: queue_id, tags, keys, properties"
        )


def stage_batches(
    batches: Iterable[pa.RecordBatch], opts: WriteOptions, job_id: str, partition: int
) -> StagedFile:
    """Write a task's batches to one Arrow file in the job's staging directory."""
    import pyarrow as pa

    d = job_dir(opts, job_id)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"part-{partition:05d}-{uuid.uuid4().hex}.arrow")
    rows = 0
    writer: pa.ipc.RecordBatchFileWriter | None = None
    try:
        with open(path, "wb") as f:
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


def remove_staging(opts: WriteOptions, job_id: str) -> None:
    """Delete a job's staging directory (and the staging root if empty)."""
    shutil.rmtree(job_dir(opts, job_id), ignore_errors=True)
    try:
        os.rmdir(opts.staging_dir)
    except OSError:
        pass


def _read_staged(files: Sequence[StagedFile]) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    for sf in sorted(files, key=lambda s: s.partition):
        if sf.rows == 0:
            continue
        with pa.memory_map(sf.path) as src:
            reader = pa.ipc.open_file(src)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


def _messages(batch: pa.RecordBatch, extra: dict[str, str] | None) -> list[Message]:
    """The rows of a staged batch as Messages (column lists, then one loop)."""
    cols = {n: batch.column(n).to_pylist() for n in batch.schema.names}
    n = batch.num_rows
    topics = cols["topic"]
    bodies = cols["body"]
    qids = cols.get("queue_id") or [None] * n
    tags = cols.get("tags") or [None] * n
    keys = cols.get("keys") or [None] * n
    props = cols.get("properties") or [None] * n
    out = []
    for i in range(n):
        p: Any = props[i]
        if isinstance(p, list):  # a map column reads as (key, value) pairs
            p = dict(p)
        if extra:
            p = {**(p or {}), **extra}
        body = bodies[i]
        if isinstance(body, str):
            body = body.encode()
        out.append(Message(
            topic=topics[i],
            body=b"" if body is None else body,
            queue_id=qids[i] or 0,
            tags=tags[i],
            keys=keys[i] or None,
            properties=p or None,
        ))
    return out


def _put_all(
    store: MessageStore, batches: Iterable[pa.RecordBatch], total: int, skip: int,
    extra: dict[str, str] | None,
) -> int:
    """Append every row after the first ``skip``; returns rows appended."""
    done = 0
    seen = 0
    for b in batches:
        if seen + b.num_rows <= skip:
            seen += b.num_rows
            continue
        if seen < skip:
            b = b.slice(skip - seen)
            seen = skip
        seen += b.num_rows
        for off in range(0, b.num_rows, PUT_CHUNK):
            msgs = _messages(b.slice(off, PUT_CHUNK), extra)
            try:
                results = store.put_messages(msgs)
            except Exception as exc:
                raise CommitError(
                    f"rocketstore commit failed after appending {done} of {total - skip} rows "
                    f"({exc})", done, total - skip) from exc
            for i, r in enumerate(results):
                if r.status is not PutStatus.PUT_OK:
                    ok = done + i
                    raise CommitError(
                        f"rocketstore commit stopped: {ok} of {total - skip} rows appended; "
                        f"row {ok} was refused ({r.status.name}: {getattr(r, 'reason', None)}); "
                        f"rows after it in the same put may also be in the store",
                        ok, total - skip)
            done += len(results)
    return done


def append_staged(opts: WriteOptions, job_id: str, files: Sequence[StagedFile]) -> int:
    """The driver's commit of a batch write: append staged rows, then delete
    them. Returns the rows appended."""
    total = sum(f.rows for f in files)
    try:
        with MessageStore(store_config(opts.path, opts.fields)) as store:
            n = _put_all(store, _read_staged(files), total, 0, None)
            store.flush()
        return n
    finally:
        remove_staging(opts, job_id)


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
    tmp = p.with_suffix(".tmp")
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


def append_stream_batch(
    opts: WriteOptions, job_id: str, files: Sequence[StagedFile], batch_id: int
) -> int:
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
        remove_staging(opts, job_id)

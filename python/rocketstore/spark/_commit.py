"""The write path's two halves: tasks stage Arrow files, the driver appends them.

The single-writer rule holds because only the driver's commit opens the store
for writing. Executors write their rows to Arrow IPC files in a staging
directory (see ``_staging`` for its layout and cleanup); the commit checks
every row against the put rules (the engine's ``check_arrow``: the same
rules, in the same code, as the append applies), then appends the files, in
partition order, with batch puts, then deletes them. A job that fails before
its commit deletes its staging directory (abort) and leaves the store
untouched; so does a row that breaks a put rule (the error names it).

Both kinds of write tag every message they append, and count the messages
already carrying their tag before appending, so a write is appended once
even when a commit is cut short (a kill, a full disk) and run again:

- The streaming sink tags with :data:`SINK_BATCH_PROPERTY` =
  ``"<sink name>:<batch id>"``. Before appending a micro-batch it counts the
  messages carrying that batch's tag from the position recorded (in
  :data:`SINK_STATE_FILE`) after its last commit to the end of the CommitLog:
  a replayed batch is not appended twice, even after a crash between the
  append and the record of progress.
- A batch write tags with :data:`WRITE_JOB_PROPERTY` = its job tag: the
  ``jobTag`` option, or by default a digest of the staged rows
  (:func:`content_tag`). Before its first append it records, durably in
  :data:`JOBS_STATE_FILE`, the CommitLog offset where it begins; when all
  rows are in, it marks the job done. A write finding its tag recorded and
  not done counts the tagged messages from the recorded offset and appends
  the rest. A finished tag is not appended again when it was a ``jobTag``
  (an idempotent write); a finished digest is appended again (the same rows
  written twice on purpose).

Either way a write cut short is completed from where it stopped: the rerun
(or Spark's replay) must carry the same rows in the same order, as a
deterministic query does.

A commit follows the put rule of its store (``docs/format.md`` §21.5): on a
``SYNC_MASTER`` it returns once a slave holds every row it appended (under
``SYNC_FLUSH``, once they are on disk too). Its store was opened just now, so
a ``SYNC_MASTER`` that listens first waits, at most ``slave_timeout``, for a
slave to connect. Rows stored but not confirmed in time fail the commit with
:class:`CommitNotConfirmedError` ("stored, not yet replicated"); the write
is not recorded as finished, so a rerun (or Spark's replay) finds every row
already there, appends nothing and waits for them again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocketstore import _native
from rocketstore.config.store_config import BrokerRole
from rocketstore.enums import PutStatus
from rocketstore.errors import StoredNotFlushedError
from rocketstore.spark import _staging
from rocketstore.spark._options import WriteOptions, store_config
from rocketstore.store import MessageStore

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SINK_BATCH_PROPERTY", "WRITE_JOB_PROPERTY", "CommitError",
           "CommitNotConfirmedError", "StagedFile",
           "append_staged", "append_stream_batch", "content_tag", "stage_batches"]

log = logging.getLogger("rocketstore")

#: Property the streaming sink puts on every message it appends.
SINK_BATCH_PROPERTY = "SPARK_SINK_BATCH"
#: Where the sink records its progress (a hint; the data is the truth).
SINK_STATE_FILE = "sparkSink.json"
#: Property a batch write puts on every message it appends: its job tag.
WRITE_JOB_PROPERTY = "SPARK_WRITE_JOB"
#: Where batch writes record their jobs: tag -> CommitLog offset where the
#: job's first append began, its rows, and whether it finished.
JOBS_STATE_FILE = "sparkJobs.json"
#: Finished jobs remembered (the oldest are forgotten first).
JOBS_KEPT = 1000
WRITE_COLUMNS = ("topic", "body", "queue_id", "tags", "keys", "properties")


class CommitError(RuntimeError):
    """The driver's commit failed: a row broke a put rule (``appended`` is 0:
    nothing was appended), or the append stopped part-way (``appended``
    rows are in the store, -1 when unknown; a rerun of the same write
    appends the rest)."""

    def __init__(self, message: str, appended: int, total: int) -> None:
        super().__init__(message)
        self.appended = appended
        self.total = total


class CommitNotConfirmedError(CommitError, StoredNotFlushedError):
    """The commit appended its rows, but they are not confirmed: on a
    ``SYNC_MASTER`` no slave reported them in time (``status``
    ``FLUSH_SLAVE_TIMEOUT`` or ``SLAVE_NOT_AVAILABLE``: stored, not yet
    replicated), under ``SYNC_FLUSH`` they were not on disk in time
    (``FLUSH_DISK_TIMEOUT``). A :class:`~rocketstore.StoredNotFlushedError`,
    never a refusal: the rows are in the store, and a rerun of the same
    write (Spark's replay of the micro-batch) appends none of them again and
    waits for them once more."""

    def __init__(self, message: str, appended: int, total: int, status: PutStatus,
                 reason: str | None) -> None:
        CommitError.__init__(self, message, appended, total)
        self.status = status
        self.reason = reason
        self.result = []

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.appended, self.total, self.status, self.reason))


def _not_confirmed(what: str, status: int, why: str, rerun: str, appended: int,
                   total: int) -> CommitNotConfirmedError:
    st = PutStatus(status)
    where = "on disk" if st == PutStatus.FLUSH_DISK_TIMEOUT else "by a slave"
    kind = "not yet on disk" if st == PutStatus.FLUSH_DISK_TIMEOUT else "not yet replicated"
    return CommitNotConfirmedError(
        f"rocketstore commit: {what} stored, {kind}: not confirmed {where} in time "
        f"({st.name}: {why}); do not write them again by other means, {rerun}",
        appended, total, st, why)


def await_slave(store: MessageStore) -> None:
    """On a ``SYNC_MASTER`` that listens, wait (at most ``slave_timeout``)
    until a slave connected and reported: the commit opened the store just
    now, its slaves connect again within a second (``docs/format.md``
    §21.1), and a put finding none is ``SLAVE_NOT_AVAILABLE`` at once."""
    cfg = store.config
    if cfg.broker_role != BrokerRole.SYNC_MASTER or store.ha_port is None:
        return
    deadline = time.monotonic() + cfg.slave_timeout / 1000
    while not any(s["acked_offset"] >= 0 for s in store.ha_status()["slaves"]):
        if time.monotonic() >= deadline:
            log.warning("rocketstore: no slave of %s connected within slave_timeout (%d ms); "
                        "the rows are appended, not replicated", cfg.store_path,
                        cfg.slave_timeout)
            return
        time.sleep(0.01)


def _confirm(store: MessageStore, start: int, total: int, rerun: str) -> None:
    """Wait for the CommitLog from ``start`` (where the write's rows begin)
    to its end as a put waits (a slave on a ``SYNC_MASTER``, the disk under
    ``SYNC_FLUSH``); raise :class:`CommitNotConfirmedError` when that is not
    confirmed in time. At once when the rows were confirmed already."""
    start = max(start, 0)
    if start >= store.max_phy_offset:
        return  # nothing written: nothing to wait for
    left = store._n.wait_stored(start, store.max_phy_offset)
    if left is not None:
        status, why = left
        raise _not_confirmed(f"all {total} rows are", status, why, rerun, total, total)


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


def _rows_after(batches: Iterable[pa.RecordBatch], skip: int) -> Iterator[pa.RecordBatch]:
    """The rows after the first ``skip``, in order, cast for the engine."""
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


def _reader(batches: Iterator[pa.RecordBatch]) -> pa.RecordBatchReader | None:
    import pyarrow as pa

    first = next(batches, None)
    if first is None:
        return None
    return pa.RecordBatchReader.from_batches(first.schema, _chain(first, batches))


def _check_all(store: MessageStore, files: Sequence[StagedFile], total: int, skip: int,
               extra: dict[str, str]) -> None:
    """Check every row after the first ``skip`` against the put rules (the
    engine's, as the append applies them with the same ``extra``
    properties), writing nothing; a refused row raises :class:`CommitError`
    before anything is appended."""
    reader = _reader(_rows_after(_read_staged(files), skip))
    if reader is None:
        return
    _, refused = store._n.check_arrow(reader, list(extra.items()))
    if refused is not None:
        row, status, why = refused
        raise CommitError(
            f"rocketstore write refused: row {skip + row} of {total} (in partition order) "
            f"breaks a put rule ({PutStatus(status).name}: {why}); nothing was appended",
            0, total - skip)


def _put_all(store: MessageStore, files: Sequence[StagedFile], total: int, skip: int,
             extra: dict[str, str], rerun: str) -> int:
    """Append every row after the first ``skip``, in order, through the
    engine's Arrow append (no per-row Python); returns rows appended.
    ``rerun`` says how a rerun completes a write cut short."""
    todo = total - skip
    reader = _reader(_rows_after(_read_staged(files), skip))
    if reader is None:
        return 0
    try:
        done, refused, unconfirmed = store._n.put_arrow(reader, list(extra.items()))
    except Exception as exc:
        raise CommitError(
            f"rocketstore commit failed part-way ({exc}); the rows appended before the "
            f"failure stay in the store, and {rerun}", -1, todo) from exc
    late = ""
    if unconfirmed is not None:
        row, status, why = unconfirmed
        if refused is None:
            raise _not_confirmed(f"all {todo} rows appended; rows {skip + row} on are",
                                 status, why, rerun, done, todo)
        late = (f" (rows {skip + row} on are stored, not confirmed: "
                f"{PutStatus(status).name})")
    if refused is not None:
        row, status, why = refused
        raise CommitError(
            f"rocketstore commit stopped: {done} of {todo} rows appended{late}; row {skip + row} "
            f"was refused ({PutStatus(status).name}: {why}); the rows before it are in the "
            f"store, and rows after it in the same batch may be too; {rerun}", done, todo)
    return int(done)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def _read_state(store: MessageStore, name: str) -> dict[str, Any]:
    p = store.config.config_dir / name
    try:
        with open(p, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_state(store: MessageStore, name: str, state: dict[str, Any]) -> None:
    """Replace config file ``name`` by ``state``, durably (fsync, rename)."""
    p = store.config.config_dir / name
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(_native.TEMP_SUFFIX)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)


def _already_appended(store: MessageStore, prop: str, tag: str, since: int) -> tuple[int, int]:
    """How many messages whose property ``prop`` is ``tag`` lie in the
    CommitLog from ``since`` on (a vectorised scan of the properties), and
    the CommitLog offset of the first (the CommitLog's end when none)."""
    import pyarrow.compute as pc

    count = 0
    first = -1
    since = max(since, store.min_phy_offset, 0)
    for b in store.read_arrow(start=since, include_system=True,
                              columns=["properties", "commit_log_offset"]):
        hit = pc.fill_null(pc.equal(pc.map_lookup(b.column("properties"), prop, "last"), tag),
                           False)
        n = pc.sum(hit).as_py() or 0
        if n and first < 0:
            first = int(pc.min(pc.filter(b.column("commit_log_offset"), hit)).as_py())
        count += n
    return count, (first if first >= 0 else store.max_phy_offset)


def content_tag(files: Sequence[StagedFile]) -> str:
    """A batch write's default job tag: a digest of its staged rows in
    partition order (a rerun of a deterministic job stages the same bytes)."""
    h = hashlib.sha256()
    for sf in sorted(files, key=lambda s: s.partition):
        if sf.rows == 0:
            continue
        h.update(b"%d\n" % sf.rows)
        with open(sf.path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return "rows-" + h.hexdigest()[:32]


def _keep_jobs(jobs: dict[str, Any]) -> dict[str, Any]:
    """The records worth keeping: every unfinished job, and the newest
    :data:`JOBS_KEPT` finished ones."""
    def offset(k: str) -> int:
        v = jobs[k]
        return int(v.get("offset", 0)) if isinstance(v, dict) else 0

    done = sorted((k for k, v in jobs.items() if isinstance(v, dict) and v.get("done")),
                  key=offset)
    drop = set(done[:max(0, len(done) - JOBS_KEPT)])
    return {k: v for k, v in jobs.items() if isinstance(v, dict) and k not in drop}


def _append_job(store: MessageStore, opts: WriteOptions, files: Sequence[StagedFile],
                total: int, tag: str) -> int:
    """Append a batch write's rows once per job tag (see the module's text)."""
    extra = {WRITE_JOB_PROPERTY: tag}
    jobs = _read_state(store, JOBS_STATE_FILE)
    rec = jobs.get(tag)
    present = 0
    how = (f"a rerun of the same write (the same rows in the same order, with jobTag={tag!r} "
           f"if it was given) appends the rest without duplicates")
    if isinstance(rec, dict) and not rec.get("done"):
        present, _ = _already_appended(store, WRITE_JOB_PROPERTY, tag,
                                       int(rec.get("offset", 0)))
    elif isinstance(rec, dict) and opts.job_tag is not None:
        log.info("rocketstore: job %s was appended to %s already; nothing appended",
                 tag, opts.path)
        return 0
    if present >= total:
        log.info("rocketstore: job %s was appended to %s already (%d rows); nothing appended",
                 tag, opts.path, present)
        # Finished only once confirmed (a slave holds the rows, §21.5).
        _confirm(store, int(jobs[tag].get("offset", 0)), total, how)
        jobs[tag] = {**jobs[tag], "done": True}
        _save_state(store, JOBS_STATE_FILE, _keep_jobs(jobs))
        return 0
    _check_all(store, files, total, present, extra)
    if present == 0:
        # Recorded (durably) before the first append: a rerun counts this
        # job's messages from here on.
        jobs[tag] = {"offset": store.max_phy_offset, "rows": total, "done": False}
        _save_state(store, JOBS_STATE_FILE, _keep_jobs(jobs))
    else:
        log.warning("rocketstore: job %s was cut short at %d of %d rows; appending the rest",
                    tag, present, total)
    log.info("rocketstore: appending %d rows to %s as job %s", total - present, opts.path, tag)
    n = _put_all(store, files, total, present, extra, how)
    # The rows a run cut short appended too (at once when confirmed already).
    _confirm(store, int(jobs[tag].get("offset", 0)), total, how)
    store.flush()
    jobs[tag] = {**jobs[tag], "done": True}
    _save_state(store, JOBS_STATE_FILE, _keep_jobs(jobs))
    return n


def append_staged(opts: WriteOptions, job_dir: str, files: Sequence[StagedFile]) -> int:
    """The driver's commit of a batch write: check every row, append them
    once per job tag, then delete the staged files. Returns the rows
    appended now."""
    total = sum(f.rows for f in files)
    try:
        if total == 0:
            return 0
        with MessageStore(store_config(opts.path, opts.fields)) as store:
            await_slave(store)
            return _append_job(store, opts, files, total, opts.job_tag or content_tag(files))
    finally:
        _staging.remove_dir(opts.staging_dir, job_dir)


def append_stream_batch(opts: WriteOptions, files: Sequence[StagedFile], batch_id: int) -> int:
    """The streaming sink's commit of micro-batch ``batch_id``: exactly once
    per (sink name, batch id). Returns rows appended now."""
    total = sum(f.rows for f in files)
    tag = f"{opts.sink_name}:{batch_id}"
    extra = {SINK_BATCH_PROPERTY: tag}
    try:
        with MessageStore(store_config(opts.path, opts.fields)) as store:
            if total:
                await_slave(store)
            state = _read_state(store, SINK_STATE_FILE)
            mine = state.get(opts.sink_name, {})
            since = int(mine.get("offset", store.min_phy_offset))
            present, first = _already_appended(store, SINK_BATCH_PROPERTY, tag, since)
            replay = "Spark's replay of the micro-batch appends the rest"
            if present >= total and total > 0:
                log.info("rocketstore sink %s: batch %d already appended; skipped",
                         opts.sink_name, batch_id)
                # A replay after a commit that was not confirmed waits again.
                _confirm(store, first, total, replay)
                n = 0
            else:
                _check_all(store, files, total, present, extra)
                if present:
                    log.warning("rocketstore sink %s: batch %d was cut short at %d of %d rows; "
                                "appending the rest", opts.sink_name, batch_id, present, total)
                start = store.max_phy_offset
                n = _put_all(store, files, total, present, extra, replay)
                _confirm(store, first if present else start, total, replay)
                store.flush()
                state[opts.sink_name] = {"batch": batch_id, "offset": start}
                _save_state(store, SINK_STATE_FILE, state)
        return n
    finally:
        remove_stream_staging(opts, files, batch_id)


def remove_stream_staging(opts: WriteOptions, files: Sequence[StagedFile], batch_id: int) -> None:
    """Delete a micro-batch's staging (and that of older ones, done or replayed)."""
    root = opts.staging_dir
    for d in sorted({os.path.dirname(f.path) for f in files}):
        _staging.remove_dir(root, d)
    _staging.remove_stream_batches(root, opts.sink_name, batch_id)

"""Reads ``MessageStore`` adds on top of the engine's: pulls with the group
rule and tag expressions (:func:`get_message`), key queries with
``datetime`` bounds (:func:`query_message`), Arrow streams
(:func:`read_arrow`), and the warning a read of an unknown topic or queue
gives (:class:`UnknownTopics`). Each public function is a ``MessageStore``
method: bound by name in its class body, or (``get_message``,
``query_message``) the definition whose usual call the native
``MessageStoreBase`` method makes itself."""

from __future__ import annotations

import datetime
import difflib
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rocketstore import _native
from rocketstore._arrow_pull import column_list, tag_list
from rocketstore._checks import I32_MAX, I64_MAX, count_arg, int_arg, ms_arg
from rocketstore.consumers.offset_table import check_group
from rocketstore.enums import GetStatus
from rocketstore.errors import UnknownTopicWarning

if TYPE_CHECKING:
    import pyarrow

    from rocketstore._native import ArrowStream, GetMessageResult, MessageExt, NativeStore
    from rocketstore.store import MessageStore

__all__ = ["MAX_READ_THREADS", "UnknownTopics", "arrow_stream", "get_message", "query_message",
           "read_arrow"]

#: Most engine threads one ``read_arrow`` may use.
MAX_READ_THREADS = 256

#: Topics an :class:`UnknownTopicWarning` lists at most.
_KNOWN_SHOWN = 20


class UnknownTopics:
    """Warns, once per topic and queue, of reads of what a store does not hold."""

    def __init__(self, store_path: str) -> None:
        self._store_path = store_path
        self._warned: set[tuple[str, int | None]] = set()

    def warn(self, n: NativeStore, topic: str, queue_id: int | None, stacklevel: int, *,
             writer_subscription: bool = False) -> bool:
        """Warn (:class:`UnknownTopicWarning`) if ``topic``, or its
        ``queue_id``, does not exist; True if it does not.

        ``writer_subscription``: the read is a consumer of a store opened for
        writing, which makes the topic itself on its first put (a service
        that starts its consumers before the first put is the usual shape):
        it warns only when ``topic`` looks like a misspelling of a topic the
        store holds (a close match, which the warning names)."""
        qids = n.queue_ids(topic)
        if qids and (queue_id is None or queue_id in qids):
            return False
        known = [t for t in n.topics() if not _native.is_system_topic(t)] if not qids else []
        close = difflib.get_close_matches(topic, known, n=1, cutoff=0.8)
        if writer_subscription and not qids and not close:
            return True
        if (topic, queue_id) in self._warned:
            return True
        self._warned.add((topic, queue_id))
        if not qids:
            shown = ", ".join(repr(t) for t in known[:_KNOWN_SHOWN])
            more = f" and {len(known) - _KNOWN_SHOWN} more" if len(known) > _KNOWN_SHOWN else ""
            what = (f"topic {topic!r} does not exist in the store at {self._store_path} "
                    f"(yet): the read returns nothing; known topics: "
                    f"{shown + more if known else 'none'}")
            if close:
                what += f" (did you mean {close[0]!r}?)"
        else:
            what = (f"queue {queue_id} of topic {topic!r} does not exist (yet): the read "
                    f"returns nothing; the topic's queues: {', '.join(map(str, qids))}")
        warnings.warn(what, UnknownTopicWarning, stacklevel=stacklevel)
        return True


def get_message(
    store: MessageStore,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_msg_nums: int = 32,
    tags: Sequence[str] | str | None = None,
) -> GetMessageResult:
    """Pull up to ``max_msg_nums`` messages of ``topic``/``queue_id`` from ``offset``.

    One pull is capped as in RocketMQ (``isTheBatchFull``): at most
    ``max_transfer_count_on_message_in_memory`` (32) messages and
    ``max_transfer_bytes_on_message_in_memory`` (256 KiB) for recent
    messages, ``..._in_disk`` (8, 64 KiB) for older ones; so
    ``get_message(..., 200)`` returns 32 by default. Pull again from
    ``next_begin_offset``, raise those fields, or use a consumer or
    :meth:`read_arrow`.

    ``tags`` filters exactly by tag (``None`` or ``["*"]``: every message; a
    string is a RocketMQ expression ``"a || b"``). The result's
    ``next_begin_offset`` is where the next pull starts. ``group`` names the
    consumer group (kept for RocketMQ's signature; offsets are committed
    with :meth:`commit_offset`).

    Statuses: ``FOUND``, ``NO_MATCHED_MESSAGE`` (nothing passed the tag
    filter), ``MESSAGE_WAS_REMOVING`` (the CommitLog file behind the units
    expired), ``OFFSET_FOUND_NULL`` (no unit readable at ``offset``),
    ``OFFSET_OVERFLOW_BADLY``/``OFFSET_OVERFLOW_ONE``/``OFFSET_TOO_SMALL``,
    ``NO_MESSAGE_IN_QUEUE``. ``NO_MATCHED_LOGIC_QUEUE`` never occurs: an
    unknown topic or queue reads as an empty one (nothing is created on
    disk), with an :class:`~rocketstore.UnknownTopicWarning` naming the
    topics (or queues) the store holds.
    ``OFFSET_FOUND_NULL`` with ``next_begin_offset == offset`` means the
    message there is not readable yet: pull again.

    Every message's body CRC is checked: a damaged record is skipped,
    counted in the result's ``damaged`` and logged once; it is never
    served, and ``next_begin_offset`` moves past it (offsets stay dense).
    Offsets whose messages retention deleted (below the min offset, or
    units pointing into a deleted CommitLog file, also inside a ``FOUND``
    pull) are counted in ``skipped``: without a tag filter, a pull that
    moves forward has ``next_begin_offset - offset == len(messages) +
    skipped + damaged``.

    On a read-only store, a pull that reaches the end of what this
    process knows of the queue first picks up what the writer appended.

    Raises:
        ValueError: ``topic`` breaks the topic rule (letters, digits and
            ``% | _ -``, at most 127 bytes) and the store holds no such
            topic; or a negative ``queue_id``, ``max_msg_nums < 1``; an
            empty ``group``.
        TypeError: ``group`` is not a ``str`` (the names rule of every
            call that names a group: :func:`~rocketstore.consumers.offset_table.check_group`).
    """
    # The usual call never gets here: `MessageStoreBase.get_message` makes
    # it natively (these steps, in Rust) and hands over every other one.
    if type(group) is not str or not group:
        check_group(group)
    tags = tags if tags is None else tag_list(tags)
    result = store._n.get_message(topic, queue_id, offset, max_msg_nums, tags)
    if result.status is GetStatus.NO_MESSAGE_IN_QUEUE:
        store._warn_unknown(topic, queue_id)
    return result


def query_message(
    store: MessageStore,
    topic: str,
    key: str,
    max_num: int = 32,
    begin_timestamp: int | datetime.datetime = 0,
    end_timestamp: int | datetime.datetime | None = None,
) -> list[MessageExt]:
    """Messages of ``topic`` whose UNIQ_KEY or KEYS contain ``key``, ascending by offset.

    Only messages really carrying the key are returned (index hash
    collisions are filtered out); at most ``min(max_num, max_msgs_num_batch)``.

    The window is the messages' store time in ``[begin_timestamp,
    end_timestamp]``, both included, exact to the millisecond (``None``:
    no end). The bounds are ms since the epoch, or ``datetime`` objects (a
    naive one is local time, as ``datetime.timestamp()`` reads it). The
    index keeps whole seconds, so the search looks up to a second before
    ``begin_timestamp`` and each record's own store time decides; the
    ``max_num`` entries the index hands out may include such neighbours
    (they are dropped, not replaced).

    Raises:
        CorruptedError: a record the index points at is damaged (the
            message names file and offset).
    """
    # A lookup is one call: the usual arguments (ints, an open store) skip
    # the conversion and the property (same results, fewer frames). A
    # closed native store refuses the lookup itself (StoreClosedError, the
    # `_n` property's text) before it looks at the arguments.
    n = store._native
    if n is None:
        n = store._n  # raises StoreClosedError with the reason
    begin = begin_timestamp if type(begin_timestamp) is int else ms_arg(begin_timestamp)
    end = end_timestamp if end_timestamp is None or type(end_timestamp) is int else ms_arg(
        end_timestamp)
    found = n.query_message(topic, key, max_num, begin, end)
    if not found:
        store._warn_unknown(topic)
    return found


def read_arrow(
    store: MessageStore,
    topic: str | Sequence[str] | None = None,
    queue_id: int | None = None,
    start: int | None = None,
    end: int | None = None,
    batch_size: int = 65536,
    *,
    include_system: bool = False,
    include_uncommitted: bool = False,
    threads: int | None = None,
    columns: Sequence[str] | None = None,
) -> pyarrow.RecordBatchReader:
    """Messages as Arrow record batches (needs ``pyarrow``: ``rocketstore[spark]``).

    With a ``topic`` (or a list of topics), reads each queue of it (or just
    ``queue_id``) through its consume queue, logical offsets ``[start, end)``
    (default: the queue's first offset to its end). Without one, scans the
    CommitLog, physical offsets ``[start, end)`` (default: all of it), in
    store order. ``start``/``end`` beyond the store are clamped to what it
    holds (a read never costs more than the data it returns); negative
    ones are refused. Every batch is decoded in the engine (bodies included, no
    per-row Python) and owns its memory, so it stays valid after the store
    is closed. Batches hold at most ``batch_size`` rows. ``threads``
    engine threads decode CommitLog segments / queues in parallel (default:
    one per CPU, at most 4; 1 to ``MAX_READ_THREADS`` = 256); the order of
    rows does not change.

    Damaged records (body CRC mismatch, broken structure) are skipped.
    CommitLog scans leave out transaction prepared/rolled-back records and
    system topics (``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``) unless
    ``include_uncommitted`` / ``include_system``.

    The columns are those of the Spark schema: ``{columns}`` (timestamps ``timestamp[us, tz=UTC]``,
    hosts ``"ip:port"``). ``columns`` (a list of those names) returns only
    those, in that order, and the engine decodes only them: the property
    bytes are parsed only when ``properties``, ``tags`` or ``keys`` is
    asked for, bodies are copied only when ``body`` is. Damaged records
    are found and skipped the same way whatever the columns.

    Raises:
        TypeError / ValueError: ``start``/``end`` negative or not ints,
            ``queue_id`` outside ``[0, 2**31 - 1]``, ``threads`` outside
            ``[1, MAX_READ_THREADS]``, ``batch_size < 1``, ``columns``
            not a list of distinct column names.

    >>> import tempfile
    >>> from rocketstore import MessageStore, StoreConfig
    >>> with tempfile.TemporaryDirectory() as path:
    ...     cfg = StoreConfig(store_path=path, mapped_file_size_commit_log=64 * 1024,
    ...                       max_hash_slot_num=64, max_index_num=256)  # small files
    ...     with MessageStore(cfg) as store:
    ...         _ = store.put("orders", b"hello", tags="paid")
    ...         table = store.read_arrow("orders").read_all()
    ...         pruned = store.read_arrow("orders", columns=["tags", "body"]).read_all()
    >>> table.column("body").to_pylist(), table.column("tags").to_pylist()
    ([b'hello'], ['paid'])
    >>> pruned.column_names, pruned.to_pylist()
    (['tags', 'body'], [{'tags': 'paid', 'body': b'hello'}])
    """
    import pyarrow as pa

    if threads is None:
        threads = max(1, min(4, os.cpu_count() or 1))
    for name, value in (("start", start), ("end", end)):
        if value is not None:
            int_arg(name, value, 0)
    if "store" in (column_list(columns) or ()):
        raise ValueError("the store column exists only in reads of several stores "
                         "(the Spark format's paths option)")
    stream = arrow_stream(store, topic, queue_id, start, end, batch_size,
                          include_system=include_system,
                          include_uncommitted=include_uncommitted,
                          threads=threads, columns=columns, stacklevel=4)
    return pa.RecordBatchReader.from_stream(stream)


# The column names in read_arrow's help come from the engine's column list
# (``store`` is the Spark source's own column), so they cannot drift.
if read_arrow.__doc__:
    read_arrow.__doc__ = read_arrow.__doc__.replace(
        "{columns}", ", ".join(c.name for c in _native.READ_COLUMNS if c.name != "store"))


def arrow_stream(
    store: MessageStore,
    topic: str | Sequence[str] | None = None,
    queue_id: int | None = None,
    start: int | None = None,
    end: int | None = None,
    batch_size: int = 65536,
    *,
    include_system: bool = False,
    include_uncommitted: bool = False,
    min_store_timestamp: int | None = None,
    max_store_timestamp: int | None = None,
    tags: Sequence[str] | None = None,
    store_name: str | None = None,
    threads: int = 1,
    columns: Sequence[str] | None = None,
    stacklevel: int = 3,
) -> ArrowStream:
    """The native stream behind :func:`read_arrow` (its counters say what was
    skipped); ``columns``: the columns returned, in order (``store`` needs
    ``store_name``, its value); ``stacklevel``: the frame an unknown topic's
    warning names, as ``MessageStore._warn_unknown`` counts it."""
    n = store._n
    cols = column_list(columns)
    batch_size = min(count_arg("batch_size", batch_size), I64_MAX)
    int_arg("threads", threads, 1, MAX_READ_THREADS)
    tag_list = None if tags is None else [str(t) for t in tags]
    # Offsets past the store read nothing: they are clamped to the range
    # a Java long holds (the engine clamps them to the store's content).
    if start is not None:
        start = max(0, min(int_arg("start", start, -I64_MAX), I64_MAX))
    if end is not None:
        end = max(0, min(int_arg("end", end, -I64_MAX), I64_MAX))
    if queue_id is not None:
        int_arg("queue_id", queue_id, 0, I32_MAX)
    if topic is None:
        if queue_id is not None:
            raise ValueError("queue_id needs a topic")
        lo = n.min_phy_offset if start is None else start
        hi = n.max_phy_offset if end is None else end
        return n.read_arrow(None, [(max(lo, 0), max(hi, 0))],
                            include_system=include_system,
                            include_uncommitted=include_uncommitted,
                            min_store_timestamp=min_store_timestamp,
                            max_store_timestamp=max_store_timestamp, tags=tag_list,
                            batch_size=batch_size, store_name=store_name, threads=threads,
                            columns=cols)
    topics = [topic] if isinstance(topic, str) else list(topic)
    for t in topics:
        if not isinstance(t, str):
            raise TypeError(f"topic must be a str or a list of str, not {type(t).__name__}")
    ranges: list[tuple[str, int, int, int]] = []
    for t in topics:
        n.get_max_offset_in_queue(t, 0)  # raises ValueError for an invalid topic name
        store._warn_unknown(t, queue_id, stacklevel=stacklevel)
        qids = n.queue_ids(t) if queue_id is None else [queue_id]
        for q in qids:
            lo = n.get_min_offset_in_queue(t, q) if start is None else start
            hi = n.get_max_offset_in_queue(t, q) if end is None else end
            if hi > lo:
                ranges.append((t, q, lo, hi))
    return n.read_arrow(ranges, None, min_store_timestamp=min_store_timestamp,
                        max_store_timestamp=max_store_timestamp, tags=tag_list,
                        batch_size=batch_size, store_name=store_name, threads=threads,
                        columns=cols)


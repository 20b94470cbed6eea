"""``MessageStore.get_arrow``: one pull of a queue as one Arrow record batch.

The pull is :meth:`~rocketstore.MessageStore.get_message`'s (the same
statuses, next offset, tag filter, CRC checks, damaged and skipped counts),
decoded in the engine into one ``pyarrow.RecordBatch``: no Python object is
made per message. See :func:`get_arrow`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rocketstore.enums import GetStatus

if TYPE_CHECKING:
    import pyarrow

    from rocketstore.store import MessageStore

__all__ = [
    "ArrowGetResult",
    "column_list",
    "concat_batches",
    "empty_batch",
    "get_arrow",
    "tag_list",
]

#: Messages one ``get_arrow`` returns by default.
DEFAULT_ARROW_BATCH = 1024

_pa: Any = None


def _pyarrow() -> Any:
    """pyarrow, imported on first use (it is an optional dependency)."""
    global _pa
    if _pa is None:
        import pyarrow

        _pa = pyarrow
    return _pa


def tag_list(tags: Sequence[str] | str | None) -> list[str] | None:
    """A tag filter as the engine takes it (a str is ``"a || b"``)."""
    if tags is None:
        return None
    if isinstance(tags, str):
        return [t.strip() for t in tags.split("||")]
    return list(tags)


def column_list(columns: Sequence[str] | None) -> list[str] | None:
    """``columns`` as a list of str (the engine checks the names)."""
    if columns is None:
        return None
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence):
        raise TypeError(f"columns must be a list of column names, not {type(columns).__name__}")
    for c in columns:
        if not isinstance(c, str):
            raise TypeError(f"columns must be a list of str, not of {type(c).__name__}")
    return list(columns)


def empty_batch(columns: Sequence[str] | None, zero_copy: bool) -> pyarrow.RecordBatch:
    """A batch of 0 rows with the columns a ``get_arrow`` would return."""
    from rocketstore._native import empty_arrow_batch

    return _pyarrow().record_batch(empty_arrow_batch(column_list(columns), zero_copy))


def concat_batches(batches: list[pyarrow.RecordBatch]) -> pyarrow.RecordBatch:
    """One batch of the rows of ``batches`` (same schema), in order."""
    pa = _pyarrow()
    concat = getattr(pa, "concat_batches", None)  # pyarrow >= 19
    if concat is not None:
        return concat(batches)
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


class ArrowGetResult:
    """What :meth:`~rocketstore.MessageStore.get_arrow` returns.

    Attributes:
        batch: the messages, a ``pyarrow.RecordBatch`` (0 rows when none).
        status: the :class:`~rocketstore.GetStatus` of the pull (as
            :meth:`~rocketstore.MessageStore.get_message`'s).
        next_begin_offset: where the next pull of the queue starts.
        min_offset: the queue's first offset.
        max_offset: one past the queue's last offset.
        damaged: messages skipped because their record is damaged (never served).
        skipped: offsets moved past because retention deleted their messages.
    """

    __slots__ = ("batch", "damaged", "max_offset", "min_offset", "next_begin_offset",
                 "skipped", "status")

    def __init__(self, batch: pyarrow.RecordBatch, status: GetStatus, next_begin_offset: int,
                 min_offset: int, max_offset: int, damaged: int, skipped: int) -> None:
        self.batch = batch
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.damaged = damaged
        self.skipped = skipped

    def __len__(self) -> int:
        return int(self.batch.num_rows)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v}" for k, v in
                        (("skipped", self.skipped), ("damaged", self.damaged)) if v)
        return (f"ArrowGetResult(status={self.status}, next_begin_offset="
                f"{self.next_begin_offset}, min_offset={self.min_offset}, max_offset="
                f"{self.max_offset}, rows={self.batch.num_rows}{extra})")


def get_arrow(
    store: MessageStore,
    topic: str,
    queue_id: int,
    offset: int,
    max_messages: int = DEFAULT_ARROW_BATCH,
    columns: Sequence[str] | None = None,
    zero_copy: bool = False,
    *,
    tags: Sequence[str] | str | None = None,
) -> ArrowGetResult:
    """Pull up to ``max_messages`` messages of a queue into one Arrow record batch.

    The pull of :meth:`get_message` — the same statuses,
    ``next_begin_offset``, tag filter (``tags``), body CRC checks, and
    ``damaged``/``skipped`` counts — without RocketMQ's per-pull transfer
    caps (32 messages, 256 KiB): one batch holds up to ``max_messages``
    messages (and at most 512 MiB of records). The rows are decoded in
    the engine; no Python object is made per message. Needs ``pyarrow``.

    The columns are those of :meth:`read_arrow`, in that order;
    ``columns`` (a list of those names, ``store`` excepted) returns only
    those, in the order given, and the engine decodes only those (the
    property bytes are parsed only for ``properties``, ``tags`` or
    ``keys``; bodies are copied only for ``body``). Every record's CRC is
    checked whatever the columns.

    ``zero_copy=False`` (default): every column owns its memory; the batch
    stays valid after the store is closed. ``zero_copy=True``: the
    ``body`` column is a ``binary_view`` array pointing into the mapped
    CommitLog files instead of a copy (bodies stored compressed are
    inflated into owned memory; bodies of at most 12 bytes sit in their
    view, as Arrow lays them out). Each CommitLog file a batch points into
    stays mapped until the batch, and every array or slice sharing its
    buffers, is released: closing the store, or retention deleting the
    file, leaves held batches valid and their bytes unchanged (a deleted
    file's name is gone at once, but its disk blocks stay in use until the
    last batch pointing into it is released). The store never shrinks or
    rewrites a file it has mapped; a CommitLog file shrunk by another
    program (``truncate``) would make reading the held pages past its new
    end fail with SIGBUS, as any mapped file does. On a read-only store
    that follows a writer, a writer that crashes and recovers may cut
    records it never flushed: a zero-copy batch then sees the cut bytes
    (zeros), where a copied one keeps them.

    Returns:
        an :class:`ArrowGetResult` (``.batch``, ``.status``,
        ``.next_begin_offset``, ``.min_offset``, ``.max_offset``,
        ``.damaged``, ``.skipped``).

    Raises:
        ValueError: ``topic`` breaks the topic rule and the store holds no
            such topic; a negative ``queue_id``; ``max_messages < 1``; an
            unknown or repeated column, or ``store``.
        TypeError: ``columns`` is not a list of str.

    >>> import tempfile
    >>> from rocketstore import MessageStore, StoreConfig
    >>> with tempfile.TemporaryDirectory() as path:
    ...     cfg = StoreConfig(store_path=path, mapped_file_size_commit_log=64 * 1024,
    ...                       max_hash_slot_num=64, max_index_num=256)  # small files
    ...     with MessageStore(cfg) as store:
    ...         for i in range(3):
    ...             _ = store.put("orders", b"order %d" % i, queue_id=0)
    ...         r = store.get_arrow("orders", 0, 0, 1024)
    >>> r.status.name, r.next_begin_offset, r.batch.column("body").to_pylist()
    ('FOUND', 3, [b'order 0', b'order 1', b'order 2'])
    """
    pa = _pyarrow()
    if not isinstance(zero_copy, bool):
        raise TypeError(f"zero_copy must be a bool, not {type(zero_copy).__name__}")
    r = store._n.get_arrow(topic, queue_id, offset, max_messages, tag_list(tags),
                           column_list(columns), zero_copy)
    status = r.status
    if status is GetStatus.NO_MESSAGE_IN_QUEUE:
        store._warn_unknown(topic, queue_id)
    return ArrowGetResult(pa.record_batch(r), status, r.next_begin_offset, r.min_offset,
                          r.max_offset, r.damaged, r.skipped)

"""A consumer's Arrow poll: :meth:`Consumer.poll_arrow
<rocketstore.consumers.consumer.Consumer.poll_arrow>` and the pull it
fills its batch with.

The functions here are methods of :class:`~rocketstore.consumers.consumer.Consumer`
(bound by name in its class body, as the store binds its parts'): the same
waits, queue turns, positions, membership and lease checks as ``poll``,
with one Arrow record batch per pull instead of a Python object per
message.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rocketstore._arrow_pull import concat_batches, empty_batch

if TYPE_CHECKING:
    import pyarrow

    from rocketstore.consumers._contract import ArrowResultLike
    from rocketstore.consumers.consumer import Consumer, _Pull

__all__ = ["arrow_pull", "arrow_result", "poll_arrow"]

#: The batches a poll gathered, each with its queue.
Batches = list[tuple[int, "pyarrow.RecordBatch"]]


def poll_arrow(
    self: Consumer,
    timeout: float | None = 1.0,
    max_messages: int = 1024,
    columns: Sequence[str] | None = None,
    zero_copy: bool = False,
) -> pyarrow.RecordBatch:
    """Up to ``max_messages`` messages as one Arrow record batch (needs ``pyarrow``).

    :meth:`poll` without a Python object per message: the same waiting,
    queue turns, positions, tag filter, auto-commit, membership changes,
    lease checks and ``skipped`` / ``damaged`` accounting (the same code),
    each queue read with the store's
    :meth:`~rocketstore.MessageStore.get_arrow` (``columns`` and
    ``zero_copy`` as there). In each turn every queue with data gets an
    equal share of what is left of ``max_messages``; the batch holds the
    queues' rows one queue after another, each queue's in offset order.
    Returns a batch of 0 rows on timeout. Positions move past every row
    returned: :meth:`commit` afterwards commits the whole batch.

    Messages fetched for iteration (``for msg in consumer``) but not yet
    yielded are dropped and read again by this poll.

    Raises:
        StoreClosedError: the store was shut down.
        ValueError: the consumer is closed, ``max_messages < 1``, or an
            unknown column.
    """
    self._check_open()
    if max_messages < 1:
        raise ValueError(f"max_messages must be >= 1, got {max_messages}")
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    while True:
        self._poll_start()
        pull, batches = self._arrow_pull(columns, zero_copy)
        try:
            self._fill(self._left(deadline), max_messages, pull, max_messages)
            self._drop_lapsed(batches)
        except BaseException:
            # Nothing is returned: the positions stay before these rows.
            self._unbuffer()
            raise
        if batches or self._left(deadline) == 0.0:
            return self._arrow_result(batches, columns, zero_copy)


def arrow_pull(self: Consumer, columns: Sequence[str] | None,
               zero_copy: bool) -> tuple[_Pull, Batches]:
    """For :meth:`poll_arrow`: a pull that gathers batches, and the list it fills."""
    self._unbuffer()
    store, topic, tags = self._store, self._topic, self._tags
    batches: Batches = []

    def pull(q: int, pos: int, n: int) -> tuple[ArrowResultLike, int]:
        r = store.get_arrow(topic, q, pos, n, columns, zero_copy, tags=tags)
        rows = r.batch.num_rows
        if rows:
            batches.append((q, r.batch))
            self._buffered[q] = self._buffered.get(q, 0) + rows
        return r, rows

    return pull, batches


def arrow_result(self: Consumer, batches: Batches, columns: Sequence[str] | None,
                 zero_copy: bool) -> pyarrow.RecordBatch:
    """For :meth:`poll_arrow`: the rows fetched as one batch; positions move past them."""
    for q in self._buffered:
        self._positions[q] = self._fetch_pos[q]
    self._buffered.clear()
    if len(batches) == 1:
        return batches[0][1]
    if not batches:
        return empty_batch(columns, zero_copy)
    return concat_batches([b for _q, b in batches])

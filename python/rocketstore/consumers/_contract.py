"""The contract a :class:`~rocketstore.consumers.consumer.Consumer` reads through:
:class:`ConsumerStore` (what :class:`~rocketstore.MessageStore` offers it) and
the results of its pulls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from rocketstore.enums import GetStatus

if TYPE_CHECKING:
    import pyarrow

    from rocketstore._native import MessageExt

__all__ = ["ArrowResultLike", "ConsumerStore", "GetResultLike"]


class GetResultLike(Protocol):
    """What :meth:`ConsumerStore.get_message` returns (the store's GetResult)."""

    @property
    def status(self) -> GetStatus: ...
    @property
    def next_begin_offset(self) -> int: ...
    @property
    def min_offset(self) -> int: ...
    @property
    def max_offset(self) -> int: ...
    @property
    def damaged(self) -> int:
        """Messages skipped because their record is damaged."""
        ...
    @property
    def skipped(self) -> int:
        """Offsets moved past because retention deleted their messages."""
        ...
    @property
    def messages(self) -> Sequence[MessageExt]: ...


class ArrowResultLike(Protocol):
    """What :meth:`ConsumerStore.get_arrow` returns (the store's ArrowGetResult)."""

    @property
    def status(self) -> GetStatus: ...
    @property
    def next_begin_offset(self) -> int: ...
    @property
    def damaged(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def batch(self) -> pyarrow.RecordBatch: ...


class ConsumerStore(Protocol):
    """The part of :class:`~rocketstore.MessageStore` a :class:`Consumer` uses.

    Every method may raise :class:`~rocketstore.StoreClosedError` once the
    store is shut down; ``wait_for_dispatch`` must then return or raise
    promptly.
    """

    @property
    def read_only(self) -> bool: ...
    @property
    def dispatch_seq(self) -> int:
        """Changes whenever new messages become visible."""
        ...

    def wait_for_dispatch(self, seq: int, timeout: float | None, /) -> int:
        """Block (GIL released) until ``dispatch_seq != seq`` or timeout; the current seq."""
        ...

    def queue_ids(self, topic: str, /) -> list[int]: ...
    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int = 32,
        tags: list[str] | None = None,
        /,
    ) -> GetResultLike: ...
    def get_arrow(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        columns: Sequence[str] | None = None,
        zero_copy: bool = False,
        *,
        tags: list[str] | None = None,
    ) -> ArrowResultLike: ...
    def get_min_offset_in_queue(self, topic: str, queue_id: int, /) -> int: ...
    def get_max_offset_in_queue(self, topic: str, queue_id: int, /) -> int: ...
    def commit_offsets(self, group: str, topic: str, offsets: Mapping[int, int], /) -> None:
        """Record ``{queue_id: next offset}`` together: a persist of the
        offsets holds all of them or none."""
        ...
    def persist_offsets(self) -> None:
        """Make committed offsets durable now (a no-op on a read-only store)."""
        ...
    def query_offset(self, group: str, topic: str, queue_id: int, /) -> int: ...

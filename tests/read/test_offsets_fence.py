"""Fenced commits (docs/format.md §13.1): a commit's fence sees the queue
ids about to be written, under the offsets lock, and refuses them by
raising; a sync commit raises its refusal, pending entries it refuses at a
later write are dropped with a warning and never written."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from helpers.read_util import SMALL
from helpers.store_util import offset_table as read_offsets_file
from rocketstore import ConsumerGroupBusyError, MessageStore
from rocketstore._native import FileLock

OpenStore = Callable[..., MessageStore]


class Fence:
    """Refuses every queue in ``lost``; records each call and whether the
    offsets lock was held while it ran."""

    def __init__(self, store: MessageStore, lost: set[int]) -> None:
        self.lock_path = store._offsets.lock_path
        self.lost = lost
        self.calls: list[tuple[list[int], bool]] = []

    def __call__(self, queue_ids: list[int]) -> None:
        self.calls.append((list(queue_ids), FileLock.is_held(self.lock_path)))
        refused = sorted(set(queue_ids) & self.lost)
        if refused:
            raise ConsumerGroupBusyError(f"queues {refused} now belong to another member")


def test_sync_commit_raises_the_fence_error_and_writes_nothing_of_it(
        open_store: OpenStore, store_path: str) -> None:
    store = open_store(**SMALL)
    store.commit_offsets("g", "T", {0: 1, 1: 1})
    store.persist_offsets()
    fence = Fence(store, {1})
    with pytest.raises(ConsumerGroupBusyError, match=r"queues \[1\]"):
        store._commit_fenced("g", "T", {0: 5, 1: 7}, fence, sync=True)
    assert fence.calls == [([0, 1], True)]  # under the offsets lock, before the write
    assert read_offsets_file(store_path)["T@g"] == {0: 1, 1: 1}
    assert store.query_offset("g", "T", 1) == 1  # the refused entry is not shown either
    fence.lost.clear()
    store._commit_fenced("g", "T", {0: 5, 1: 7}, fence, sync=True)
    assert read_offsets_file(store_path)["T@g"] == {0: 5, 1: 7}


def test_pending_entries_refused_later_are_dropped_with_a_warning(
        open_store: OpenStore, store_path: str, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(**SMALL)
    fence = Fence(store, set())
    store._commit_fenced("g", "T", {0: 3, 1: 4}, fence, sync=False)
    store.commit_offsets("other", "T", {0: 9})  # no fence: always written
    fence.lost.add(0)  # the member lost queue 0 before the write
    with caplog.at_level(logging.WARNING, logger="rocketstore"):
        store.persist_offsets()
    assert fence.calls == [([0, 1], True)]
    assert read_offsets_file(store_path) == {"T@other": {0: 9}}
    assert store.query_offset("g", "T", 0) == -1
    assert "dropped unwritten" in caplog.text and "'g'" in caplog.text
    store.persist_offsets()  # dropped for good: not tried again
    assert len(fence.calls) == 1


def test_a_fenced_commit_through_the_consumer(open_store: OpenStore, store_path: str) -> None:
    store = open_store(**SMALL)
    assert store.put("T", b"x", 0).ok
    fence = Fence(store, {0})
    with store.consumer("g", "T", auto_commit=False) as consumer:
        consumer.poll(timeout=1.0)
        with pytest.raises(ConsumerGroupBusyError):
            consumer._commits.commit({0: 1}, sync=True, explicit=True, fence=fence)
        assert fence.calls and fence.calls[0][1]
        fence.lost.clear()
        consumer._commits.commit({0: 1}, sync=True, explicit=True, fence=fence)
    assert read_offsets_file(store_path)["T@g"] == {0: 1}

"""One pull is capped as in RocketMQ (32 messages from memory by default),
as the docs say; the StoreConfig fields lift the cap."""

from __future__ import annotations

from collections.abc import Callable

from helpers.presets import SMALL
from rocketstore import MessageStore


def test_a_pull_of_200_returns_32_by_default(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL)
    store.put_batch("orders", [b"m%d" % i for i in range(100)])
    store.flush()
    g = store.get_message("g", "orders", 0, 0, 200)
    assert len(g.messages) == 32
    assert g.next_begin_offset == 32
    doc = MessageStore.get_message.__doc__ or ""
    assert "max_transfer_count_on_message_in_memory" in doc and "32" in doc


def test_the_config_lifts_the_cap(open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL, max_transfer_count_on_message_in_memory=200)
    store.put_batch("orders", [b"m%d" % i for i in range(100)])
    store.flush()
    assert len(store.get_message("g", "orders", 0, 0, 200).messages) == 100

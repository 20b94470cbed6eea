"""A read of a topic (or a queue) the store does not hold says so, the same way
in every API: an UnknownTopicWarning naming the topic and what the store
holds, once per store, topic and queue; the read itself returns nothing."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest

from helpers.presets import SMALL
from rocketstore import GetStatus, MessageStore, UnknownTopicWarning


@pytest.fixture
def store(open_store: Callable[..., MessageStore]) -> MessageStore:
    s = open_store(**SMALL)
    s.put("orders", b"x", queue_id=0, keys=["k"])
    s.put("orders", b"y", queue_id=1)
    s.flush()
    return s


def test_get_message_on_an_unknown_topic_names_the_known_ones(store: MessageStore) -> None:
    with pytest.warns(UnknownTopicWarning, match=r"topic 'order' does not exist.*'orders'"):
        r = store.get_message("g", "order", 0, 0)
    assert r.status is GetStatus.NO_MESSAGE_IN_QUEUE and r.messages == []


def test_get_message_on_an_unknown_queue_names_the_queues(store: MessageStore) -> None:
    with pytest.warns(UnknownTopicWarning, match=r"queue 7 of topic 'orders'.*queues: 0, 1"):
        r = store.get_message("g", "orders", 7, 0)
    assert r.messages == []


def test_read_arrow_warns_the_same_way(store: MessageStore) -> None:
    pytest.importorskip("pyarrow")
    with pytest.warns(UnknownTopicWarning, match=r"topic 'order' does not exist.*'orders'"):
        assert store.read_arrow("order").read_all().num_rows == 0
    with pytest.warns(UnknownTopicWarning, match=r"queue 7 of topic 'orders'"):
        assert store.read_arrow("orders", 7).read_all().num_rows == 0


def test_a_consumer_of_an_unknown_topic_warns(store: MessageStore) -> None:
    with pytest.warns(UnknownTopicWarning, match=r"topic 'ordrs' does not exist.*'orders'"):
        consumer = store.consumer("g", "ordrs")
    assert consumer.poll(timeout=0.01) == []
    consumer.close()


def test_query_message_on_an_unknown_topic_warns(store: MessageStore) -> None:
    with pytest.warns(UnknownTopicWarning, match=r"topic 'order' does not exist"):
        assert store.query_message("order", "k") == []
    # A known topic without the key: no warning, just nothing.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.query_message("orders", "missing") == []


def test_the_warnings_of_pulls_and_lookups_point_at_the_caller(store: MessageStore) -> None:
    # The usual call is native; a call by keyword, or with tags as a string,
    # goes through the Python definition: each names this line.
    calls: list[Callable[[], object]] = [
        lambda: store.query_message("ordr", "k"),
        lambda: store.query_message(topic="ordx", key="k"),
        lambda: store.get_message("g", "ordy", 0, 0),
        lambda: store.get_message("g", "ordz", 0, 0, 32, ["a"]),
        lambda: store.get_message("g", "orda", 0, 0, 32, "a || b"),
        lambda: store.get_message("g", topic="ordb", queue_id=0, offset=0),
        lambda: store.get_message("g", "orders", 9, 0),
    ]
    for call in calls:
        with pytest.warns(UnknownTopicWarning) as record:
            r = call()
        assert r == [] or r.messages == []  # type: ignore[union-attr]
        assert len(record) == 1
        assert record[0].filename == __file__


def test_known_topics_and_queues_read_without_a_warning(store: MessageStore) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [m.body for m in store.get_message("g", "orders", 0, 0).messages] == [b"x"]
        # Past the end of a known queue: nothing, and no warning.
        assert store.get_message("g", "orders", 0, 1).messages == []
        consumer = store.consumer("g", "orders")
        consumer.close()


def test_the_warning_is_given_once_per_topic_and_queue(store: MessageStore) -> None:
    with pytest.warns(UnknownTopicWarning) as record:
        for _ in range(3):
            store.get_message("g", "order", 0, 0)
    assert len(record) == 1
    assert record[0].filename == __file__  # points at the caller's line


def test_read_arrow_warning_points_at_the_caller(store: MessageStore) -> None:
    pytest.importorskip("pyarrow")
    with pytest.warns(UnknownTopicWarning) as record:
        store.read_arrow("nope")
    assert [w.filename for w in record] == [__file__]


def test_system_topics_are_not_listed_as_known(open_store: Callable[..., MessageStore]) -> None:
    from rocketstore import Message
    s = open_store(**SMALL)
    s.put_message(Message(topic="later", body=b"x", delay_level=3))
    s.flush()
    with pytest.warns(UnknownTopicWarning, match=r"known topics: none"):
        s.get_message("g", "later", 0, 0)


def test_a_writers_consumer_started_before_the_first_put_does_not_warn(
        open_store: Callable[..., MessageStore]) -> None:
    """The README's service pattern: a store opened for writing starts its
    consumers, then puts (which makes the topic): no warning."""
    import asyncio

    s = open_store(**SMALL)

    async def service() -> list[bytes]:
        consumer = s.async_consumer("pipeline", "orders")
        await s.aput("orders", b"first")
        got = [m.body for m in await consumer.poll(timeout=5.0)]
        await consumer.close()
        return got

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = s.consumer("billing", "orders")
        assert asyncio.run(service()) == [b"first"]
        assert [m.body for m in c.poll(timeout=5.0)] == [b"first"]
        c.close()
        # Another topic is held now; a consumer of a new, unrelated one is
        # still not warned of.
        s.consumer("audit", "payments").close()


def test_a_writers_consumer_of_a_misspelt_topic_warns_with_the_close_name(
        store: MessageStore) -> None:
    with pytest.warns(UnknownTopicWarning, match=r"'ordrs' does not exist.*did you mean "
                                                 r"'orders'\?"):
        store.consumer("g", "ordrs").close()


def test_a_read_only_stores_consumer_of_an_unknown_topic_warns(
        store: MessageStore, open_store: Callable[..., MessageStore]) -> None:
    ro = open_store(read_only=True, **SMALL)
    with pytest.warns(UnknownTopicWarning, match=r"topic 'payments' does not exist.*'orders'"):
        ro.consumer("g", "payments").close()
    # One-shot reads of a writer still warn of any unknown topic.
    with pytest.warns(UnknownTopicWarning, match=r"topic 'payments' does not exist"):
        store.get_message("g", "payments", 0, 0)

"""``topics()`` lists the user's topics; system topics (``SCHEDULE_TOPIC_XXXX``,
where delayed messages wait) only when asked."""

from __future__ import annotations

from collections.abc import Callable

from helpers.presets import SMALL
from rocketstore import Message, MessageStore, PutStatus, _native


def test_topics_hide_system_topics_unless_asked(
        open_store: Callable[..., MessageStore]) -> None:
    store = open_store(**SMALL)
    assert store.put("orders", b"now").status is PutStatus.PUT_OK
    r = store.put_message(Message(topic="later", body=b"x", delay_level=3))
    assert r.status is PutStatus.PUT_OK
    store.flush()
    everything = store.topics(include_system=True)
    assert "SCHEDULE_TOPIC_XXXX" in everything
    assert store.topics() == ["orders"]
    assert [t for t in everything if not _native.is_system_topic(t)] == ["orders"]


def test_a_read_only_store_hides_them_too(open_store: Callable[..., MessageStore]) -> None:
    writer = open_store(**SMALL)
    writer.put_message(Message(topic="later", body=b"x", delay_level=3))
    writer.put("orders", b"now")
    writer.shutdown()
    ro = open_store(read_only=True, **SMALL)
    assert ro.topics() == ["orders"]
    assert "SCHEDULE_TOPIC_XXXX" in ro.topics(include_system=True)

"""One rule for group and topic names on every call that names them
(consumers, commits, queries, resets, deletes): the key of the consumer
offsets is ``<topic>@<group>`` (docs/format.md §13), so a topic holding ``@``
or an empty name would write a key that reads back as another one."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.read_util import SMALL
from rocketstore import MessageStore

OpenStore = Callable[..., MessageStore]

#: Every public call that names a group and a topic, as ``call(store, group, topic)``.
CALLS: dict[str, Callable[[MessageStore, Any, Any], object]] = {
    "consumer": lambda s, g, t: s.consumer(g, t).close(),
    "commit_offset": lambda s, g, t: s.commit_offset(g, t, 0, 1),
    "commit_offsets": lambda s, g, t: s.commit_offsets(g, t, {0: 1}),
    "query_offset": lambda s, g, t: s.query_offset(g, t, 0),
    "reset_consumer_group": lambda s, g, t: s.reset_consumer_group(g, "earliest", topic=t),
    "reset_consumer_group(dry_run)": lambda s, g, t: s.reset_consumer_group(
        g, "earliest", topic=t, dry_run=True),
    "delete_consumer_group": lambda s, g, t: s.delete_consumer_group(g, topic=t),
    "hold_consumer_group": lambda s, g, t: s.hold_consumer_group(g, t),
}

#: ``(group, topic)`` -> the error every call raises.
BAD_NAMES: list[tuple[Any, Any, type[Exception], str]] = [
    ("", "T", ValueError, "group must not be empty"),
    ("g", "", ValueError, "topic must not be empty"),
    (1, "T", TypeError, "group must be str, not int"),
    ("g", b"T", TypeError, "topic must be str, not bytes"),
    ("g", "a@b", ValueError, "topic must not contain '@': 'a@b'"),
]


def _offsets_file(store_path: str) -> Path:
    return Path(store_path) / "config" / "consumerOffset.json"


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize(("group", "topic", "exc", "message"), BAD_NAMES)
def test_every_call_refuses_a_bad_name_alike(
    open_store: OpenStore, store_path: str, call: str, group: Any, topic: Any,
    exc: type[Exception], message: str,
) -> None:
    store = open_store(**SMALL)
    store.put("T", b"x")
    store.commit_offset("g", "T", 0, 1)
    store.flush()  # writes consumerOffset.json (docs/format.md §13.3)
    before = _offsets_file(store_path).read_bytes()
    with pytest.raises(exc, match=f"^{re.escape(message)}$"):
        CALLS[call](store, group, topic)
    store.flush()
    assert _offsets_file(store_path).read_bytes() == before  # no "T@" entry, nothing else


def test_a_reset_or_delete_of_every_topic_checks_the_group(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    store.put("T", b"x")
    for group, exc, message in (("", ValueError, "group must not be empty"),
                                (None, TypeError, "group must be str, not NoneType")):
        with pytest.raises(exc, match=f"^{re.escape(message)}$"):
            store.reset_consumer_group(group, "latest")
        with pytest.raises(exc, match=f"^{re.escape(message)}$"):
            store.delete_consumer_group(group)


def test_a_pull_checks_its_group_like_every_call(open_store: OpenStore) -> None:
    """``get_message`` commits nothing, yet its group follows the same rule."""
    store = open_store(**SMALL)
    store.put("T", b"x")
    for group, exc, message in (("", ValueError, "group must not be empty"),
                                (None, TypeError, "group must be str, not NoneType"),
                                (1, TypeError, "group must be str, not int")):
        with pytest.raises(exc, match=f"^{re.escape(message)}$"):
            store.get_message(group, "T", 0, 0)
    assert [m.body for m in store.get_message("a@b", "T", 0, 0).messages] == [b"x"]


def test_a_group_may_hold_the_separator_everywhere(open_store: OpenStore, store_path: str) -> None:
    """As ``consumer()`` always took it: the key splits at its first ``@``,
    and a topic never holds one, so ``T@a@b`` is group ``a@b`` on ``T``."""
    store = open_store(**SMALL)
    for i in range(3):
        store.put("T", b"m%d" % i)
    with store.consumer("a@b", "T") as consumer:
        assert len(consumer.poll(timeout=5.0)) == 3
    assert store.query_offset("a@b", "T", 0) == 3
    store.flush()
    assert '"T@a@b":{0:3' in _offsets_file(store_path).read_text()
    [lag] = store.consumer_groups()
    assert (lag.group, lag.topics, lag.lag) == ("a@b", ("T",), 0)
    assert store.reset_consumer_group("a@b", "earliest") == {("T", 0): (3, 0)}
    assert store.query_offset("a@b", "T", 0) == 0
    with pytest.raises(ValueError, match="topic must not contain '@'"):
        store.commit_offset("b", "T@a", 0, 9)  # the same key text, read back as another key
    assert store.delete_consumer_group("a@b") == ["T"]
    assert store.consumer_groups() == []

"""Tag filtering in ``get_message`` and the consumer: exact, hash collisions never leak.

docs/format.md §14: the CQ tagsCode is only a prefilter; the stored ``TAGS``
string decides.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from helpers.read_util import SMALL, wait_dispatched
from helpers.store_util import java_string_hash
from rocketstore import GetStatus, MessageStore

OpenStore = Callable[..., MessageStore]

# (tag, count) in put order, interleaved below
TAGS: list[str | None] = ["A", "B", "Aa", "BB", "中文", "日本語", None, "C"]


def _tagged_store(
    open_store: OpenStore, n_rounds: int = 6
) -> tuple[MessageStore, list[str | None]]:
    store = open_store(**SMALL)
    order: list[str | None] = []
    for rnd in range(n_rounds):
        for tag in TAGS:
            r = store.put("T", f"{tag}:{rnd}".encode(), 0, tags=tag)
            assert r.ok
            order.append(tag)
    wait_dispatched(store)
    return store, order


def _pull_all(store: MessageStore, tags: object, max_msg_nums: int = 32) -> list:
    out = []
    offset = 0
    end = store.get_max_offset_in_queue("T", 0)
    while offset < end:
        r = store.get_message("g", "T", 0, offset, max_msg_nums, tags)  # type: ignore[arg-type]
        # FOUND when the scanned units hold a match, else NO_MATCHED_MESSAGE.
        assert r.status is (GetStatus.FOUND if r.messages else GetStatus.NO_MATCHED_MESSAGE), (
            r.status
        )
        assert r.next_begin_offset > offset
        out += r.messages
        offset = r.next_begin_offset
    return out


def test_collision_premise() -> None:
    assert java_string_hash("Aa") == java_string_hash("BB")
    assert java_string_hash("中文") == 646394


@pytest.mark.parametrize(
    ("filt", "want"),
    [
        (["A"], {"A"}),
        (["B"], {"B"}),
        (["C"], {"C"}),
        (["中文"], {"中文"}),
        (["日本語"], {"日本語"}),
        (["中文", "日本語"], {"中文", "日本語"}),
        (["Aa"], {"Aa"}),
        (["BB"], {"BB"}),
        (["A", "B"], {"A", "B"}),
        ("A || B", {"A", "B"}),
        ("A||B", {"A", "B"}),
        ("中文 || C", {"中文", "C"}),
    ],
)
def test_exact_filter(open_store: OpenStore, filt: object, want: set[str]) -> None:
    store, order = _tagged_store(open_store)
    got = _pull_all(store, filt)
    assert {m.tags for m in got} == want
    expected_offsets = [i for i, t in enumerate(order) if t in want]
    assert [m.queue_offset for m in got] == expected_offsets
    for m in got:
        assert m.body.decode().split(":")[0] == m.tags
        assert m.properties["TAGS"] == m.tags
        assert m.tags_code == java_string_hash(m.tags)


@pytest.mark.parametrize("filt", [None, ["*"], "*"])
def test_no_filter_returns_everything(open_store: OpenStore, filt: object) -> None:
    store, order = _tagged_store(open_store)
    got = _pull_all(store, filt)
    assert [m.queue_offset for m in got] == list(range(len(order)))
    assert [m.tags for m in got] == order


def test_collision_never_leaks_even_when_only_colliders_are_in_range(
    open_store: OpenStore,
) -> None:
    store = open_store(**SMALL)
    for i in range(40):
        assert store.put("T", b"bb%d" % i, 0, tags="BB").ok
    wait_dispatched(store)
    r = store.get_message("g", "T", 0, 0, 32, ["Aa"])
    # every unit passes the tagsCode prefilter; none may be delivered
    assert r.status is GetStatus.NO_MATCHED_MESSAGE
    assert r.messages == []
    assert r.next_begin_offset == 40
    assert store.put("T", b"aa", 0, tags="Aa").ok
    wait_dispatched(store)
    r = store.get_message("g", "T", 0, r.next_begin_offset, 32, ["Aa"])
    assert r.status is GetStatus.FOUND
    assert [(m.queue_offset, m.body) for m in r.messages] == [(40, b"aa")]
    r = store.get_message("g", "T", 0, 0, 32, ["BB"])
    assert len(r.messages) == 32 and {m.tags for m in r.messages} == {"BB"}


def test_untagged_messages_only_match_no_filter(open_store: OpenStore) -> None:
    store = open_store(**SMALL)
    store.put("T", b"none", 0)
    store.put("T", b"a", 0, tags="A")
    wait_dispatched(store)
    r = store.get_message("g", "T", 0, 0, 32, ["A"])
    assert [m.body for m in r.messages] == [b"a"]
    r = store.get_message("g", "T", 0, 0, 32, None)
    assert [m.body for m in r.messages] == [b"none", b"a"]
    assert r.messages[0].tags is None


def test_consumer_tag_filter(open_store: OpenStore) -> None:
    store, order = _tagged_store(open_store)
    for filt in (["Aa"], ["中文", "B"]):
        c = store.consumer("g-" + "-".join(filt), "T", tags=filt)
        got = c.poll(timeout=1.0, max_messages=1000)
        more = c.poll(timeout=0)
        assert more == []
        assert [m.queue_offset for m in got] == [i for i, t in enumerate(order) if t in filt]
        # the position moved past the filtered tail too
        assert c.position(0) == len(order)
        c.close()

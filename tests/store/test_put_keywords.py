"""``MessageStore.put`` matches its keyword arguments by identity.

Keyword names written in code are interned strings, and ``put`` places
them by comparing pointers; every call it cannot place so (a name built at
run time, an unknown or repeated argument, a ``check`` that is not a bool,
too many or too few arguments) goes to the generated parser, so a put
behaves the same whichever way its arguments come: these tests compare the
stored messages and the errors of each way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocketstore import MessageStore
from rocketstore._native import NativeStore

OpenStore = Callable[..., MessageStore]

#: Every put field with a value that is not its default.
FIELDS: dict[str, Any] = {
    "topic": "T",
    "body": b"body",
    "queue_id": 2,
    "tags": "TagA",
    "keys": ["k1", "k2"],
    "properties": {"p": "v"},
    "delay_level": 0,
    "flag": 7,
    "born_timestamp": 1_234_567,
    "born_host": ("10.1.2.3", 4567),
    "sys_flag": 0,
}


def _not_interned(name: str) -> str:
    """``name`` as a new string object (not the interned one)."""
    return "".join(list(name))


def _stored(store: MessageStore, queue_id: int, offset: int) -> tuple[Any, ...]:
    r = store.get_message("g", "T", queue_id, offset, 1)
    (m,) = r.messages
    return (m.body, m.tags, m.keys, m.properties.get("p"), m.flag, m.born_timestamp,
            m.born_host, m.queue_id)


@pytest.mark.parametrize("npos", range(0, 12))
def test_any_split_of_position_and_keyword_stores_the_same(open_store: OpenStore,
                                                           npos: int) -> None:
    """The first ``npos`` fields by position, the rest by keyword (interned
    names, then names built at run time): the same message each time."""
    store = open_store()
    names = list(FIELDS)
    pos = [FIELDS[n] for n in names[:npos]]
    kw = {n: FIELDS[n] for n in names[npos:]}
    results = [
        store.put(*pos, **kw),
        store.put(*pos, **{_not_interned(k): v for k, v in kw.items()}),
        store.put(*[FIELDS[n] for n in names]),
    ]
    assert [r.queue_offset for r in results] == [0, 1, 2]
    stored = [_stored(store, 2, i) for i in range(3)]
    assert stored[0] == stored[1] == stored[2]
    assert stored[0][:3] == (b"body", "TagA", ["k1", "k2"])


def test_tags_and_keys_by_keyword_and_check(open_store: OpenStore) -> None:
    store = open_store()
    r = store.put("T", b"x", 1, tags="a", keys="k", check=False)
    assert r.ok and r.queue_offset == 0
    assert store.put("T", b"x", 1, "a", "k", check=True).queue_offset == 1
    first, second = _stored(store, 1, 0), _stored(store, 1, 1)
    assert first[:5] == second[:5]  # born now: the born timestamps differ
    assert first[:3] == (b"x", "a", ["k"])


def _error(call: Callable[[], object]) -> tuple[type, str]:
    with pytest.raises(Exception) as e:  # any error: compared below
        call()
    return type(e.value), str(e.value)


@pytest.mark.parametrize(("args", "kwargs"), [
    (("T", b"x"), {"tagz": "a"}),
    (("T", b"x"), {_not_interned("tagz"): "a"}),
    (("T", b"x"), {"topic": "U"}),
    (("T", b"x", 0, "a"), {"tags": "b"}),
    (("T", b"x"), {"check": 1}),
    (("T", b"x"), {"check": None}),
    (("T",), {}),
    ((), {"body": b"x"}),
    (("T", b"x", 0, None, None, None, 0, 0, None, None, 0, True), {}),
    (("T", b"x"), {"queue_id": True}),
    (("T", b"x"), {"tags": 5}),
    ((5, b"x"), {}),
])
def test_errors_are_the_generated_parsers(open_store: OpenStore, args: tuple[Any, ...],
                                          kwargs: dict[str, Any]) -> None:
    """A call the fast path cannot place raises what the generated parser of
    the same signature raises (``NativeStore.put``), word for word but for
    the class name."""
    store = open_store()
    native: NativeStore = store._n
    got = _error(lambda: store.put(*args, **kwargs))
    want = _error(lambda: native.put(*args, **kwargs))
    assert got[0] is want[0]
    assert got[1].replace("MessageStoreBase.put", "put") == want[1].replace(
        "NativeStore.put", "put")


def test_signature_and_docstring_are_kept() -> None:
    sig = inspect.signature(MessageStore.put)
    assert list(sig.parameters) == ["self", *FIELDS, "check"]
    assert sig.parameters["check"].kind is inspect.Parameter.KEYWORD_ONLY
    assert (MessageStore.put.__doc__ or "").startswith("Append one message given as arguments")
    assert MessageStore.put.__qualname__ == "MessageStoreBase.put"


def test_a_method_of_another_class_is_refused(open_store: OpenStore) -> None:
    """The type of ``self`` is checked before the method runs (it is not
    checked again inside)."""
    put = MessageStore.put
    with pytest.raises(TypeError, match=r"doesn't apply to a 'object' object"):
        put(object(), "T", b"x")


def _records(store: MessageStore, results: list[Any]) -> list[bytes]:
    """The stored records of ``results``, with the bytes that differ between
    two stores written alike masked: STORETIMESTAMP (the put's time) and the
    property CRC's ten digits, which cover it (docs/format.md §3, §6.1)."""
    store.flush()
    data = (Path(store.config.store_path) / "commitlog" / ("0" * 20)).read_bytes()
    out = []
    for r in results:
        rec = bytearray(data[r.wrote_offset:r.wrote_offset + r.wrote_bytes])
        assert int.from_bytes(rec[:4], "big") == len(rec)
        rec[56:64] = bytes(8)  # STORETIMESTAMP (an IPv4 born host before it)
        rec[-11:-1] = bytes(10)  # the property CRC's digits, before its 0x02
        out.append(bytes(rec))
    return out


def _put_both_ways(store: MessageStore, by_keyword: bool, rounds: int) -> list[Any]:
    """The same puts each round from six call sites (more than the keyword
    placements ``put`` keeps), by keyword or by position."""
    results = []
    for i in range(rounds):
        body, ts = f"m{i}".encode(), 1_000 + i
        if by_keyword:
            results += [
                store.put("T", body, 1, tags="a", keys=[f"k{i}"], born_timestamp=ts),
                store.put("T", body, 1, tags="b", born_timestamp=ts),
                store.put("T", body, 1, keys=f"k{i}", born_timestamp=ts),
                store.put("T", body, queue_id=1, tags="c", born_timestamp=ts),
                store.put("T", body, 1, "d", born_timestamp=ts, keys=["x", "y"]),
                store.put(topic="T", body=body, queue_id=1, tags="e", born_timestamp=ts),
            ]
        else:
            results += [
                store.put("T", body, 1, "a", [f"k{i}"], None, 0, 0, ts),
                store.put("T", body, 1, "b", None, None, 0, 0, ts),
                store.put("T", body, 1, None, f"k{i}", None, 0, 0, ts),
                store.put("T", body, 1, "c", None, None, 0, 0, ts),
                store.put("T", body, 1, "d", ["x", "y"], None, 0, 0, ts),
                store.put("T", body, 1, "e", None, None, 0, 0, ts),
            ]
    return results


def test_keyword_and_positional_puts_store_the_same_bytes(open_store: OpenStore,
                                                          tmp_path: Path) -> None:
    """Two stores written alike, one by keyword and one by position, from
    call sites whose keyword placements ``put`` keeps and replaces: the
    records are the same bytes (but for the put's own time)."""
    kw = open_store(path=str(tmp_path / "kw"))
    pos = open_store(path=str(tmp_path / "pos"))
    by_kw = _put_both_ways(kw, True, 5)
    by_pos = _put_both_ways(pos, False, 5)
    assert [r.wrote_offset for r in by_kw] == [r.wrote_offset for r in by_pos]
    assert _records(kw, by_kw) == _records(pos, by_pos)
    assert kw.get_message("g", "T", 1, 4, 1).messages[0].keys == ["x", "y"]


def test_a_kept_placement_is_per_number_of_positional_arguments(
        open_store: OpenStore) -> None:
    """One keyword-name tuple with a different number of positional
    arguments: two call sites of one function share the constant
    ``("queue_id",)``, and ``**kwargs`` calls may build theirs alike. With
    two positional arguments ``queue_id`` is placed; with three it is given
    twice, a TypeError each time, however often the other call came first."""
    store = open_store()
    kw = {"queue_id": 2}
    for i in range(3):
        assert store.put("T", b"x", queue_id=2).queue_offset == 2 * i
        with pytest.raises(TypeError, match="queue_id"):
            store.put("T", b"x", 1, queue_id=2)  # type: ignore[misc]
        assert store.put(*["T", b"y"], **kw).queue_offset == 2 * i + 1  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="queue_id"):
            store.put(*["T", b"y", 1], **kw)  # type: ignore[arg-type, misc]
    assert store.get_max_offset_in_queue("T", 2) == 6
    assert store.get_max_offset_in_queue("T", 1) == 0

"""The attributes of ``PutResult`` and ``BatchPutResult``.

Their getters are installed in place of the ones PyO3 generates (they read
the object without a second type check): each attribute keeps its value,
its docstring and the descriptor's type check, for a stored and a refused
put alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rocketstore import BatchPutResult, MessageStore, PutResult, PutStatus

OpenStore = Callable[..., MessageStore]

PUT_ATTRS = ("status", "ok", "wrote_offset", "wrote_bytes", "queue_offset",
             "store_timestamp", "msg_id", "reason")
BATCH_ATTRS = ("status", "ok", "reason", "wrote_offset", "queue_offset", "count",
               "wrote_bytes", "store_timestamp", "offsets")


def test_every_attribute_is_a_documented_descriptor() -> None:
    """Every attribute reads through a descriptor of its own class, with
    the docstring the class gives it (none lost when it was replaced)."""
    for cls, attrs in ((PutResult, PUT_ATTRS), (BatchPutResult, BATCH_ATTRS)):
        for name in attrs:
            d = cls.__dict__[name]
            assert type(d).__name__ == "getset_descriptor", (cls, name)
            assert d.__objclass__ is cls
        assert PutResult.__dict__["status"].__doc__ == "`PutStatus` of the put."
        assert PutResult.__dict__["msg_id"].__doc__.startswith("Offset message id")
        assert BatchPutResult.__dict__["offsets"].__doc__.startswith(
            "Every message's CommitLog offset")


def test_a_getter_refuses_an_object_of_another_class(open_store: OpenStore) -> None:
    """The descriptor checks the object's class before its getter reads it."""
    store = open_store()
    r = store.put("T", b"x")
    b = store.put_batch("T", [b"x"])
    for name in PUT_ATTRS:
        with pytest.raises(TypeError, match="doesn't apply"):
            PutResult.__dict__[name].__get__(b, BatchPutResult)
    for name in BATCH_ATTRS:
        with pytest.raises(TypeError, match="doesn't apply"):
            BatchPutResult.__dict__[name].__get__(r, PutResult)
    with pytest.raises(TypeError):
        PutResult.__dict__["status"].__get__(object(), object)


def _attrs(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: getattr(obj, n) for n in names}


def test_stored_put_reads_its_values(open_store: OpenStore) -> None:
    store = open_store()
    first = store.put("T", b"a" * 10, 1)
    r = store.put("T", b"body", 1, tags="t", keys=["k"])
    got = _attrs(r, PUT_ATTRS)
    assert got["status"] is PutStatus.PUT_OK and got["ok"] is True
    assert got["wrote_offset"] == first.wrote_offset + first.wrote_bytes
    assert got["wrote_bytes"] > len(b"body") and got["queue_offset"] == 1
    assert got["store_timestamp"] >= first.store_timestamp > 0
    assert got["reason"] is None
    (m,) = store.get_message("g", "T", 1, 1, 1).messages
    assert got["msg_id"] == m.msg_id != ""
    with pytest.raises(AttributeError):
        r.status = PutStatus.PUT_OK  # type: ignore[misc]


def test_refused_put_reads_its_values(open_store: OpenStore) -> None:
    store = open_store()
    r = store.put("bad topic", b"x", check=False)
    got = _attrs(r, PUT_ATTRS)
    assert got["status"] is PutStatus.MESSAGE_ILLEGAL and got["ok"] is False
    assert (got["wrote_offset"], got["wrote_bytes"], got["queue_offset"]) == (-1, 0, -1)
    assert got["msg_id"] == "" and "topic" in got["reason"]


def test_batch_reads_its_values(open_store: OpenStore) -> None:
    store = open_store()
    b = store.put_batch("T", [b"a", b"b", b"c"], 2, return_offsets=True)
    got = _attrs(b, BATCH_ATTRS)
    assert got["status"] is PutStatus.PUT_OK and got["ok"] is True
    assert got["reason"] is None and got["count"] == 3 == len(b)
    offsets = list(got["offsets"])
    assert len(offsets) == 3 and offsets[0] == got["wrote_offset"] == 0
    assert got["queue_offset"] == 0 and got["wrote_bytes"] > 3
    assert got["store_timestamp"] > 0
    refused = store.put_batch("T", [b"a"], 2, tags=[""], check=False)
    assert refused.status is PutStatus.MESSAGE_ILLEGAL and refused.ok is False
    assert refused.offsets is None and "message 0" in refused.reason

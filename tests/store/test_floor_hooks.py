"""The measuring hooks of ``rocketstore._native`` (``_floor_put``, ...;
``benches/python/floors.py``) take the arguments of the store method of
their name with the same signature and conversion: they accept what it
accepts and refuse what it refuses, with the same errors, and do nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from rocketstore import MessageStore
from rocketstore import _native as nat

OpenStore = Callable[..., MessageStore]

#: (positional, keyword) arguments of put: accepted ones, then refused ones.
PUT_OK: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("T", b"x", 1), {"tags": "a", "keys": ["k"]}),
    (("T", b"x", 1, "a", ["k"]), {}),
    (("T", b"x"), {"check": False}),
    ((), {"topic": "T", "body": b"x", "born_timestamp": 5}),
]
PUT_BAD: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("T",), {}),
    (("T", b"x"), {"nope": 1}),
    (("T", b"x"), {"check": 1}),
    (("T", b"x", 1), {"queue_id": 2}),
    (("T", b"x", 0, None, None, None, 0, 0, None, None, 0, 1), {}),
    (("T", b"x"), {"".join(["no", "pe"]): 1}),
]


def _error(f: Callable[..., Any], args: tuple[Any, ...],
           kw: dict[str, Any]) -> tuple[type[BaseException], str]:
    with pytest.raises(Exception) as e:
        f(*args, **kw)
    return type(e.value), str(e.value).replace("MessageStoreBase.put()", "_floor_put()")


def test_floor_put_takes_what_put_takes(open_store: OpenStore) -> None:
    store = open_store()
    assert inspect.signature(nat._floor_put) == inspect.signature(store.put)
    for args, kw in PUT_OK:
        assert nat._floor_put(*args, **kw) is None
        assert store.put(*args, **kw).ok
    for args, kw in PUT_BAD:
        assert _error(nat._floor_put, args, kw) == _error(store.put, args, kw), (args, kw)
    assert store.get_max_offset_in_queue("T", 1) == 2  # the hooks wrote nothing


@pytest.mark.parametrize(("hook", "method", "good", "bad"), [
    ("_floor_put_batch", "put_batch", (("T", [b"x"], 1), {"keys": ["k"], "tags": ["t"]}),
     [(("T", [b"x"], -1), {}), ((1, [b"x"]), {})]),
    ("_floor_get_message", "get_message", (("g", "T", 0, 0, 32), {}),
     [(("g", "T", -1, 0), {}), (("g", "T", 0, "x"), {}), (("g", "T", 0, 0, 0), {})]),
    ("_floor_query_message", "query_message", (("T", "k", 32, 0), {}),
     [(("T", "k", 0), {}), ((1, "k"), {}), (("T", 2), {})]),
])
def test_the_other_hooks_take_what_their_methods_take(
        open_store: OpenStore, hook: str, method: str,
        good: tuple[tuple[Any, ...], dict[str, Any]],
        bad: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> None:
    """Their native methods' errors (``get_message`` takes the consumer
    group first in Python, which the native method and the hook do not)."""
    store = open_store()
    store.put("T", b"x", 0, keys=["k"])
    f = getattr(nat, hook)
    # put_batch is MessageStoreBase's; the reads are NativeStore's.
    native = getattr(store if method == "put_batch" else store._n, method)
    skip = 1 if method == "get_message" else 0
    args, kw = good
    assert f(*args[skip:], **kw) is None
    native(*args[skip:], **kw)
    for args, kw in bad:
        got, want = _error(f, args[skip:], kw), _error(native, args[skip:], kw)
        assert got[0] is want[0] and got[1] == want[1], (hook, args)


def test_floor_get_arrow_takes_what_get_arrow_takes(open_store: OpenStore) -> None:
    store = open_store()
    cols = ["queue_offset", "body"]
    assert nat._floor_get_arrow("T", 0, 0, 4096, columns=cols) is None
    store._n.get_arrow("T", 0, 0, 4096, columns=cols)
    for args, kw in [(("T", 0, 0, 0), {}), (("T", 0, 0, 16), {"columns": ["nope"]}),
                     (("T", -1, 0, 16), {})]:
        got = _error(nat._floor_get_arrow, args, kw)
        want = _error(store._n.get_arrow, args, kw)
        assert got == want, args

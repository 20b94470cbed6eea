"""Calls every public method of MessageStore and Consumer with odd arguments.

``python fuzz_api_child.py STORE_DIR EXAMPLES SEED``

Each example picks a method and draws every parameter from edge integers
(0, -1, 2**31, 2**63, 2**64, ...), odd types (None, str, float, bytes,
list, dict) and a few valid values (so calls also get past the argument
checks). A call must return, or raise ValueError/TypeError or a
documented StoreError (never InternalError, OverflowError, RecursionError,
a pyo3 PanicException, ...). The process must survive: the parent runs this
in a subprocess, so an abort or a segfault fails the test too. Prints
``ok <calls>`` and exits 0, or prints the offending call and exits 1.
"""

from __future__ import annotations

import inspect
import math
import sys
import traceback
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from rocketstore import InternalError, MessageStore, StoreConfig, StoreError

EDGE_INTS = [0, 1, 3, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, -(2**63) - 1,
             2**64, 10**30]
ODD = [None, "", "T", "a@b", "x" * 300, "\x00", "é", 1.5, math.nan, -0.0, b"T", b"",
       bytearray(b"x"), [], [0], ["T"], [None], {"a": 1}, {0: 1}, {0: 2**64}, (1, 2), True,
       object()]
# Timeouts never block for long (a huge or missing timeout waits forever by design).
TIMEOUTS = [0, 0.001, -1, -(2**63), math.nan, "1", b"1", [], True]
VALUES = st.sampled_from(EDGE_INTS + ODD)
# Valid values by parameter name: half the draws take one, so calls get
# past the first argument check and reach the later ones.
VALID: dict[str, list[Any]] = {
    "topic": ["T"], "group": ["g"], "queue_id": [0, 3], "offset": [0, 5],
    "cq_offset": [0, 5], "next_offset": [0, 5], "phy_offset": [0], "seq": [0],
    "max_msg_nums": [1, 32], "max_num": [1, 32], "max_messages": [1, 100],
    "batch_size": [1, 7], "threads": [1, 2], "start": [0, None], "end": [None, 10],
    "timestamp": [0, 2**41], "begin_timestamp": [0], "end_timestamp": [None, 2**41],
    "tags": [None, ["a"]], "key": ["k1"], "keys": [None, ["k1"]], "body": [b"x"],
    "bodies": [[b"x", b"y"]], "offsets": [{0: 1}], "queue_ids": [None, [0]],
    "properties": [None, {"a": "b"}], "force": [False], "sync": [True, False],
}

# Lifecycle methods run once at the end, not at random.
SKIP = {"close", "shutdown", "start"}

ALLOWED = (ValueError, TypeError, StoreError)


def _methods(obj: object) -> dict[str, Callable[..., Any]]:
    out = {}
    for name in dir(type(obj)):
        if name.startswith("_") or name in SKIP:
            continue
        attr = getattr(obj, name)
        if callable(attr):
            out[name] = attr
    return out


def _params(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    try:
        return [p for p in inspect.signature(fn).parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        return None


def _call(fn: Callable[..., Any], name: str, data: st.DataObject) -> tuple[list[Any],
                                                                        dict[str, Any]]:
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    params = _params(fn)
    if params is None:
        n = data.draw(st.integers(0, 5), label="argc")
        return [data.draw(VALUES) for _ in range(n)], kwargs
    positional = True
    for p in params:
        optional = p.default is not p.empty
        if optional and data.draw(st.booleans(), label=f"omit {p.name}"):
            positional = False
            continue
        if p.name == "timeout":
            strategy: st.SearchStrategy[Any] = st.sampled_from(TIMEOUTS)
        elif p.name in VALID and data.draw(st.booleans(), label=f"valid {p.name}"):
            strategy = st.sampled_from(VALID[p.name])
        else:
            strategy = VALUES
        value = data.draw(strategy, label=p.name)
        if p.kind == p.KEYWORD_ONLY or (not positional and p.kind != p.POSITIONAL_ONLY):
            kwargs[p.name] = value
        elif positional:
            args.append(value)
        else:  # a positional-only parameter after an omitted one
            break
    if name in ("poll", "wait_for_dispatch") and "timeout" not in kwargs and (
            len(args) < (1 if name == "poll" else 2)):
        kwargs["timeout"] = 0  # the defaults wait (poll: 1 s, wait_for_dispatch: forever)
    return args, kwargs


def _use(result: Any) -> None:
    """Consume lazy results (an Arrow reader decodes when read)."""
    read_all = getattr(result, "read_all", None)
    if callable(read_all):
        read_all()


def main() -> None:
    path, examples, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cfg = StoreConfig(store_path=path, mapped_file_size_commit_log=64 * 1024,
                      mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=64,
                      max_index_num=256)
    store = MessageStore(cfg).start()
    for i in range(40):
        r = store.put("T", b"m%d" % i, queue_id=i % 4, tags="a" if i % 2 else "b",
                      keys=[f"k{i}"])
        assert r.ok, r
    consumer = store.consumer("g", "T", auto_commit_interval=0)
    targets: dict[str, tuple[object, Callable[..., Any]]] = {}
    for owner in (store, consumer):
        for name, fn in _methods(owner).items():
            targets[f"{type(owner).__name__}.{name}"] = (owner, fn)
    names = sorted(targets)
    calls = [0]
    # Every distinct failure (method, exception type, raising line), first call that hit it.
    failures: dict[tuple[str, str, str], str] = {}

    def _record(qualified: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        exc = sys.exc_info()[1]
        assert exc is not None
        tb = traceback.extract_tb(exc.__traceback__)
        where = f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "?"
        key = (qualified, type(exc).__name__, where)
        if key not in failures:
            failures[key] = (f"{qualified}(*{args!r}, **{kwargs!r}) raised "
                             f"{type(exc).__name__}: {exc} (at {where})")

    @hypothesis_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None,
              phases=[Phase.generate], print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def fuzz(data: st.DataObject) -> None:
        qualified = data.draw(st.sampled_from(names), label="method")
        _owner, fn = targets[qualified]
        args, kwargs = _call(fn, qualified.rsplit(".", 1)[1], data)
        calls[0] += 1
        try:
            _use(fn(*args, **kwargs))
        except InternalError:
            _record(qualified, args, kwargs)
        except ALLOWED:
            pass
        except BaseException:
            _record(qualified, args, kwargs)

    fuzz()
    if store.running_flags:  # no call may stop a service or poison the store
        failures[("MessageStore", "running_flags", "")] = (
            f"after the calls the store refuses puts: {store.running_flags}")
    for closing in (consumer.close, consumer.close, store.shutdown, store.shutdown):
        try:
            closing()  # idempotent
        except BaseException:
            _record(closing.__qualname__, [], {})
    if failures:
        for text in failures.values():
            print(f"FAILED: {text}", flush=True)
        sys.exit(1)
    print(f"ok {calls[0]}", flush=True)


if __name__ == "__main__":
    main()

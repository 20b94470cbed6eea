"""Python conventions: ``close()``, bytes-like bodies, argument errors in
Python's words, typed results, docstrings that point only at shipped files."""

from __future__ import annotations

import array
import ast
import inspect
import pkgutil
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rocketstore
from helpers.paths import REPO
from rocketstore import Message, MessageStore, PutStatus, StoreClosedError

OpenStore = Callable[..., MessageStore]
SEG = 4096


def test_close_is_shutdown(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    r = store.put("T", b"x")
    store.close()
    with pytest.raises(StoreClosedError):
        store.put("T", b"y")
    store.close()  # idempotent, like shutdown()
    store = open_store(mapped_file_size_commit_log=SEG)
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None and m.body == b"x"
    assert store.recovery_report is not None and store.recovery_report.mode == "normal"


@pytest.mark.parametrize(
    "make",
    [
        bytearray,
        memoryview,
        lambda b: memoryview(bytearray(b)),
        lambda b: memoryview(b + b)[::2],  # not contiguous
        lambda b: array.array("B", b),
    ],
    ids=["bytearray", "memoryview", "memoryview-bytearray", "strided", "array"],
)
def test_bodies_may_be_any_bytes_like_object(open_store: OpenStore, make: Any) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    data = b"bytes-like body"
    body = make(data)
    expected = bytes(body)
    for r in (
        store.put("T", body),
        store.put_message(Message("T", body)),
        *store.put_messages([Message("T", body)]),
    ):
        assert r.status is PutStatus.PUT_OK, r.reason
        m = store.look_message_by_offset(r.wrote_offset)
        assert m is not None and m.body == expected
        assert m.body_crc == zlib.crc32(expected) & 0x7FFFFFFF


def test_wide_items_are_taken_as_their_bytes(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    body = array.array("i", [1, 2, 3])
    r = store.put("T", body)
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None and m.body == body.tobytes()


def test_a_message_keeps_a_copy_of_a_mutable_body(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    buf = bytearray(b"before")
    msg = Message("T", buf)
    buf[:] = b"AFTER!"
    assert msg.body == b"before"
    r = store.put_message(msg)
    m = store.look_message_by_offset(r.wrote_offset)
    assert m is not None and m.body == b"before"
    assert m.body_crc == zlib.crc32(b"before") & 0x7FFFFFFF


CALLS: list[tuple[str, Callable[[MessageStore], object], type[Exception], str]] = [
    ("put topic", lambda s: s.put(5, b"x"), TypeError, "topic must be str, not int"),  # type: ignore[arg-type]
    ("put body", lambda s: s.put("T", "x"), TypeError,  # type: ignore[arg-type]
     "body must be a bytes-like object (bytes, bytearray, memoryview), not str"),
    ("put tags", lambda s: s.put("T", b"x", tags=3), TypeError, "tags must be str, not int"),  # type: ignore[arg-type]
    ("put keys", lambda s: s.put("T", b"x", keys=[1]), TypeError, "key must be str, not int"),  # type: ignore[list-item]
    ("put properties", lambda s: s.put("T", b"x", properties=[("a", "b")]), TypeError,  # type: ignore[arg-type]
     "properties must be a dict of str to str, not list"),
    ("put property value", lambda s: s.put("T", b"x", properties={"a": 1}), TypeError,  # type: ignore[dict-item]
     "property values must be str, not int"),
    ("put queue_id type", lambda s: s.put("T", b"x", queue_id=1.5), TypeError,  # type: ignore[arg-type]
     "queue_id must be int, not float"),
    ("put queue_id range", lambda s: s.put("T", b"x", queue_id=2**70), ValueError, "queue_id"),
    ("put queue_id 2**31", lambda s: s.put("T", b"x", queue_id=2**31), ValueError, "queue_id"),
    ("put flag range", lambda s: s.put("T", b"x", flag=2**40), ValueError, "flag"),
    ("put sys_flag range", lambda s: s.put("T", b"x", sys_flag=2**40), ValueError, "sys_flag"),
    ("put delay range", lambda s: s.put("T", b"x", delay_level=2**40), ValueError, "delay_level"),
    ("put born_timestamp", lambda s: s.put("T", b"x", born_timestamp=2**70), ValueError,
     "born_timestamp"),
    ("put born_host", lambda s: s.put("T", b"x", born_host="h"), TypeError,  # type: ignore[arg-type]
     "born_host must be an (ip: str, port: int) tuple, not str"),
    ("Message topic", lambda s: Message(None, b"x"), TypeError, "topic must be str, not NoneType"),  # type: ignore[arg-type]
    ("Message flag", lambda s: Message("T", b"x", flag=2**40), ValueError, "flag"),
    ("Message queue_id", lambda s: Message("T", b"x", queue_id=2**80), ValueError, "queue_id"),
    ("get_message topic", lambda s: s.get_message("g", 1, 0, 0), TypeError,  # type: ignore[arg-type]
     "topic must be str, not int"),
    ("get_message offset", lambda s: s.get_message("g", "T", 0, 2**70), ValueError, "offset"),
    ("get_message queue_id", lambda s: s.get_message("g", "T", "0", 0), TypeError,  # type: ignore[arg-type]
     "queue_id must be int, not str"),
    ("get_message tags", lambda s: s.get_message("g", "T", 0, 0, 32, [1]), TypeError,  # type: ignore[list-item]
     "tag must be str, not int"),
    ("max offset topic", lambda s: s.get_max_offset_in_queue(b"T", 0), TypeError,  # type: ignore[arg-type]
     "topic must be str, not bytes"),
    ("look by offset", lambda s: s.look_message_by_offset("0"), TypeError,  # type: ignore[arg-type]
     "offset must be int, not str"),
    ("look by offset range", lambda s: s.look_message_by_offset(2**64), ValueError, "offset"),
    ("look by id", lambda s: s.look_message_by_id(None), TypeError,  # type: ignore[arg-type]
     "msg_id must be str, not NoneType"),
    ("query key", lambda s: s.query_message("T", 5), TypeError, "key must be str, not int"),  # type: ignore[arg-type]
    ("query end", lambda s: s.query_message("T", "k", 32, 0, 2**70), ValueError, "end_timestamp"),
    ("wait seq", lambda s: s.wait_for_dispatch(-1, 0), ValueError, "seq must be >= 0"),
    ("wait timeout", lambda s: s.wait_for_dispatch(0, "1"), TypeError,  # type: ignore[arg-type]
     "timeout must be a number of seconds or None, not str"),
]


@pytest.mark.parametrize(("what", "call", "exc", "text"), CALLS, ids=[c[0] for c in CALLS])
def test_argument_errors_name_the_argument_and_python_types(
    open_store: OpenStore,
    what: str,
    call: Callable[[MessageStore], object],
    exc: type[Exception],
    text: str,
) -> None:
    store = open_store(mapped_file_size_commit_log=SEG, max_hash_slot_num=100, max_index_num=400)
    with pytest.raises(Exception) as info:
        call(store)
    assert type(info.value) is exc, repr(info.value)
    message = str(info.value)
    assert text in message
    assert "Py" not in message and "C long" not in message and "integral" not in message
    assert store.max_phy_offset == 0


def _docstrings() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    seen: set[int] = set()

    def visit(name: str, obj: object) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        doc = inspect.getdoc(obj)
        if doc:
            out.append((name, doc))
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                target = member.fget if isinstance(member, property) else member
                if callable(target) or isinstance(member, property):
                    visit(f"{name}.{attr}", target)

    for info in pkgutil.walk_packages(rocketstore.__path__, "rocketstore."):
        if info.name.endswith("spark") or ".spark" in info.name:
            continue
        module = __import__(info.name, fromlist=["_"])
        visit(info.name, module)
        for attr, member in vars(module).items():
            if getattr(member, "__module__", None) in (info.name, "rocketstore._native"):
                visit(f"{info.name}.{attr}", member)
    return out


def test_docstrings_point_only_at_documents_that_ship() -> None:
    docs = _docstrings()
    assert len(docs) > 50
    for name, doc in docs:
        for ref in re.findall(r"[\w./-]+\.md\b", doc):
            assert (REPO / ref).is_file() or (REPO / "docs" / Path(ref).name).is_file(), (
                f"{name} points at {ref}, which is not in the repository"
            )
        for word in ("SPEC", "API" + ".md", "STYLE"):
            assert word not in doc, f"{name} mentions {word}: {doc[:200]}"


# -- format knowledge in one place -----------------------------------------------------

#: Modules a Python file would need to decode store files itself.
_BYTE_LEVEL_MODULES = ("struct", "zlib", "fcntl", "mmap", "binascii", "ctypes")


def test_no_python_module_decodes_store_files() -> None:
    """Records, units, index entries, the lock and CRCs are the engine's: the
    package imports nothing to pack bytes, take CRCs, lock or map files."""
    package = Path(rocketstore.__file__).parent
    pattern = re.compile(
        r"^\s*(?:import|from)\s+(" + "|".join(_BYTE_LEVEL_MODULES) + r")\b", re.MULTILINE
    )
    found = {
        str(path.relative_to(package)): pattern.findall(path.read_text())
        for path in sorted(package.rglob("*.py"))
    }
    assert {name: mods for name, mods in found.items() if mods} == {}


#: Names of the engine's ``paths`` that are also everyday words: ``rocketstore
#: info`` prints fields called so. Every other name is checked below.
_NAMES_THAT_ARE_WORDS = frozenset({"index", "checkpoint", "config", "lock", "abort"})


def _string_literals(tree: ast.AST) -> Iterator[ast.Constant]:
    """Every string constant of a module except docstrings (f-string parts included)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings):
            yield node


def test_store_file_names_come_from_the_engine() -> None:
    """The engine's ``paths`` module spells every store folder and file name
    (the consumer offsets' lock, their group locks' folder and suffix, the
    config files' ``.tmp`` and ``.bak`` included); the package takes them
    from ``_native`` and spells none itself."""
    from rocketstore import _native

    names = {value for name, value in vars(_native).items()
             if name.endswith(("_FILE", "_DIR", "_SUFFIX")) and isinstance(value, str)}
    assert {"consumerOffset.lock", "consumerLocks", ".lock", ".tmp", ".bak"} <= names
    package = Path(rocketstore.__file__).parent
    found = [
        f"{path.relative_to(package)}:{node.lineno} {node.value!r}"
        for path in sorted(package.rglob("*.py"))
        for node in _string_literals(ast.parse(path.read_text()))
        if node.value in names - _NAMES_THAT_ARE_WORDS
    ]
    assert found == []


def test_file_formats_live_in_their_own_modules() -> None:
    """The .properties reader and the fastjson codec are modules of
    ``rocketstore.formats``, used (not defined) by the config modules; the
    cli is a package with one module per group of commands."""
    from rocketstore import cli
    from rocketstore.config import files as config_files
    from rocketstore.config import store_config as config

    assert config.read_properties.__module__ == "rocketstore.formats.properties"
    assert config_files.loads_fastjson.__module__ == "rocketstore.formats.fastjson"
    assert config_files.dumps_fastjson.__module__ == "rocketstore.formats.fastjson"
    modules = {m.name for m in pkgutil.iter_modules(cli.__path__)}
    assert {"demo", "info", "read", "verify", "bench"} <= modules

"""``MessageStore`` is one class over its native base: every public method
is defined in its own class body or in ``MessageStoreBase`` (none comes from
a Python base class), so ``help(MessageStore)`` lists them all in one place,
each with its text; the per-message methods stay native calls."""

from __future__ import annotations

import inspect
import pydoc
import re

from helpers.paths import REPO
from rocketstore import MessageStore
from rocketstore._native import MessageStoreBase

#: The store's methods and attributes the public contract names (the
#: README's and the project's API list), written here independently of the
#: class, so a name that moves or goes away fails this test.
CONTRACT = {
    "put", "put_message", "put_messages", "put_batch", "get_message",
    "get_max_offset_in_queue", "get_min_offset_in_queue",
    "get_commit_log_offset_in_queue", "get_offset_in_queue_by_time",
    "get_earliest_message_time", "get_message_store_timestamp",
    "look_message_by_offset", "look_message_by_id", "query_message",
    "max_phy_offset", "min_phy_offset", "flushed_offset", "is_writeable",
    "running_flags", "dispatch_behind_bytes", "commit_offset", "commit_offsets",
    "query_offset", "persist_offsets", "delete_expired_files", "flush", "start",
    "shutdown", "close", "config", "recovery_report", "consumer",
    "async_consumer", "aput", "aput_message", "aput_messages", "aput_batch",
    "aclose", "read_arrow", "get_arrow", "stats", "consumer_groups",
    "reset_consumer_group", "delete_consumer_group", "topics", "queue_ids",
}

#: A put is one native call: these are the native base's own methods.
NATIVE = {"put", "put_message", "put_messages", "put_batch", "look_message_by_offset",
          "get_max_offset_in_queue", "get_min_offset_in_queue", "query_message"}


def _readme_names() -> set[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return set(re.findall(r"\bstore\.([a-z][a-z0-9_]*)\b(?!\.(?:py|rs)\b)", text))


def _public(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def test_the_store_has_no_python_base_class() -> None:
    assert MessageStore.__mro__ == (MessageStore, MessageStoreBase, object)


def test_every_public_name_is_defined_in_the_class_or_the_native_base() -> None:
    own = _public(MessageStore) | _public(MessageStoreBase)
    listed = CONTRACT | _readme_names()
    assert listed - own == set(), "named by the contract or README, not defined on the store"
    inherited = {n for n in dir(MessageStore) if not n.startswith("_")} - own
    assert inherited == set(), "public names that come from somewhere else"


def test_the_readme_names_are_found() -> None:
    # A broken pattern would find nothing and make the test above vacuous.
    assert {"put", "consumer", "read_arrow", "stats", "aput", "get_arrow"} <= _readme_names()


def test_puts_are_the_native_methods() -> None:
    for name in NATIVE:
        assert name not in vars(MessageStore), f"{name} is wrapped in Python"
        assert inspect.isroutine(getattr(MessageStoreBase, name)), name


def test_help_shows_every_public_method_with_its_text() -> None:
    text = pydoc.render_doc(MessageStore, renderer=pydoc.plaintext)
    for name in sorted(_public(MessageStore)):
        member = inspect.getattr_static(MessageStore, name)
        assert re.search(rf"^ \|  (async )?{name}\b", text, re.M), f"help() lacks {name}"
        if inspect.isfunction(member):
            assert member.__doc__ and member.__doc__.strip(), f"{name} has no text"

r"""The consumer offset table: RocketMQ's ``ConsumerOffsetManager.offsetTable``.

The one owner of what a committed consumer offset is (``docs/format.md``,
§13): its key, a group on a topic (:class:`OffsetKey`), spelled
``<topic>@<group>`` in the file and split at its first ``@`` (a topic never
holds one); the rule for group and topic names every call that names them
follows (:meth:`OffsetKey.of`); the per-queue next offsets; and the table's
JSON document::

    {"offsetTable":{"<topic>@<group>":{<queue id>:<next offset to consume>}}}

The separator is the engine's (``_native.TOPIC_GROUP_SEPARATOR``, as in
RocketMQ). The engine takes the table as rows ``(topic, group, queue_id,
offset)`` (:meth:`OffsetTable.rows`): no key text crosses into it.
:class:`~rocketstore.consumers.offsets.ConsumerOffsets` shares the file
between processes.

>>> table = OffsetTable.from_json('{"offsetTable":{"orders@group-a":{0:12,"1":5}}}')
>>> table.offsets(OffsetKey.of("group-a", "orders"))
{0: 12, 1: 5}
>>> table.rows()
[('orders', 'group-a', 0, 12), ('orders', 'group-a', 1, 5)]
>>> OffsetKey.parse("orders@group-a")
OffsetKey(topic='orders', group='group-a')
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from rocketstore import _native
from rocketstore.config.files import MAX_QUEUE_ID, _check_int, _check_name, _int_map
from rocketstore.formats.fastjson import dumps_fastjson, loads_fastjson

__all__ = [
    "SEPARATOR", "OffsetKey", "OffsetTable", "check_group", "check_topic", "checked_offsets",
]

#: RocketMQ's ``TOPIC_GROUP_SEPARATOR``, the engine's constant.
SEPARATOR: str = _native.TOPIC_GROUP_SEPARATOR

#: One entry as the engine takes it: ``(topic, group, queue_id, offset)``.
Row = tuple[str, str, int, int]


def check_group(group: object) -> str:
    """``group`` if it is a consumer group name: a non-empty ``str`` (it may
    hold ``@``: the key splits at the first one, which is the topic's end).

    Raises:
        TypeError: not a ``str``.
        ValueError: empty.
    """
    return _check_name("group", group)


def check_topic(topic: object) -> str:
    """``topic`` if it can name a topic of the offset table: a non-empty
    ``str`` without ``@`` (the key would split inside it).

    Raises:
        TypeError: not a ``str``.
        ValueError: empty, or holds ``@``.
    """
    name = _check_name("topic", topic)
    if SEPARATOR in name:
        raise ValueError(f"topic must not contain '{SEPARATOR}': {name!r}")
    return name


class OffsetKey(NamedTuple):
    """A consumer group on a topic: one key of the offset table."""

    topic: str
    group: str

    @classmethod
    def of(cls, group: object, topic: object) -> OffsetKey:
        """The key of ``group`` on ``topic`` (the public calls' argument
        order), both checked (:func:`check_group`, :func:`check_topic`).

        Raises:
            TypeError / ValueError: a name the rule refuses.
        """
        checked_group = check_group(group)
        return cls(check_topic(topic), checked_group)

    @classmethod
    def parse(cls, text: object) -> OffsetKey:
        """The key the file spells ``text``: split at the first ``@``.

        Raises:
            ValueError: not a ``str`` holding ``@``.
        """
        if not isinstance(text, str) or SEPARATOR not in text:
            raise ValueError(f"consumer offsets: key {text!r} is not 'topic{SEPARATOR}group'")
        topic, _, group = text.partition(SEPARATOR)
        return cls(topic, group)

    @property
    def text(self) -> str:
        """The file's spelling: ``<topic>@<group>``."""
        return f"{self.topic}{SEPARATOR}{self.group}"


class OffsetTable:
    """Committed consumer offsets: per :class:`OffsetKey`, queue id -> the
    next offset to consume. A plain value (no lock, no file): callers that
    share one guard it.

    ``entries`` maps keys (or ``(topic, group)`` tuples) to ``{queue_id:
    offset}``; they are copied. A key may hold no queues (a file can say
    ``"T@g":{}``); :meth:`drop_empty` removes such keys.
    """

    __slots__ = ("_entries",)

    def __init__(
        self,
        entries: Mapping[OffsetKey, Mapping[int, int]]
        | Mapping[tuple[str, str], Mapping[int, int]] | None = None,
    ) -> None:
        self._entries: dict[OffsetKey, dict[int, int]] = {
            OffsetKey(*key): dict(queues) for key, queues in (entries or {}).items()
        }

    # -- the file's document ---------------------------------------------------

    @classmethod
    def from_json(cls, text: str) -> OffsetTable:
        """The table of a ``consumerOffset.json`` document (quoted or
        unquoted queue ids; other top-level keys are ignored).

        Raises:
            ValueError: not an offset table, a key without ``@``, or a queue
                id or offset outside its range (``docs/format.md``, §13).
        """
        doc = loads_fastjson(text)
        if not isinstance(doc, dict):
            raise ValueError("consumer offsets: the document is not a JSON object")
        raw = doc.get("offsetTable")
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise ValueError("consumer offsets: offsetTable is not an object")
        table = cls()
        for text_key, queues in raw.items():
            key = OffsetKey.parse(text_key)
            if not isinstance(queues, dict):
                raise ValueError(f"consumer offsets: {text_key!r} is not an object")
            table._entries[key] = _int_map(queues, f"consumer offsets: {text_key!r}", "queue id")
        return table

    def to_json(self) -> str:
        """The ``consumerOffset.json`` document of the table (RocketMQ's
        fastjson shape: keys sorted, queue ids unquoted)."""
        return dumps_fastjson({"offsetTable": {k.text: q for k, q in self._entries.items()}})

    # -- reading -----------------------------------------------------------------

    def query(self, key: OffsetKey, queue_id: int) -> int:
        """The next offset of ``key``'s queue, or ``-1`` when none is committed."""
        return self._entries.get(key, {}).get(queue_id, -1)

    def offsets(self, key: OffsetKey) -> dict[int, int]:
        """A copy of ``key``'s ``{queue_id: next offset}`` (empty when unknown)."""
        return dict(self._entries.get(key, {}))

    def keys(self) -> list[OffsetKey]:
        """Every key, in the table's order."""
        return list(self._entries)

    def rows(self) -> list[Row]:
        """Every entry as ``(topic, group, queue_id, offset)``, what the
        engine takes."""
        return [(k.topic, k.group, q, off) for k, queues in self._entries.items()
                for q, off in queues.items()]

    def topics_of(self, group: str) -> list[str]:
        """The topics ``group`` has a key on, sorted."""
        return sorted(k.topic for k in self._entries if k.group == group)

    def by_group(self) -> dict[str, dict[str, dict[int, int]]]:
        """``{group: {topic: {queue_id: offset}}}`` (copies)."""
        out: dict[str, dict[str, dict[int, int]]] = {}
        for key, queues in self._entries.items():
            out.setdefault(key.group, {})[key.topic] = dict(queues)
        return out

    def as_dict(self) -> dict[OffsetKey, dict[int, int]]:
        """A copy: ``{OffsetKey: {queue_id: offset}}`` (keys compare equal to
        ``(topic, group)`` tuples)."""
        return {k: dict(q) for k, q in self._entries.items()}

    def copy(self) -> OffsetTable:
        return OffsetTable(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[OffsetKey]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        """Number of keys."""
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OffsetTable):
            return NotImplemented
        return self._entries == other._entries

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        texts = {k.text: q for k, q in self._entries.items()}
        return f"OffsetTable({texts!r})"

    # -- changing ----------------------------------------------------------------

    def set(self, key: OffsetKey, queue_id: int, offset: int) -> bool:
        """Set ``key``'s queue to ``offset``; True if that changed the table."""
        queues = self._entries.setdefault(key, {})
        if queues.get(queue_id) == offset:
            return False
        queues[queue_id] = offset
        return True

    def replace(self, key: OffsetKey, offsets: Mapping[int, int]) -> None:
        """Make ``offsets`` all of ``key``'s queues."""
        self._entries[key] = dict(offsets)

    def pop(self, key: OffsetKey) -> bool:
        """Remove ``key`` and its queues; True if it was there."""
        return self._entries.pop(key, None) is not None

    def drop_empty(self) -> None:
        """Remove the keys without queues."""
        self._entries = {k: q for k, q in self._entries.items() if q}

    def overlay(self, top: OffsetTable) -> OffsetTable:
        """A copy of this table with every entry of ``top`` set over it."""
        out = self.copy()
        for key, queues in top._entries.items():
            out._entries.setdefault(key, {}).update(queues)
        return out

    def discard_same(self, written: OffsetTable) -> None:
        """Remove every entry equal to ``written``'s (and keys left empty):
        what stays are the entries changed since ``written`` was taken."""
        for key, queues in written._entries.items():
            mine = self._entries.get(key)
            if mine is None:
                continue
            for qid, off in queues.items():
                if mine.get(qid) == off:
                    del mine[qid]
            if not mine:
                del self._entries[key]

    def remove(self, entries: OffsetTable) -> None:
        """Remove every entry of ``entries`` (whatever its offset here), and
        keys left empty."""
        for key, queues in entries._entries.items():
            mine = self._entries.get(key)
            if mine is None:
                continue
            for qid in queues:
                mine.pop(qid, None)
            if not mine:
                del self._entries[key]

    def lower(self, end_of: Callable[[str, int], int]) -> list[tuple[OffsetKey, int, int, int]]:
        """Lower every offset above ``end_of(topic, queue_id)`` to it; returns
        ``(key, queue_id, old, new)`` for each offset lowered."""
        lowered = []
        for key, queues in self._entries.items():
            for qid, off in queues.items():
                end = end_of(key.topic, qid)
                if off > end:
                    queues[qid] = end
                    lowered.append((key, qid, off, end))
        return lowered


def checked_offsets(offsets: object) -> list[tuple[int, int]]:
    """``offsets`` (``{queue_id: offset}``) as checked pairs: queue ids in
    ``[0, 2**31 - 1]`` (a Java int), offsets in ``[0, 2**63 - 1]`` (a Java long).

    Raises:
        TypeError / ValueError: not a mapping, or an id or offset out of range.
    """
    if not isinstance(offsets, Mapping):
        raise TypeError("offsets must be a mapping {queue_id: offset}, "
                        f"not {type(offsets).__name__}")
    return [(_check_int("queue_id", q, maximum=MAX_QUEUE_ID), _check_int("offset", off))
            for q, off in offsets.items()]

"""Options of the ``rocketstore`` Spark format, parsed without Spark.

Everything here runs on the driver (planning) or inside a task; nothing holds
an open store, so every object is safe to pickle.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from collections.abc import Mapping

from rocketstore._native import is_system_topic
from rocketstore.config.store_config import StoreConfig
from rocketstore.store import MessageStore

__all__ = ["ReadOptions", "WriteOptions", "check_options", "first_offset_at_or_after",
           "open_read_only", "parse_offsets", "queue_key", "store_config"]

_STORE_FIELDS = frozenset(f.name for f in dataclasses.fields(StoreConfig)) - {"store_path"}

#: Default rows of one queue partition, and bytes of one CommitLog partition.
DEFAULT_MAX_RECORDS_PER_PARTITION = 2_000_000
DEFAULT_BATCH_SIZE = 65_536
#: Longest ``jobTag`` (characters): it is stored in every message the write appends.
MAX_JOB_TAG = 200


#: Options Spark itself hands to a data source (the ``load``/``save``/``start``
#: path, ``load`` of a list, a streaming query's checkpoint and name).
SPARK_OPTIONS = ("path", "paths", "checkpointLocation", "queryName")
#: The format's own options, by use.
BATCH_READ_OPTIONS = ("topic", "queues", "startingOffsets", "endingOffsets", "startingTimestamp",
                      "includeSystemTopics", "includeUncommitted", "maxRecordsPerPartition",
                      "maxBytesPerPartition", "batchSize", "key", "metricsFile")
STREAM_READ_OPTIONS = (*(o for o in BATCH_READ_OPTIONS if o not in ("endingOffsets", "key")),
                       "maxOffsetsPerTrigger", "failOnDataLoss")
BATCH_WRITE_OPTIONS = ("stagingDir", "jobTag")
STREAM_WRITE_OPTIONS = ("stagingDir", "sinkName")

_KINDS: dict[str, tuple[str, ...]] = {
    "batch read": BATCH_READ_OPTIONS,
    "streaming read": STREAM_READ_OPTIONS,
    "batch write": BATCH_WRITE_OPTIONS,
    "streaming write": STREAM_WRITE_OPTIONS,
}


def check_options(options: Mapping[str, str], kinds: tuple[str, ...]) -> None:
    """Refuse an option that none of ``kinds`` (keys of ``_KINDS``) takes.

    Names are compared case-insensitively, as Spark does. The error lists the
    valid options, says when an option belongs to another kind of use, and
    suggests the closest name."""
    own = [o for k in kinds for o in _KINDS[k]]
    valid = {o.lower(): o for o in (*SPARK_OPTIONS, *own)}
    valid.update({f: f for f in _STORE_FIELDS})
    unknown = sorted(str(k) for k in options if str(k).lower() not in valid)
    if not unknown:
        return
    what = " or ".join(kinds)
    notes = []
    for name in unknown:
        elsewhere = {k: o for k, opts in _KINDS.items() for o in opts
                     if o.lower() == name.lower()}
        if elsewhere:  # Spark lower-cases names: give the option's own spelling
            notes.append(f"{next(iter(elsewhere.values()))} (an option of a "
                         f"{' or '.join(elsewhere)})")
            continue
        close = difflib.get_close_matches(name.lower(), list(valid), n=1)
        notes.append(f"{name} (did you mean {valid[close[0]]}?)" if close else name)
    raise ValueError(
        f"unknown option{'s' if len(unknown) > 1 else ''} for a rocketstore {what}: "
        f"{', '.join(notes)}. Valid options (case-insensitive): "
        f"{', '.join(dict.fromkeys((*SPARK_OPTIONS[:2], *own)))}, "
        "and any StoreConfig field by its snake_case name")


def _get(options: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive option lookup (Spark keeps the user's spelling)."""
    want = name.lower()
    for k, v in options.items():
        if k.lower() == want:
            return None if v is None else str(v)
    return None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    v = _get(options, name)
    if v is None:
        return default
    if v.strip().lower() not in ("true", "false"):
        raise ValueError(f"option {name}={v!r}: expected true or false")
    return v.strip().lower() == "true"


def _int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    v = _get(options, name)
    if v is None or v.strip() == "":
        return default
    try:
        return int(v.strip())
    except ValueError:
        raise ValueError(f"option {name}={v!r}: expected an integer") from None


def _list(v: str | None) -> list[str] | None:
    if v is None:
        return None
    if v.lstrip().startswith("["):  # load([p1, p2]) hands Spark's paths as a JSON array
        try:
            arr = json.loads(v)
        except json.JSONDecodeError:
            arr = None
        if isinstance(arr, list) and all(isinstance(x, str) for x in arr):
            return [x for x in arr if x.strip()] or None
    items = [s.strip() for s in v.split(",") if s.strip()]
    return items or None


def store_fields(options: Mapping[str, str]) -> dict[str, str]:
    """The options that are ``StoreConfig`` fields (snake_case names)."""
    return {k.lower(): str(v) for k, v in options.items() if k.lower() in _STORE_FIELDS}


def store_config(path: str, fields: Mapping[str, str]) -> StoreConfig:
    """A config for ``path`` with string-valued ``StoreConfig`` fields."""
    return StoreConfig.from_properties(dict(fields), store_path=path)


def open_read_only(path: str, fields: Mapping[str, str]) -> MessageStore:
    """Open the store at ``path`` read-only (segment sizes from its files)."""
    return MessageStore(store_config(path, fields), read_only=True).start()


def queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}/{queue_id}"


def split_key(key: str) -> tuple[str, int]:
    topic, sep, q = key.rpartition("/")
    if not sep or not topic or not q.lstrip("-").isdigit():
        raise ValueError(f"offset key {key!r}: expected \"topic/queue_id\"")
    return topic, int(q)


def parse_offsets(text: str | None, name: str, default: str) -> str | dict[str, int]:
    """``earliest``, ``latest`` or a JSON object ``{"topic/queue": offset}``
    (-2 means earliest and -1 latest, as in Kafka's source)."""
    if text is None or text.strip() == "":
        return default
    t = text.strip()
    if t.lower() in ("earliest", "latest"):
        return t.lower()
    try:
        obj = json.loads(t)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"option {name}={text!r}: expected earliest, latest or JSON "
            f"{{\"topic/queue\": offset}} ({exc})"
        ) from None
    if not isinstance(obj, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in obj.values()
    ):
        raise ValueError(f"option {name}={text!r}: expected a JSON object of integer offsets")
    for k in obj:
        split_key(k)
    return {str(k): int(v) for k, v in obj.items()}


def first_offset_at_or_after(store: MessageStore, topic: str, queue_id: int, ts: int) -> int:
    """The first offset of a queue whose message was stored at or after ``ts``
    (ms), or the queue's end when there is none (Kafka's ``offsetsForTimes``)."""
    lo = store.get_min_offset_in_queue(topic, queue_id)
    hi = store.get_max_offset_in_queue(topic, queue_id)
    while lo < hi:
        mid = (lo + hi) // 2
        t = store.get_message_store_timestamp(topic, queue_id, mid)
        if t >= ts:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """The read options of one DataFrame (batch or stream)."""

    paths: tuple[str, ...]
    topics: tuple[str, ...] | None
    queues: tuple[int, ...] | None
    starting: str | dict[str, int]
    ending: str | dict[str, int]
    starting_timestamp: int | None
    include_system: bool
    include_uncommitted: bool
    max_records_per_partition: int
    max_bytes_per_partition: int | None
    batch_size: int
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    fields: dict[str, str]
    #: The ``key`` option: rows whose ``keys`` hold one of these (by the index).
    keys: tuple[str, ...] | None = None
    #: The ``metricsFile`` option: each partition read appends its counters.
    metrics_file: str | None = None
    #: True when ``startingOffsets`` was given (False: ``starting`` is the
    #: default, ``latest`` for a stream and ``earliest`` for a batch read).
    starting_given: bool = False

    @property
    def several(self) -> bool:
        """True when several stores are read (adds the ``store`` column)."""
        return len(self.paths) > 1

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool | None = False) -> ReadOptions:
        """``streaming=None``: not known yet (the schema; options of either use pass)."""
        check_options(options, ("batch read", "streaming read") if streaming is None else
                      ("streaming read",) if streaming else ("batch read",))
        paths = _list(_get(options, "paths")) or _list(_get(options, "path"))
        if not paths:
            raise ValueError("the rocketstore format needs option path (a store directory, "
                             "or a comma-separated list / option paths for several stores)")
        queues_raw = _list(_get(options, "queues"))
        try:
            queues = tuple(int(q) for q in queues_raw) if queues_raw else None
        except ValueError:
            raise ValueError(f"option queues={_get(options, 'queues')!r}: expected a "
                             "comma-separated list of queue ids") from None
        topics = _list(_get(options, "topic"))
        batch = _int(options, "batchSize", DEFAULT_BATCH_SIZE) or DEFAULT_BATCH_SIZE
        per_part = _int(options, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION)
        max_bytes = _int(options, "maxBytesPerPartition", None)
        for name, v in (("batchSize", batch), ("maxRecordsPerPartition", per_part),
                        ("maxBytesPerPartition", max_bytes)):
            if v is not None and v <= 0:
                raise ValueError(f"option {name} must be > 0, got {v}")
        mopt = _int(options, "maxOffsetsPerTrigger", None)
        if mopt is not None and mopt <= 0:
            raise ValueError(f"option maxOffsetsPerTrigger must be > 0, got {mopt}")
        opts = cls(
            paths=tuple(os.fspath(p) for p in paths),
            topics=tuple(topics) if topics else None,
            queues=queues,
            starting=parse_offsets(_get(options, "startingOffsets"), "startingOffsets",
                                   "latest" if streaming else "earliest"),
            ending=parse_offsets(_get(options, "endingOffsets"), "endingOffsets", "latest"),
            starting_timestamp=_int(options, "startingTimestamp", None),
            include_system=_bool(options, "includeSystemTopics", False),
            include_uncommitted=_bool(options, "includeUncommitted", False),
            max_records_per_partition=per_part or DEFAULT_MAX_RECORDS_PER_PARTITION,
            max_bytes_per_partition=max_bytes,
            batch_size=batch,
            max_offsets_per_trigger=mopt,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            fields=store_fields(options),
            keys=tuple(_list(_get(options, "key")) or ()) or None,
            metrics_file=_get(options, "metricsFile") or None,
            starting_given=_get(options, "startingOffsets") is not None,
        )
        if _get(options, "key") is not None and opts.keys is None:
            raise ValueError("option key: expected a comma-separated list of keys")
        for p in opts.paths:
            store_config(p, opts.fields)  # bad store options fail on the driver
        if streaming and opts.ending != "latest":
            raise ValueError("endingOffsets is for batch reads only")
        return opts

    def store_name(self, path: str) -> str | None:
        return path if self.several else None

    def queues_of(self, store: MessageStore) -> list[tuple[str, int]]:
        """The (topic, queue) pairs to read, sorted (canonical order)."""
        if self.topics is not None:
            topics = list(self.topics)
        else:
            topics = [t for t in store.topics(include_system=True)
                      if self.include_system or not is_system_topic(t)]
        out: list[tuple[str, int]] = []
        for t in sorted(set(topics)):
            qids = store.queue_ids(t)
            if self.queues is not None:
                qids = [q for q in qids if q in self.queues]
            out.extend((t, q) for q in sorted(qids))
        return out

    def start_of(self, store: MessageStore, topic: str, qid: int) -> int:
        """Where reading a queue starts (startingTimestamp wins over startingOffsets)."""
        if self.starting_timestamp is not None:
            return first_offset_at_or_after(store, topic, qid, self.starting_timestamp)
        return _resolve(self.starting, store, topic, qid, missing=-2)

    def end_of(self, store: MessageStore, topic: str, qid: int) -> int:
        return _resolve(self.ending, store, topic, qid, missing=-1)


def _resolve(
    spec: str | dict[str, int], store: MessageStore, topic: str, qid: int, *, missing: int
) -> int:
    """An offset spec for one queue; a queue missing from a JSON spec gets
    ``missing`` (-2 earliest, -1 latest)."""
    lo = store.get_min_offset_in_queue(topic, qid)
    hi = store.get_max_offset_in_queue(topic, qid)
    if isinstance(spec, dict):
        v = spec.get(queue_key(topic, qid), missing)
        if v == -2:
            return lo
        if v == -1:
            return hi
        return max(0, v)
    return lo if spec == "earliest" else hi


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """The write options of one DataFrame write or streaming sink."""

    path: str
    staging_dir: str
    sink_name: str
    fields: dict[str, str]
    #: The ``jobTag`` option of a batch write (None: the tag is derived from
    #: the rows, see ``_commit``).
    job_tag: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> WriteOptions:
        check_options(options, ("streaming write",) if streaming else ("batch write",))
        paths = _list(_get(options, "path"))
        if not paths or len(paths) != 1:
            raise ValueError("writing with the rocketstore format needs option path "
                             "(exactly one store directory)")
        path = os.fspath(paths[0])
        staging = _get(options, "stagingDir") or (path.rstrip(os.sep) + ".spark-staging")
        fields = store_fields(options)
        store_config(path, fields)
        tag = _get(options, "jobTag")
        if tag is not None and not (0 < len(tag) <= MAX_JOB_TAG
                                    and tag.isprintable() and tag.strip() == tag):
            raise ValueError(f"option jobTag={tag!r}: expected 1 to {MAX_JOB_TAG} printable "
                             "characters, without leading or trailing spaces")
        return cls(path=path, staging_dir=staging,
                    sink_name=_get(options, "sinkName") or "default", fields=fields,
                    job_tag=tag)


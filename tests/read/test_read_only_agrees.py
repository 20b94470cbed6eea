"""A read-only open serves what a read-write open would keep, and no more.

The image: a store with damage in the middle of its CommitLog that a
RocketMQ broker then opened. The broker cut its log at the damaged record
without zeroing what it cut (the old bytes after its cut point stay), cut
its consume queues the same way (old units after the cut stay), appended
new records from the cut, rewrote the first fields of the checkpoint, left
rocketstore's durable mark as it was (stale now: its timestamp copy no
longer matches), and stopped cleanly.

Where the broker's new records end inside an old record, invalid bytes
follow them and then intact old records: RocketMQ's recovery ends its log
at those invalid bytes. A read-write open refuses the store (damage inside
durable data); one with ``on_corruption="skip"`` ends the log where
RocketMQ does (the intact records after the damage are older than the
records before it: docs/format.md, "A store a RocketMQ broker cut and
appended to"). A read-only open serves exactly what that open keeps — by
queue, by offset, by key — and nothing past the end it cuts, also while it
follows a writer that recovers the store and appends to it.

Where the broker's new records end exactly at an old record's start, no
invalid byte is left: RocketMQ's log, and this one, go on through the old
records, and both opens agree on them.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.presets import SMALL, body_of
from rocketstore import CorruptedError, GetStatus, MessageStore, PutResult, StoreConfig

TOPIC = "topic"


def cfg(path: Path, **kw: Any) -> StoreConfig:
    return StoreConfig(store_path=str(path), **{**SMALL, **kw})


def key_of(i: int) -> str:
    return f"key{i:05d}"


def index_of(body: bytes) -> int:
    return int(body[1:6])


def _cl_file(path: Path) -> Path:
    files = sorted((path / "commitlog").iterdir())
    assert len(files) == 1
    return files[0]


def _queue_files(path: Path) -> list[Path]:
    return sorted((path / "consumequeue" / TOPIC).glob("*/*"))


@dataclasses.dataclass(frozen=True)
class Shape:
    queues: int
    n: int  # records before the broker ran (one CommitLog file)
    k: int  # the damaged record: the broker cuts its log there
    new: int  # records the broker appends from k
    old_body: int
    new_body: int  # -1: twice the old record's size (the new end meets an old record's start)


SHAPES = {
    # Shorter new records, more of them: the broker's queue offsets pass
    # those of the old records after its end.
    "shorter": Shape(queues=2, n=200, k=100, new=30, old_body=150, new_body=40),
    # Longer new records, fewer of them: the old units right after the
    # broker's point into its new records, the later ones at intact old records.
    "longer": Shape(queues=1, n=104, k=44, new=16, old_body=100, new_body=400),
    "longer_two_queues": Shape(queues=2, n=160, k=61, new=21, old_body=90, new_body=333),
    # Each new record exactly twice an old one: the new end is an old
    # record's start, no invalid byte follows it.
    "aligned": Shape(queues=2, n=160, k=60, new=20, old_body=120, new_body=-1),
}


@dataclasses.dataclass
class Image:
    old: list[PutResult]
    new: list[PutResult]
    new_end: int  # where the broker's records end
    old_end: int  # where the old log ended


def broker_image(path: Path, sh: Shape) -> Image:
    """Builds the image at ``path``."""
    N, K, NEW, QUEUES = sh.n, sh.k, sh.new, sh.queues
    old: list[PutResult] = []
    with MessageStore(cfg(path)) as store:
        for i in range(N):
            r = store.put(TOPIC, body_of(i, sh.old_body), queue_id=i % QUEUES, keys=[key_of(i)])
            assert r.ok
            old.append(r)
    new_body = sh.new_body if sh.new_body >= 0 else sh.old_body + old[0].wrote_bytes
    cl = _cl_file(path)
    before_cl = cl.read_bytes()
    before_cq = {p: p.read_bytes() for p in _queue_files(path)}
    before_ckpt = (path / "checkpoint").read_bytes()
    cut = old[K].wrote_offset
    old_end = old[-1].wrote_offset + old[-1].wrote_bytes
    # Damage in record K: its magic code.
    with open(cl, "r+b") as f:
        f.seek(cut + 4)
        f.write(b"\xde\xad\xbe\xef")
    # The broker cuts at K: to let this engine play the broker's appends, the
    # cut part is zeroed here first and given back afterwards (the broker
    # does not zero it).
    with open(cl, "r+b") as f:
        f.seek(cut)
        f.write(bytes(old_end - cut))
    # The broker runs later than the old writer did.
    time.sleep(0.01)
    new: list[PutResult] = []
    with MessageStore(cfg(path, on_corruption="skip")) as store:
        assert store.max_phy_offset == cut
        for j in range(NEW):
            i = N + j
            r = store.put(TOPIC, body_of(i, new_body), queue_id=i % QUEUES, keys=[key_of(i)])
            assert r.ok
            new.append(r)
    new_end = new[-1].wrote_offset + new[-1].wrote_bytes
    assert new[0].wrote_offset == cut and new_end < old_end
    starts = {r.wrote_offset for r in old}
    assert (new_end in starts) == (sh.new_body < 0)
    # What the broker did not zero: the old bytes past its new end ...
    data = bytearray(cl.read_bytes())
    data[new_end:old_end] = before_cl[new_end:old_end]
    cl.write_bytes(bytes(data))
    # ... and the old units past each queue's new end.
    for p, was in before_cq.items():
        qid = int(p.parent.name)
        kept_units = sum(1 for i in range(K) if i % QUEUES == qid)
        units = kept_units + sum(1 for j in range(NEW) if (N + j) % QUEUES == qid)
        cur = bytearray(p.read_bytes())
        cur[units * 20 :] = was[units * 20 :]
        p.write_bytes(bytes(cur))
    # The broker rewrote the checkpoint's timestamps, not the mark at 2048.
    ckpt = (path / "checkpoint").read_bytes()
    (path / "checkpoint").write_bytes(ckpt[:24] + before_ckpt[24:])
    return Image(old, new, new_end, old_end)


def reads(store: MessageStore, queues: int, offsets: list[int], keys: list[str]) -> dict[str, Any]:
    """Everything the store serves: each queue's range and messages, lookups
    by CommitLog offset, queries by key."""
    out: dict[str, Any] = {"max_phy": store.max_phy_offset}
    for q in range(queues):
        lo = store.get_min_offset_in_queue(TOPIC, q)
        hi = store.get_max_offset_in_queue(TOPIC, q)
        msgs = []
        off = lo
        while off < hi:
            r = store.get_message("g", TOPIC, q, off, 32)
            msgs.append(("pull", off, r.status.name, r.damaged))
            msgs.extend(("msg", m.queue_offset, m.commit_log_offset, m.body) for m in r.messages)
            if r.next_begin_offset <= off:
                break
            off = r.next_begin_offset
        beyond = store.get_message("g", TOPIC, q, hi, 32)
        out[f"queue {q}"] = (lo, hi, msgs, beyond.status.name, len(beyond.messages))
    for o in offsets:
        m = store.look_message_by_offset(o)
        out[f"phy {o}"] = None if m is None else (m.queue_id, m.queue_offset, m.body)
    for k in keys:
        out[f"key {k}"] = sorted(m.commit_log_offset for m in store.query_message(TOPIC, k))
    return out


def served_messages(served: dict[str, Any], queues: int) -> set[tuple[int, int, bytes]]:
    """(queue, offset, body) of every message the pulls served."""
    out = set()
    for q in range(queues):
        for m in served[f"queue {q}"][2]:
            if m[0] == "msg":
                out.add((q, m[1], m[3]))
    return out


@pytest.mark.parametrize("shape", list(SHAPES))
def test_read_only_serves_what_a_skipping_writer_keeps(tmp_path: Path, shape: str) -> None:
    sh = SHAPES[shape]
    aligned = sh.new_body < 0
    path = tmp_path / "s"
    im = broker_image(path, sh)
    if not aligned:
        with pytest.raises(CorruptedError):
            MessageStore(cfg(path)).start()
    offsets = sorted({r.wrote_offset for r in im.old + im.new})
    keys = [key_of(i) for i in range(sh.n + sh.new)]
    with MessageStore(cfg(path), read_only=True) as ro:
        served = reads(ro, sh.queues, offsets, keys)
    rw_path = tmp_path / "rw"
    shutil.copytree(path, rw_path)
    with MessageStore(cfg(rw_path, on_corruption="skip")) as rw:
        kept = reads(rw, sh.queues, offsets, keys)
        end = rw.max_phy_offset
    # RocketMQ's recovery ends the log at the first invalid record: right
    # after the broker's records, or (no invalid byte there) at the old end.
    assert end == (im.old_end if aligned else im.new_end)
    # Every record before the broker's cut and every record it wrote is kept.
    for r in im.old[: sh.k] + im.new:
        assert kept[f"phy {r.wrote_offset}"] is not None, r
    for name in sorted(kept):
        assert served.get(name) == kept[name], name
    assert sorted(served) == sorted(kept)
    assert served_messages(served, sh.queues) == served_messages(kept, sh.queues)
    # Nothing past that end is served.
    assert served["max_phy"] == end
    for o in offsets:
        if o >= end:
            assert served[f"phy {o}"] is None, o
    for q in range(sh.queues):
        _lo, hi, msgs, status, n = served[f"queue {q}"]
        assert status in (GetStatus.OFFSET_OVERFLOW_ONE.name, GetStatus.NO_MESSAGE_IN_QUEUE.name)
        assert n == 0
        assert all(m[2] < end for m in msgs if m[0] == "msg")
        if not aligned:
            # Each queue ends with the broker's last record of it.
            assert hi == sum(1 for i in range(sh.k) if i % sh.queues == q) + sum(
                1 for j in range(sh.new) if (sh.n + j) % sh.queues == q
            )
    if not aligned:
        # The stale old records past the broker's cut are served nowhere.
        bodies = {m[2] for m in served_messages(served, sh.queues)}
        assert not any(sh.k <= index_of(b) < sh.n for b in bodies)
        for i in range(sh.k, sh.n):
            assert served[f"key {key_of(i)}"] == [], i


WRITER = r"""
import json, sys, time
from rocketstore import MessageStore, StoreConfig

path, first, count, queues, size = (
    sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
cfg = StoreConfig(store_path=path, on_corruption="skip", **json.loads(sys.argv[6]))
store = MessageStore(cfg).start()
print("READY", store.max_phy_offset, flush=True)
for i in range(first, first + count):
    body = (b"m%05d-" % i).ljust(size, b"y")
    r = store.put("topic", body, queue_id=i % queues, keys=[f"key{i:05d}"])
    assert r.ok, r
    print("PUT", i % queues, r.queue_offset, flush=True)
    time.sleep(0.002)
store.close()
print("DONE", flush=True)
"""


@pytest.mark.parametrize("shape", ["shorter", "longer"])
def test_read_only_follower_never_serves_stale_records(tmp_path: Path, shape: str) -> None:
    """A read-only store opened on the broker's image follows a writer that
    recovers it (cutting where RocketMQ cuts) and appends: it never serves an
    old record past the broker's cut, and in the end it serves what the
    writer acknowledged and what a fresh read-only open serves."""
    sh = SHAPES[shape]
    path = tmp_path / "s"
    im = broker_image(path, sh)
    first = sh.n + sh.new
    count = 120
    seen: set[tuple[int, int, bytes]] = set()
    with MessageStore(cfg(path), read_only=True) as ro:
        nexts = {q: ro.get_min_offset_in_queue(TOPIC, q) for q in range(sh.queues)}

        def poll() -> None:
            for q in range(sh.queues):
                while True:
                    r = ro.get_message("g", TOPIC, q, nexts[q], 32)
                    for m in r.messages:
                        seen.add((q, m.queue_offset, m.body))
                    if r.next_begin_offset <= nexts[q]:
                        break
                    nexts[q] = r.next_begin_offset

        poll()
        acked: set[tuple[int, int]] = set()
        with subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(first), str(count), str(sh.queues),
             "60", json.dumps(SMALL)],
            stdout=subprocess.PIPE,
            text=True,
        ) as proc:
            assert proc.stdout is not None
            ready = proc.stdout.readline().split()
            # The writer's recovery ends the log where RocketMQ's does.
            assert ready[0] == "READY" and int(ready[1]) == im.new_end, ready
            for line in proc.stdout:
                parts = line.split()
                if parts[0] == "PUT":
                    acked.add((int(parts[1]), int(parts[2])))
                poll()
            assert proc.wait(timeout=120) == 0
        assert len(acked) == count
        poll()
        ro.refresh()
        poll()
        final = {q: ro.get_max_offset_in_queue(TOPIC, q) for q in range(sh.queues)}
    # Never a stale record: bodies are either older than the cut, the
    # broker's, or the writer's; each offset served is the one it was put at.
    for q, off, body in seen:
        i = index_of(body)
        assert i < sh.k or i >= sh.n, (q, off, i)
        assert i % sh.queues == q
    kept_units = {q: sum(1 for i in range(sh.k) if i % sh.queues == q) for q in range(sh.queues)}
    assert {(q, off) for q, off, _ in seen if index_of(_) >= first} == acked
    by_offset: dict[tuple[int, int], bytes] = {}
    for q, off, body in seen:
        assert by_offset.setdefault((q, off), body) == body, (q, off)
    with MessageStore(cfg(path), read_only=True) as fresh:
        for q in range(sh.queues):
            assert fresh.get_max_offset_in_queue(TOPIC, q) == final[q]
            off = fresh.get_min_offset_in_queue(TOPIC, q)
            while off < final[q]:
                r = fresh.get_message("g", TOPIC, q, off, 32)
                for m in r.messages:
                    assert by_offset.get((q, m.queue_offset)) == m.body
                assert r.next_begin_offset > off
                off = r.next_begin_offset
    for q in range(sh.queues):
        assert final[q] >= kept_units[q]


@pytest.mark.parametrize(
    ("queues", "spans", "how"),
    [
        (1, [(30, 1)], "magic"),  # one record of the only queue
        (1, [(30, 6)], "zeros"),  # six in a row: the queue's offsets jump by six
        (3, [(41, 5)], "garbage"),  # five across three queues
        # Several damaged ranges: each is judged against what precedes it.
        (2, [(10, 1), (20, 3), (21 + 10, 2), (70, 4)], "garbage"),
        (1, [(5, 2), (50, 1), (90, 3)], "magic"),
    ],
)
def test_damage_in_one_log_keeps_what_follows(
    tmp_path: Path, queues: int, spans: list[tuple[int, int]], how: str
) -> None:
    """Damage in a log nobody cut is not an older log: the records after it
    were stored later and their queue offsets follow, leaving out at most the
    damaged records. A skipping writer keeps them all, and a read-only open
    serves the same."""
    path = tmp_path / "s"
    acked: list[PutResult] = []
    with MessageStore(cfg(path)) as store:
        for i in range(100):
            r = store.put(TOPIC, body_of(i, 120), queue_id=i % queues, keys=[key_of(i)])
            assert r.ok
            acked.append(r)
    damaged: list[tuple[int, int]] = []
    gone: set[int] = set()
    for first, count in spans:
        lo = acked[first].wrote_offset
        hi = acked[first + count - 1].wrote_offset + acked[first + count - 1].wrote_bytes
        damaged.append((lo, hi))
        gone.update(range(first, first + count))
        with open(_cl_file(path), "r+b") as f:
            if how == "magic":
                for i in range(first, first + count):
                    f.seek(acked[i].wrote_offset + 4)
                    f.write(b"\xde\xad\xbe\xef")
            else:
                f.seek(lo)
                f.write(bytes(hi - lo) if how == "zeros" else b"\x5a" * (hi - lo))
    with pytest.raises(CorruptedError):
        MessageStore(cfg(path)).start()
    offsets = [r.wrote_offset for r in acked]
    keys = [key_of(i) for i in range(100)]
    with MessageStore(cfg(path), read_only=True) as ro:
        served = reads(ro, queues, offsets, keys)
    rw_path = tmp_path / "rw"
    shutil.copytree(path, rw_path)
    with MessageStore(cfg(rw_path, on_corruption="skip")) as rw:
        rep = rw.recovery_report
        assert rep is not None and [(d[0], d[1]) for d in rep.damaged] == damaged
        kept = reads(rw, queues, offsets, keys)
    assert kept["max_phy"] == acked[-1].wrote_offset + acked[-1].wrote_bytes
    want = {
        (i % queues, r.queue_offset, body_of(i, 120))
        for i, r in enumerate(acked)
        if i not in gone
    }
    assert served_messages(kept, queues) == want
    assert served == kept

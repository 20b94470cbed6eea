"""Reads never serve a damaged body.

One bit is flipped in the bodies of records in old CommitLog segments (a
normal recovery scans only the last three, so these stay in place). Every
read API then either skips the record and counts it (pulls, consumers: queue
offsets stay dense, the record is logged once) or raises ``CorruptedError``
naming the file and the offset (``look_message_by_offset``,
``look_message_by_id``, ``query_message``) -- on the writer and on a
read-only store alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.presets import SEG, SMALL
from helpers.store_util import BODY_AT, flip_commitlog_bits
from rocketstore import CorruptedError, MessageStore, PutResult, StoreConfig
from rocketstore._logging import pump_now

N = 600  # 1000-byte bodies: about 60 per 64 KiB segment, 10 segments
BODY = 1000
VICTIMS = (3, 70, 71, 150, 222, 290)  # all in segments 0..4


def body_of(i: int) -> bytes:
    return (b"m%05d-" % i).ljust(BODY, b"x")


def tags_of(i: int) -> str:
    return f"t{i % 3}"


@pytest.fixture
def flipped(store_path: str) -> Iterator[tuple[str, list[PutResult]]]:
    with MessageStore(StoreConfig(store_path=store_path, **SMALL)) as s:
        acked = [
            s.put("topic", body_of(i), queue_id=i % 2, tags=tags_of(i), keys=[f"key{i}"])
            for i in range(N)
        ]
    assert all(r.ok for r in acked)
    n_files = len(list((Path(store_path) / "commitlog").iterdir()))
    for i in VICTIMS:
        r = acked[i]
        assert r.wrote_offset // SEG < n_files - 3, "a victim inside the recovery scan"
        flip_commitlog_bits(store_path, r.wrote_offset + BODY_AT + 500 + i % 100, SEG,
                            1 << (i % 8))
    yield store_path, acked


def segment_name(r: PutResult) -> str:
    return f"{r.wrote_offset // SEG * SEG:020d}"


def check_every_read(store: MessageStore, acked: list[PutResult]) -> None:
    victims = set(VICTIMS)
    # By offset and by id: an error naming file and offset.
    for i in VICTIMS:
        r = acked[i]
        for look, arg in (
            (store.look_message_by_offset, r.wrote_offset),
            (store.look_message_by_id, r.msg_id),
            (lambda key: store.query_message("topic", key), f"key{i}"),
        ):
            with pytest.raises(CorruptedError) as ei:
                look(arg)
            assert segment_name(r) in str(ei.value), str(ei.value)
            assert f"offset {r.wrote_offset}" in str(ei.value), str(ei.value)
    for i in (0, 4, 69, 72, 299, N - 1):
        m = store.look_message_by_offset(acked[i].wrote_offset)
        assert m is not None and m.body == body_of(i)
        assert [m.body for m in store.query_message("topic", f"key{i}")] == [body_of(i)]

    # Pulls: the damaged record is skipped and counted, offsets stay dense.
    for q in (0, 1):
        for tags in (None, ["t0"]):
            offset, served, skipped = 0, [], 0
            n = store.get_max_offset_in_queue("topic", q)
            while offset < n:
                g = store.get_message("g", "topic", q, offset, 7, tags)
                assert g.next_begin_offset > offset
                for m in g.messages:
                    i = int(m.body[1:6])
                    assert m.body == body_of(i), f"altered body of message {i} served"
                    served.append(i)
                skipped += g.damaged
                offset = g.next_begin_offset
            wanted = [i for i in range(q, N, 2) if tags is None or tags_of(i) in tags]
            assert served == [i for i in wanted if i not in victims]
            assert skipped == sum(1 for i in wanted if i in victims)
    # A pull starting at the damaged record moves past it.
    v = acked[VICTIMS[0]]
    g = store.get_message("g", "topic", VICTIMS[0] % 2, v.queue_offset, 1)
    assert g.damaged == 1 and g.messages and g.messages[0].queue_offset == v.queue_offset + 1
    assert g.next_begin_offset == v.queue_offset + 2

    # Consumers: everything else, intact; the damaged ones counted.
    with store.consumer("c", "topic") as consumer:
        got = []
        while batch := consumer.poll(timeout=0.5, max_messages=500):
            got += batch
        assert consumer.damaged == len(VICTIMS)
    assert sorted(int(m.body[1:6]) for m in got) == [i for i in range(N) if i not in victims]
    assert all(m.body == body_of(int(m.body[1:6])) for m in got)


def check_logged_once(caplog: pytest.LogCaptureFixture, acked: list[PutResult]) -> None:
    pump_now()
    for i in VICTIMS:
        off = acked[i].wrote_offset
        hits = [
            r for r in caplog.records
            if r.levelno == logging.WARNING and f"CommitLog offset {off})" in r.getMessage()
        ]
        assert len(hits) == 1, (i, [r.getMessage() for r in hits])
        assert segment_name(acked[i]) in hits[0].getMessage()


def test_flipped_body_bits_are_never_served_by_the_writer(
    flipped: tuple[str, list[PutResult]], caplog: pytest.LogCaptureFixture
) -> None:
    path, acked = flipped
    caplog.set_level(logging.WARNING, logger="rocketstore")
    with MessageStore(StoreConfig(store_path=path, **SMALL)) as store:
        rep = store.recovery_report
        assert rep is not None and rep.mode == "normal"
        check_every_read(store, acked)
        check_logged_once(caplog, acked)


def test_flipped_body_bits_are_never_served_read_only(
    flipped: tuple[str, list[PutResult]], caplog: pytest.LogCaptureFixture
) -> None:
    path, acked = flipped
    caplog.set_level(logging.WARNING, logger="rocketstore")
    with MessageStore(StoreConfig(store_path=path, **SMALL), read_only=True) as store:
        check_every_read(store, acked)
        check_logged_once(caplog, acked)

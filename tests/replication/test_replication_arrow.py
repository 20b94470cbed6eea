"""The engine's Arrow append (``put_arrow``, the Spark commit's append) and
the put rule of docs/format.md §21.5: rows stored but not confirmed by a
slave (SYNC_MASTER) or on disk (SYNC_FLUSH) are appended, counted and
reported apart from refused rows; a stream waits for a slave as a batch put
does, and never a timeout per batch once one was missed."""

from __future__ import annotations

import contextlib
import errno
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.ha_util import master_config, slave_config, wait_until
from rocketstore import FlushDiskType, MessageStore, PoisonedError, PutStatus

pa = pytest.importorskip("pyarrow")


def _stream(batches: int, rows: int = 50, tag: str = "r") -> object:
    """``batches`` record batches of ``rows`` rows each, topic ``T``."""
    schema = pa.schema([("topic", pa.string()), ("body", pa.binary())])
    out = [pa.RecordBatch.from_pydict(
        {"topic": ["T"] * rows, "body": [f"{tag}{b}-{i}".encode() for i in range(rows)]},
        schema=schema) for b in range(batches)]
    return pa.RecordBatchReader.from_batches(schema, out)


def _bodies(store: MessageStore) -> list[bytes]:
    t = store.read_arrow(columns=["topic", "body"]).read_all()
    return [b for tp, b in zip(t.column("topic").to_pylist(), t.column("body").to_pylist(),
                               strict=True) if tp == "T"]


def test_rows_stored_without_a_slave_are_appended_and_reported_apart(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", slave_timeout=300)) as m:
        done, refused, unconfirmed = m._n.put_arrow(_stream(3), [("P", "v")])
        # Every row is in the log: none was refused.
        assert (done, refused) == (150, None)
        assert unconfirmed is not None
        row, status, why = unconfirmed
        assert (row, PutStatus(status)) == (0, PutStatus.SLAVE_NOT_AVAILABLE)
        assert "no slave is connected" in why
        assert len(_bodies(m)) == 150
        # Nothing is confirmed later either: still no slave.
        assert m._n.wait_stored(0, m.max_phy_offset) == (
            PutStatus.SLAVE_NOT_AVAILABLE.value, why)


def test_a_stream_returns_once_the_slave_holds_it(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m")) as m, \
            MessageStore(slave_config(tmp_path / "s", m.ha_port)) as s:
        wait_until(lambda: bool(m.ha_status()["slaves"]), what="slave")
        assert m._n.put_arrow(_stream(4)) == (200, None, None)
        # At once: the append waited for the slave's report.
        assert s.max_phy_offset == m.max_phy_offset
        assert m._n.wait_stored(0, m.max_phy_offset) is None


def test_a_slave_that_stops_reporting_costs_two_timeouts_not_one_per_batch(
        tmp_path: Path) -> None:
    timeout = 300
    with MessageStore(master_config(tmp_path / "m", slave_timeout=timeout)) as m, \
            socket.create_connection(("127.0.0.1", m.ha_port)) as peer:
        # A slave that reports once and then never again.
        peer.sendall((0).to_bytes(8, "big"))
        wait_until(lambda: bool(m.ha_status()["slaves"]) and
                   m.ha_status()["slaves"][0]["acked_offset"] == 0, what="report")
        t = time.monotonic()
        done, refused, unconfirmed = m._n.put_arrow(_stream(8, rows=10))
        took = time.monotonic() - t
        assert (done, refused) == (80, None)
        assert unconfirmed is not None
        assert (unconfirmed[0], PutStatus(unconfirmed[1])) == (0, PutStatus.FLUSH_SLAVE_TIMEOUT)
        # The first batch waits, the rest is appended and waited for once.
        assert 2 * timeout / 1000 * 0.9 < took < 4 * timeout / 1000, took
        # Its report of the end confirms all of it.
        end = m.max_phy_offset
        peer.sendall(end.to_bytes(8, "big"))
        wait_until(lambda: m.ha_status()["slaves"][0]["acked_offset"] == end, what="ack")
        assert m._n.wait_stored(0, end) is None


def test_a_slave_catching_up_during_the_stream_confirms_it(tmp_path: Path) -> None:
    with MessageStore(master_config(tmp_path / "m", slave_timeout=300)) as m:
        # No slave for the first batch; one connects while the rest goes in.
        batches = [pa.RecordBatch.from_pydict({"topic": ["T"] * 20,
                                               "body": [b"x%d" % i for i in range(20)]})
                   for _ in range(3)]
        slave: list[MessageStore] = []

        def gen() -> object:
            yield batches[0]
            s = MessageStore(slave_config(tmp_path / "s", m.ha_port)).start()
            slave.append(s)
            wait_until(lambda: bool(m.ha_status()["slaves"]), what="slave")
            yield from batches[1:]

        try:
            reader = pa.RecordBatchReader.from_batches(batches[0].schema, gen())
            assert m._n.put_arrow(reader) == (60, None, None)
            assert slave[0].max_phy_offset == m.max_phy_offset
        finally:
            for s in slave:
                s.close()


def test_rows_not_flushed_in_time_are_appended_and_reported_apart(
        tmp_path: Path, fail_points: Callable[[str, int], None]) -> None:
    cfg = master_config(tmp_path / "m", sync=False, ha_listen_port=None,
                        flush_disk_type=FlushDiskType.SYNC_FLUSH,
                        sync_flush_timeout=3_600_000)
    m = MessageStore(cfg).start()
    try:
        assert m._n.put_arrow(_stream(1, tag="ok")) == (50, None, None)
        before = m.max_phy_offset
        fail_points("msync", errno.EIO)
        done, refused, unconfirmed = m._n.put_arrow(_stream(2))
        # The first batch is written, not flushed (the failed flush poisons
        # the store): the second is refused.
        assert done == 50
        assert unconfirmed is not None
        assert (unconfirmed[0], PutStatus(unconfirmed[1])) == (0, PutStatus.FLUSH_DISK_TIMEOUT)
        assert refused is not None
        assert (refused[0], PutStatus(refused[1])) == (50, PutStatus.SERVICE_NOT_AVAILABLE)
        # In the log (reads stop at the flushed end under SYNC_FLUSH).
        assert m.max_phy_offset > before
    finally:
        fail_points("msync", 0)
        with contextlib.suppress(PoisonedError, OSError):
            m.close()

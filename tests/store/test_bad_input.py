"""Bad arguments are refused with ValueError/TypeError and change nothing.

Calls that could take the interpreter down (an abort on a huge allocation)
run in a subprocess, so a crash fails the test instead of the test runner.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rocketstore import MessageStore, StoreConfig

pytest.importorskip("pyarrow")

SMALL: dict[str, Any] = {
    "mapped_file_size_commit_log": 4096,
    "mapped_file_size_consume_queue": 20 * 100,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
}


def _fill(path: Path, n: int = 20) -> None:
    with MessageStore(StoreConfig(store_path=str(path), **SMALL)) as store:
        for i in range(n):
            assert store.put("T", b"%03d" % i + b"x" * 90, queue_id=i % 4).ok


def _run(path: Path, code: str) -> subprocess.CompletedProcess[str]:
    prog = textwrap.dedent("""
        import sys
        from rocketstore import MessageStore, StoreConfig
        cfg = StoreConfig(store_path=sys.argv[1], mapped_file_size_commit_log=4096,
                          mapped_file_size_consume_queue=2000, max_hash_slot_num=64,
                          max_index_num=256)
        store = MessageStore(cfg).start()
    """) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", prog, str(path)], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("end", [2**40, 2**62, 2**63 - 1, 2**63, 2**64])
def test_read_arrow_end_far_past_the_store_is_clamped(tmp_path: Path, end: int) -> None:
    """The range is clamped to the store: the read returns every row, and the
    memory of a read follows what is read (2**40 bytes in 4 KiB segments is
    2**28 pieces: listing them aborted the interpreter)."""
    _fill(tmp_path)
    p = _run(tmp_path, f"""
        for threads in (1, 2, 4):
            t = store.read_arrow(start=0, end={end}, threads=threads).read_all()
            print(t.num_rows)
        t = store.read_arrow("T", start=0, end={end}).read_all()
        print(t.num_rows)
        t = store.read_arrow("T", start={end}).read_all()
        print(t.num_rows)
        store.shutdown()
    """)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["20", "20", "20", "20", "0"]


@pytest.mark.parametrize("threads", [0, -1, 2**31, 2**63, 2**64, 1.5, "2", None, True])
def test_read_arrow_refuses_bad_threads(tmp_path: Path, threads: Any) -> None:
    _fill(tmp_path)
    with MessageStore(StoreConfig(store_path=str(tmp_path), **SMALL)) as store:
        if threads is None:  # the default
            assert store.read_arrow(threads=threads).read_all().num_rows == 20
            return
        with pytest.raises((ValueError, TypeError), match="threads"):
            store.read_arrow(threads=threads)


@pytest.mark.parametrize("name", ["start", "end"])
@pytest.mark.parametrize("value", [-1, -(2**64), 1.5, "0", b"0", [0]])
def test_read_arrow_refuses_bad_bounds(tmp_path: Path, name: str, value: Any) -> None:
    _fill(tmp_path)
    with MessageStore(StoreConfig(store_path=str(tmp_path), **SMALL)) as store:
        for topic in (None, "T"):
            with pytest.raises((ValueError, TypeError), match=name):
                store.read_arrow(topic, **{name: value})
        with pytest.raises((ValueError, TypeError), match="queue_id"):
            store.read_arrow("T", queue_id=2**40)


@pytest.mark.parametrize("offset", [2**63, 2**64, 10**30])
def test_commit_offset_above_a_java_long_is_refused(tmp_path: Path, offset: int) -> None:
    """A bad commit of one group changes nothing and blocks no other group."""
    _fill(tmp_path)
    cfg = StoreConfig(store_path=str(tmp_path), **SMALL)
    with MessageStore(cfg) as store:
        store.commit_offset("A", "T", 0, 3)
        store.persist_offsets()
        with pytest.raises(ValueError, match="offset"):
            store.commit_offset("B", "T", 0, offset)
        with pytest.raises(ValueError, match="queue_id"):
            store.commit_offset("B", "T", 2**31, 1)
        assert store.query_offset("B", "T", 0) == -1
        store.commit_offset("A", "T", 0, 5)
        store.flush()
        store.persist_offsets()
        c = store.consumer("C", "T")
        with pytest.raises(ValueError, match="offset"):
            c.commit({0: offset})
        with pytest.raises(ValueError, match="queue_id"):
            c.commit({2**31: 0})
        assert c.committed(0) == -1
        c.poll(timeout=0, max_messages=4)
        c.close()  # commits the positions; the refused value is not kept
    with MessageStore(cfg) as store:
        assert store.query_offset("A", "T", 0) == 5
        assert store.query_offset("B", "T", 0) == -1
        assert sum(store.query_offset("C", "T", q) for q in range(4)) == 4


@pytest.mark.parametrize("topic", ["é", "x" * 300, "a b"])
def test_commit_offset_for_a_topic_that_breaks_the_topic_rule_is_refused(
    tmp_path: Path, topic: str
) -> None:
    """Refused as reads refuse it; before, the offset was kept and the next
    retention round raised on it, which stopped the retention service and
    poisoned the store."""
    _fill(tmp_path)
    with MessageStore(StoreConfig(store_path=str(tmp_path), **SMALL)) as store:
        with pytest.raises(ValueError, match="topic"):
            store.commit_offset("g", topic, 0, 1)
        store.delete_expired_files(force=True)
        assert store.running_flags == []
        assert store.put("T", b"after").ok


def test_a_stored_offset_of_an_unreadable_topic_does_not_stop_retention(
    tmp_path: Path,
) -> None:
    """A consumerOffset.json (a broker's, say) may name a topic this store
    refuses to read; retention passes over it instead of failing."""
    _fill(tmp_path)
    cfg = StoreConfig(store_path=str(tmp_path), **SMALL)
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "consumerOffset.json").write_text(
        '{"offsetTable":{"a b@g":{0:1},"T@g":{0:2}}}')
    with MessageStore(cfg) as store:
        store.delete_expired_files(force=True)
        assert store.running_flags == []
        assert store.query_offset("g", "T", 0) == 2


@pytest.mark.parametrize("queue_id", [2**31, 2**63, -(2**63) - 1, 2**64])
def test_put_batch_queue_id_out_of_range_is_a_value_error(tmp_path: Path, queue_id: int) -> None:
    _fill(tmp_path)
    with MessageStore(StoreConfig(store_path=str(tmp_path), **SMALL)) as store:
        before = store.max_phy_offset
        with pytest.raises(ValueError, match="queue_id"):
            store.put_batch("T", [b"x"], queue_id)
        with pytest.raises(ValueError, match="queue_id"):
            store.put_batch("T", [b"x"], queue_id=queue_id)
        assert store.max_phy_offset == before


@pytest.mark.parametrize("offsets", [0, "x", [(0, 1)], None])
def test_commit_offsets_needs_a_mapping(tmp_path: Path, offsets: Any) -> None:
    _fill(tmp_path)
    with MessageStore(StoreConfig(store_path=str(tmp_path), **SMALL)) as store:
        with pytest.raises(TypeError, match="mapping"):
            store.commit_offsets("g", "T", offsets)
        assert store.query_offset("g", "T", 0) == -1

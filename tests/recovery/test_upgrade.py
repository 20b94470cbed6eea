"""A store written by rocketstore 0.1.0 opens and reads identically today.

The fixture was written by ``tests/helpers/make_upgrade_fixture.py`` with the
0.1.0 engine (clean shutdown, three CommitLog segments, an IPv6 record, a
delayed record, committed consumer offsets).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers.make_upgrade_fixture import read_all
from helpers.paths import FIXTURES
from rocketstore import MessageStore, StoreConfig

EXPECTED: dict[str, Any] = json.loads((FIXTURES / "store_0_1_0_expected.json").read_text())


@pytest.fixture(autouse=True)
def _clock_when_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Delayed delivery sees the time the fixture was written: its delayed
    record is not due yet, so a writer appends nothing while the test reads
    (its delivery is tested in test_schedule.py)."""
    from rocketstore.services import schedule

    written = max(m["store_timestamp"] for m in EXPECTED["messages"])
    monkeypatch.setattr(schedule, "now_ms", lambda: written)


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    dest = tmp_path / "store"
    shutil.copytree(FIXTURES / "store_0_1_0", dest)
    return dest


@pytest.mark.parametrize("read_only", [False, True])
def test_old_store_reads_identically(old_store: Path, read_only: bool) -> None:
    cfg = StoreConfig(store_path=str(old_store), **EXPECTED["geometry"])
    before = {p: p.read_bytes() for p in (old_store / "commitlog").iterdir()}
    with MessageStore(cfg, read_only=read_only) as store:
        assert store.max_phy_offset == EXPECTED["max_phy_offset"]
        assert read_all(store) == EXPECTED["messages"]
        for key, want in EXPECTED["offsets"].items():
            group, topic, qid = key.split("/")
            assert store.query_offset(group, topic, int(qid)) == want
        by_key = store.query_message("orders", "k-3")
        assert [m.body for m in by_key] == [b"body 3 " * 4]
        first = EXPECTED["messages"][0]
        got = store.look_message_by_id(first["msg_id"])
        assert got is not None and got.body.hex() == first["body_hex"]
    after = {p: p.read_bytes() for p in (old_store / "commitlog").iterdir()}
    assert after == before, "opening an old store must not rewrite its CommitLog"


def test_old_store_accepts_new_writes(old_store: Path) -> None:
    cfg = StoreConfig(store_path=str(old_store), **EXPECTED["geometry"])
    with MessageStore(cfg) as store:
        end = store.get_max_offset_in_queue("orders", 1)
        r = store.put("orders", b"after upgrade", queue_id=1)
        assert r.queue_offset == end
    with MessageStore(cfg) as store:
        g = store.get_message("upgrade", "orders", 1, end, 1)
        assert [m.body for m in g.messages] == [b"after upgrade"]
        rest = [m for m in read_all(store) if m["body_hex"] != b"after upgrade".hex()]
        assert rest == EXPECTED["messages"]

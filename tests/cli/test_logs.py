"""Logs that help: one summary for a recovery, a few lines and a count for a
full disk, and a recovery report that says what it counts."""

from __future__ import annotations

import errno
import logging
import re
from collections.abc import Callable

import pytest

from helpers.read_util import SMALL, wait_dispatched
from rocketstore import MessageStore, PutStatus, RecoveryReport
from rocketstore._logging import pump_now

OpenStore = Callable[..., MessageStore]
BIG_CQ = {**SMALL, "mapped_file_size_consume_queue": 20 * 4000}


def _engine_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    pump_now()
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "rocketstore" and r.levelno >= level
    ]


def test_abnormal_recovery_logs_one_summary_not_a_line_per_record(
    open_store: OpenStore, caplog: pytest.LogCaptureFixture
) -> None:
    n = 3000
    store = open_store(**BIG_CQ)
    for i in range(n):
        assert store.put("T", b"x" * 20, keys=[f"k{i}"]).status is PutStatus.PUT_OK
    wait_dispatched(store)
    store.flush()
    native = store._native
    assert native is not None
    native._simulate_crash()  # the abort file stays: the next open is abnormal
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rocketstore"):
        store = open_store(**BIG_CQ)
        report = store.recovery_report
        assert report is not None and report.mode == "abnormal"
        assert report.redispatched_records == n
        lines = _engine_lines(caplog, logging.INFO)
    warnings = _engine_lines(caplog, logging.WARNING)
    assert len(warnings) <= 2, warnings[:5]
    assert len(lines) <= 6, lines[:10]
    assert any(str(n) in line for line in lines), lines


def test_full_disk_logs_a_few_lines_and_a_count(
    open_store: OpenStore,
    fail_points: Callable[[str, int], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = open_store(mapped_file_size_commit_log=4096)
    r = store.put("T", b"x" * 100)
    while store.put("T", b"x" * 100).wrote_offset < 4096 - 300:
        pass  # fill the first file
    wait_dispatched(store)  # the consume queue file exists before the disk "fills"
    caplog.clear()
    attempts = 2000
    with caplog.at_level(logging.INFO, logger="rocketstore"):
        fail_points("create_file", errno.ENOSPC)
        # A file made ahead before the disk "filled" still takes puts.
        for _ in range(100):
            r = store.put("T", b"x" * 300, check=False)
            if r.status is PutStatus.CREATE_MAPPED_FILE_FAILED:
                break
        statuses = {store.put("T", b"x" * 300, check=False).status for _ in range(attempts)}
        assert statuses == {PutStatus.CREATE_MAPPED_FILE_FAILED}
        fail_points("create_file", 0)
        r = store.put("T", b"x" * 300)
        assert r.status is PutStatus.PUT_OK
        lines = _engine_lines(caplog, logging.INFO)
    assert len(lines) <= 6, lines[:10]
    counts = [int(m.group(1)) for line in lines if (m := re.search(r"after (\d+) failed", line))]
    assert counts and counts[-1] >= attempts, lines


def test_recovery_report_says_it_counts_the_records_scanned(open_store: OpenStore) -> None:
    seg = 4096
    store = open_store(mapped_file_size_commit_log=seg)
    written = 0
    while store.max_phy_offset < 5 * seg:
        assert store.put("T", b"x" * 200).ok
        written += 1
    store.shutdown()
    store = open_store(mapped_file_size_commit_log=seg)
    rep = store.recovery_report
    assert rep is not None and rep.mode == "normal"
    # After a clean stop only the last three files are scanned: fewer records
    # than the store holds, and the field's name says so.
    assert 0 < rep.records_scanned < written
    assert rep.records == rep.records_scanned
    assert "records_scanned" in rep.as_dict()  # a field of the report's schema
    assert "not the number of records" in (RecoveryReport.__doc__ or "")

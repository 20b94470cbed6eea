"""Retention in fractions of an hour: ``file_reserved_time`` takes an int, a
float or a ``datetime.timedelta``; the deletion log gives the deleted file's
real age."""

from __future__ import annotations

import datetime
import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.retention_util import age, cl_files, fill, hour_clock, with_config
from rocketstore import MessageStore, StoreConfig

MINUTE_S = 60


@pytest.fixture
def opened(open_store: Callable[..., MessageStore]) -> Callable[..., MessageStore]:
    return with_config(open_store)


def _age_minutes(files: list[Path], minutes: int) -> None:
    when = time.time() - minutes * MINUTE_S
    for p in files:
        os.utime(p, (when, when))


@pytest.mark.parametrize("reserved", [0.5, datetime.timedelta(minutes=30)])
def test_half_an_hour_of_retention_deletes_files_older_than_30_minutes(
    opened: Callable[..., MessageStore], reserved: object
) -> None:
    clock, hour = hour_clock()
    store = opened(file_reserved_time=reserved, delete_when=hour)
    assert store.config.file_reserved_time == 0.5
    retention = store._retention
    assert retention is not None
    retention.clock = clock
    retention.disk_usage = lambda path: 0.10
    fill(store, 6)
    files = cl_files(store)
    _age_minutes(files[:2], 45)  # older than 30 minutes
    _age_minutes(files[2:4], 15)  # younger
    report = retention.run_round()
    assert report.commit_log_files == 2
    assert cl_files(store) == files[2:]


def test_the_deletion_log_gives_the_files_real_age(
    opened: Callable[..., MessageStore], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rocketstore")  # before the engine starts
    store = opened(file_reserved_time=1)
    fill(store, 4)
    files = cl_files(store)
    age(files[:1], 5)
    assert store.delete_expired_files() == 1
    store.shutdown()  # the engine's log lines are pumped by now
    ages = [float(m.group(1)) for r in caplog.records
            if (m := re.search(r"deleted expired CommitLog file .* \(age ([0-9.]+) h\)",
                               r.getMessage()))]
    assert len(ages) == 1, [r.getMessage() for r in caplog.records]
    assert 4.9 <= ages[0] <= 5.2


def test_fractional_hours_are_written_in_whole_hours_for_rocketmq() -> None:
    cfg = StoreConfig(file_reserved_time=0.5)
    assert cfg.to_properties()["fileReservedTime"] == "1"  # an int RocketMQ parses
    assert StoreConfig(file_reserved_time=48).to_properties()["fileReservedTime"] == "48"
    assert StoreConfig(file_reserved_time=datetime.timedelta(hours=2)).file_reserved_time == 2
    assert StoreConfig.from_properties({"fileReservedTime": "0.25"}).file_reserved_time == 0.25


@pytest.mark.parametrize("bad, exc", [("1", TypeError), (True, TypeError),
                                      (-0.5, ValueError), (float("inf"), ValueError),
                                      (datetime.timedelta(hours=-1), ValueError)])
def test_bad_retention_values_are_refused(bad: object, exc: type[Exception]) -> None:
    with pytest.raises(exc, match="file_reserved_time"):
        StoreConfig(file_reserved_time=bad)

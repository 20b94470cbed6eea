"""Tests for rocketstore.config.store_config: defaults, validation, properties I/O."""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from rocketstore import _native
from rocketstore.config.store_config import (
    CQ_STORE_UNIT_SIZE,
    DEFAULT_MESSAGE_DELAY_LEVEL,
    MIN_MAPPED_FILE_SIZE_COMMIT_LOG,
    BrokerRole,
    FlushDiskType,
    StoreConfig,
)

# RocketMQ 4.9.8's MessageStoreConfig defaults (plus the 5.x-only ones),
# hard-coded here so a changed default is caught.
SPEC_DEFAULTS: dict[str, Any] = {
    "store_path_commit_log": None,
    "mapped_file_size_commit_log": None,  # None => 1 GiB for a new store
    "mapped_file_size_consume_queue": None,  # None => 6,000,000 for a new store
    "enable_consume_queue_ext": False,
    "mapped_file_size_consume_queue_ext": 48 * 1024 * 1024,
    "bit_map_length_consume_queue_ext": 64,
    "flush_interval_commit_log": 500,
    "flush_commit_log_least_pages": 4,
    "flush_commit_log_thorough_interval": 10000,
    "flush_commit_log_timed": True,
    "commit_interval_commit_log": 200,
    "commit_commit_log_least_pages": 4,
    "commit_commit_log_thorough_interval": 200,
    "flush_interval_consume_queue": 1000,
    "flush_consume_queue_least_pages": 2,
    "flush_consume_queue_thorough_interval": 60000,
    "flush_disk_type": FlushDiskType.ASYNC_FLUSH,
    "sync_flush_timeout": 5000,
    "slave_timeout": 3000,
    "file_reserved_time": 72,
    "delete_when": "04",
    "disk_max_used_space_ratio": 75,
    "disk_space_warning_level_ratio": 0.90,
    "disk_space_clean_forcibly_ratio": 0.85,
    "clean_file_forcibly_enable": True,
    "delete_commit_log_files_interval": 100,
    "delete_consume_queue_files_interval": 100,
    "destroy_mapped_file_interval_forcibly": 120000,
    "redelete_hanged_file_interval": 120000,
    "clean_resource_interval": 10000,
    "delete_file_batch_max": 10,
    "transient_store_pool_enable": False,
    "transient_store_pool_size": 5,
    "fast_fail_if_no_buffer_in_store_pool": False,
    "warm_mapped_file_enable": False,
    "flush_least_pages_when_warm_mapped_file": 4096,
    "max_hash_slot_num": 5000000,
    "max_index_num": 20000000,
    "message_index_enable": True,
    "message_index_safe": True,
    "max_msgs_num_batch": 64,
    "default_query_max_num": 32,
    "max_message_size": 4194304,
    "check_crc_on_recover": True,
    "max_transfer_bytes_on_message_in_memory": 262144,
    "max_transfer_count_on_message_in_memory": 32,
    "max_transfer_bytes_on_message_in_disk": 65536,
    "max_transfer_count_on_message_in_disk": 8,
    "access_message_in_memory_max_ratio": 40,
    "os_page_cache_busy_time_out_mills": 1000,
    "message_delay_level": "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
    "flush_delay_offset_interval": 10000,
    "put_msg_index_hight_water": 600000,
    "use_reentrant_lock_when_put_message": True,
    "offset_check_in_slave": False,
    "duplication_enable": False,
    "disk_fall_recorded": True,
    "broker_role": BrokerRole.ASYNC_MASTER,
    # ours: no listener unless a port is set (RocketMQ's broker listens on 10912);
    # docs/format.md §21.1
    "ha_listen_port": None,
    "ha_listen_address": "127.0.0.1",
    "ha_master_address": None,
    "ha_allowed_slaves": "",
    "ha_send_heartbeat_interval": 5000,
    "ha_housekeeping_interval": 20000,
    "ha_transfer_batch_size": 32768,
    "ha_slave_fallbehind_max": 256 * 1024 * 1024,
    "ha_new_slave_from_first_file": False,
    # ours: the offsets sync (docs/format.md §21.7)
    "ha_offsets_port": None,
    "ha_offsets_master_address": None,
    "ha_offsets_interval": 3000,
    # 5.x only
    "max_recovery_commitlog_files": 30,
    "auto_message_version_on_topic_len": True,
    # ours: 5.x's property CRC on by default (docs/format.md "Property CRC")
    "enabled_append_prop_crc": True,
    "force_verify_prop_crc": False,
    "max_topic_length": 127,
    "put_message_timeout": 8000,
    "max_filter_message_size": 16000,
    "write_without_mmap": False,
    "store_type": "default",
    "mapped_file_swap_enable": True,
    "enable_running_flags_in_flush": False,
    # ours
    "store_host": ("127.0.0.1", 10911),
    "on_corruption": "refuse",
}


# --- defaults ---------------------------------------------------------------


def test_defaults_match_spec() -> None:
    cfg = StoreConfig()
    mismatches = {
        name: (getattr(cfg, name), expected)
        for name, expected in SPEC_DEFAULTS.items()
        if getattr(cfg, name) != expected
    }
    assert mismatches == {}
    # every field of the dataclass is accounted for (store_path checked below)
    fields = {f.name for f in dataclasses.fields(StoreConfig)}
    # our additions: store_path is checked below; the size cap is off by default;
    # consumer group members heartbeat every 3 s and time out after 10 s
    assert fields - set(SPEC_DEFAULTS) == {"store_path", "max_store_size_bytes",
                                           "consumer_heartbeat_interval",
                                           "consumer_session_timeout"}
    assert cfg.max_store_size_bytes is None
    assert (cfg.consumer_heartbeat_interval, cfg.consumer_session_timeout) == (3.0, 10.0)


@pytest.mark.parametrize(
    ("changes", "error", "words"),
    [
        ({"consumer_heartbeat_interval": 10.0}, ValueError, "less than consumer_session_timeout"),
        ({"consumer_heartbeat_interval": 2.0, "consumer_session_timeout": 2},
         ValueError, "less than consumer_session_timeout"),
        ({"consumer_session_timeout": 0}, ValueError, "must be in (0, 86400]"),
        ({"consumer_heartbeat_interval": -1.0}, ValueError, "must be in (0, 86400]"),
        ({"consumer_session_timeout": 1e9}, ValueError, "must be in (0, 86400]"),
        ({"consumer_session_timeout": float("inf")}, ValueError, "must be finite"),
        ({"consumer_heartbeat_interval": True}, TypeError, "expected a float"),
        ({"consumer_heartbeat_interval": "3"}, TypeError, "expected a float"),
    ],
)
def test_consumer_group_intervals_are_checked(changes: dict[str, object], error: type,
                                              words: str) -> None:
    with pytest.raises(error, match=re.escape(words)):
        StoreConfig(store_path="/x", **changes)


def test_consumer_group_intervals_take_fractions_and_properties() -> None:
    cfg = StoreConfig(store_path="/x", consumer_heartbeat_interval=0.2,
                      consumer_session_timeout=1)
    assert (cfg.consumer_heartbeat_interval, cfg.consumer_session_timeout) == (0.2, 1.0)
    props = cfg.to_properties()
    assert props["consumerHeartbeatInterval"] == "0.2"
    assert props["consumerSessionTimeout"] == "1.0"
    assert StoreConfig.from_properties(props) == cfg


def test_default_store_path_is_home_store() -> None:
    assert StoreConfig().store_path == os.path.expanduser("~/store")


def test_resolved_defaults() -> None:
    cfg = StoreConfig()
    assert cfg.effective_mapped_file_size_commit_log == 1073741824
    assert cfg.effective_mapped_file_size_consume_queue == 6000000
    assert cfg.put_result_wait_timeout == 10000
    assert cfg.delete_when_hours == frozenset({4})
    assert cfg.effective_disk_max_used_space_ratio == 75


def test_enums_values_are_names() -> None:
    assert [m.value for m in FlushDiskType] == ["ASYNC_FLUSH", "SYNC_FLUSH"]
    assert [m.value for m in BrokerRole] == ["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"]


# --- layout -----------------------------------------------------------------


def test_layout_paths(tmp_path: Path) -> None:
    cfg = StoreConfig(store_path=str(tmp_path))
    assert cfg.commit_log_dir == tmp_path / "commitlog"
    assert cfg.consume_queue_dir == tmp_path / "consumequeue"
    assert cfg.index_dir == tmp_path / "index"
    assert cfg.config_dir == tmp_path / "config"
    assert cfg.checkpoint_path == tmp_path / "checkpoint"
    assert cfg.abort_path == tmp_path / "abort"
    assert cfg.lock_path == tmp_path / "lock"
    other = tmp_path / "elsewhere"
    assert cfg.replace(store_path_commit_log=str(other)).commit_log_dir == other


def test_path_like_store_path_is_stored_as_str(tmp_path: Path) -> None:
    cfg = StoreConfig(store_path=tmp_path)  # type: ignore[arg-type]
    assert cfg.store_path == str(tmp_path)


# --- segment sizes ----------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "stored"),
    [(128, 140), (10, 20), (20, 20), (1, 20), (6000000, 6000000), (6000001, 6000020)],
)
def test_consume_queue_size_rounded_up_to_units(given: int, stored: int) -> None:
    cfg = StoreConfig(mapped_file_size_consume_queue=given)
    assert cfg.mapped_file_size_consume_queue == stored
    assert cfg.effective_mapped_file_size_consume_queue == stored
    # rounding is idempotent through replace()
    assert cfg.replace().mapped_file_size_consume_queue == stored


@pytest.mark.parametrize("size", [99, 128, 4096, 1 << 30])
def test_small_commit_log_segments_are_legal(size: int) -> None:
    cfg = StoreConfig(mapped_file_size_commit_log=size)
    assert cfg.mapped_file_size_commit_log == size
    assert cfg.effective_mapped_file_size_commit_log == size


# --- validation -------------------------------------------------------------


def test_unknown_keyword_is_type_error() -> None:
    with pytest.raises(TypeError):
        StoreConfig(bogus=1)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"mapped_file_size_commit_log": -1}, "mapped_file_size_commit_log"),
        ({"mapped_file_size_commit_log": 0}, "mapped_file_size_commit_log"),
        ({"mapped_file_size_commit_log": 50}, "mapped_file_size_commit_log"),
        ({"mapped_file_size_commit_log": 98}, "mapped_file_size_commit_log"),
        ({"mapped_file_size_commit_log": 1 << 31}, "mapped_file_size_commit_log"),
        ({"mapped_file_size_consume_queue": 0}, "mapped_file_size_consume_queue"),
        ({"mapped_file_size_consume_queue": -20}, "mapped_file_size_consume_queue"),
        ({"flush_interval_commit_log": 0}, "flush_interval_commit_log"),
        ({"flush_commit_log_least_pages": -1}, "flush_commit_log_least_pages"),
        ({"sync_flush_timeout": -5}, "sync_flush_timeout"),
        ({"file_reserved_time": -1}, "file_reserved_time"),
        ({"transient_store_pool_size": 0}, "transient_store_pool_size"),
        ({"max_message_size": 0}, "max_message_size"),
        ({"max_hash_slot_num": 0}, "max_hash_slot_num"),
        ({"max_index_num": 0}, "max_index_num"),
        ({"message_delay_level": "1s 5x"}, "message_delay_level"),
        ({"message_delay_level": "0s"}, "message_delay_level"),
        ({"message_delay_level": "s"}, "message_delay_level"),
        ({"message_delay_level": ""}, "message_delay_level"),
        ({"delete_when": "24"}, "delete_when"),
        ({"delete_when": "04;"}, "delete_when"),
        ({"delete_when": "four"}, "delete_when"),
        ({"delete_when": "-1"}, "delete_when"),
        ({"disk_space_warning_level_ratio": 0.0}, "disk_space_warning_level_ratio"),
        ({"disk_space_warning_level_ratio": 90.0}, "disk_space_warning_level_ratio"),
        ({"disk_space_clean_forcibly_ratio": 1.5}, "disk_space_clean_forcibly_ratio"),
        (
            {"access_message_in_memory_max_ratio": 101},
            "access_message_in_memory_max_ratio",
        ),
        ({"store_host": ("localhost", 10911)}, "store_host"),
        ({"store_host": ("10.0.0.256", 10911)}, "store_host"),
        ({"store_host": ("127.0.0.1", 70000)}, "store_host"),
        ({"store_host": ("127.0.0.1", -1)}, "store_host"),
        ({"store_host": ("127.0.0.1",)}, "store_host"),
        ({"ha_listen_port": 65536}, "ha_listen_port"),
        ({"store_path": ""}, "store_path"),
        ({"store_path_commit_log": "/a,/b"}, "store_path_commit_log"),
        ({"flush_disk_type": "FAST_FLUSH"}, "flush_disk_type"),
    ],
)
def test_invalid_values_are_value_errors(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field) as info:
        StoreConfig(**changes)
    # the message names the value too
    assert repr(changes[field])[:20] in str(info.value)


def test_index_geometry_must_fit_a_java_int() -> None:
    with pytest.raises(ValueError, match="max_hash_slot_num"):
        StoreConfig(max_hash_slot_num=100_000_000, max_index_num=100_000_000)
    StoreConfig(max_hash_slot_num=1, max_index_num=1)


@pytest.mark.parametrize(
    "changes",
    [
        {"flush_interval_commit_log": "500"},
        {"flush_interval_commit_log": 500.0},
        {"message_index_enable": 1},
        {"message_index_enable": "true"},
        {"max_message_size": True},
        {"disk_space_warning_level_ratio": "0.9"},
        {"delete_when": 4},
        {"flush_disk_type": 1},
        {"store_host": "127.0.0.1:10911"},
        {"store_host": (127, 10911)},
        {"store_host": ("127.0.0.1", "10911")},
    ],
)
def test_wrong_types_are_rejected(changes: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        StoreConfig(**changes)


def test_accepted_normalizations() -> None:
    cfg = StoreConfig(
        store_host=["::1", 0],  # type: ignore[arg-type]
        flush_disk_type="SYNC_FLUSH",  # type: ignore[arg-type]
        broker_role="SLAVE",  # type: ignore[arg-type]
        disk_space_warning_level_ratio=1,
    )
    assert cfg.store_host == ("::1", 0)
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.broker_role is BrokerRole.SLAVE
    assert cfg.disk_space_warning_level_ratio == 1.0
    assert isinstance(cfg.disk_space_warning_level_ratio, float)


@pytest.mark.parametrize(
    ("stored", "effective"), [(75, 75), (5, 10), (99, 95), (-3, 10)]
)
def test_disk_max_used_space_ratio_clamped_like_rocketmq(
    stored: int, effective: int
) -> None:
    cfg = StoreConfig(disk_max_used_space_ratio=stored)
    assert cfg.disk_max_used_space_ratio == stored
    assert cfg.effective_disk_max_used_space_ratio == effective


def test_delete_when_lists() -> None:
    assert StoreConfig(delete_when="04;12; 23").delete_when_hours == frozenset(
        {4, 12, 23}
    )
    assert StoreConfig(delete_when="0").delete_when_hours == frozenset({0})


def test_transient_pool_effective_only_for_async_master() -> None:
    on = StoreConfig(transient_store_pool_enable=True)
    assert on.effective_transient_store_pool_enable
    assert not on.replace(
        flush_disk_type=FlushDiskType.SYNC_FLUSH
    ).effective_transient_store_pool_enable
    assert not on.replace(
        broker_role=BrokerRole.SLAVE
    ).effective_transient_store_pool_enable
    assert not StoreConfig().effective_transient_store_pool_enable


# --- delay levels -----------------------------------------------------------


def test_default_delay_level_table() -> None:
    cfg = StoreConfig()
    table = cfg.delay_level_table()
    assert cfg.max_delay_level == 18
    assert len(table) == 18
    assert table[1] == 1000
    assert table[5] == 60000
    assert table[18] == 7200000
    assert min(table) == 1


def test_custom_delay_levels() -> None:
    cfg = StoreConfig(message_delay_level="1s 2m 3h 1d")
    assert cfg.delay_level_table() == {1: 1000, 2: 120000, 3: 10800000, 4: 86400000}
    assert cfg.max_delay_level == 4


# --- immutability and copies ------------------------------------------------


def test_frozen() -> None:
    cfg = StoreConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.file_reserved_time = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="extra"):
        cfg.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError, match="file_reserved_time"):
        del cfg.file_reserved_time


def test_replace_validates_and_copies() -> None:
    cfg = StoreConfig()
    changed = cfg.replace(file_reserved_time=48, mapped_file_size_consume_queue=10)
    assert changed.file_reserved_time == 48
    assert changed.mapped_file_size_consume_queue == 20
    assert cfg.file_reserved_time == 72
    with pytest.raises(ValueError, match="mapped_file_size_commit_log"):
        cfg.replace(mapped_file_size_commit_log=50)
    with pytest.raises(TypeError):
        cfg.replace(bogus=1)


def test_hashable_equal_and_picklable() -> None:
    a = StoreConfig(store_path="/x", mapped_file_size_commit_log=4096)
    b = StoreConfig(store_path="/x", mapped_file_size_commit_log=4096)
    assert a == b
    assert hash(a) == hash(b)
    assert pickle.loads(pickle.dumps(a)) == a


# --- properties -------------------------------------------------------------

BROKER_CONF = """\
# RocketMQ broker.conf
! another comment style
brokerClusterName = DefaultCluster
brokerName=broker-a
brokerId=0
storePathRootDir={root}
storePathCommitLog : {root}/commitlog
mappedFileSizeCommitLog=4096
mappedFileSizeConsumeQueue=128
flushDiskType=SYNC_FLUSH
brokerRole=SYNC_MASTER
deleteWhen=04;16
fileReservedTime=48
warmMapedFileEnable=true
flushLeastPagesWhenWarmMappedFile=512
destroyMapedFileIntervalForcibly=60000
diskSpaceWarningLevelRatio=90
diskSpaceCleanForciblyRatio=0.8
diskMaxUsedSpaceRatio=88
checkCRCOnRecover=FALSE
messageDelayLevel=1s 10s \\
    1m
storeHost=10.1.2.3:10921
somethingElseEntirely=42
"""


def test_from_properties_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    conf.write_text(BROKER_CONF.format(root=root), encoding="utf-8")
    with caplog.at_level(logging.DEBUG, logger="rocketstore"):
        cfg = StoreConfig.from_properties(conf)
    assert cfg.store_path == str(root)
    assert cfg.store_path_commit_log == f"{root}/commitlog"
    assert cfg.mapped_file_size_commit_log == 4096
    assert cfg.mapped_file_size_consume_queue == 140
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.broker_role is BrokerRole.SYNC_MASTER
    assert cfg.delete_when == "04;16"
    assert cfg.file_reserved_time == 48
    assert cfg.warm_mapped_file_enable is True
    assert cfg.flush_least_pages_when_warm_mapped_file == 512
    assert cfg.destroy_mapped_file_interval_forcibly == 60000
    assert cfg.disk_space_warning_level_ratio == pytest.approx(0.90)
    assert cfg.disk_space_clean_forcibly_ratio == pytest.approx(0.80)
    assert cfg.disk_max_used_space_ratio == 88
    assert cfg.check_crc_on_recover is False
    assert cfg.message_delay_level == "1s 10s 1m"
    assert cfg.store_host == ("10.1.2.3", 10921)
    # untouched fields keep their defaults
    assert cfg.flush_interval_commit_log == 500
    # unknown keys are ignored and logged at debug
    logged = " ".join(r.getMessage() for r in caplog.records if r.name == "rocketstore")
    assert "somethingElseEntirely" in logged
    assert "brokerName" in logged


def test_from_properties_str_path_and_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("fileReservedTime=48\nmaxMessageSize=1024\n", encoding="utf-8")
    cfg = StoreConfig.from_properties(
        str(conf), store_path=str(tmp_path), file_reserved_time=1
    )
    assert cfg.file_reserved_time == 1  # overrides win
    assert cfg.max_message_size == 1024
    assert cfg.store_path == str(tmp_path)


def test_from_properties_mapping_both_spellings_and_snake_case() -> None:
    cfg = StoreConfig.from_properties(
        {
            "warmMappedFileEnable": "TRUE",
            "destroyMapedFileIntervalForcibly": "1000",
            "mapedFileSizeCommitLog": "4096",  # RocketMQ 3.x spelling
            "max_hash_slot_num": "100",  # snake_case, as the Spark options pass it
            "maxIndexNum": "400",
            "checkCrcOnRecover": "false",
            "storeHost": "[::1]:10911",
            "flushDiskType": "sync_flush",
        }
    )
    assert cfg.warm_mapped_file_enable is True
    assert cfg.destroy_mapped_file_interval_forcibly == 1000
    assert cfg.mapped_file_size_commit_log == 4096
    assert cfg.max_hash_slot_num == 100
    assert cfg.max_index_num == 400
    assert cfg.check_crc_on_recover is False
    assert cfg.store_host == ("::1", 10911)
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH


def test_from_properties_broker_address() -> None:
    cfg = StoreConfig.from_properties(
        {"brokerIP1": "192.168.1.2", "listenPort": "10921"}
    )
    assert cfg.store_host == ("192.168.1.2", 10921)
    # a host name is not a usable STOREHOST: the default host is kept
    cfg = StoreConfig.from_properties(
        {"brokerIP1": "broker.example", "listenPort": "10921"}
    )
    assert cfg.store_host == ("127.0.0.1", 10921)
    # an explicit storeHost wins
    cfg = StoreConfig.from_properties(
        {"brokerIP1": "192.168.1.2", "storeHost": "10.0.0.1:1"}
    )
    assert cfg.store_host == ("10.0.0.1", 1)


def test_from_properties_empty_optional_is_none() -> None:
    cfg = StoreConfig.from_properties(
        {"storePathCommitLog": "", "mappedFileSizeCommitLog": ""}
    )
    assert cfg.store_path_commit_log is None
    assert cfg.mapped_file_size_commit_log is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mappedFileSizeCommitLog", "1G"),
        ("deleteFileBatchMax", "10.5"),  # an int field (fileReservedTime takes 0.5)
        ("fileReservedTime", "seventy"),
        ("warmMapedFileEnable", "yes"),
        ("diskSpaceWarningLevelRatio", "ninety"),
        ("flushDiskType", "FAST"),
        ("storeHost", "10.0.0.1"),
        ("storeHost", "10.0.0.1:port"),
    ],
)
def test_from_properties_bad_value_names_key(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=key):
        StoreConfig.from_properties({key: value})


def test_from_properties_bad_int_in_file(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# store\nmaxHashSlotNum = lots\n", encoding="utf-8")
    with pytest.raises(ValueError, match="maxHashSlotNum"):
        StoreConfig.from_properties(conf)


def test_from_properties_value_out_of_range(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mapped_file_size_commit_log"):
        StoreConfig.from_properties({"mappedFileSizeCommitLog": "50"})
    conf = tmp_path / "broker.conf"
    conf.write_text("deleteWhen=25\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"broker\.conf.*delete_when"):
        StoreConfig.from_properties(conf)


def test_to_properties_round_trip() -> None:
    cfg = StoreConfig(
        store_path="/data/store",
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=6000,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        warm_mapped_file_enable=True,
        disk_space_warning_level_ratio=0.8,
        store_host=("fe80::1", 10911),
    )
    props = cfg.to_properties()
    assert props["storePathRootDir"] == "/data/store"
    assert props["warmMapedFileEnable"] == "true"
    assert props["destroyMapedFileIntervalForcibly"] == "120000"
    assert props["checkCRCOnRecover"] == "true"
    assert props["flushDiskType"] == "SYNC_FLUSH"
    assert props["mappedFileSizeConsumeQueue"] == "6000"
    assert props["storeHost"] == "[fe80::1]:10911"
    assert "storePathCommitLog" not in props  # None fields are omitted
    assert all(isinstance(v, str) for v in props.values())
    assert StoreConfig.from_properties(props) == cfg


def test_every_field_round_trips_through_its_rocketmq_name() -> None:
    props = StoreConfig(store_path_commit_log="/c").to_properties()
    # one key per field, none dropped except None-valued ones
    none_fields = {
        "mapped_file_size_commit_log",
        "mapped_file_size_consume_queue",
        "max_store_size_bytes",
        "ha_listen_port",
        "ha_master_address",
        "ha_offsets_port",
        "ha_offsets_master_address",
    }
    assert len(props) == len(dataclasses.fields(StoreConfig)) - len(none_fields)
    for key, value in props.items():
        single = StoreConfig.from_properties({key: value})
        assert single.to_properties()[key] == value


def test_inert_fields_are_marked_and_warn_once(caplog: pytest.LogCaptureFixture) -> None:
    import inspect

    from rocketstore.config import store_config as config_mod

    source = inspect.getsource(config_mod.StoreConfig)
    marked = set()
    lines = source.splitlines()
    for i, line in enumerate(lines):
        if "*Inert*" in line:
            j = i + 1
            while lines[j].lstrip().startswith("#:"):
                j += 1
            marked.add(lines[j].split(":")[0].strip())
    assert marked == set(config_mod._INERT), "docstring marks match the inert table"
    fields = {f.name: f for f in dataclasses.fields(StoreConfig)}
    assert set(config_mod._INERT) <= set(fields)
    config_mod._WARNED_INERT.discard("duplication_enable")
    with caplog.at_level(logging.WARNING, logger="rocketstore"):
        StoreConfig(store_path="/x")
        StoreConfig(store_path="/x", duplication_enable=False)  # the default: silent
        assert not [r for r in caplog.records if "duplication_enable" in r.getMessage()]
        StoreConfig(store_path="/x", duplication_enable=True)
        StoreConfig(store_path="/x", duplication_enable=True)
    warned = [r for r in caplog.records if "duplication_enable" in r.getMessage()]
    assert len(warned) == 1
    assert "no effect" in warned[0].getMessage()


# --- one definition of the format ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("\u0663s", "bad level '\u0663s'"),  # an Arabic-Indic digit: not a decimal level
        ("+5s", "bad level '+5s'"),
        ("5", "bad level '5'"),
        ("1s 9999999999999999d", "level '9999999999999999d' is too long"),
        ("   ", "must name at least one level"),
    ],
)
def test_delay_grammar_is_the_engines(text: str, why: str) -> None:
    """StoreConfig refuses exactly what the engine refuses, with its reason."""
    with pytest.raises(ValueError, match="message_delay_level") as ei:
        StoreConfig(message_delay_level=text)
    assert why.replace("'", '"') in str(ei.value)
    with pytest.raises(ValueError, match=why.replace("'", '"').replace("+", r"\+")):
        _native.parse_delay_levels(text)


def test_format_sizes_come_from_the_engine() -> None:
    assert CQ_STORE_UNIT_SIZE == _native.CQ_STORE_UNIT_SIZE == 20
    assert MIN_MAPPED_FILE_SIZE_COMMIT_LOG == 91 + 8
    assert DEFAULT_MESSAGE_DELAY_LEVEL == _native.DEFAULT_MESSAGE_DELAY_LEVEL
    assert _native.index_file_size(5_000_000, 20_000_000) == 420_000_040
    assert _native.index_file_size(2**31 // 4, 1) is None  # past a Java int
    # The largest geometry config accepts is the largest the engine maps.
    slots = (2**31 - 1 - 40 - 20) // 4
    StoreConfig(max_hash_slot_num=slots, max_index_num=1)
    with pytest.raises(ValueError, match="IndexFile size"):
        StoreConfig(max_hash_slot_num=slots + 1, max_index_num=1)

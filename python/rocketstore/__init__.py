"""rocketstore: RocketMQ's message store as an embedded, durable Python queue.

>>> import tempfile
>>> from rocketstore import MessageStore, StoreConfig, PutStatus
>>> with tempfile.TemporaryDirectory() as path:
...     cfg = StoreConfig(store_path=path, mapped_file_size_commit_log=64 * 1024,
...                       max_hash_slot_num=64, max_index_num=256)  # small files
...     with MessageStore(cfg) as store:
...         r = store.put("orders", b"hello", tags="paid")
...         r.status is PutStatus.PUT_OK, store.look_message_by_offset(r.wrote_offset).body
(True, b'hello')
"""

from __future__ import annotations

from rocketstore._arrow_pull import ArrowGetResult
from rocketstore._native import __version__
from rocketstore.config.store_config import BrokerRole, FlushDiskType, StoreConfig
from rocketstore.consumers.groups import GroupLag, QueueLag
from rocketstore.errors import (
    ConfigMismatchError,
    ConsumerGroupBusyError,
    CorruptedError,
    FencedError,
    InternalError,
    InvalidMessageError,
    MessageRefusedError,
    NotAStoreError,
    PoisonedError,
    ReadOnlyStoreError,
    RecoveryOrderError,
    SlaveOffsetsError,
    StoreClosedError,
    StoredNotFlushedError,
    StoreError,
    StoreLockedError,
    UnknownTopicWarning,
)
from rocketstore.message import (
    BatchPutResult,
    GetMessageResult,
    GetStatus,
    Message,
    MessageExt,
    PutResult,
    PutStatus,
)
from rocketstore.services.recovery import RecoveryMode, RecoveryReport
from rocketstore.stats import QueueStats, StoreStats
from rocketstore.store import MessageStore

__all__ = [
    "ArrowGetResult",
    "BatchPutResult",
    "BrokerRole",
    "ConfigMismatchError",
    "ConsumerGroupBusyError",
    "CorruptedError",
    "FencedError",
    "FlushDiskType",
    "GetMessageResult",
    "GetStatus",
    "GroupLag",
    "InternalError",
    "InvalidMessageError",
    "Message",
    "MessageExt",
    "MessageRefusedError",
    "MessageStore",
    "NotAStoreError",
    "PoisonedError",
    "PutResult",
    "PutStatus",
    "QueueLag",
    "QueueStats",
    "ReadOnlyStoreError",
    "RecoveryMode",
    "RecoveryOrderError",
    "RecoveryReport",
    "SlaveOffsetsError",
    "StoreClosedError",
    "StoreConfig",
    "StoreError",
    "StoreLockedError",
    "StoreStats",
    "StoredNotFlushedError",
    "UnknownTopicWarning",
    "__version__",
]

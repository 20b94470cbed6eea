"""Per-message types.

``Message`` (what you put), ``PutResult`` (what a put did) and ``MessageExt``
(a stored message read back) are frozen native classes: they sit on the hot
path, where a Python dataclass costs several times more to build.
"""

from __future__ import annotations

from rocketstore._native import BatchPutResult, GetMessageResult, Message, MessageExt, PutResult
from rocketstore.enums import GetStatus, PutStatus

__all__ = [
    "BatchPutResult",
    "GetMessageResult",
    "GetStatus",
    "Message",
    "MessageExt",
    "PutResult",
    "PutStatus",
]

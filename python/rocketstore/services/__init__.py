"""Store services: Python orchestration around engine steps and threads."""

from __future__ import annotations

from rocketstore.services.dispatch import DispatchService
from rocketstore.services.recovery import RecoveryReport, RecoveryService
from rocketstore.services.retention import RetentionService
from rocketstore.services.schedule import ScheduleService

__all__ = [
    "DispatchService",
    "RecoveryReport",
    "RecoveryService",
    "RetentionService",
    "ScheduleService",
]

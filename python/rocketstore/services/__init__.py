"""Store services: Python orchestration around engine steps and threads."""

from __future__ import annotations

from rocketstore.services.recovery import RecoveryReport, RecoveryService
from rocketstore.services.dispatch import ReputService
from rocketstore.services.schedule import ScheduleService

__all__ = ["RecoveryReport", "RecoveryService", "ReputService", "ScheduleService"]

"""The one error of cron schedules."""

from __future__ import annotations


class CronError(ValueError):
    """An expression or zone chronos cannot read; the message says which and why."""

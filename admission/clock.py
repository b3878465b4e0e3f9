"""The one clock: every part that needs the time reads it here and passes ``now`` on."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(UTC)

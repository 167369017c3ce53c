"""RFC 3339 timestamps as Kubernetes writes them (`2026-11-22T08:00:00Z`), for both writers."""

from __future__ import annotations

from datetime import datetime, timezone


def rfc3339(moment: datetime | float) -> str:
    """A UTC timestamp to the second; ``moment`` is a datetime or seconds since the epoch."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, tz=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: object) -> datetime | None:
    """The aware datetime of an RFC 3339 string (naive means UTC); None for anything else."""
    if not value or not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)

"""Timestamps as written by common web servers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

CLF_FORMAT = "%d/%b/%Y:%H:%M:%S"


def parse_clf(text: str) -> datetime:
    """'10/Oct/2025:13:55:36 +0200' -> an aware datetime in UTC."""
    stamp, _, offset = text.partition(" ")
    when = datetime.strptime(stamp, CLF_FORMAT)
    if not offset:
        return when
    sign = -1 if offset.startswith("-") else 1
    hours, minutes = int(offset[1:3]), int(offset[3:5])
    tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
    return when.replace(tzinfo=tz).astimezone(timezone.utc)


def parse_iso(text: str) -> datetime:
    """'2025-10-10T13:55:36.120Z' -> an aware datetime in UTC."""
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc)


def bucket(when: datetime, minutes: int = 5) -> datetime:
    """The start of the `minutes`-long bucket holding `when`."""
    floored = when.minute - when.minute % minutes
    return when.replace(minute=floored, second=0, microsecond=0)

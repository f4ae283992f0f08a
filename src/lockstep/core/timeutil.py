"""Durations and timestamps as the core sees them: parsed from text, never read from a clock."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

__all__ = ["format_duration", "iso", "parse_duration", "parse_iso"]

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
MAX_DURATION_MS = 100 * 365 * 86_400_000
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: object) -> timedelta:
    """Parse `500ms`, `30s`, `5m`, `2h`, `3d` or a compound like `1h30m`; raise ValueError otherwise."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"expected a duration such as 30s, 5m or 2h, got {text!r}")
    if isinstance(text, int | float):
        raise ValueError(f"a duration needs a unit (ms, s, m, h, d): write {text}s, not {text}")
    s = text.strip()
    pos, total_ms = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total_ms += float(m.group(1)) * _UNITS_MS[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise ValueError(f"expected a duration such as 500ms, 30s, 5m, 2h or 3d, got {text!r}")
    if total_ms > MAX_DURATION_MS:
        raise ValueError(f"duration {text!r} is too long (at most 100 years)")
    return timedelta(milliseconds=total_ms)


def format_duration(td: timedelta) -> str:
    """Render a duration compactly for people: `2d 21h`, `4m 10s`, `350ms`."""
    ms = round(td.total_seconds() * 1000)
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    secs = ms // 1000
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if secs >= size:
            parts.append(f"{secs // size}{unit}")
            secs %= size
    return sign + " ".join(parts[:2])


def iso(dt: datetime) -> str:
    """UTC ISO-8601 with milliseconds and a Z, the one timestamp format in events."""
    if dt.tzinfo is not UTC:
        dt = dt.astimezone(UTC)
    return dt.isoformat(timespec="milliseconds")[:-6] + "Z"  # "+00:00" -> "Z"


def parse_iso(text: str) -> datetime:
    """Inverse of iso(); also accepts offsets like +00:00; naive times are taken as UTC."""
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)

"""Durations as people write them on a command line (`36h`, `2d`, `1d12h`, `90m`), and ages as people read them."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+)([dhms])")


def parse_duration(text: str) -> timedelta:
    """'36h' -> 36 hours; several parts add up ('1d12h'). Raise ValueError for anything else or a zero duration."""
    compact = text.strip().lower()
    parts = _PART.findall(compact)
    if not parts or "".join(n + unit for n, unit in parts) != compact:
        raise ValueError(f"expected a duration such as 36h, 2d, 1d12h or 90m, got {text!r}")
    seconds = sum(int(n) * _UNITS[unit] for n, unit in parts)
    if seconds <= 0:
        raise ValueError(f"expected a duration longer than 0, got {text!r}")
    return timedelta(seconds=seconds)


def describe_duration(duration: timedelta) -> str:
    """Rounded down to the minute, in its two largest units: '2 d 23 h', '3 d', '5 h', '12 min', '40 s'."""
    seconds = max(0, int(duration.total_seconds()))
    days, hours, minutes = seconds // 86400, seconds % 86400 // 3600, seconds % 3600 // 60
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h"
    return f"{minutes} min" if minutes else f"{seconds} s"


def spell_duration(duration: timedelta) -> str:
    """A threshold as the command line takes it, in its largest exact unit: 36 hours -> '36h', 2 days -> '2d'."""
    seconds = max(0, int(duration.total_seconds()))
    for unit, size in _UNITS.items():
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"

"""Times given on the command line: ISO 8601, or an age such as 30m, 2h, 7d, 2w."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from ckptcli.errors import InvalidInputError

_AGE = re.compile(r"^(\d+)\s*(s|m|h|d|w)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> int:
    """'7d' -> seconds."""
    m = _AGE.match(text.strip())
    if not m:
        raise InvalidInputError(f"{text!r} is not a duration", hint="use a number and a unit: 30m, 2h, 7d, 2w")
    return int(m.group(1)) * _UNITS[m.group(2)]


def parse_time(text: str, now_ns: int | None = None) -> int:
    """An ISO 8601 time or an age before now; returns nanoseconds since the epoch."""
    now = time.time_ns() if now_ns is None else now_ns
    if _AGE.match(text.strip()):
        return now - parse_duration(text) * 1_000_000_000
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInputError(f"{text!r} is not a time", hint="use ISO 8601 (2026-11-21T10:00) or an age (2h, 7d)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1_000_000_000)

"""Times given on the command line: ISO 8601, or an age such as 30m, 2h, 7d, 2w; and
durations in seconds (`parse_seconds`: 0.5, 300ms, 30s, 5m, 1.5h, 1d)."""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime

from ckptcli.errors import InvalidInputError

_AGE = re.compile(r"^(\d+)\s*(s|m|h|d|w)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SECONDS = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|w)?$")
_SECOND_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, None: 1.0}
#: the longest duration accepted (1e308 is a typo, not an interval)
MAX_SECONDS = 100 * 365.25 * 86400.0
SECONDS_HINT = "give seconds or a number and a unit: 300, 0.5, 300ms, 5m, 24h, 1d"


def parse_duration(text: str) -> int:
    """'7d' -> seconds."""
    m = _AGE.match(text.strip())
    if not m:
        raise InvalidInputError(f"{text!r} is not a duration", hint="use a number and a unit: 30m, 2h, 7d, 2w")
    return int(m.group(1)) * _UNITS[m.group(2)]


def parse_seconds(text: str, what: str, *, zero_ok: bool = False) -> float:
    """A duration in seconds: a number (`300`, `0.25`) or a number and a unit (`300ms`,
    `30s`, `5m`, `1.5h`, `1d`, `2w`).

    Raises:
        InvalidInputError naming `what`: text that is no duration, 0 (unless `zero_ok`), or
        more than 100 years.
    """
    m = _SECONDS.match(text.strip())
    if not m:
        raise InvalidInputError(f"{what}: {text!r} is not a duration", hint=SECONDS_HINT)
    value = float(m.group(1)) * _SECOND_UNITS[m.group(2)]
    if not math.isfinite(value) or value > MAX_SECONDS:
        raise InvalidInputError(f"{what} of {text} is over 100 years", hint=SECONDS_HINT)
    if value == 0 and not zero_ok:
        raise InvalidInputError(f"{what} must be > 0 seconds, not {text}", hint=SECONDS_HINT)
    return value


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

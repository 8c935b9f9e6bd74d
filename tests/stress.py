"""How hard the stress tests push, from CKPT_STRESS_SCALE.

- unset or 0: the bounded run, what `bash scripts/test` (and so CI) does: a sample of
  each sweep (kill points, byte offsets, rounds), so the whole suite stays near ten
  minutes on two cores;
- 1: the full sweeps, the counts the docs claim (every kill point of a take, 30 kills
  of a take at least, 22 kill points of each operation on S3, ...);
- N > 1: N times the full sweeps, for a soak run.

`CKPT_STRESS_SCALE=1 bash scripts/test` runs every stress test at full size.
"""

from __future__ import annotations

import os

import pytest


def _scale() -> int:
    raw = os.environ.get("CKPT_STRESS_SCALE", "") or "0"
    try:
        return max(0, int(raw))
    except ValueError:
        pytest.exit(f"CKPT_STRESS_SCALE must be a whole number (0, 1, 2, ...), not {raw!r}", returncode=4)


#: 0: bounded; 1: full; N: N x full
SCALE = _scale()
#: whether the full sweeps run
FULL = SCALE >= 1


def count(full: int, bounded: int) -> int:
    """`full` x SCALE when the full sweeps run, else `bounded`."""
    return full * SCALE if FULL else bounded


def sample(items: list, bounded: int) -> list:  # type: ignore[type-arg]
    """Every item when the full sweeps run, else `bounded` of them spread evenly
    (the first and the last always among them)."""
    if FULL or len(items) <= bounded:
        return list(items)
    if bounded <= 1:
        return items[:1]
    picks = sorted({round(k * (len(items) - 1) / (bounded - 1)) for k in range(bounded)})
    return [items[i] for i in picks]

"""History: the events a run records, the state at any point of them, and how checkpoints
change over time (replay, fork, the history graph, diff, `ckpt log` and `ckpt bisect`).

`log`, `bisect` and the other names of `ckptcli.history.query` are re-exported here on
first use, as they were when this package was one module.
"""

from __future__ import annotations

from typing import Any

# the module's __all__ when it was `ckptcli.history` (0.2), and the other names it offered
_QUERY = (
    "BisectResult",
    "EventChange",
    "Expect",
    "LogEntry",
    "bisect",
    "first_parents",
    "load_check",
    "log",
    "max_calls",
    "parse_expect",
    "render_entry",
)
_ALSO = (
    "Change",
    "Event",
    "PathParts",
    "Predicate",
    "Reducers",
    "StateAt",
    "describe",
    "describe_change",
    "diff_checkpoints",
    "overlaps",
    "parse_pointer",
    "pointer",
    "same_value",
    "section_path",
    "state_at",
    "tail_events",
    "touched",
)
__all__ = list(_QUERY)


def __getattr__(name: str) -> Any:
    if name in _QUERY or name in _ALSO:
        from ckptcli.history import query

        return getattr(query, name)
    raise AttributeError(f"module 'ckptcli.history' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_QUERY, *_ALSO})

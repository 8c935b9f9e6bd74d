"""What `ckpt show` and `ckpt restore` say about calls in doubt (ckptcli/indoubt.py):
the --json keys and the human lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptcli.cli.output import safe

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.history.stateat import StateAt
    from ckptcli.indoubt import InDoubtList


def calls_in_doubt(ck: Checkpoint, at: StateAt | None = None) -> InDoubtList:
    """The calls in doubt at `ck` (at most MAX_LISTED of them); a tools section the store
    cannot read is a warning here, not the command's failure."""
    from ckptcli.errors import CkptError
    from ckptcli.indoubt import MAX_LISTED, InDoubtList, checkpoint_in_doubt

    try:
        return checkpoint_in_doubt(ck, at=at, limit=MAX_LISTED)
    except CkptError as exc:
        from ckptcli.cli.app import warn

        warn(f"could not look for calls in doubt: {exc.message}")
        return InDoubtList()


def in_doubt_json(doubt: InDoubtList) -> dict[str, object]:
    """What --json adds: "in_doubt", and "in_doubt_total" when there are more than it lists."""
    out: dict[str, object] = {"in_doubt": [d.to_dict() for d in doubt]}
    if doubt.total > len(doubt):
        out["in_doubt_total"] = doubt.total
    return out


def in_doubt_lines(doubt: InDoubtList, hexid: str | None = None) -> list[str]:
    """The human lines (escaped for a terminal): a heading, then one line per call (at
    most MAX_SHOWN); none when no call is in doubt."""
    from ckptcli.indoubt import MAX_SHOWN

    if not doubt:
        return []
    n = doubt.total
    at = f" at {hexid[:12]}" if hexid else ""
    calls = "1 call" if n == 1 else f"{n} calls"
    lines = [f"in doubt{at}: {calls} sent without a recorded result (reconcile before resuming: docs/workflows.md)"]
    lines += [f"  {safe(d.line(), backslash=False)}" for d in doubt[:MAX_SHOWN]]
    if n > MAX_SHOWN:
        lines.append(f"  ... and {n - MAX_SHOWN} more (--json lists {min(n, len(doubt))})")
    return lines

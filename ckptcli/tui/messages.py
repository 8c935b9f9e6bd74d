"""What the TUI's background workers report: small messages, posted from their threads
(Message is safe to post from any thread), handled on the app's event loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from ckptcli.history.render import Line
from ckptcli.history.timeline import StepView


@dataclass
class StateReady(Message):
    """The state at a timeline row, and its step's changes, were replayed."""

    row: int
    step: StepView


@dataclass
class StateFailed(Message):
    """The state at a timeline row cannot be had (an event does not fit, no reducer)."""

    row: int
    error: str


@dataclass
class PrefillDone(Message):
    """The timeline's kept states reach the end of the tail."""

    kept: int


@dataclass
class SearchDone(Message):
    """A search of the timeline ended: the row found, or None."""

    query: str
    row: int | None


@dataclass
class DiffReady(Message):
    """A diff was computed: the lines to show, and the patch to copy."""

    lines: list[Line]
    patch: list[dict[str, Any]]
    #: line index -> the change it shows (what Enter or v opens in the value viewer)
    changes: dict[int, Any] | None = None


@dataclass
class DiffFailed(Message):
    error: str


@dataclass
class ViewValue(Message):
    """Open a value whole in the value viewer; with `changed`, `old` is the value before a
    change (ckptcli.tui.valuetext.MISSING: it was added), for a line diff of before and after."""

    title: str
    value: Any
    old: Any = None
    changed: bool = False


@dataclass
class JumpDone(Message):
    """A jump (`]e`: the next error, ...) ended: the row found, or None."""

    what: str
    row: int | None


@dataclass
class JumpIndexReady(Message):
    """The rows of every sort of jump (ckptcli.tui.screens.timeline.JUMPS), read once from the
    whole tail: later jumps look them up instead of reading events."""

    rows: dict[str, Any]


@dataclass
class HolderFound(Message):
    """`g SEQ` outside the tail: the checkpoint of the subject whose tail holds `seq`, looked
    for in a worker (Session.holder_of_seq); None when none does, `error` when it failed."""

    seq: int
    holder: bytes | None
    error: str | None = None

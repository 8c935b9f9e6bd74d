"""The help screen: every key of every screen (from their bindings, so it cannot go
stale), the mouse, and what the graph's glyphs mean."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ckptcli.history.graph import FORK, GLYPHS, MERGE, MIGRATION, ROOT, TAKE
from ckptcli.tui.actions import ACTION_KEYS
from ckptcli.tui.session import APP_BINDINGS

LIST_KEYS = [
    ("↑ ↓  k j", "move the cursor"),
    ("PgUp PgDn", "a page up or down"),
    ("ctrl+u ctrl+d", "half a page up or down"),
    ("Home End  g G", "the first or last row (on the timeline, g asks for a seq)"),
    ("Enter", "open the row (a checkpoint, an event, a value; a more… node of a tree)"),
    ("v", "the value under the cursor, whole (a node, a plan item, a tool call, an event, a change)"),
    ("Tab", "the next pane; Esc goes back one pane, then one screen"),
]
MOUSE = [
    ("click", "move the cursor to a row; click it again to open it"),
    ("wheel", "scroll"),
    ("click a tab", "show that section"),
    ("click a key in the footer", "run it"),
]


def _key_name(binding: Binding) -> str:
    names = {
        "slash": "/",
        "question_mark": "?",
        "space": "Space",
        "colon": ":",
        "escape": "Esc",
        "enter": "Enter",
        "f1": "F1",
        "right_square_bracket": "]",
        "left_square_bracket": "[",
    }
    return " ".join(names.get(k, k) for k in binding.key.split(","))


def key_rows(bindings: list[BindingType]) -> list[tuple[str, str]]:
    return [(_key_name(b), b.description or b.action) for b in bindings if isinstance(b, Binding)]


def bindings_of(cls: type) -> list[tuple[str, str]]:
    return key_rows(getattr(cls, "BINDINGS", []))


def help_text() -> Text:
    """Every section of keys, then the graph's legend."""
    from ckptcli.tui.screens.checkpoint import CheckpointScreen
    from ckptcli.tui.screens.diff import DiffScreen
    from ckptcli.tui.screens.history import HistoryScreen
    from ckptcli.tui.screens.timeline import JUMPS, TimelineScreen
    from ckptcli.tui.screens.value import ValueScreen

    sections: list[tuple[str, list[tuple[str, str]]]] = [
        ("Everywhere", key_rows(APP_BINDINGS)),
        (
            "Actions, on the checkpoint or event under the cursor (confirmed first; the ckpt command is said and copied; also in ctrl+p)",
            [(k, what) for k, _kind, what in ACTION_KEYS],
        ),
        ("Lists", LIST_KEYS),
        (HistoryScreen.HELP, bindings_of(HistoryScreen)),
        (CheckpointScreen.HELP, bindings_of(CheckpointScreen)),
        (TimelineScreen.HELP, bindings_of(TimelineScreen)),
        ("Timeline jumps: ] then a key, the next one; [ then the key, the previous one", [(k, what) for k, (what, _) in JUMPS.items()]),
        (DiffScreen.HELP, bindings_of(DiffScreen)),
        (ValueScreen.HELP, bindings_of(ValueScreen)),
        ("Mouse", MOUSE),
        (
            "Graph",
            [
                (GLYPHS[ROOT], "a root: no parent"),
                (GLYPHS[TAKE], "a checkpoint taken after its parent"),
                (GLYPHS[FORK], "a fork (ckpt fork: labels fork.of, fork.at)"),
                (GLYPHS[MIGRATION], "a migration (another schema version than its parent's)"),
                (GLYPHS[MERGE], "a merge (several parents)"),
                ("│ ╯ ╮", "a lane; a branch joining its parent; a merge's other parent"),
                ("[t] (b) <latest>", "refs: a tag, a branch, the subject's latest"),
            ],
        ),
    ]
    out = Text()
    out.append("ckpt tui", style="bold")
    out.append(": browse the history, inspect checkpoints, scrub through event tails, diff. Esc or ? closes this.\n")
    for title, rows in sections:
        out.append(f"\n{title}\n", style="bold cyan")
        for key, what in rows:
            out.append(f"  {key:<18}", style="bold yellow")
            out.append(f"{what}\n")
    return out


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q,f1", "close", "Close"),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90%; height: 90%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(help_text(), id="help-body")

    def action_close(self) -> None:
        self.dismiss(None)

"""The diff screen: two checkpoints (ckptcli.history.diff, as `ckpt diff` shows them) or two
points of a timeline (the changes between the two states), computed in a worker."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Header, Static

from ckptcli.errors import CkptError
from ckptcli.history.change import Change
from ckptcli.history.render import Line, change_line, render_changes
from ckptcli.history.timeline import Timeline, state_changes
from ckptcli.tui.messages import DiffFailed, DiffReady, ViewValue
from ckptcli.tui.screens.base import BaseScreen, KeyFooter
from ckptcli.tui.session import Session
from ckptcli.tui.valuetext import MISSING
from ckptcli.tui.widgets import VirtualList, path_text, styled_lines

Compute = Callable[[bool], tuple[list[Line], list[dict[str, Any]], dict[int, Change]]]


def changes_by_line(lines: list[Line], changes: list[Change], shown: Callable[[Change], Change] = lambda c: c) -> dict[int, Change]:
    """Which change each line shows: the lines `change_line(shown(c))` drew, by their text
    (a run of changes drawn as one line is not one change: it opens nothing)."""
    texts: dict[str, Change] = {}
    for c in changes:
        texts.setdefault(change_line(shown(c))[1], c)
    return {i: texts[text] for i, (_kind, text) in enumerate(lines) if text in texts}


class DiffScreen(BaseScreen):
    """What changed from A to B."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("s", "stat", "Summary / full"),
        Binding("c", "copy_patch", "Copy patch"),
        Binding("v", "view", "View value", show=False),
    ]
    HELP = "Diff: what changed from A to B"
    DEFAULT_CSS = """
    DiffScreen #diff { height: 1fr; }
    """

    def __init__(self, session: Session, title: str, compute: Compute, command: str | None = None) -> None:
        """`command`: the ckpt command that prints the same diff (said in a notification)."""
        super().__init__(session)
        self.title_text = title
        self.command = command
        self.compute = compute
        self.stat = False
        self.lines: list[Line] = [("summary", "comparing…")]
        self.patch: list[dict[str, Any]] = []
        self.changes: dict[int, Change] = {}

    @classmethod
    def of_checkpoints(cls, session: Session, a: bytes, b: bytes) -> DiffScreen:
        def compute(stat: bool) -> tuple[list[Line], list[dict[str, Any]], dict[int, Change]]:
            from ckptcli.history.diff import diff_checkpoints
            from ckptcli.history.render import render

            result = diff_checkpoints(session.checkpoint(a), session.checkpoint(b))
            lines = render(result, stat=stat)
            return lines, result.patch(), changes_by_line(lines, [c for c in result.changes if not c.structural])

        from ckptcli.tui.actions import cli_command, store_args

        command = cli_command(["diff", a.hex()[:12], b.hex()[:12], *store_args(session)]) if not session.is_file else None
        return cls(session, f"diff {a.hex()[:12]} → {b.hex()[:12]}", compute, command)

    @classmethod
    def of_points(cls, session: Session, model: Timeline, a: int, b: int) -> DiffScreen:
        sa, sb = model.seq(a), model.seq(b)

        def compute(stat: bool) -> tuple[list[Line], list[dict[str, Any]], dict[int, Change]]:
            changes = state_changes(model.state(a), model.state(b))
            lines = render_changes(changes, f"state at seq {sa:,} -> state at seq {sb:,} (checkpoint {model.id[:12]})")
            if stat:
                lines = [lines[0], lines[-1]]
            shown = changes_by_line(lines, changes, lambda c: Change(c.op, c.path[1:], c.old, c.new) if c.path else c)
            return lines, [c.to_dict() for c in changes], shown

        return cls(session, f"timeline {model.id[:12]}: seq {sa:,} → seq {sb:,}", compute)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(self.title_text, id="diff-title", classes="pane-title")
        yield VirtualList(self._render_line, len(self.lines), id="diff")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = self.title_text
        self.query_one("#diff", VirtualList).focus()
        self._run(self.stat)
        if self.command is not None:
            self.notify(f"$ {self.command}", title="diff", timeout=6)

    def _render_line(self, i: int) -> Any:
        return styled_lines(self.lines)(i)

    @work(thread=True, exclusive=True, group="diff")
    def _run(self, stat: bool) -> None:
        try:
            lines, patch, changes = self.compute(stat)
        except CkptError as exc:
            self.post_message(DiffFailed(str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - a bug: shown on the screen, not a crash
            self.post_message(DiffFailed(f"internal error: {type(exc).__name__}: {exc}"))
            return
        self.post_message(DiffReady(lines, patch, changes))

    def on_diff_ready(self, message: DiffReady) -> None:
        self.lines = message.lines
        self.patch = message.patch
        self.changes = message.changes or {}
        self.query_one("#diff", VirtualList).set_count(len(self.lines))

    def on_diff_failed(self, message: DiffFailed) -> None:
        self.lines = [("remove", f"cannot compare: {message.error}")]
        self.query_one("#diff", VirtualList).set_count(1)

    def action_back(self) -> None:
        self.app.pop_screen()

    def on_virtual_list_selected(self, event: VirtualList.Selected) -> None:
        self._view(event.index)

    def action_view(self) -> None:
        self._view(self.query_one("#diff", VirtualList).cursor)

    def _view(self, i: int) -> None:
        """A change's value whole: a line diff of before and after."""
        c = self.changes.get(i)
        if c is None:
            return
        where = f"{c.section}: " if getattr(c, "section", None) else ""
        old = MISSING if c.op == "add" else c.old
        new = MISSING if c.op == "remove" else c.new
        self.post_message(ViewValue(f"{self.title_text}: {where}{path_text(c.path)}", new, old, changed=True))

    def action_stat(self) -> None:
        self.stat = not self.stat
        self._run(self.stat)

    def action_copy_patch(self) -> None:
        self.ckpt_app.copy_id(json.dumps(self.patch, ensure_ascii=False, default=str), "the JSON patch")

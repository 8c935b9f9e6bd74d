"""The value viewer: one value whole, in a scrollable pane (pretty JSON, wrapped text, a hex
dump for bytes), with search and copy; for a changed value, a line diff of before and after."""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Header, Input, Static

from ckptcli.format.jsonview import to_json
from ckptcli.tui.screens.base import BaseScreen, KeyFooter
from ckptcli.tui.session import Session
from ckptcli.tui.valuetext import MISSING, diff_lines, value_lines, wrap
from ckptcli.tui.widgets import LINE_STYLES, VirtualList

DIFF_STYLES = {**LINE_STYLES, "header": "bold cyan", "same": ""}


class ValueScreen(BaseScreen):
    """A value whole; a changed one as a diff of before and after (`d` switches)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("slash", "search", "Search"),
        Binding("n", "find(1)", "Next match", show=False),
        Binding("N", "find(-1)", "Previous match", show=False),
        Binding("c", "copy", "Copy value"),
        Binding("d", "toggle_diff", "Diff / value"),
    ]
    HELP = "Value: one value whole (Enter or v on a value); a changed one as a diff"
    DEFAULT_CSS = """
    ValueScreen #value { height: 1fr; }
    ValueScreen Input { height: 3; }
    """

    def __init__(self, session: Session, title: str, value: Any, *, old: Any = None, changed: bool = False) -> None:
        super().__init__(session)
        self.title_text = title
        self.value = value
        self.old = old
        self.changed = changed
        self.show_diff = changed
        self.search_text = ""
        self.kinds: list[str] = []
        self.lines: list[str] = []
        self.shown: list[tuple[int, str]] = []
        self.width = 0
        self._load()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "toggle_diff":
            return self.changed
        return True

    def _load(self) -> None:
        """The logical lines (the value's, or the diff's) and their kinds."""
        if self.show_diff:
            got = diff_lines(self.old, MISSING if self.value is MISSING else self.value)
            self.kinds = [k for k, _ in got]
            self.lines = [t for _, t in got]
            self.what = "diff of before and after"
        else:
            shown = self.old if self.value is MISSING else self.value
            self.what, self.lines = value_lines(shown)
            self.kinds = ["same"] * len(self.lines)
            if self.value is MISSING:
                self.what += ", before it was removed"
        self.width = 0  # wrapped again at the next layout

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="value-title", classes="pane-title")
        yield VirtualList(self._value_row, id="value")
        yield self.make_input("search: text in the value; Enter finds the next match, n / N the next and previous", "vsearch")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = self.title_text
        self.list.focus()
        self._rewrap()

    @property
    def list(self) -> VirtualList:
        return self.query_one("#value", VirtualList)

    def _rewrap(self, cursor: int = 0) -> None:
        width = self.list.scrollable_content_region.width or self.app.size.width - 2
        self.width = width
        self.shown = wrap(self.lines, width)
        self.list.set_count(len(self.shown), cursor)
        wrapped = len(self.shown) - len(self.lines)
        title = f"{self.title_text}: {self.what}; {len(self.lines):,} line{'s' if len(self.lines) != 1 else ''}"
        if wrapped:
            title += f" ({len(self.shown):,} on screen, long ones wrapped)"
        self.query_one("#value-title", Static).update(title, layout=False)

    def on_resize(self) -> None:
        self.call_after_refresh(self._resized)

    def _resized(self) -> None:
        width = self.list.scrollable_content_region.width
        if width and width != self.width:
            line = self.shown[self.list.cursor][0] if self.shown else 0
            self._rewrap()
            self.list.set_cursor(next((i for i, (li, _) in enumerate(self.shown) if li == line), 0), center=True)

    def _value_row(self, i: int) -> Text:
        line, piece = self.shown[i]
        t = Text(piece, style=DIFF_STYLES.get(self.kinds[line], ""))
        if self.search_text:
            t.highlight_regex(re.compile(re.escape(self.search_text), re.IGNORECASE), "reverse yellow")
        return t

    # -- actions -----------------------------------------------------------------------------
    def action_back(self) -> None:
        box = self.query_one("#vsearch", Input)
        if not box.has_class("hidden"):
            box.add_class("hidden")
            self.list.focus()
            return
        self.app.pop_screen()

    def action_search(self) -> None:
        box = self.query_one("#vsearch", Input)
        box.value = self.search_text
        box.remove_class("hidden")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.add_class("hidden")
        self.list.focus()
        self.search_text = event.value
        self.list.refresh_rows()
        self.action_find(1)

    def find(self, direction: int) -> int | None:
        """The next row of the pane (the previous, `direction` -1) holding the search text,
        wrapping around; None when none does."""
        needle = self.search_text.lower()
        n = len(self.shown)
        start = self.list.cursor
        for step in range(1, n + 1):
            r = (start + direction * step) % n
            if needle in self.shown[r][1].lower():
                return r
        return None

    def action_find(self, direction: int) -> None:
        if not self.search_text:
            self.action_search()
            return
        found = self.find(direction)
        if found is None:
            self.notify(f"no line holds {self.search_text!r}", severity="warning", timeout=3)
        else:
            self.list.set_cursor(found, center=True)

    def action_copy(self) -> None:
        """The value as text (a string as it is, anything else as JSON) on the clipboard."""
        value = self.old if self.value is MISSING else self.value
        text = value if isinstance(value, str) else json.dumps(to_json(value), indent=2, ensure_ascii=False, default=str)
        self.ckpt_app.copy_id(text, "the value")

    def action_toggle_diff(self) -> None:
        if not self.changed:
            return
        self.show_diff = not self.show_diff
        self._load()
        self._rewrap()

"""Widgets of the TUI: a virtual list that draws only the rows on screen, and a tree of a
value whose children are added when a node is opened (and a page at a time for long
lists and maps)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any, ClassVar, Protocol, runtime_checkable

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from ckptcli.history.lazylist import LRU
from ckptcli.history.timeline import PAGE, child_keys, label_of, windows
from ckptcli.tui.messages import ViewValue
from ckptcli.tui.valuetext import MISSING, is_bookkeeping_channel, message_row

__all__ = ["LINE_STYLES", "ROLE_STYLES", "OpenableList", "Slot", "ValueTree", "VirtualList", "path_text", "styled_lines", "value_label"]

RowRenderer = Callable[[int], Text]
#: Rows VirtualList draws ahead of the screen at a time (about a millisecond each).
AHEAD_BATCH = 8


@runtime_checkable
class _ActivityAware(Protocol):
    """An app that wants to know when the user moves (CkptApp: its idle-time collection)."""

    def note_activity(self) -> None: ...


#: Styles of the line kinds of ckptcli.history.diff.render and ckptcli.history.timeline.render_changes,
#: the colours `ckpt diff` uses.
LINE_STYLES = {"header": "bold", "section": "bold cyan", "add": "green", "remove": "red", "change": "yellow", "summary": "dim"}
OP_STYLES = {"add": "green", "remove": "red", "replace": "yellow"}
#: The colours of a chat message's role (formats' `message.append`, LangChain's classes).
ROLE_STYLES = {"user": "bold cyan", "human": "bold cyan", "assistant": "bold green", "ai": "bold green", "tool": "bold yellow"}


def path_text(path: tuple[Any, ...]) -> str:
    """A path as `ckpt diff` writes it: `tools[0].status`."""
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


def value_label(key: Any, value: Any, width: int = 60) -> Text:
    """A tree node's or a list row's text: a chat message as `role: first words…`, anything
    else as `key: summary` (ckptcli.history.timeline.label_of)."""
    msg = message_row(value, width)
    if msg is None:
        return Text(label_of(key, value, width))
    role, words = msg
    t = Text.assemble((f"[{key}] " if isinstance(key, int) else f"{key}: ", "dim"))
    t.append(role, style=ROLE_STYLES.get(role, "bold magenta"))
    t.append(": " + words)
    return t


class VirtualList(ScrollView, can_focus=True):
    """A list of `count` rows with a cursor, drawn through the Line API: only the rows
    on screen are asked for (`render_row(index)`), and the last few hundred rendered rows
    are kept. Arrow keys, PageUp/PageDown, Home/End, the vim keys (j/k, ctrl-d/ctrl-u,
    g/G) and the mouse move the cursor; Enter, or a click on the row under the cursor,
    selects it. The cursor stays on screen when the list is resized."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("ctrl+u", "half_page(-1)", "Half a page up", show=False),
        Binding("ctrl+d", "half_page(1)", "Half a page down", show=False),
        Binding("home,g", "jump(0)", "First", show=False),
        Binding("end,G", "jump(-1)", "Last", show=False),
        Binding("enter", "select", "Open", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {"virtual-list--cursor"}
    DEFAULT_CSS = """
    VirtualList {
        overflow-x: hidden;
        overflow-y: auto;
        background: $surface;
    }
    VirtualList > .virtual-list--cursor {
        background: $panel;
        text-style: bold;
    }
    VirtualList:focus > .virtual-list--cursor {
        background: $accent 40%;
        text-style: bold;
    }
    """

    cursor: reactive[int] = reactive(0, always_update=True, repaint=False)

    @dataclass
    class Highlighted(Message):
        """The cursor moved to `index`."""

        list: VirtualList
        index: int

        @property
        def control(self) -> VirtualList:
            return self.list

    @dataclass
    class Selected(Message):
        """Enter was pressed, or the row under the cursor clicked."""

        list: VirtualList
        index: int

        @property
        def control(self) -> VirtualList:
            return self.list

    def __init__(
        self,
        render_row: RowRenderer,
        count: int = 0,
        *,
        on_highlight: Callable[[int], None] | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        """`on_highlight(index)`, when given, is called as the cursor moves, instead of
        posting a Highlighted message."""
        super().__init__(id=id, classes=classes)
        self.render_row = render_row
        self.on_highlight = on_highlight
        self.count = count
        self._strips: LRU[tuple[int, int, Style], Strip] = LRU(512)
        self._styles: dict[tuple[bool, str], tuple[Style, Style]] = {}
        self.first_render_at: float | None = None  # when a row was first drawn (bench/tui.py)
        self.rows_rendered = 0
        self._ahead_pending = False  # a _draw_ahead is asked for

    def on_mount(self) -> None:
        self.virtual_size = Size(self.size.width, self.count)

    def set_count(self, count: int, cursor: int = 0) -> None:
        """Replace the rows: `count` of them, the cursor at `cursor`."""
        self.count = count
        self._strips.clear()
        self.virtual_size = Size(self.size.width, count)
        self.scroll_to(y=0, animate=False)
        self.set_cursor(cursor)
        self.refresh()

    def extend(self, count: int) -> None:
        """Rows were appended (a followed timeline): `count` of them now. The cursor and
        the scroll position stay where they are."""
        if count == self.count:
            return
        self.count = count
        self.virtual_size = Size(self.size.width, count)
        self.refresh()

    def refresh_rows(self) -> None:
        """Draw every row again (their content changed)."""
        self._strips.clear()
        self.refresh()

    def set_cursor(self, index: int, *, center: bool = False) -> None:
        self.cursor = max(0, min(index, self.count - 1)) if self.count else 0
        self._scroll_to_cursor(center)

    def _scroll_to_cursor(self, center: bool = False) -> None:
        if self.count:
            self.scroll_to_region(Region(0, self.cursor, 1, 1), animate=False, center=center, force=True, x_axis=False, immediate=True)

    def watch_cursor(self, old: int, new: int) -> None:
        if not self.is_mounted:
            return
        # rows of the list: ScrollView.refresh_line makes them lines of the screen itself
        self.refresh_line(old)
        self.refresh_line(new)
        if self.on_highlight is not None:
            # at once, not through the message queue: what the new row shows then makes it
            # into the same frame as the moved cursor (a message would be handled a frame later)
            self.on_highlight(new)
        else:
            self.post_message(self.Highlighted(self, new))
        if isinstance(self.app, _ActivityAware):
            self.app.note_activity()
        self._ask_ahead()

    def action_cursor(self, delta: int) -> None:
        self.set_cursor(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self.set_cursor(self.cursor + direction * max(1, self.scrollable_content_region.height - 1))

    def action_half_page(self, direction: int) -> None:
        self.set_cursor(self.cursor + direction * max(1, self.scrollable_content_region.height // 2))

    def action_jump(self, index: int) -> None:
        self.set_cursor(self.count - 1 if index < 0 else index, center=True)

    def action_select(self) -> None:
        if self.count:
            self.post_message(self.Selected(self, self.cursor))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        index = int(self.scroll_offset.y) + offset.y
        if not 0 <= index < self.count:
            return
        self.focus()
        if index == self.cursor or event.chain >= 2:
            self.cursor = index
            self.post_message(self.Selected(self, index))
        else:
            self.cursor = index

    def _row_styles(self) -> tuple[Style, Style]:
        """The list's style and the cursor's (looked up once per focus state and theme:
        computing a widget's rich style is a CSS walk, too slow to do for every line)."""
        key = (self.has_focus, self.app.theme)
        got = self._styles.get(key)
        if got is None:
            base = self.rich_style
            got = self._styles[key] = (base, base + self.get_component_rich_style("virtual-list--cursor"))
        return got

    def render_line(self, y: int) -> Strip:
        if self.first_render_at is None:
            self.first_render_at = perf_counter()
        index = int(self.scroll_offset.y) + y
        width = self.scrollable_content_region.width
        base, cursor = self._row_styles()
        if not 0 <= index < self.count:
            return Strip.blank(width, base)
        return self._strip(index, width, cursor if index == self.cursor else base)

    def _strip(self, index: int, width: int, style: Style) -> Strip:
        """Row `index` drawn `width` cells wide in `style`, from the cache when it was drawn so."""
        key = (index, width, style)
        strip = self._strips.get(key)
        if strip is None:
            self.rows_rendered += 1
            text = self.render_row(index)
            if text.style:  # Text.render draws only spans: make the base style the first one,
                text.stylize_before(text.style, 0)  # under the spans of the row's parts
                text.style = ""
            text.no_wrap = True
            text.overflow = "ellipsis"
            text.truncate(width, overflow="ellipsis")
            # the row's own colours over the list's (or the cursor's) background
            strip = Strip(text.render(self.app.console), text.cell_len).crop_extend(0, width, style).apply_style(style)
            self._strips.put(key, strip)
        return strip

    def _draw_ahead(self) -> None:
        """Once a move is on the screen, draw the page below it and the page above into the
        row cache, AHEAD_BATCH rows at a time, each batch after the messages that came
        meanwhile (a key pressed goes first): a PageDown or PageUp then finds its rows
        drawn (and the row it moves the cursor to, in the cursor's style), and its frame
        has only the rest of the screen to do (bench/tui.py). Only rows not in the cache
        are drawn: after a move by one row, a few."""
        self._ahead_pending = False
        if not self.is_mounted or not self.count:
            return
        height = self.scrollable_content_region.height
        width = self.scrollable_content_region.width
        top = int(self.scroll_offset.y)
        base, cursor = self._row_styles()
        page = max(1, height - 1)  # what PageDown and PageUp move the cursor by (action_page)
        wanted = [
            (self.cursor, base),  # the cursor's row once the cursor has left it
            (self.cursor + page, cursor),
            (self.cursor - page, cursor),
            *((i, base) for i in range(top + height, top + 2 * height)),
            *((i, base) for i in range(top - 1, top - height - 1, -1)),
        ]
        drawn = 0
        for index, style in wanted:
            if 0 <= index < self.count and (index, width, style) not in self._strips:
                self._strip(index, width, style)
                drawn += 1
                if drawn == AHEAD_BATCH:  # let a key that came meanwhile go first
                    self._ask_ahead()
                    return

    def _ask_ahead(self) -> None:
        if not self._ahead_pending:
            self._ahead_pending = True
            self.call_after_refresh(self._draw_ahead)

    def on_resize(self, event: events.Resize) -> None:
        self._strips.clear()
        self.virtual_size = Size(event.size.width, self.count)
        # a smaller list can leave the cursor below its last row: scroll it back into view
        self.call_after_refresh(self._scroll_to_cursor)


class OpenableList(VirtualList):
    """A VirtualList whose rows open something: the footer shows Enter."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select", "Open")]


@dataclass
class Slot:
    """What a ValueTree node stands for: the value at `path`, or (`more`) the children
    `start`..`end` of the container at `path` not shown yet."""

    path: tuple[Any, ...]
    value: Any = None
    more: tuple[int, int] | None = None
    filled: bool = False
    removed: bool = False  # what a step removed: `value` is the old value


class ValueTree(Tree[Slot]):
    """A value (a state, a section) as a tree. Children are added when a node is opened,
    at most `PAGE` at a time for long lists and maps (a "… N more" node adds the next
    page when selected). Paths in `marks` (path -> "add", "remove" or "replace") are
    coloured and opened, with a few of their neighbours (timeline.windows), so a step's
    changes are in view however long the lists they are in."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("v", "view", "View value")]
    DEFAULT_CSS = """
    ValueTree {
        background: $surface;
    }
    """

    def __init__(self, label: str = "value", *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(label, Slot(()), id=id, classes=classes)
        self.show_root = True
        self.guide_depth = 2
        self.title = label
        self.marks: dict[tuple[Any, ...], str] = {}
        self.olds: dict[tuple[Any, ...], Any] = {}
        self._ancestors: set[tuple[Any, ...]] = set()
        self._removed: dict[tuple[Any, ...], list[tuple[Any, Any]]] = {}

    def show(
        self,
        value: Any,
        label: str,
        marks: dict[tuple[Any, ...], str] | None = None,
        removed: dict[tuple[Any, ...], Any] | None = None,
        olds: dict[tuple[Any, ...], Any] | None = None,
    ) -> None:
        """Show `value`; `removed`: path -> old value of what a step removed (drawn struck out);
        `olds`: path -> the value a step replaced (the value viewer shows the diff)."""
        self.title = label.split(" (")[0]  # "memory (map, 12 keys)": the viewer's title says what it is
        self.olds = dict(olds or {})
        self.marks = dict(marks or {})
        self._ancestors = {path[:i] for path in self.marks for i in range(len(path))}
        self._removed = {}
        for path, old in (removed or {}).items():
            if path:
                self._removed.setdefault(path[:-1], []).append((path[-1], old))
                self._ancestors.update(path[:i] for i in range(len(path)))
        self.clear()
        self.root.set_label(Text(label, style="bold"))
        self.root.data = Slot((), value)
        self._fill(self.root)
        self.root.expand()
        self.cursor_line = 0

    def _label(self, key: Any, path: tuple[Any, ...], value: Any) -> Text:
        text = value_label(key, value)
        op = self.marks.get(path)
        if op is not None:
            text.stylize(OP_STYLES.get(op, "bold"))
            text.append(f"  ({'added' if op == 'add' else 'changed'})", style="dim")
        elif path in self._ancestors:
            text.stylize("bold")
        return text

    def _fill(self, node: TreeNode[Slot]) -> None:
        slot = node.data
        if slot is None or slot.filled:
            return
        slot.filled = True
        value = slot.value
        keys, folded = self._keys(value)
        focus = [i for i, k in enumerate(keys) if (*slot.path, k) in self._ancestors or (*slot.path, k) in self.marks]
        for start, end in self._spans(len(keys), focus):
            if start < 0:  # a gap
                self._more(node, slot.path, -start - 1, end)
                continue
            for k in keys[start:end]:
                self._add(node, slot.path, k, value[k])
        if folded:
            label = Text(f"LangGraph bookkeeping: {len(folded)} channel{'s' if len(folded) != 1 else ''} ({', '.join(folded[:3])}…)")
            label.stylize("dim italic")
            fold = node.add(label, Slot(slot.path, {k: value[k] for k in folded}))
            if any((*slot.path, k) in self._ancestors or (*slot.path, k) in self.marks for k in folded):
                self._fill(fold)
                fold.expand()
        for key, old in self._removed.get(slot.path, []):
            label = Text(label_of(key, old) + "  (removed)", style="red strike")
            node.add_leaf(label, Slot((*slot.path, key), old, filled=True, removed=True))

    @staticmethod
    def _keys(value: Any) -> tuple[list[Any], list[str]]:
        """A container's keys shown, and LangGraph's bookkeeping channels folded under one
        node (`branch:to:*`, `__start__`...; when the map holds other keys too)."""
        keys = child_keys(value)
        if type(value) is not dict:
            return keys, []
        folded = [k for k in keys if is_bookkeeping_channel(k)]
        if not folded or len(folded) == len(keys):
            return keys, []
        return [k for k in keys if not is_bookkeeping_channel(k)], folded

    @staticmethod
    def _spans(n: int, focus: list[int]) -> list[tuple[int, int]]:
        """Ranges to show, with the gaps between as (-(start + 1), end)."""
        out: list[tuple[int, int]] = []
        pos = 0
        for s, e in windows(n, focus, PAGE):
            if s > pos:
                out.append((-(pos + 1), s))
            out.append((s, e))
            pos = e
        if pos < n:
            out.append((-(pos + 1), n))
        return out

    def _add(self, node: TreeNode[Slot], parent: tuple[Any, ...], key: Any, value: Any) -> None:
        path = (*parent, key)
        label = self._label(key, path, value)
        if child_keys(value):
            child = node.add(label, Slot(path, value))
            if path in self._ancestors:
                self._fill(child)
                child.expand()
        else:
            node.add_leaf(label, Slot(path, value, filled=True))

    def _more(self, node: TreeNode[Slot], path: tuple[Any, ...], start: int, end: int, before: TreeNode[Slot] | None = None) -> None:
        label = Text(f"… {end - start:,} more ({start:,}–{end - 1:,}): select to show {min(PAGE, end - start):,}", style="dim italic")
        if before is None:
            node.add_leaf(label, Slot(path, more=(start, end), filled=True))
        else:
            node.add(label, Slot(path, more=(start, end), filled=True), before=before, allow_expand=False)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[Slot]) -> None:
        self._fill(event.node)

    def view(self, node: TreeNode[Slot]) -> None:
        """Open the node's value in the value viewer (a changed one with its old value)."""
        slot = node.data
        if slot is None or slot.more is not None:
            return
        title = f"{self.title}: {path_text(slot.path)}" if slot.path else self.title
        op = self.marks.get(slot.path)
        if slot.removed:
            self.post_message(ViewValue(title + " (removed)", MISSING, slot.value, changed=True))
        elif op == "add":
            self.post_message(ViewValue(title + " (added)", slot.value, MISSING, changed=True))
        elif slot.path in self.olds:
            self.post_message(ViewValue(title + " (changed)", slot.value, self.olds[slot.path], changed=True))
        else:
            self.post_message(ViewValue(title, slot.value))

    def action_view(self) -> None:
        if self.cursor_node is not None:
            self.view(self.cursor_node)

    def on_tree_node_selected(self, event: Tree.NodeSelected[Slot]) -> None:
        slot = event.node.data
        parent = event.node.parent
        if slot is not None and slot.more is None and not event.node.allow_expand:
            event.stop()  # Enter on a leaf: its value whole
            self.view(event.node)
            return
        if slot is None or slot.more is None or parent is None or parent.data is None:
            return
        event.stop()
        start, end = slot.more
        container = parent.data.value
        keys = self._keys(container)[0]
        stop = min(end, start + PAGE)
        index = parent.children.index(event.node)
        event.node.remove()
        siblings = list(parent.children)
        anchor = siblings[index] if index < len(siblings) else None
        for k in keys[start:stop]:
            path = (*parent.data.path, k)
            label = self._label(k, path, container[k])
            if child_keys(container[k]):
                if anchor is None:
                    parent.add(label, Slot(path, container[k]))
                else:
                    parent.add(label, Slot(path, container[k]), before=anchor)
            elif anchor is None:
                parent.add_leaf(label, Slot(path, container[k], filled=True))
            else:
                parent.add(label, Slot(path, container[k], filled=True), before=anchor, allow_expand=False)
        if stop < end:
            self._more(parent, parent.data.path, stop, end, before=anchor)


def styled_lines(lines: list[tuple[str, str]]) -> Callable[[int], Text]:
    """A row renderer for (kind, text) lines (ckptcli.history.diff.render), coloured as `ckpt diff`."""

    def render(i: int) -> Text:
        kind, text = lines[i]
        indent = "  " if kind in ("add", "remove", "change") else ""
        return Text(indent + text, style=LINE_STYLES.get(kind, ""))

    return render

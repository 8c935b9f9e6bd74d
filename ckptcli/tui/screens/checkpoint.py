"""The checkpoint screen: metadata, memory, plan stack, tool-call log, events, blobs, ext."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Header, Static, TabbedContent, TabPane

from ckptcli._util.units import human_size
from ckptcli.api import Checkpoint
from ckptcli.errors import CkptError
from ckptcli.format.manifest import EXT_PREFIX, LAYOUT_DOCUMENT
from ckptcli.history.events import LABEL_FORK_AT, LABEL_FORK_OF
from ckptcli.history.lazylist import LazyList
from ckptcli.history.render import describe
from ckptcli.history.timeline import (
    BlobEntry,
    blob_listing,
    event_summary,
    section_list,
    section_shape,
    tool_answers,
    tool_status,
)
from ckptcli.listing import format_time
from ckptcli.tui.messages import ViewValue
from ckptcli.tui.screens.base import KIND_STYLES, BaseScreen, KeyFooter, refs_text
from ckptcli.tui.session import Session
from ckptcli.tui.widgets import OpenableList, ValueTree, VirtualList

TABS = ("overview", "memory", "plan", "tools", "events", "blobs", "ext")
#: What each tab's key focuses: the first of these that is shown.
TAB_FOCUS = {
    "overview": ("#overview-scroll",),
    "memory": ("#memory-tree",),
    "plan": ("#plan-list", "#plan-item"),
    "tools": ("#tools-list", "#tools-item"),
    "events": ("#events-list",),
    "blobs": ("#blobs-list",),
    "ext": ("#ext-tree",),
}
STATUS = {"ok": ("✓", "green"), "error": ("✗", "red"), "pending": ("…", "yellow")}


class CheckpointScreen(BaseScreen):
    """One checkpoint: each section on a tab, decoded when the tab is first shown."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("t", "timeline", "Timeline"),
        Binding("d", "diff", "Diff mark/parent"),
        Binding("c", "copy_id", "Copy id"),
        Binding("v", "view", "View value", show=False),
        *(Binding(str(i + 1), f"tab('{name}')", name.capitalize(), show=False) for i, name in enumerate(TABS)),
    ]
    HELP = "Checkpoint: its metadata and sections, one tab each (1-7)"
    DEFAULT_CSS = """
    CheckpointScreen TabbedContent { height: 1fr; }
    CheckpointScreen TabPane { padding: 0; }
    CheckpointScreen .split-list { height: 1fr; }
    CheckpointScreen .split-detail { height: 2fr; border-top: solid $primary-background; }
    CheckpointScreen #overview-body { padding: 0 1; }
    CheckpointScreen .note { padding: 0 1; color: $text-muted; }
    """

    def __init__(self, session: Session, cid: bytes) -> None:
        super().__init__(session)
        self.cid = cid
        self.ck: Checkpoint = session.checkpoint(cid)  # raises CkptError before the screen is shown
        self.loaded: set[str] = set()
        self.plan: LazyList | None = None
        self.tools: LazyList | None = None
        self._answers: dict[str, str] | None = None  # call id -> status of the tool message answering it
        self.blobs: list[BlobEntry] = []
        self.event_rows: list[tuple[int, str]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial="overview", id="tabs"):
            with TabPane("Overview", id="overview"), VerticalScroll(id="overview-scroll"):
                yield Static("", id="overview-body")
            with TabPane("Memory", id="memory"):
                yield ValueTree("memory", id="memory-tree")
            with TabPane("Plan", id="plan"), Vertical():
                yield Static("", id="plan-note", classes="pane-title")
                yield VirtualList(self._plan_row, id="plan-list", classes="split-list")
                yield ValueTree("item", id="plan-item", classes="split-detail")
            with TabPane("Tools", id="tools"), Vertical():
                yield Static("", id="tools-note", classes="pane-title")
                yield VirtualList(self._tool_row, id="tools-list", classes="split-list")
                yield ValueTree("call", id="tools-item", classes="split-detail")
            with TabPane("Events", id="events"), Vertical():
                yield Static("", id="events-note", classes="pane-title")
                yield OpenableList(self._event_row, id="events-list")
            with TabPane("Blobs", id="blobs"), Vertical():
                yield Static("", id="blobs-note", classes="pane-title")
                yield VirtualList(self._blob_row, id="blobs-list")
            with TabPane("Ext", id="ext"):
                yield ValueTree("ext", id="ext-tree")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = f"checkpoint {self.ck.hex[:12]}  {self.ck.manifest.subject}"
        self._load("overview")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "timeline":  # a checkpoint without an event tail has no timeline: no key for it
            return "events" in self.ck.manifest.sections
        return True

    # -- loading each tab ----------------------------------------------------------------
    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        pane = event.pane.id
        if pane:
            self._load(pane)

    def _load(self, tab: str) -> None:
        if tab in self.loaded:
            return
        self.loaded.add(tab)
        try:
            getattr(self, f"_load_{tab}")()
        except CkptError as exc:
            self.error(exc)

    def _load_overview(self) -> None:
        m = self.ck.manifest
        h = self.session.history
        node = h.nodes.get(self.cid)
        t = Table.grid(padding=(0, 2))
        t.add_column(style="bold", no_wrap=True)
        t.add_column()
        t.add_row("id", Text(self.ck.hex, style="yellow"))
        t.add_row("subject", str(m.subject))
        t.add_row("created", format_time(m.created_ns))
        kind = node.kind if node else "take"
        t.add_row("kind", Text(kind, style=KIND_STYLES.get(kind, "")))
        t.add_row("parents", ", ".join(p.hex() for p in m.parents) or "none (a root)")
        children = h.children.get(self.cid, [])
        if children:
            t.add_row(
                "children", ", ".join(c.hex()[:12] for c in children[:8]) + (f" and {len(children) - 8} more" if len(children) > 8 else "")
            )
        if LABEL_FORK_OF in m.labels:
            t.add_row("forked", f"from {m.labels[LABEL_FORK_OF][:12]} at seq {m.labels.get(LABEL_FORK_AT, '?')}")
        refs = h.ref_names(self.cid)
        if refs:
            t.add_row("refs", refs_text(refs))
        t.add_row("labels", Text("  ".join(f"{k}={v}" for k, v in m.labels.items()) or "none", style="green"))
        t.add_row("message", m.message or "")
        t.add_row("producer", " ".join(f"{k}={v}" for k, v in m.producer.items()))
        t.add_row("format", f"version {m.format_version}")
        t.add_row("schema", "none" if m.schema_version is None else str(m.schema_version))
        if m.config_hash:
            t.add_row("config", m.config_hash)
        if m.deps:
            t.add_row("deps", " ".join(f"{k}={v}" for k, v in m.deps.items()))
        if m.stats:
            t.add_row("stats", " ".join(f"{k}={v:,}" for k, v in m.stats.items()))
        layout = "whole document in memory" if m.layout.get("kind") == LAYOUT_DOCUMENT else "sections"
        t.add_row("layout", f"{layout} ({m.layout.get('format', '?')})")
        for name in m.sections:
            try:
                shape: str | Text = section_shape(self.ck, name)
            except CkptError as exc:  # a damaged pack: the manifest above is still worth reading
                shape = Text(f"unreadable: {exc}", style="red")
            t.add_row(Text(f"  {name}", style="cyan"), shape)
        self.query_one("#overview-body", Static).update(t)

    def _load_memory(self) -> None:
        tree = self.query_one("#memory-tree", ValueTree)
        if "memory" not in self.ck.manifest.sections:
            tree.show(None, "no memory section")
            return
        tree.show(self.ck.section("memory"), f"memory ({section_shape(self.ck, 'memory')})")

    def _load_list(self, section: str, what: str, summary: str) -> Any:
        """The section as a lazy list shown in #<section>-list, or None (then the note
        says why and #<section>-item shows whatever the section holds)."""
        items = section_list(self.ck, section)
        note = self.query_one(f"#{section}-note", Static)
        if items is None:
            self.query_one(f"#{section}-list", VirtualList).display = False
            present = section in self.ck.manifest.sections
            note.update(f"the {what} is not a list" if present else f"no {section} section")
            if present:
                self.query_one(f"#{section}-item", ValueTree).show(self.ck.section(section), section)
            return None
        n = len(items)
        note.update(f"{what}: {n:,} {summary.format(s='s' if n != 1 else '')}")
        self.query_one(f"#{section}-list", VirtualList).set_count(n)
        return items

    def _load_plan(self) -> None:
        self.plan = self._load_list("plan", "plan stack", "item{s}, the top first")
        if self.plan is not None:
            self._show_plan_item(0)

    def _plan_index(self, row: int) -> int:
        assert self.plan is not None
        return len(self.plan) - 1 - row

    def _plan_row(self, row: int) -> Text:
        if self.plan is None:
            return Text()
        i = self._plan_index(row)
        item = self.plan.value(i)
        t = Text.assemble(("▶ top " if row == 0 else "      ", "bold cyan"))
        t.append(f"[{i}] ", style="dim")
        if isinstance(item, dict):
            status = item.get("status")
            if isinstance(status, str):
                t.append(f"{status:<8} ", style={"running": "yellow", "done": "green", "failed": "red"}.get(status, ""))
            t.append(describe({k: v for k, v in item.items() if k != "status"}, 100))
        else:
            t.append(describe(item, 100))
        return t

    def _show_plan_item(self, row: int) -> None:
        if self.plan is not None and len(self.plan):
            i = self._plan_index(row)
            self.query_one("#plan-item", ValueTree).show(self.plan.value(i), f"plan[{i}]")

    def _load_tools(self) -> None:
        self.tools = self._load_list("tools", "tool-call log", "call{s}, oldest first")
        if self.tools is not None:
            self._show_tool(0)

    def _tool_row(self, i: int) -> Text:
        if self.tools is None:
            return Text()
        rec = self.tools.value(i)
        t = Text.assemble((f"{i:>5} ", "dim"))
        if not isinstance(rec, dict):
            t.append(describe(rec, 100))
            return t
        status = tool_status(rec, self._tool_answers)
        mark, style = STATUS.get(str(status), ("?", ""))
        t.append(f"{mark} ", style=style)
        t.append(str(rec.get("tool", rec.get("name", "?"))), style="bold")
        args = rec.get("args", rec.get("arguments"))
        t.append(f"({describe(args, 40) if args is not None else ''})")
        dur = rec.get("duration_ns")
        if type(dur) is int:
            t.append(f" {dur / 1e6:.1f} ms", style="dim")
        if "result" in rec:
            t.append(" → " + describe(rec["result"], 50), style="green" if status == "ok" else "")
        if "error" in rec:
            t.append(f" error: {rec['error']}", style="red")
        key = rec.get("key", rec.get("idempotency_key"))
        if isinstance(key, str):
            t.append(f"  key={key}", style="dim")
        return t

    def _tool_answers(self) -> dict[str, str]:
        if self._answers is None:
            self._answers = tool_answers(self.tools) if self.tools is not None else {}
        return self._answers

    def _show_tool(self, i: int) -> None:
        if self.tools is not None and len(self.tools):
            self.query_one("#tools-item", ValueTree).show(self.tools.value(i), f"tools[{i}]")

    def _load_events(self) -> None:
        note = self.query_one("#events-note", Static)
        lst = self.query_one("#events-list", VirtualList)
        events = section_list(self.ck, "events")
        if events is None:
            note.update("no event tail" if "events" not in self.ck.manifest.sections else "the events section is not a list")
            lst.display = False
            return
        n = len(events)
        if n == 0:
            note.update("an empty tail: no events after the snapshot")
            lst.display = False
            return
        # the first and the last events; the timeline (t) shows them all
        shown = list(range(min(n, 50)))
        if n > 50:
            shown += list(range(max(50, n - 50), n))
        from ckptcli.history.events import event_from_map

        rows: list[tuple[int, str]] = []
        for i in shown:
            try:
                ev = event_from_map(events.value(i), f"events[{i}]")
                rows.append((i, f"#{ev.seq:<7} {format_time(ev.ts)[11:23]}  {ev.kind:<15} {event_summary(ev)}"))
            except CkptError as exc:
                rows.append((i, f"events[{i}]: {exc}"))
            if n > 100 and i == 49:
                rows.append((-1, f"… {n - 100:,} more: press t for the timeline"))
        self.event_rows = rows
        note.update(f"event tail: {n:,} events; press t to scrub through them with the state at each")
        lst.set_count(len(rows))

    def _event_row(self, i: int) -> Text:
        index, text = self.event_rows[i]
        return Text(text, style="dim italic" if index < 0 else "")

    def _load_blobs(self) -> None:
        note = self.query_one("#blobs-note", Static)
        self.blobs = blob_listing(self.ck.blobs())
        files = [b for b in self.blobs if b.type == "file"]
        total = sum(b.size or 0 for b in files)
        note.update(f"{len(files):,} file{'s' if len(files) != 1 else ''}, {human_size(total)}" if self.blobs else "no blobs")
        self.query_one("#blobs-list", VirtualList).set_count(len(self.blobs))

    def _blob_row(self, i: int) -> Text:
        b = self.blobs[i]
        name = b.path.rsplit("/", 1)[-1]
        t = Text("  " * b.depth)
        t.append(name + ("/" if b.type == "dir" else ""), style="bold blue" if b.type == "dir" else "")
        if b.type == "file":
            t.append(f"  {human_size(b.size)}" if b.size is not None else "  ", style="dim")
        elif b.type == "symlink":
            t.append(f" -> {b.detail}", style="cyan")
        elif b.type == "skipped":
            t.append(f"  skipped ({b.detail})", style="yellow")
        if b.mode is not None:
            t.append(f"  {b.mode:04o}", style="dim")
        return t

    def _load_ext(self) -> None:
        names = [n for n in self.ck.manifest.sections if n.startswith(EXT_PREFIX)]
        tree = self.query_one("#ext-tree", ValueTree)
        if not names:
            tree.show(None, "no ext sections (adapters' namespaces)")
            return
        tree.show({n[len(EXT_PREFIX) :]: self.ck.section(n) for n in names}, f"ext: {len(names)} namespace{'s' if len(names) != 1 else ''}")

    # -- events --------------------------------------------------------------------------------
    def on_virtual_list_highlighted(self, event: VirtualList.Highlighted) -> None:
        try:
            if event.list.id == "plan-list":
                self._show_plan_item(event.index)
            elif event.list.id == "tools-list":
                self._show_tool(event.index)
        except CkptError as exc:
            self.error(exc)

    def on_virtual_list_selected(self, event: VirtualList.Selected) -> None:
        try:
            if event.list.id == "events-list":
                index = self.event_rows[event.index][0]
                self.action_timeline(None if index < 0 else index + 1)
            elif event.list.id == "plan-list" and self.plan is not None:
                i = self._plan_index(event.index)
                self.post_message(ViewValue(f"plan[{i}]", self.plan.value(i)))
            elif event.list.id == "tools-list" and self.tools is not None:
                self.post_message(ViewValue(f"tools[{event.index}]", self.tools.value(event.index)))
        except CkptError as exc:
            self.error(exc)

    def action_view(self) -> None:
        """v: the value under the cursor whole (a list's row, a tree's node)."""
        focused = self.focused
        if isinstance(focused, ValueTree):
            focused.action_view()
        elif isinstance(focused, VirtualList) and focused.id in ("plan-list", "tools-list") and focused.count:
            focused.action_select()

    # -- actions ----------------------------------------------------------------------------------
    def action_back(self) -> None:
        """Esc: from an item's tree back to its list, else back to the history."""
        focused = self.focused
        pane = {"plan-item": "#plan-list", "tools-item": "#tools-list"}.get(focused.id or "") if focused is not None else None
        if pane is not None and self.query_one(pane, VirtualList).display:
            self.query_one(pane, VirtualList).focus()
            return
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()

    def action_tab(self, name: str) -> None:
        self.query_one("#tabs", TabbedContent).active = name
        # the keys then move in the tab's content, not along the tab strip
        self._focus_tab(name)

    def _focus_tab(self, name: str) -> None:
        for selector in TAB_FOCUS.get(name, ()):
            widget = self.query_one(selector)
            if widget.display and widget.can_focus:
                widget.focus()
                return

    def action_timeline(self, row: int | None = None) -> None:
        """The timeline, at event row `row` when given (the Events tab's row under the cursor)."""
        from ckptcli.tui.screens.timeline import TimelineScreen

        try:
            self.app.push_screen(TimelineScreen(self.session, self.cid, row=row))
        except CkptError as exc:
            self.error(exc)

    def _marked(self) -> bytes | None:
        """The checkpoint marked A in the history below (Space or m there), if another."""
        for s in self.app.screen_stack:
            mark = getattr(s, "mark", None)
            if isinstance(mark, bytes) and mark != self.cid and mark in self.session.history.nodes:
                return mark
        return None

    def action_diff(self) -> None:
        """d: what changed from the checkpoint marked in the history to this one, else from its first parent."""
        a = self._marked()
        if a is None:
            parents = [p for p in self.ck.manifest.parents if p in self.session.history.nodes]
            if not parents:
                self.notify("this checkpoint has no parent here to compare with (mark one in the history: m)", severity="warning")
                return
            a = parents[0]
        from ckptcli.tui.screens.diff import DiffScreen

        self.app.push_screen(DiffScreen.of_checkpoints(self.session, a, self.cid))

    def point(self) -> tuple[bytes, int | None] | None:
        """This checkpoint (the actions: fork, tag, restore, export)."""
        return (self.cid, None)

    def action_copy_id(self) -> None:
        self.ckpt_app.copy_id(self.ck.hex)

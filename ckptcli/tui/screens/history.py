"""The history screen: subjects on the left, their checkpoints as a graph on the right."""

from __future__ import annotations

import contextlib
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Header, Input, OptionList, Static
from textual.widgets.option_list import Option

from ckptcli.errors import CkptError, NotFoundError
from ckptcli.history.graph import GLYPHS, History, Node
from ckptcli.store.repository import Store
from ckptcli.tui.screens.base import KIND_STYLES, BaseScreen, KeyFooter, mark_text, refs_text
from ckptcli.tui.session import Session
from ckptcli.tui.valuetext import short_label
from ckptcli.tui.widgets import OpenableList, VirtualList

ALL = "*"
#: The labels that say a checkpoint's step (your own `step=41`; the LangGraph saver's).
STEP_LABELS = ("step", "langgraph.step")
#: Narrower than this, the subjects sidebar starts folded (`b` shows it).
NARROW = 100


#: The characters of the subjects' hints, in the order they are given.
HINT_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"


def subject_hints(names: list[str]) -> dict[str, str]:
    """A short hint for each subject, which `:` takes in place of its name (`:b 41`): one
    character while there are enough of HINT_CHARS (36 subjects, fewer when some subject
    is named like one), else two (1,296), else three. Given in the subjects' name order,
    so a hint stays with its subject while others take checkpoints; none equals a
    subject's name or the name after its kind (those name the subject themselves)."""
    taken = {n.lower() for n in names} | {n.partition(":")[2].lower() for n in names}
    out: dict[str, str] = {}
    size = 1
    while True:
        pool = [h for h in _hint_strings(size) if h not in taken]
        if len(pool) >= len(names):
            break
        size += 1
    for name, hint in zip(sorted(names), pool, strict=False):
        out[name] = hint
    return out


def _hint_strings(size: int) -> list[str]:
    if size == 1:
        return list(HINT_CHARS)
    return [a + b for a in HINT_CHARS for b in _hint_strings(size - 1)]


def match_subject(history: History, words: str) -> str:
    """The subject `words` names: its whole name, the name after its kind (`x` for
    agent:x), its hint in the sidebar (subject_hints), the start of the name after its
    kind, or a part of the whole name that only one subject has. Raises NotFoundError
    (none, or several: they are named)."""
    names = [s.name for s in history.subjects()]
    w = words.strip().lower()
    hints = subject_hints(names)
    for test in (
        lambda n: n.lower() == w,
        lambda n: n.partition(":")[2].lower() == w,
        lambda n: hints.get(n) == w,
        lambda n: n.partition(":")[2].lower().startswith(w),
        lambda n: w in n.lower(),
    ):
        found = [n for n in names if test(n)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
            raise NotFoundError(f"{words!r} names several subjects: {shown}", hint="type more of the name")
    raise NotFoundError(f"no subject is named like {words!r}", hint="s lists the subjects")


def step_of(history: History, subject: str, step: int) -> Node:
    """Step `step` of a subject: the checkpoint labelled step=N (or langgraph.step=N; the
    newest if several are), or, for a subject none of whose checkpoints has such a label,
    its checkpoint number N counting its oldest as 0. Raises NotFoundError."""
    rows = history.rows(subject)
    labelled = [n for n in rows if any(k in n.labels for k in STEP_LABELS)]
    if labelled:
        for n in labelled:  # newest first
            if any(n.labels.get(k) == str(step) for k in STEP_LABELS):
                return n
        raise NotFoundError(
            f"no checkpoint of {subject} is labelled step {step}", hint="its checkpoints carry a step label: / step= finds them"
        )
    if not 0 <= step < len(rows):
        raise NotFoundError(
            f"{subject} has {len(rows):,} checkpoint{'s' if len(rows) != 1 else ''}: steps 0 to {len(rows) - 1:,} (its oldest is 0)"
        )
    return rows[len(rows) - 1 - step]


def _reference(history: History, text: str, store: Store | None) -> Node:
    """The checkpoint of this history that `text` resolves to as a reference (without a
    store: an id prefix). Raises CkptError (NotFoundError when there is none)."""
    cid = store.resolve(text) if store is not None else next((n.id for n in history.order if n.hex.startswith(text.lower())), None)
    node = history.nodes.get(cid) if cid is not None else None
    if node is None:
        raise NotFoundError(f"{text!r} is not a checkpoint of this history")
    return node


def go_to(history: History, text: str, subject: str | None, store: Store | None) -> Node:
    """What `:` goes to: `N`, step N of `subject`; `SUBJECT N`, step N of the subject named
    (match_subject); anything else a reference (tag, branch, id prefix, KIND:NAME, latest,
    REF~N, as the commands take them) or, failing that, the newest checkpoint of the subject
    it names. One word of digits that is no step of the subject is tried as an id prefix
    (an id may start with digits only); `#N` is always a step. Raises NotFoundError."""
    words = text.split()
    if words and words[-1].lstrip("#").isdecimal() and words[-1].isascii():
        if len(words) > 1:
            subject = match_subject(history, " ".join(words[:-1]))
        try:
            if subject is None:
                raise NotFoundError("no subject to count steps in", hint="give one: SUBJECT STEP")
            return step_of(history, subject, int(words[-1].lstrip("#")))
        except NotFoundError:
            if len(words) == 1 and not text.startswith("#"):
                with contextlib.suppress(CkptError):
                    return _reference(history, text, store)
            raise
    try:
        return _reference(history, text, store)
    except CkptError as exc:
        ref_error = exc
    try:
        return history.rows(match_subject(history, text))[0]
    except NotFoundError:
        if store is not None:
            raise ref_error from None
        raise NotFoundError(
            f"{text!r} is not a checkpoint here", hint="a tag, branch, id prefix, KIND:NAME, or STEP / SUBJECT STEP"
        ) from None


class HistoryScreen(BaseScreen):
    """Every checkpoint of the store, newest first, with the graph of its parents."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Open"),
        Binding("t", "timeline", "Timeline"),
        Binding("space", "mark", "Mark A"),
        Binding("m", "mark", "Mark A", show=False),
        Binding("colon", "goto", "Go to", show=False),
        Binding("d", "diff", "Diff"),
        Binding("c", "copy_id", "Copy id"),
        Binding("f", "filter", "Filter"),
        Binding("slash", "search", "Search"),
        Binding("n", "find(1)", "Next match", show=False),
        Binding("N", "find(-1)", "Previous match", show=False),
        Binding("s", "subjects", "Subjects"),
        Binding("b", "sidebar", "Sidebar"),
        Binding("r", "refresh", "Refresh"),
        Binding("escape", "clear", "Clear", show=False),
    ]
    HELP = "History: every checkpoint of the store, newest first"
    DEFAULT_CSS = """
    HistoryScreen #left { width: 30; border-right: solid $primary-background; }
    HistoryScreen.-narrow #left { width: 24; }
    HistoryScreen.-folded #left { display: none; }
    HistoryScreen #subjects { height: 1fr; border: none; }
    HistoryScreen #checkpoints { height: 1fr; }
    HistoryScreen #detail { height: 4; padding: 0 1; background: $boost; }
    HistoryScreen Input { height: 3; }
    """

    def __init__(self, session: Session, focus: bytes | None = None) -> None:
        super().__init__(session)
        self.history = session.history
        self.subject: str | None = None
        self.query_text = ""
        self.search_text = ""
        self.rows: list[Node] = self.history.rows(None)
        self.lanes: list[str] | None = None
        self.lane_width = 0
        self.mark: bytes | None = None
        self.focus_id = focus
        self.folded: bool | None = None  # None: by the terminal's width until `b` is pressed
        self.hints_shown = False  # the folded sidebar shown while `:` is open

    # -- layout --------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            with Vertical(id="left"):
                yield Static("subjects", classes="pane-title")
                yield OptionList(*self._subject_options(), id="subjects")
            with Vertical(id="right"):
                yield Static("", id="title", classes="pane-title")
                yield self.make_input("filter: words that must all appear (id, subject, label k=v, tag:NAME, message, kind)", "filter")
                yield OpenableList(self._render_row, on_highlight=self._on_cursor, id="checkpoints")
                yield Static("", id="detail")
                yield self.make_input("go to: STEP, SUBJECT STEP, a tag, branch or id", "goto")
                yield self.make_input("search: words; Enter finds the next match, n / N the next and previous", "search")
        yield KeyFooter()

    def _subject_options(self) -> list[Option]:
        subjects = self.history.subjects()
        hints = subject_hints([s.name for s in subjects])
        width = max((len(h) for h in hints.values()), default=1)
        out = [Option(Text.assemble(("all subjects", "bold"), f"  {len(self.history):,}"), id=ALL)]
        # each subject's hint first: `:HINT STEP` goes to its step (match_subject)
        out.extend(
            Option(Text.assemble((f"{hints[s.name]:<{width}} ", "bold magenta"), s.name, (f"  {s.count:,}", "dim")), id=s.name)
            for s in subjects
        )
        return out

    def on_mount(self) -> None:
        self._fit_width(self.app.size.width)
        self._load_rows()
        target = 0
        if self.focus_id is not None:
            target = next((i for i, n in enumerate(self.rows) if n.id == self.focus_id), 0)
        self.list.set_cursor(target, center=True)
        self.list.focus()
        self._show_detail()
        self.ckpt_app.settle()

    @property
    def list(self) -> VirtualList:
        return self.query_one("#checkpoints", VirtualList)

    def on_resize(self, event: events.Resize) -> None:
        self._fit_width(event.size.width)

    def _fit_width(self, width: int) -> None:
        """A narrow terminal folds the subjects sidebar (unless `b` said otherwise)."""
        narrow = width < NARROW
        self.set_class(narrow, "-narrow")
        self.set_class(narrow if self.folded is None else self.folded, "-folded")

    def _load_rows(self, keep: bytes | None = None) -> None:
        rows = self.history.rows(self.subject)
        filtered = bool(self.query_text.strip())
        self.rows = self.history.filter(rows, self.query_text)
        # the graph draws parent links; a filtered list has holes, so it shows kinds only
        self.lanes = None if filtered else self.history.graph(self.rows)
        self.lane_width = max((len(g) for g in self.lanes), default=0) if self.lanes else 1
        cursor = next((i for i, n in enumerate(self.rows) if n.id == keep), 0) if keep else 0
        self.list.set_count(len(self.rows), cursor)
        subject = self.subject or "all subjects"
        shown = f"{len(self.rows):,} of {len(rows):,}" if filtered else f"{len(rows):,}"
        extra = f"  filter: {self.query_text}" if filtered else ""
        self.query_one("#title", Static).update(f"{subject}: {shown} checkpoint{'s' if len(rows) != 1 else ''}{extra}", layout=False)

    def _render_row(self, i: int) -> Text:
        n = self.rows[i]
        t = mark_text(n.id == self.mark)
        glyph = GLYPHS.get(n.kind, "●")
        graph = self.lanes[i] if self.lanes else glyph
        # the lanes dim, the checkpoint's own glyph in the colour of its kind
        for ch in graph.ljust(self.lane_width):
            t.append(ch, style=(KIND_STYLES.get(n.kind, "") or "bold cyan") if ch == glyph else "dim")
        t.append(" ")
        t.append(n.hex[:12], style="yellow")
        t.append(" " + n.time[:19].replace("T", " "), style="dim")
        if self.subject is None:
            t.append(f" {n.subject}", style="blue")
        refs = self.history.ref_names(n.id)
        if refs:
            t.append(" ")
            t.append_text(refs_text(refs))
        else:
            t.append(" ")
        if n.kind not in ("take", "root"):
            t.append(f"{n.kind} ", style=KIND_STYLES.get(n.kind, ""))
        t.append(n.message)
        if n.labels:
            # after the message, machine labels (hex ids, UUIDs) shortened: the detail pane has them whole
            t.append("  " + " ".join(f"{k}={short_label(v)}" for k, v in n.labels.items()), style="green")
        return t

    def _current(self) -> Node | None:
        if not self.rows:
            return None
        return self.rows[min(self.list.cursor, len(self.rows) - 1)]

    def _show_detail(self) -> None:
        n = self._current()
        detail = self.query_one("#detail", Static)
        if n is None:
            detail.update("no checkpoints" + (" match the filter" if self.query_text.strip() else ""), layout=False)
            return
        # four lines that each fit 80 columns for a plain checkpoint: the id and kind; the
        # subject, time and relations; schema, refs and labels; the message
        t = Text()
        t.append(n.hex, style="bold yellow")
        t.append(f"  {n.kind}", style=KIND_STYLES.get(n.kind, ""))
        parents = ", ".join(p.hex()[:12] for p in n.parents) or "none (a root)"
        children = self.history.children.get(n.id, [])
        t.append(f"\n{n.subject}  {n.time[:19].replace('T', ' ')}  parents: {parents}  children: {len(children)}")
        t.append("\n")
        if n.schema_version is not None:
            t.append(f"schema {n.schema_version}  ", style="dim")
        refs = self.history.ref_names(n.id)
        if refs:
            t.append_text(refs_text(refs))
        if n.labels:
            t.append("  ".join(f"{k}={v}" for k, v in n.labels.items()), style="green")
        t.append("\n" + n.message)
        detail.update(t, layout=False)

    # -- events ------------------------------------------------------------------------------
    def _on_cursor(self, index: int) -> None:
        self._show_detail()

    def on_virtual_list_selected(self, event: VirtualList.Selected) -> None:
        self.action_open()

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        subject = None if event.option.id in (None, ALL) else event.option.id
        if subject != self.subject:
            current = self._current()
            self.subject = subject
            self._load_rows(keep=current.id if current else None)
            self._show_detail()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.list.focus()
        if self.folded is None and self.has_class("-narrow"):
            self.add_class("-folded")  # a narrow terminal: the sidebar closes once a subject is chosen

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            current = self._current()
            self.query_text = event.value
            self._load_rows(keep=current.id if current else None)
            self._show_detail()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.add_class("hidden")
        self.list.focus()
        if event.input.id == "search":
            self.search_text = event.value
            self.action_find(1)
        elif event.input.id == "goto":
            self._fold_after_goto()
            self.go(event.value)

    def go(self, text: str) -> None:
        """`:TEXT` Enter: to a step, a subject's step, a reference (go_to)."""
        if not text.strip():
            return
        current = self._current()
        subject = self.subject or (current.subject if current is not None else None)
        store = self.session.source if isinstance(self.session.source, Store) else None
        try:
            node = go_to(self.history, text.strip(), subject, store)
        except CkptError as exc:
            self.notify(str(exc), severity="warning", timeout=5)
            return
        self.show_checkpoint(node.id)

    def show_checkpoint(self, cid: bytes) -> bool:
        """Put the cursor on checkpoint `cid`: the filter is cleared, and the subject
        shown is its own or all, when they hide it. False if the store has no such checkpoint."""
        if cid not in self.history.nodes:
            return False
        if all(n.id != cid for n in self.rows) and self.query_text:
            self.query_text = ""
            with self.prevent(Input.Changed):
                self.query_one("#filter", Input).value = ""
            self._load_rows()
        if all(n.id != cid for n in self.rows):
            self.subject = None
            with self.prevent(OptionList.OptionHighlighted):
                self.query_one("#subjects", OptionList).highlighted = 0
            self._load_rows()
        self.list.set_cursor(next(i for i, n in enumerate(self.rows) if n.id == cid), center=True)
        self._show_detail()
        return True

    def point(self) -> tuple[bytes, int | None] | None:
        """The checkpoint under the cursor (the actions: fork, tag, restore, export)."""
        n = self._current()
        return None if n is None else (n.id, None)

    # -- actions -------------------------------------------------------------------------------
    def action_open(self) -> None:
        n = self._current()
        if n is None:
            return
        from ckptcli.tui.screens.checkpoint import CheckpointScreen

        try:
            self.app.push_screen(CheckpointScreen(self.session, n.id))
        except CkptError as exc:
            self.error(exc)

    def action_timeline(self) -> None:
        n = self._current()
        if n is None:
            return
        from ckptcli.tui.screens.timeline import TimelineScreen

        try:
            self.app.push_screen(TimelineScreen(self.session, n.id))
        except NotFoundError as exc:  # no event tail: nothing went wrong
            self.notify(str(exc), severity="warning", timeout=4)
        except CkptError as exc:
            self.error(exc)

    def action_mark(self) -> None:
        n = self._current()
        if n is None:
            return
        self.mark = None if self.mark == n.id else n.id
        self.list.refresh_rows()
        if self.mark:
            self.notify(f"marked {n.hex[:12]} as A: move to B and press d", timeout=4)

    def action_diff(self) -> None:
        n = self._current()
        if n is None:
            return
        if self.mark is not None and self.mark != n.id:
            a = self.mark
        elif n.parents and n.parents[0] in self.history.nodes:
            a = n.parents[0]
        else:
            self.notify("mark a checkpoint first (space), then press d on another", severity="warning")
            return
        from ckptcli.tui.screens.diff import DiffScreen

        self.app.push_screen(DiffScreen.of_checkpoints(self.session, a, n.id))

    def action_copy_id(self) -> None:
        n = self._current()
        if n is not None:
            self.ckpt_app.copy_id(n.hex)

    def action_goto(self) -> None:
        box = self.query_one("#goto", Input)
        box.value = ""
        box.remove_class("hidden")
        box.focus()
        if self.has_class("-folded"):  # the subjects' hints in view while `:` is open (no `b` first)
            self.remove_class("-folded")
            self.hints_shown = True

    def _fold_after_goto(self) -> None:
        if self.hints_shown:
            self.hints_shown = False
            self.add_class("-folded")

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.remove_class("hidden")
        box.focus()

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.value = self.search_text
        box.remove_class("hidden")
        box.focus()

    def action_find(self, direction: int) -> None:
        if not self.search_text.strip():
            self.action_search()
            return
        found = self.history.find(self.rows, self.search_text, self.list.cursor, backwards=direction < 0)
        if found is None:
            self.notify(f"no checkpoint matches {self.search_text!r}", severity="warning", timeout=3)
        else:
            self.list.set_cursor(found, center=True)

    def action_subjects(self) -> None:
        self.remove_class("-folded")
        self.query_one("#subjects", OptionList).focus()

    def action_sidebar(self) -> None:
        """Show or fold the subjects sidebar."""
        self.folded = not self.has_class("-folded")
        self.set_class(self.folded, "-folded")
        if self.folded:
            self.list.focus()

    def action_refresh(self) -> None:
        """Read the store's checkpoints and refs again: what another process took or pruned."""
        self.reload(quiet=False)

    def reload(self, *, quiet: bool = True) -> None:
        """Read the store again (an action wrote to it; `r`, not `quiet`, says what changed)."""
        if not isinstance(self.session.source, Store):
            if not quiet:
                self.notify("a checkpoint file does not change", timeout=3)
            return
        current = self._current()
        before = len(self.history)
        hints_before = subject_hints([s.name for s in self.history.subjects()])
        try:
            self.history = self.session.history = History.from_store(self.session.source)
        except CkptError as exc:
            self.error(exc)
            return
        subjects = self.query_one("#subjects", OptionList)
        highlighted = subjects.highlighted
        subjects.clear_options()
        subjects.add_options(self._subject_options())
        if self.subject is not None and self.subject not in {s.name for s in self.history.subjects()}:
            self.subject = None
        ids = [o.id for o in subjects.options]
        subjects.highlighted = ids.index(self.subject or ALL) if (self.subject or ALL) in ids else highlighted
        at = self.list.cursor
        self._load_rows(keep=current.id if current else None)
        if current is not None and current.id not in self.history.nodes:
            self.list.set_cursor(min(at, len(self.rows) - 1))  # pruned: the row that took its place
        self._show_detail()
        gained = len(self.history) - before
        if not quiet:
            self.notify(f"{len(self.history):,} checkpoints ({gained:+,})", title="refreshed", timeout=3)
        hints = subject_hints([s.name for s in self.history.subjects()])
        moved = [f"{name} is {hints[name]}" for name, h in hints_before.items() if name in hints and hints[name] != h]
        if moved:  # a subject came or went: `:HINT` typed from memory would go elsewhere
            more = f" and {len(moved) - 3} more" if len(moved) > 3 else ""
            self.notify(f"subjects came or went, so hints moved: {', '.join(moved[:3])}{more}", severity="warning", timeout=8)

    def action_clear(self) -> None:
        """Escape: close an open input, else leave the subjects for the list, else clear
        the filter, else the mark."""
        subjects = self.query_one("#subjects", OptionList)
        if subjects.has_focus:
            self.list.focus()
            if self.folded is None and self.has_class("-narrow"):
                self.add_class("-folded")
            return
        for box in self.query(Input):
            if not box.has_class("hidden"):
                box.add_class("hidden")
                if box.id == "filter":
                    box.value = ""
                if box.id == "goto":
                    self._fold_after_goto()
                self.list.focus()
                return
        if self.query_text:
            self.query_one("#filter", Input).value = ""
        elif self.mark is not None:
            self.mark = None
            self.list.refresh_rows()

"""The timeline screen: a checkpoint's event tail with a cursor; the state at the cursor,
with what that step changed highlighted.

The event list is virtual (only the rows on screen are read from the tail). The state
at the cursor comes from ckptcli.history.timeline.Timeline: at once when it is a few reducer
applications away from a kept state, else from a worker thread that is abandoned when
the cursor moves on, while the rows stay responsive. Once the screen is shown, another
worker replays the tail to its end in the background so that every kept state exists
and any jump costs at most `Timeline.every` applications.
"""

from __future__ import annotations

import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.events import Key
from textual.timer import Timer
from textual.widgets import Header, Input, Static
from textual.worker import Worker, get_current_worker

from ckptcli.errors import CkptError
from ckptcli.format.jsonview import to_json
from ckptcli.history.change import Change
from ckptcli.history.events import Event
from ckptcli.history.render import Line, change_line, describe
from ckptcli.history.timeline import STOP_CHECK_EVERY, StepView, Stopped, Timeline
from ckptcli.tui.messages import (
    HolderFound,
    JumpDone,
    JumpIndexReady,
    PrefillDone,
    SearchDone,
    StateFailed,
    StateReady,
    ViewValue,
)
from ckptcli.tui.overview import OverviewStrip
from ckptcli.tui.screens.base import BaseScreen, KeyFooter, mark_text
from ckptcli.tui.session import Host, Session
from ckptcli.tui.valuetext import MISSING
from ckptcli.tui.widgets import ValueTree, VirtualList, path_text, styled_lines

if TYPE_CHECKING:
    from ckptcli.tui.follow import Follow, FollowUpdate

#: An event list narrower than this leaves out the events' times (the header shows the time at the cursor).
NARROW_LIST = 56
#: A state this many reducer applications away is replayed at once, on the UI thread.
SYNC_COST = 64
KIND_STYLES = {
    "snapshot": "bold cyan",
    "memory.set": "green",
    "memory.delete": "red",
    "plan.push": "blue",
    "plan.pop": "blue",
    "plan.update": "blue",
    "tool.call": "yellow",
    "tool.result": "yellow",
    "message.append": "cyan",
    "checkpoint": "bold magenta",
    "error": "bold red",
}
TOOL_OUTCOMES = {"ok": "green", "error": "bold red", "failed": "bold red", "pending": "yellow"}


def _failed(ev: Event) -> bool:
    return ev.kind == "tool.result" and ev.fields.get("status") in ("error", "failed")


#: What `]` and `[` jump to (the next or previous row of that sort), by the key after them.
JUMPS: dict[str, tuple[str, Callable[[Event], bool]]] = {
    "e": ("error", lambda ev: ev.kind == "error" or _failed(ev)),
    "t": ("tool call", lambda ev: ev.kind == "tool.call"),
    "f": ("tool failure", _failed),
    "p": ("plan change", lambda ev: ev.kind.startswith("plan.")),
    "m": ("message", lambda ev: ev.kind == "message.append"),
    "c": ("checkpoint", lambda ev: ev.kind == "checkpoint"),
}


class TailList(VirtualList):
    """The event list: `g` asks for a seq (Enter on nothing: the first row), as before the vim keys."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("g", "screen.goto", "Go to seq")]


class TimelineScreen(BaseScreen):
    """Scrub through a checkpoint's event tail."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("g", "goto", "Go to seq"),
        Binding("m", "mark", "Mark A"),
        Binding("d", "diff", "Diff A..cursor"),
        Binding("slash", "search", "Search"),
        Binding("n", "find(1)", "Next match", show=False),
        Binding("N", "find(-1)", "Previous match", show=False),
        Binding("c", "copy_id", "Copy id"),
        Binding("s", "focus_state", "State", show=False),
        Binding("v", "view", "View value", show=False),
        Binding("F", "follow", "Follow"),
        Binding("right_square_bracket", "jump(1)", "Next …", show=False),
        Binding("left_square_bracket", "jump(-1)", "Previous …", show=False),
    ]
    HELP = "Timeline: the event tail; the state at the cursor, what its step changed"
    DEFAULT_CSS = """
    TimelineScreen #tl-left { width: 55%; border-right: solid $primary-background; }
    TimelineScreen #events { height: 1fr; }
    TimelineScreen #step { height: 10; border-bottom: solid $primary-background; }
    TimelineScreen #state { height: 1fr; }
    TimelineScreen Input { height: 3; }
    """

    def __init__(
        self,
        session: Session,
        cid: bytes,
        *,
        row: int | None = None,
        seq: int | None = None,
        follow: bool | None = None,
        journal: Path | None = None,
    ) -> None:
        """`row`: the row to open at (the Events tab's row), else the snapshot's; `seq`: the
        row of that seq; `follow`: tail the run (default: the session's `--follow`), the
        cursor on the last row; `journal`: the journal to follow (default: the session's)."""
        super().__init__(session)
        self.journal = journal
        self.cid = cid
        self.start_row = row
        self.step_changes: dict[int, Change] = {}
        self.jump_direction = 0  # `]` or `[` pressed: the next key says what to jump to
        self.jump_rows: dict[str, array[int]] | None = None  # JUMPS key -> its rows, once the tail was read
        self.indexing = False
        self.ck = session.checkpoint(cid)
        # raises NotFoundError (no events section) before the screen is shown
        self.model = Timeline.open(self.ck, reducers=session.reducers)
        self.mark: int | None = None
        self.search_text = ""
        self.shown_row = -1
        self.step_lines: list[Line] = []
        self.prefilled = len(self.model) <= self.model.every
        if seq is not None:
            self.start_row = self.model.row_for_seq(seq)
        self.follow_at_start = session.follow if follow is None else follow
        self.follower: Follow | None = None
        self.follow_timer: Timer | None = None
        self.polling = False
        self.indexed_upto = 0  # rows the jump index was built from (rows appended later are added)
        #: checkpoints taken while following: (their last seq, hex id), oldest first
        self.live_checkpoints: list[tuple[int, str]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            with Vertical(id="tl-left"):
                yield Static(self._title(), id="tl-title", classes="pane-title")
                yield OverviewStrip(self._row_time, id="overview")
                yield TailList(self._render_row, len(self.model), on_highlight=self._request, id="events")
                yield self.make_input("go to seq: a number", "goto")
                yield self.make_input("search: a kind or text in the events (#42: seq 42)", "tsearch")
            with Vertical(id="tl-right"):
                yield Static("", id="at", classes="pane-title")
                yield VirtualList(self._render_step, id="step")
                yield Static("state", id="state-title", classes="pane-title")
                yield ValueTree("state", id="state")
        yield KeyFooter()

    def _title(self) -> str:
        n = len(self.model) - 1
        if n == 0:
            return f"no events after the snapshot (seq {self.model.base_seq})"
        title = f"{n:,} events, seq {self.model.base_seq + 1:,}..{self.model.last_seq:,}"
        if n > self.model.every:
            title += f"; a state kept every {self.model.every:,}" + ("" if self.prefilled else " (replaying in the background)")
        if self.follower is not None:
            title += "; following"
            if self.live_checkpoints:
                seq, hex_id = self.live_checkpoints[-1]
                title += f" (checkpoint {hex_id[:8]} at seq {seq:,})"
        return title

    def on_mount(self) -> None:
        self.sub_title = f"timeline of {self.ck.hex[:12]}  {self.ck.manifest.subject}"
        self.events.focus()
        start = min(self.start_row or 0, len(self.model) - 1)
        if start:
            self.events.set_cursor(start, center=True)  # the highlight calls _request
        else:
            self._request(0)
        if not self.prefilled and self.session.prefill:
            self.call_after_refresh(self._prefill)
        elif self.session.prefill:
            self.call_after_refresh(self._start_index)
        if self.follow_at_start:
            self.start_follow(cursor_to_end=self.start_row is None)
        self.strip.update_run(len(self.model), self.events.cursor)
        self.call_after_refresh(self.strip.activate)  # its reads wait for the first frame

    @property
    def strip(self) -> OverviewStrip:
        return self.query_one("#overview", OverviewStrip)

    def _row_time(self, r: int) -> int | None:
        """The time of row r's event (the overview strip's cells), None for the snapshot or one unreadable."""
        if r <= 0:
            return None
        try:
            return self.model.event(r - 1, keep=False).ts
        except CkptError:
            return None

    def _update_strip(self) -> None:
        """The strip after the rows, the jump index or the checkpoints taken changed."""
        errors = checkpoints = None
        if self.jump_rows is not None:
            errors = self.jump_rows["e"]
            live = []
            for seq, _hex in self.live_checkpoints:
                try:
                    live.append(self.model.row_for_seq(seq))
                except CkptError:
                    continue
            checkpoints = sorted({*self.jump_rows["c"], *live})
        self.strip.update_run(len(self.model), self.events.cursor, errors, checkpoints)

    def on_overview_strip_jump(self, message: OverviewStrip.Jump) -> None:
        self.events.focus()
        self.events.set_cursor(message.row, center=True)

    @property
    def events(self) -> VirtualList:
        return self.query_one("#events", VirtualList)

    # -- rows ------------------------------------------------------------------------------------
    def _render_row(self, r: int) -> Text:
        t = mark_text(r == self.mark)
        try:
            row = self.model.row(r)
        except CkptError as exc:
            t.append(f"event {r - 1}: {exc}", style="red")
            return t
        if r == 0:
            t.append(f"{'#' + str(row.seq):>8}  snapshot  ", style="bold cyan")
            t.append(row.summary, style="italic")
            return t
        t.append(f"{'#' + str(row.seq):>8} ", style="dim")
        if self.events.size.width >= NARROW_LIST:  # a narrow list keeps its width for the summary
            t.append(row.time[11:23] + " ", style="dim")
        t.append("↳ " if row.cause is not None else "▸ ", style="dim" if row.cause is not None else "bold")
        style = KIND_STYLES.get(row.kind, "magenta")
        if row.kind == "tool.result":  # the outcome's colour: green ok, red failed
            style = TOOL_OUTCOMES.get(str(self.model.event(r - 1).fields.get("status", "ok")), style)
        t.append(f"{row.kind:<15}", style=style)
        t.append(" " + row.summary)
        return t

    def _render_step(self, i: int) -> Text:
        return styled_lines(self.step_lines)(i)

    # -- the state at the cursor ---------------------------------------------------------------------
    def _request(self, r: int) -> None:
        self.shown_row = r
        for strip in self.query("#overview").results(OverviewStrip):
            strip.move_cursor(r)
        self._show_header(r)
        # a step needs the states before and after its event: the one before decides the cost
        if self.model.cost(max(r - 1, 0)) <= SYNC_COST:
            try:
                self._show_step(self.model.step(r))
            except CkptError as exc:
                self._show_failure(r, str(exc))
            return
        self._show_pending(r)
        self._replay(r)

    def _stopper(self, worker: Worker[None]) -> Callable[[], bool]:
        """`should_stop` for a replay in a worker thread: whether the worker was cancelled
        (asked about every millisecond of replaying). While the user is at the keys
        (Host.input_pending), it also gives up the interpreter (time.sleep(0)), so that
        the app's thread, drawing the rows, does not wait for the 5 ms switch interval
        behind a replay; otherwise the replay runs at full speed (giving up every
        millisecond also yields the CPU to other processes: a cold replay of 100,000
        events ran ~1.7x slower on a shared machine, bench/tui.py)."""
        app = self.app
        input_pending = app.input_pending if isinstance(app, Host) else (lambda: False)

        def should_stop() -> bool:
            if input_pending():
                time.sleep(0)
            return worker.is_cancelled

        return should_stop

    @work(thread=True, exclusive=True, group="replay")
    def _replay(self, r: int) -> None:
        worker = get_current_worker()
        try:
            step = self.model.step(r, should_stop=self._stopper(worker))
        except Stopped:
            return
        except CkptError as exc:
            self.post_message(StateFailed(r, str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - a bug: shown in the pane, not a crash of the worker's app
            self.post_message(StateFailed(r, f"internal error: {type(exc).__name__}: {exc}"))
            return
        self.post_message(StateReady(r, step))

    @work(thread=True, exclusive=True, group="replay")
    def _prefill(self) -> None:
        worker = get_current_worker()
        try:
            self.model.state(len(self.model) - 1, should_stop=self._stopper(worker))
        except (Stopped, CkptError):
            return  # stopped for a cursor request (which starts it again), or an event does not fit
        except Exception:  # noqa: BLE001 - a bug: the cursor's own replay will show it
            return
        self.post_message(PrefillDone(self.model.kept_states))

    def on_state_ready(self, message: StateReady) -> None:
        if message.row == self.shown_row:
            self._show_step(message.step)
        if not self.prefilled and self.session.prefill:
            self._prefill()

    def on_state_failed(self, message: StateFailed) -> None:
        if message.row == self.shown_row:
            self._show_failure(message.row, message.error)

    def on_prefill_done(self, message: PrefillDone) -> None:
        self.prefilled = True
        self.ckpt_app.settle()
        self.query_one("#tl-title", Static).update(self._title(), layout=False)
        self._start_index()

    def _show_header(self, r: int) -> None:
        try:
            row = self.model.row(r)
        except CkptError as exc:
            self.query_one("#at", Static).update(Text(str(exc), style="red"), layout=False)
            return
        if r == 0:
            text = f"snapshot at seq {row.seq}: the state before the tail"
        else:
            text = f"seq {row.seq}  {row.kind}  {row.time}  state after {r:,} of {len(self.model) - 1:,} events"
        self.query_one("#at", Static).update(text, layout=False)

    def _set_step_lines(self, lines: list[Line]) -> None:
        self.step_lines = lines
        self.query_one("#step", VirtualList).set_count(len(lines))

    def _show_pending(self, r: int) -> None:
        try:
            to = f"seq {self.model.seq(r):,}"
        except CkptError:  # the row's own event breaks the spec: the replay says why
            to = f"row {r:,}"
        self._set_step_lines(
            [("summary", f"replaying to {to} ({self.model.cost(max(r - 1, 0)) + 1:,} events from the nearest kept state)…")]
        )

    def _show_failure(self, r: int, error: str) -> None:
        self._set_step_lines([("remove", f"no state here: {error}")])
        self.query_one("#state", ValueTree).show(None, "state unavailable")

    def _show_step(self, step: StepView) -> None:
        r = step.row
        lines: list[Line] = []
        self.step_changes = {}
        if r == 0:
            lines.append(("summary", "the snapshot: the state before the first event of the tail"))
        else:
            ev = self.model.event(r - 1)
            fields = {k: v for k, v in ev.fields.items()}
            lines.append(("header", f"{ev.kind} {describe(to_json(fields), 200)}"))
            for c in step.changes:
                self.step_changes[len(lines)] = c
                lines.append(change_line(c))
            if not step.changes:
                lines.append(("summary", "(no change to the state)"))
        self._set_step_lines(lines)
        removed = {c.path: c.old for c in step.changes if c.op == "remove"}
        marks = {c.path: c.op for c in step.changes if c.op != "remove"}
        olds = {c.path: c.old for c in step.changes if c.op == "replace"}
        label = "state at the snapshot" if r == 0 else f"state at seq {self.model.seq(r):,}"
        self.query_one("#state", ValueTree).show(step.after, label, marks, removed, olds)

    # -- actions --------------------------------------------------------------------------------------
    def action_back(self) -> None:
        """Esc: close an open input, else from the step or the state back to the events,
        else back to the screen below."""
        for box in self.query(Input):
            if not box.has_class("hidden"):
                box.add_class("hidden")
                self.events.focus()
                return
        if not self.events.has_focus:
            self.events.focus()
            return
        self.workers.cancel_group(self, "replay")
        self.workers.cancel_group(self, "search")
        self.workers.cancel_group(self, "index")
        self.workers.cancel_group(self, "goto")
        self.leave(self.cid)

    def action_goto(self) -> None:
        box = self.query_one("#goto", Input)
        box.value = ""
        box.remove_class("hidden")
        box.focus()

    def goto_elsewhere(self, seq: int) -> None:
        """`g SEQ` outside this tail: the subject's checkpoint whose tail holds it is opened
        at that seq, in place of this timeline (Session.holder_of_seq, which may read up to
        64 tails: in a worker, the keys stay live meanwhile); when none holds it, a
        notification says so and the cursor stays."""
        self._find_holder(seq)

    @work(thread=True, exclusive=True, group="goto")
    def _find_holder(self, seq: int) -> None:
        worker = get_current_worker()
        try:
            holder = self.session.holder_of_seq(str(self.ck.manifest.subject), seq, self.cid)
        except CkptError as exc:
            self.post_message(HolderFound(seq, None, str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - a bug: said in a notification, not a crash of the worker's app
            self.post_message(HolderFound(seq, None, f"internal error: {type(exc).__name__}: {exc}"))
            return
        if not worker.is_cancelled:
            self.post_message(HolderFound(seq, holder))

    def on_holder_found(self, message: HolderFound) -> None:
        seq, holder = message.seq, message.holder
        if message.error is not None:
            self.notify(f"g {seq}: {message.error}", title="error", severity="error", timeout=8)
            return
        if self.app.screen is not self:
            return  # left meanwhile (Esc, a viewer on top): not replaced under the user's feet
        subject = str(self.ck.manifest.subject)
        if holder is None:
            self.notify(
                f"seq {seq:,} is not in this tail (seq {self.model.base_seq:,} (the snapshot) to {self.model.last_seq:,}) "
                f"nor in any other checkpoint of {subject}",
                severity="warning",
                timeout=6,
            )
            return
        try:
            screen = TimelineScreen(self.session, holder, seq=seq)
        except CkptError as exc:
            self.error(exc)
            return
        self.workers.cancel_group(self, "replay")
        self.workers.cancel_group(self, "search")
        self.workers.cancel_group(self, "index")
        if self.follower is not None:
            self.stop_follow()
        self.app.switch_screen(screen)
        self.app.notify(f"seq {seq:,} is in checkpoint {holder.hex()[:12]}: its timeline", timeout=4)

    def action_search(self) -> None:
        box = self.query_one("#tsearch", Input)
        box.value = self.search_text
        box.remove_class("hidden")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.add_class("hidden")
        self.events.focus()
        value = event.value.strip()
        if event.input.id == "goto":
            text = value.lstrip("#")
            if text and not (text.isdecimal() and text.isascii()):
                self.notify(f"{value!r} is not a seq number", severity="warning")
                return
            if not text:  # g Enter: the first row
                self.events.set_cursor(0, center=True)
                return
            seq = int(text)
            if not self.model.base_seq <= seq <= self.model.last_seq:
                self.goto_elsewhere(seq)
                return
            try:
                self.events.set_cursor(self.model.row_for_seq(seq), center=True)
            except CkptError as exc:
                self.error(exc)
        elif event.input.id == "tsearch":
            self.search_text = value
            self.action_find(1)

    def action_find(self, direction: int) -> None:
        if not self.search_text:
            self.action_search()
            return
        self._search(self.search_text, self.events.cursor, direction < 0)

    @work(thread=True, exclusive=True, group="search")
    def _search(self, text: str, start: int, backwards: bool) -> None:
        worker = get_current_worker()
        try:
            found = self.model.find(text, start, backwards=backwards, should_stop=self._stopper(worker))
        except (Stopped, CkptError):
            return
        self.post_message(SearchDone(text, found))

    def on_search_done(self, message: SearchDone) -> None:
        if message.row is None:
            self.notify(f"no event matches {message.query!r}", severity="warning", timeout=3)
        else:
            self.events.set_cursor(message.row, center=True)

    def action_mark(self) -> None:
        r = self.events.cursor
        self.mark = None if self.mark == r else r
        self.events.refresh_rows()
        if self.mark is not None:
            self.notify(f"marked seq {self.model.seq(r):,} as A: move to B and press d", timeout=4)

    def action_diff(self) -> None:
        a = self.mark if self.mark is not None else max(0, self.events.cursor - 1)
        b = self.events.cursor
        from ckptcli.tui.screens.diff import DiffScreen

        self.app.push_screen(DiffScreen.of_points(self.session, self.model, a, b))

    def action_copy_id(self) -> None:
        self.ckpt_app.copy_id(self.ck.hex)

    def point(self) -> tuple[bytes, int | None]:
        """The checkpoint and the seq at the cursor (ckptcli.tui.actions: B forks after that event)."""
        return (self.cid, self.model.seq(self.events.cursor))

    def action_focus_state(self) -> None:
        self.query_one("#state", ValueTree).focus()

    # -- the value viewer ---------------------------------------------------------------------------
    def on_virtual_list_selected(self, event: VirtualList.Selected) -> None:
        if event.list.id == "events":
            self._view_event(event.index)
        elif event.list.id == "step":
            self._view_step_line(event.index)

    def _view_event(self, r: int) -> None:
        try:
            if r == 0:
                self.post_message(ViewValue(f"the snapshot of {self.ck.hex[:12]}", self.model.snapshot))
                return
            ev = self.model.event(r - 1)
        except CkptError as exc:
            self.error(exc)
            return
        self.post_message(ViewValue(f"event seq {ev.seq:,} ({ev.kind})", {"seq": ev.seq, "ts": ev.ts, "kind": ev.kind, **ev.fields}))

    def _view_step_line(self, i: int) -> None:
        c = self.step_changes.get(i)
        if c is None:
            if i == 0 and self.shown_row > 0:
                self._view_event(self.shown_row)
            return
        old = MISSING if c.op == "add" else c.old
        new = MISSING if c.op == "remove" else c.new
        self.post_message(ViewValue(f"seq {self.model.seq(self.shown_row):,}: {path_text(c.path)}", new, old, changed=True))

    def action_view(self) -> None:
        """v: the value under the cursor whole: the event, a change, a node of the state."""
        focused = self.focused
        if isinstance(focused, ValueTree):
            focused.action_view()
        elif focused is self.events:
            self._view_event(self.events.cursor)
        elif isinstance(focused, VirtualList) and focused.id == "step":
            self._view_step_line(focused.cursor)

    # -- jumps: ]e [e (error), ]t (tool call), ]f (tool failure), ]p (plan change), ]m, ]c ----------------
    def action_jump(self, direction: int) -> None:
        self.jump_direction = direction
        keys = "  ".join(f"{k} {what}" for k, (what, _) in JUMPS.items())
        self.notify(f"{'next' if direction > 0 else 'previous'}: {keys}", timeout=2)

    def on_key(self, event: Key) -> None:
        if not self.jump_direction:
            return
        direction, self.jump_direction = self.jump_direction, 0
        if event.character in JUMPS:
            event.stop()
            event.prevent_default()
            self.jump_to(event.character, direction)

    def jump_to(self, key: str, direction: int) -> None:
        """Move to the next row (`direction` -1: the previous) of the sort JUMPS[key] names:
        looked up in the index of the tail's rows once it is read (in the background, after
        the replay of the tail), else found by reading events from the cursor on."""
        if self.jump_rows is None:
            self._start_index()
            self._jump(key, self.events.cursor, direction)
            return
        rows = self.jump_rows[key]
        at = self.events.cursor
        found: int | None = None
        if rows:
            if direction > 0:
                i = bisect_right(rows, at)
                found = rows[i] if i < len(rows) else rows[0]
            else:
                i = bisect_left(rows, at) - 1
                found = rows[i] if i >= 0 else rows[-1]
        self.on_jump_done(JumpDone(JUMPS[key][0], None if found == at else found))

    def _start_index(self) -> None:
        if self.jump_rows is None and not self.indexing:
            self.indexing = True
            self._index()

    @work(thread=True, exclusive=True, group="index")
    def _index(self) -> None:
        worker = get_current_worker()
        should_stop = self._stopper(worker)
        tests = [(k, test) for k, (_what, test) in JUMPS.items()]
        rows: dict[str, array[int]] = {k: array("i") for k in JUMPS}
        n = len(self.model)
        try:
            for r in range(1, n):
                if r % STOP_CHECK_EVERY == 0 and should_stop():
                    return
                ev = self.model.event(r - 1, keep=False)
                for k, test in tests:
                    if test(ev):
                        rows[k].append(r)
        except CkptError:
            return  # an event that does not fit: jumps keep reading events
        self.indexed_upto = n
        self.post_message(JumpIndexReady(rows))

    def on_jump_index_ready(self, message: JumpIndexReady) -> None:
        self.jump_rows = message.rows
        self._index_rows(self.indexed_upto, len(self.model))  # rows a follow appended meanwhile
        self._update_strip()

    def _index_rows(self, start: int, end: int) -> None:
        """Add rows start..end-1 (appended while following) to the jump index."""
        if self.jump_rows is None:
            return
        try:
            for r in range(max(start, 1), end):
                ev = self.model.event(r - 1)
                for k, (_what, test) in JUMPS.items():
                    if test(ev):
                        self.jump_rows[k].append(r)
        except CkptError:
            self.jump_rows = None  # jumps read events again
            self.indexing = False
            return
        self.indexed_upto = end

    @work(thread=True, exclusive=True, group="search")
    def _jump(self, key: str, start: int, direction: int) -> None:
        worker = get_current_worker()
        what, test = JUMPS[key]
        should_stop = self._stopper(worker)
        n = len(self.model)
        try:
            for step in range(1, n):
                if step % STOP_CHECK_EVERY == 0 and should_stop():
                    return
                r = (start + direction * step) % n
                if r and test(self.model.event(r - 1, keep=False)):
                    self.post_message(JumpDone(what, r))
                    return
        except CkptError:
            pass
        self.post_message(JumpDone(what, None))

    def on_jump_done(self, message: JumpDone) -> None:
        if message.row is None:
            self.notify(f"no other {message.what} in this tail", severity="warning", timeout=3)
        else:
            self.events.set_cursor(message.row, center=True)

    # -- following the run: F, ckpt tui --follow ------------------------------------------------------
    def action_follow(self) -> None:
        if self.follower is None:
            self.start_follow(cursor_to_end=True)
        else:
            self.stop_follow()

    def start_follow(self, *, cursor_to_end: bool) -> None:
        """Tail the run from this timeline's last event on: the checkpoints taken after it
        and the recorder's journal (the session's, else one found beside the store), polled
        every POLL_SECONDS in a worker; new events are rows appended at the end."""
        from ckptcli.tui.follow import POLL_SECONDS, Follow, LiveEvents, journal_places  # not on the first paint's path

        if not isinstance(self.model.events, LiveEvents):
            self.model.events = LiveEvents(self.model.events)
        from ckptcli.store.repository import Store

        store = self.session.source if isinstance(self.session.source, Store) else None
        subject = str(self.ck.manifest.subject)
        journal = self.journal or self.session.journal
        try:
            last = self.model.last_seq
        except CkptError as exc:
            self.error(exc)
            return
        places = journal_places(store) if journal is None and store is not None else None  # looked in by the polls
        self.follower = Follow(store, subject, last, {self.cid}, journal, places)
        self.follow_timer = self.set_interval(POLL_SECONDS, self._tick)
        self.query_one("#tl-title", Static).update(self._title(), layout=False)
        where = f"journal {journal}" if journal is not None else "its checkpoints, and its journal once found beside the store"
        self.notify(f"following {subject}: {where}; F stops", timeout=4)
        if cursor_to_end:
            self.events.set_cursor(len(self.model) - 1)

    def _follow_new_run(self, cid: bytes) -> None:
        """The followed journal records another run now, from checkpoint `cid`: its timeline,
        following that journal, in place of this one (rows are only ever appended: another
        run's events are not this tail's)."""
        journal = self.follower.journal.path if self.follower is not None and self.follower.journal is not None else None
        try:
            screen = TimelineScreen(self.session, cid, follow=True, journal=journal)
        except CkptError as exc:
            self.error(exc)
            return
        self.stop_follow(quiet=True)
        self.workers.cancel_group(self, "replay")
        self.workers.cancel_group(self, "search")
        self.workers.cancel_group(self, "index")
        if self.app.screen is self:
            self.app.switch_screen(screen)

    def stop_follow(self, *, quiet: bool = False) -> None:
        if self.follow_timer is not None:
            self.follow_timer.stop()
        self.follow_timer = None
        self.follower = None
        self.workers.cancel_group(self, "follow")
        self.polling = False
        self.query_one("#tl-title", Static).update(self._title(), layout=False)
        if not quiet:
            self.notify("stopped following", timeout=2)

    def _tick(self) -> None:
        if self.follower is not None and not self.polling:
            self.polling = True
            self._poll(self.follower)

    @work(thread=True, group="follow")
    def _poll(self, follower: Follow) -> None:
        from ckptcli.tui.follow import FollowUpdate

        try:
            update = follower.poll()
        except Exception as exc:  # noqa: BLE001 - a journal or store that cannot be read: said, not a crash
            update = FollowUpdate([], [], follower)
            self.app.call_from_thread(self.notify, f"following: {exc}", severity="warning", timeout=4)
        self.post_message(update if update is not None else FollowUpdate([], [], follower))

    def on_follow_update(self, message: FollowUpdate) -> None:
        if self.follower is None or message.follower is not self.follower:
            return  # a poll of a follow stopped since
        self.polling = False
        if message.found is not None:
            self.notify(f"following the journal {message.found}", timeout=3)
        if message.said is not None:
            self.notify(message.said, title="following", severity="warning", timeout=8)
        if message.new_run is not None:
            self._follow_new_run(message.new_run)
            return
        if not (message.events or message.checkpoints):
            return
        events = self.events
        before = len(self.model)
        at_end = events.cursor >= before - 1
        if message.events:
            from ckptcli.tui.follow import LiveEvents

            assert isinstance(self.model.events, LiveEvents)
            self.model.events.append(message.events)
        after = len(self.model)
        for hex_id, seq in message.checkpoints:
            self.live_checkpoints.append((seq, hex_id))
        if after != before:
            self._index_rows(before, after)
            events.extend(after)
            if at_end:  # the cursor was at the end: it follows
                events.set_cursor(after - 1)
        self.query_one("#tl-title", Static).update(self._title(), layout=False)
        self._update_strip()

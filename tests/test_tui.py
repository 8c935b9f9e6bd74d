"""`ckpt tui` driven by Textual's Pilot: every view, every binding, the mouse, filter and
search, the timeline's cursor and the state it shows, diffs, help, copying an id, opening
a checkpoint file; and the command's errors before Textual starts.

The tests wait for the app's workers (`wait_for_complete`) where a screen replays or
diffs in the background, so nothing here depends on timing."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint, take
from ckptcli.history.replay import replay
from ckptcli.store.single import CheckpointFile
from ckptcli.tui.app import CkptApp
from ckptcli.tui.screens.checkpoint import CheckpointScreen
from ckptcli.tui.screens.diff import DiffScreen
from ckptcli.tui.screens.help import HelpScreen
from ckptcli.tui.screens.history import HistoryScreen
from ckptcli.tui.screens.timeline import TimelineScreen
from ckptcli.tui.widgets import ValueTree, VirtualList
from tests.conftest import REPO
from tests.tui_data import build_demo_store, demo_events, export_demo
from tests.tui_pilot import run, settle

Scenario = Callable[[Any], Awaitable[None]]
SIZE = (120, 36)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    path = tmp_path_factory.mktemp("demo") / ".ckpt"
    return path, build_demo_store(path)


def test_the_demo_stores_files_restore_whole(demo: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    """Each file of the demo's blobs holds the bytes its size declares (restore checks it)."""
    path, ids = demo
    from ckptcli.api import Checkpoint

    Checkpoint(ckptcli.open_store(path), ids["merge"]).restore_blobs(tmp_path / "out")
    assert (tmp_path / "out" / "out" / "report.csv").stat().st_size == 24


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """A 1,500-event tail, a tail with an event that does not fit, a 250-key memory."""
    path = tmp_path_factory.mktemp("big") / ".ckpt"
    store = ckptcli.init_store(path)
    snap: dict[str, Any] = {"memory": {"messages": []}, "plan": [], "tools": []}
    ids = {"long": take(store, {**snap, "events": demo_events(1, 1500, 10**18)}, subject="agent:long").id}
    broken: list[dict[str, Any]] = [{"seq": i, "ts": i, "kind": "memory.set", "path": ["k"], "value": i} for i in range(1, 11)]
    broken[5] = {"seq": 6, "ts": 6, "kind": "plan.pop"}
    ids["broken"] = take(store, {**snap, "events": broken}, subject="agent:broken").id
    ids["wide"] = take(store, {"memory": {f"key{i:03}": i for i in range(250)}}, subject="agent:wide").id
    return path, ids


def text(widget: Any) -> str:
    return str(widget.content)


def rows(lst: VirtualList) -> list[str]:
    return [lst.render_row(i).plain for i in range(lst.count)]


# -- history -------------------------------------------------------------------------------------------
def test_history_lists_every_checkpoint_newest_first_with_its_graph(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, HistoryScreen)
        lst = screen.query_one("#checkpoints", VirtualList)
        assert lst.count == 11 and lst.has_focus and lst.first_render_at is not None
        shown = rows(lst)
        assert shown[0].startswith("  ▲") and ids["migrated"].hex()[:12] in shown[0] and "<latest>" in shown[0]
        assert "[known-good]" in shown[[n.id for n in screen.rows].index(ids["good"])]
        assert "(try-again)" in shown[1]
        assert ids["migrated"].hex() in text(screen.query_one("#detail"))
        assert "all subjects: 11 checkpoints" in text(screen.query_one("#title"))

    run(path, scenario)


def test_cursor_keys_move_through_the_history(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        lst = screen.query_one("#checkpoints", VirtualList)
        await pilot.press("down", "down")
        assert lst.cursor == 2
        assert ids["fork"].hex() in text(screen.query_one("#detail"))
        await pilot.press("end")
        assert lst.cursor == 10 and ids["root"].hex() in text(screen.query_one("#detail"))
        await pilot.press("home")
        assert lst.cursor == 0
        await pilot.press("pagedown")
        assert lst.cursor == 10  # the list is shorter than a page
        await pilot.press("pageup", "up")
        assert lst.cursor == 0

    run(path, scenario)


def test_subjects_narrow_the_history(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, _ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        lst = screen.query_one("#checkpoints", VirtualList)
        await pilot.press("s")
        assert screen.query_one("#subjects").has_focus
        await pilot.press("down")
        assert screen.subject == "agent:support-bot" and lst.count == 7
        assert rows(lst)[3].startswith("  ●─╯")  # the recorded checkpoint: its fork branches off here
        await pilot.press("down")
        assert screen.subject == "workflow:nightly" and lst.count == 4
        assert [r[2:5] for r in rows(lst)] == ["◉─╮", "│ ●", "● │", "○─╯"]
        await pilot.press("enter")  # back to the list
        assert lst.has_focus
        await pilot.press("s", "up", "up")
        assert screen.subject is None and lst.count == 11

    run(path, scenario)


def test_filter_narrows_and_escape_clears_it(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        lst = screen.query_one("#checkpoints", VirtualList)
        await pilot.press("f")
        box = screen.query_one("#filter")
        assert box.has_focus and not box.has_class("hidden")
        await pilot.press(*"fork")
        assert [n.id for n in screen.rows] == [ids["fork2"], ids["fork"]]
        assert "2 of 11" in text(screen.query_one("#title"))
        await pilot.press("enter")
        assert lst.has_focus and box.has_class("hidden") and lst.count == 2
        await pilot.press("escape")
        assert lst.count == 11 and screen.query_text == ""
        await pilot.press("f", *"zzz")
        assert lst.count == 0 and "no checkpoints match" in text(screen.query_one("#detail"))
        await pilot.press("escape")  # closes the input and clears the filter
        assert lst.count == 11

    run(path, scenario)


def test_search_moves_to_matches_with_n_and_shift_n(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, _ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        lst = screen.query_one("#checkpoints", VirtualList)
        await pilot.press("n")  # nothing searched yet: opens the search box
        assert screen.query_one("#search").has_focus
        await pilot.press(*"nightly", "enter")
        first = lst.cursor
        assert screen.rows[first].subject == "workflow:nightly" and lst.has_focus
        await pilot.press("n")
        assert lst.cursor == first + 1
        await pilot.press("N")
        assert lst.cursor == first
        await pilot.press("slash", *"x" * 3, "enter")
        assert lst.cursor == first  # no match: the cursor stays

    run(path, scenario)


def test_mouse_click_moves_the_cursor_and_a_second_click_opens(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        lst = screen.query_one("#checkpoints", VirtualList)
        await pilot.click("#checkpoints", offset=(20, 3))
        assert lst.cursor == 3 and screen.rows[3].id == ids["recorded"]
        await pilot.click("#checkpoints", offset=(20, 3))
        await pilot.pause()
        top = pilot.app.screen
        assert isinstance(top, CheckpointScreen) and top.cid == ids["recorded"]
        await pilot.press("escape")
        assert pilot.app.screen is screen
        await pilot.click("#subjects", offset=(2, 2))  # the second subject
        assert screen.subject == "workflow:nightly"

    run(path, scenario)


def test_enter_t_and_escape_open_and_close_screens(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        history = pilot.app.screen
        await pilot.press("enter")
        assert isinstance(pilot.app.screen, CheckpointScreen) and pilot.app.screen.cid == ids["migrated"]
        await pilot.press("escape")
        assert pilot.app.screen is history
        await pilot.press("down", "down", "down", "t")
        assert isinstance(pilot.app.screen, TimelineScreen) and pilot.app.screen.cid == ids["recorded"]
        await pilot.press("escape")
        assert pilot.app.screen is history
        await pilot.press("home", *["down"] * 6, "t")  # the merge has no tail: an error, not a crash
        await pilot.pause()
        assert pilot.app.screen is history
        assert any("no event tail" in n.message for n in pilot.app._notifications)

    run(path, scenario)


def test_mark_and_diff_two_checkpoints(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        await pilot.press("end", "space")  # A: the root
        assert screen.mark == ids["root"] and rows(screen.query_one("#checkpoints", VirtualList))[10].startswith("A ")
        await pilot.press("home", "d")  # B: the latest
        await settle(pilot)
        diff = pilot.app.screen
        assert isinstance(diff, DiffScreen)
        lines = diff.lines
        assert lines[0] == ("header", f"diff {ids['root'].hex()[:12]} -> {ids['migrated'].hex()[:12]}")
        assert ("add", '+ customer.segment: "retail"') in lines
        assert lines[-1][0] == "summary" and diff.patch
        await pilot.press("s")
        await settle(pilot)
        assert [k for k, _ in diff.lines if k == "section"] and not [k for k, _ in diff.lines if k == "add"]  # --stat
        await pilot.press("c")
        assert '"op": "add"' in pilot.app.clipboard
        await pilot.press("escape", "escape")  # back; and clear the mark
        assert pilot.app.screen is screen and screen.mark is None
        await pilot.press("down", "d")  # no mark: against its parent
        await settle(pilot)
        assert pilot.app.screen.lines[0] == ("header", f"diff {ids['fork'].hex()[:12]} -> {ids['fork2'].hex()[:12]}")
        assert ("change", '~ memory.mood: "calm" -> "curious"') not in pilot.app.screen.lines  # paths are per section
        assert ("change", '~ mood: "calm" -> "curious"') in pilot.app.screen.lines

    run(path, scenario)


def test_diff_needs_a_second_checkpoint(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, _ids = demo

    async def scenario(pilot: Any) -> None:
        await pilot.press("end", "d")  # the root has no parent, and nothing is marked
        await pilot.pause()
        assert isinstance(pilot.app.screen, HistoryScreen)
        assert any("mark a checkpoint first" in n.message for n in pilot.app._notifications)

    run(path, scenario)


def test_copy_id_puts_it_on_the_clipboard_and_says_so(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo
    calls: list[str] = []

    async def scenario(pilot: Any) -> None:
        original = pilot.app.copy_to_clipboard
        pilot.app.copy_to_clipboard = lambda s: (calls.append(s), original(s))
        await pilot.press("down", "c")
        assert calls == [ids["fork2"].hex()] and pilot.app.clipboard == ids["fork2"].hex()
        assert any(ids["fork2"].hex() in n.message for n in pilot.app._notifications)

    run(path, scenario)


def test_help_screen_lists_every_binding(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, _ids = demo

    async def scenario(pilot: Any) -> None:
        await pilot.press("question_mark")
        help_screen = pilot.app.screen
        assert isinstance(help_screen, HelpScreen)
        body = help_screen.query_one("#help-body").content.plain
        for cls in (HistoryScreen, CheckpointScreen, TimelineScreen, DiffScreen, CkptApp):
            for b in cls.BINDINGS:
                assert b.description in body, b
        assert "◆" in body and "a fork" in body
        await pilot.press("escape")
        assert isinstance(pilot.app.screen, HistoryScreen)
        await pilot.press("f1")
        assert isinstance(pilot.app.screen, HelpScreen)
        await pilot.press("question_mark")
        assert isinstance(pilot.app.screen, HistoryScreen)

    run(path, scenario)


def test_q_quits(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, _ids = demo

    async def scenario(pilot: Any) -> None:
        await pilot.press("enter", "q")  # from any screen

    app = run(path, scenario)
    assert app.return_code == 0 and not app.is_running


# -- checkpoint ------------------------------------------------------------------------------------------
def test_every_tab_of_a_checkpoint(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, CheckpointScreen)
        overview = screen.query_one("#overview-body").content
        cells = " ".join(str(c) for col in overview.columns for c in col._cells)
        assert ids["recorded"].hex() in cells and "recorder: 40 events" in cells and "list, 40 items" in cells
        await pilot.press("2")
        tree = screen.query_one("#memory-tree", ValueTree)
        assert str(tree.root.label).startswith("memory (map, 5 keys)")
        assert [str(c.label).split(" ")[0].rstrip(":") for c in tree.root.children] == ["goal", "customer", "messages", "mood", "queue"]
        await pilot.press("3")
        plan = screen.query_one("#plan-list", VirtualList)
        assert plan.count == 1 and rows(plan)[0].startswith("▶ top [0] running")
        await pilot.press("4")
        assert screen.query_one("#tools-list", VirtualList).count == 0
        await pilot.press("5")
        events = screen.query_one("#events-list", VirtualList)
        assert events.count == 40 and rows(events)[0].startswith("#1 ")
        await pilot.press("6")
        assert text(screen.query_one("#blobs-note")) == "no blobs"
        await pilot.press("7")
        assert "no ext sections" in str(screen.query_one("#ext-tree", ValueTree).root.label)
        await pilot.press("1")
        assert screen.query_one("#tabs").active == "overview"

    run(path, scenario, checkpoint=ids["recorded"], view="checkpoint")


def test_plan_tools_and_blobs_of_other_checkpoints(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        await pilot.press("3")
        plan = screen.query_one("#plan-list", VirtualList)
        assert plan.count == 2 and "look up order 4705" in rows(plan)[0] and "triage the queue" in rows(plan)[1]
        await pilot.press("4")
        tools = screen.query_one("#tools-list", VirtualList)
        assert tools.count == 5 and "✗ orders.lookup" in rows(tools)[2] and "timeout" in rows(tools)[2]
        tools.focus()
        await pilot.press("down", "down")
        assert str(screen.query_one("#tools-item", ValueTree).root.label) == "tools[2]"
        await pilot.click("#tools-list", offset=(5, 4))
        assert str(screen.query_one("#tools-item", ValueTree).root.label) == "tools[4]"

    run(path, scenario, checkpoint=ids["migrated"], view="checkpoint")


def test_blobs_tab_and_clicking_a_tab(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        await pilot.click("#--content-tab-blobs")
        await pilot.pause()
        assert screen.query_one("#tabs").active == "blobs"
        listing = rows(screen.query_one("#blobs-list", VirtualList))
        assert listing == ["out/  0755", "  report.csv  24 B  0644", "  latest -> report.csv", "  logs/  0755", "    run.log  3 B  0600"]
        assert text(screen.query_one("#blobs-note")) == "2 files, 27 B"

    run(path, scenario, checkpoint=ids["merge"], view="checkpoint")


def test_checkpoint_screen_keys(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        await pilot.press("c")
        assert pilot.app.clipboard == ids["fork"].hex()
        await pilot.press("d")
        await settle(pilot)
        assert isinstance(pilot.app.screen, DiffScreen)
        assert pilot.app.screen.lines[0][1] == f"diff {ids['recorded'].hex()[:12]} -> {ids['fork'].hex()[:12]}"
        await pilot.press("escape", "t")
        timeline = pilot.app.screen
        assert isinstance(timeline, TimelineScreen) and len(timeline.model) == 1  # a fork's tail is empty
        await pilot.press("escape")
        assert pilot.app.screen is screen
        await pilot.press("5", "escape")
        assert isinstance(pilot.app.screen, HistoryScreen)
        assert pilot.app.screen.rows[pilot.app.screen.list.cursor].id == ids["fork"]  # opened at it

    run(path, scenario, checkpoint=ids["fork"], view="checkpoint")


def test_enter_on_the_events_tab_opens_the_timeline(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        await pilot.press("5")
        pilot.app.screen.query_one("#events-list", VirtualList).focus()
        await pilot.press("enter")
        assert isinstance(pilot.app.screen, TimelineScreen)

    run(path, scenario, checkpoint=ids["recorded"], view="checkpoint")


def test_a_long_map_opens_a_page_at_a_time(big: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = big

    async def scenario(pilot: Any) -> None:
        await pilot.press("2")
        tree = pilot.app.screen.query_one("#memory-tree", ValueTree)
        children = tree.root.children
        assert len(children) == 101 and "150 more" in str(children[-1].label)
        tree.focus()
        tree.move_cursor(children[-1])
        await pilot.press("enter")
        children = tree.root.children
        assert len(children) == 201 and str(children[100].label) == "key100: 100" and "50 more" in str(children[-1].label)

    run(path, scenario, checkpoint=ids["wide"], view="checkpoint")


# -- timeline ------------------------------------------------------------------------------------------------
def test_replays_in_workers_give_way_to_input(demo: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    """For a moment after a key, a replay in a worker thread gives up the interpreter at
    each check (time.sleep(0)); otherwise it runs at full speed."""
    import threading

    from ckptcli.tui import app as app_module
    from ckptcli.tui.screens import timeline as screen_module

    path, ids = demo
    yields: list[tuple[int, float]] = []  # (thread, seconds): the scenario's own, not a background replay's
    monkeypatch.setattr(screen_module.time, "sleep", lambda s: yields.append((threading.get_ident(), s)))
    # the window outlasts any pause of a loaded machine between the key and the check
    monkeypatch.setattr(app_module, "INPUT_WINDOW", 3600.0)

    async def scenario(pilot: Any) -> None:
        app = pilot.app
        me = threading.get_ident()
        stop = app.screen._stopper(type("W", (), {"is_cancelled": False})())
        app.last_input = time.monotonic() - 7200.0
        assert not app.input_pending() and stop() is False and [s for t, s in yields if t == me] == []
        await pilot.press("down")
        assert app.input_pending() and stop() is False and [s for t, s in yields if t == me] == [0]

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def test_timeline_cursor_shows_the_state_and_what_the_step_changed(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo
    ck = open_checkpoint(ids["recorded"].hex(), ckptcli.open_store(path))

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, TimelineScreen)
        events = screen.query_one("#events", VirtualList)
        state = screen.query_one("#state", ValueTree)
        assert events.count == 41 and rows(events)[0].strip().startswith("#0  snapshot")
        assert str(state.root.label) == "state at the snapshot"
        await pilot.press("down", "down", "down", "down")
        assert events.cursor == 4 and text(screen.query_one("#at")).startswith("seq 4  tool.result")
        assert state.root.data is not None and state.root.data.value == replay(ck, to_seq=4)
        assert state.marks == {
            ("tools", 0, "status"): "replace",
            ("tools", 0, "result"): "add",
            ("tools", 0, "result_seq"): "add",
            ("tools", 0, "duration_ns"): "add",
        }
        step = [t for _k, t in screen.step_lines]
        assert step[1:] == [
            '~ tools[0].status: "pending" -> "ok"',
            '+ tools[0].result: {"status": "shipped", "eta": "2026-01-03"}',
            "+ tools[0].result_seq: 4",
            "+ tools[0].duration_ns: 1500000000",
        ]
        tools = next(n for n in state.root.children if n.data is not None and n.data.path == ("tools",))
        assert tools.is_expanded and tools.children[0].is_expanded  # the changed record is open
        await pilot.press("down", "down", "down")  # plan.pop: a removal, shown struck out
        assert any("(removed)" in str(n.label) for n in _walk(state.root))
        await pilot.press("pagedown")
        assert events.cursor > 7
        await pilot.press("end")
        assert events.cursor == 40 and state.root.data.value == replay(ck)
        await pilot.press("home")
        assert events.cursor == 0
        await pilot.click("#events", offset=(10, 9))
        assert events.cursor == 9 and text(screen.query_one("#at")).startswith("seq 9 ")

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def _walk(node: Any) -> list[Any]:
    out = [node]
    for c in node.children:
        out.extend(_walk(c))
    return out


def test_timeline_goto_search_mark_diff_copy(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        events = screen.query_one("#events", VirtualList)
        await pilot.press("g", *"20", "enter")
        await settle(pilot)  # a loaded machine may still be loading the tail's rows
        assert events.cursor == 20 and events.has_focus
        await pilot.press("g", *"x", "enter")
        assert events.cursor == 20 and any("not a seq number" in n.message for n in pilot.app._notifications)
        await pilot.press("home", "slash", *"toolf", "enter")  # the error event's "ToolFailed: ..."
        await settle(pilot)
        assert events.cursor == 21 and screen.model.row(21).kind == "error"
        await pilot.press("slash", "ctrl+u", *"ol.CA", "enter")  # any case: the kind tool.call
        await settle(pilot)
        calls = [r for r in range(41) if screen.model.row(r).kind == "tool.call"]
        assert len(calls) == 5 and events.cursor == calls[3]
        await pilot.press("n")
        await settle(pilot)
        assert events.cursor == calls[4]
        await pilot.press("n")
        await settle(pilot)
        assert events.cursor == calls[0]  # wrapped around
        await pilot.press("N")
        await settle(pilot)
        assert events.cursor == calls[4]
        await pilot.press("home", "m")
        assert screen.mark == 0 and rows(events)[0].startswith("A ")
        await pilot.press("end", "d")
        await settle(pilot)
        diff = pilot.app.screen
        assert isinstance(diff, DiffScreen)
        assert diff.lines[0] == ("header", f"state at seq 0 -> state at seq 40 (checkpoint {ids['recorded'].hex()[:12]})")
        assert ("add", '+ orders: {"4701": "shipped", "4702": "shipped", "4703": "unknown", "4704": "shipped", "4… (5 keys)') in diff.lines
        assert diff.lines[-1] == ("summary", "16 changes: memory 10 added; plan 1 added; tools 5 added")
        assert {"op": "add", "path": "/plan/1", "value": {"step": "look up order 4705", "status": "done"}} in diff.patch
        await pilot.press("escape", "c")
        assert pilot.app.clipboard == ids["recorded"].hex()
        await pilot.press("s")
        assert screen.query_one("#state").has_focus
        await pilot.press("escape")  # one pane back: the events
        assert pilot.app.screen is screen and screen.query_one("#events").has_focus
        await pilot.press("escape")  # opened with --timeline: back to the history, at that checkpoint
        history = pilot.app.screen
        assert isinstance(history, HistoryScreen) and history.rows[history.list.cursor].id == ids["recorded"]

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def test_far_jumps_replay_in_a_worker_and_the_tail_is_prefilled(big: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = big
    store = ckptcli.open_store(path)
    ck = open_checkpoint(ids["long"].hex(), store)

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        model = screen.model
        await settle(pilot)  # the prefill replays to the end and keeps every 1,000th state
        assert screen.prefilled and "replaying" not in text(screen.query_one("#tl-title"))
        assert model.cached_state(1000) is not None and model.cached_state(1500) is not None
        applied = model.applied
        await pilot.press("end")
        await settle(pilot)
        assert model.applied - applied <= model.every  # at most every-1 events from a kept state
        assert screen.query_one("#state", ValueTree).root.data.value == replay(ck)
        await pilot.press("g", *"700", "enter")
        await settle(pilot)
        assert screen.query_one("#state", ValueTree).root.data.value == replay(ck, to_seq=700)
        assert model.applied - applied <= 2 * model.every

    run(path, scenario, checkpoint=ids["long"], view="timeline", prefill=True)


def test_a_cold_jump_shows_progress_then_the_state(big: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = big
    store = ckptcli.open_store(path)
    ck = open_checkpoint(ids["long"].hex(), store)

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        pending: list[int] = []
        show_pending = screen._show_pending
        screen._show_pending = lambda r: (pending.append(r), show_pending(r))
        await pilot.press("end")
        await settle(pilot)
        assert pending == [1500]  # shown at once, while the worker replays
        assert screen.query_one("#state", ValueTree).root.data.value == replay(ck)
        assert screen.step_lines[0][0] == "header"
        await pilot.press("up")
        assert pending == [1500]  # the neighbour of a state at hand: replayed on the spot

    run(path, scenario, checkpoint=ids["long"], view="timeline")


def test_an_event_that_does_not_fit_is_shown_not_raised(big: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = big

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        await pilot.press("end")
        await settle(pilot)
        assert screen.step_lines[0] == ("remove", "no state here: event 6 (plan.pop): the plan is empty: nothing to pop")
        assert str(screen.query_one("#state", ValueTree).root.label) == "state unavailable"
        await pilot.press("home", "down")
        assert screen.step_lines[0][0] == "header"  # before the bad event, states are there

    run(path, scenario, checkpoint=ids["broken"], view="timeline")


# -- a checkpoint file ---------------------------------------------------------------------------------------
def test_opening_a_checkpoint_file(demo: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    path, ids = demo
    file = export_demo(ckptcli.open_store(path), ids["recorded"], tmp_path / "support-bot.ckpt")
    source = CheckpointFile(file)

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, CheckpointScreen) and screen.cid == ids["recorded"]
        assert pilot.app.sub_title.endswith("support-bot.ckpt")
        await pilot.press("d")  # its parent is not in the file
        assert any("no parent here" in n.message for n in pilot.app._notifications)
        await pilot.press("t", "end")
        assert pilot.app.screen.query_one("#events", VirtualList).cursor == 40
        await pilot.press("escape", "escape")
        history = pilot.app.screen
        assert isinstance(history, HistoryScreen) and history.query_one("#checkpoints", VirtualList).count == 1
        await pilot.press("escape", "enter")
        assert isinstance(pilot.app.screen, CheckpointScreen)

    try:
        run(source, scenario)
    finally:
        source.close()


# -- the command -----------------------------------------------------------------------------------------------
def test_the_command_refuses_without_a_terminal(cli: Any, demo: tuple[Path, dict[str, bytes]]) -> None:
    path, _ids = demo
    r = cli("tui", path)
    assert r.code == 2 and "ckpt tui draws on a terminal" in r.err and r.err.count("\n") == 1
    assert r.out == ""


def test_the_commands_errors_come_before_textual(
    cli: Any, demo: tuple[Path, dict[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, ids = demo
    r = cli("tui", tmp_path / "missing.ckpt")
    assert r.code == 3 and "does not exist" in r.err
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"\x89CKPFILE" + b"\x00" * 100)
    r = cli("tui", bad)
    assert r.code in (5, 6) and r.err.startswith("ckpt: error:") and r.err.count("\n") == 1
    monkeypatch.delenv("CKPT_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    r = cli("tui")
    assert r.code == 10
    r = cli("tui", "--store", path, "--timeline")
    assert r.code == 2 and "--timeline needs a checkpoint" in r.err
    r = cli("tui", "nightly-ok", "--store", path, "--timeline")
    assert r.code == 3 and "no event tail" in r.err
    r = cli("tui", "no-such-ref", "--store", path)
    assert r.code == 3
    r = cli("tui", ids["recorded"].hex()[:8], "--store", path, "--timeline")
    assert r.code == 2 and "terminal" in r.err  # everything checked; only the terminal is missing
    r = cli("tui", "latest", "--store", path, "--reducers", "nope")
    assert r.code == 2 and "MODULE:NAME" in r.err


def test_a_long_tails_middle_is_checked_as_it_is_drawn_not_before_starting(cli: Any, tmp_path: Path) -> None:
    """Of a tail longer than 1,000 events the command checks the first and last 500 (a bad
    one there: its exit code, before anything is drawn); one in the middle is shown in red
    on its row when it is drawn, and the timeline says why there is no state after it."""
    store = ckptcli.init_store(tmp_path / ".ckpt")
    snap: dict[str, Any] = {"memory": {"messages": []}, "plan": [], "tools": []}
    events = demo_events(1, 1500, 10**18)
    middle = dict(events[700])
    del middle["ts"]
    first = dict(events[10])
    del first["ts"]
    bad_middle = take(store, {**snap, "events": [*events[:700], middle, *events[701:]]}, subject="agent:middle").id
    bad_first = take(store, {**snap, "events": [*events[:10], first, *events[11:]]}, subject="agent:first").id
    r = cli("tui", bad_first.hex()[:12], "--store", tmp_path / ".ckpt", "--timeline")
    assert r.code == 4 and "has no 'ts'" in r.err and r.err.count("\n") == 1
    r = cli("tui", bad_middle.hex()[:12], "--store", tmp_path / ".ckpt", "--timeline")
    assert r.code == 2 and "terminal" in r.err  # checked as far as it is before starting: only the terminal is missing

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        screen.events.set_cursor(701, center=True)
        await settle(pilot)
        shown = rows(screen.events)
        assert any("event 700" in line and "has no 'ts'" in line for line in shown), shown
        assert "no state here" in "\n".join(t for _k, t in screen.step_lines)

    run(store, scenario, checkpoint=bad_middle, view="timeline")


def test_the_command_draws_in_a_real_terminal_and_quits_on_q(demo: tuple[Path, dict[str, bytes]]) -> None:
    pty = pytest.importorskip("pty")
    import fcntl
    import struct
    import termios

    path, _ids = demo
    try:
        master, slave = pty.openpty()
    except OSError as exc:  # pragma: no cover - no pseudo-terminals here
        pytest.skip(f"no pty: {exc}")
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptcli", "tui", str(path)], stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 120  # a bound for a loaded machine: the test waits for output, not for a time
    try:
        while b"all subjects" not in seen and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
        assert b"all subjects" in seen, seen[-500:]
        os.write(master, b"q")
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    os.read(master, 65536)
                except OSError:
                    break
        assert proc.wait(timeout=max(1.0, deadline - time.monotonic())) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_docs_show_the_tui() -> None:
    doc = (REPO / "docs" / "tui.md").read_text()
    for view in ("history", "checkpoint", "timeline", "diff", "help"):
        assert (REPO / "docs" / "img" / f"tui-{view}.svg").is_file(), view
        assert f"img/tui-{view}.svg" in doc
    for cls in (HistoryScreen, CheckpointScreen, TimelineScreen, DiffScreen):
        for b in cls.BINDINGS:
            assert b.description in doc, b
    assert "docs/tui.md" in (REPO / "README.md").read_text()


# -- a LangGraph thread ------------------------------------------------------------------------------
def test_the_tools_tab_shows_langgraph_tool_calls_with_their_results_status(tmp_path: Path) -> None:
    """A LangGraph AI message's tool call is ✓ or ✗ by the tool message answering it (its
    status), … while no tool message has answered it yet (the thread waits at an interrupt)."""
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.types import interrupt

    from ckptcli.adapters.langgraph.saver import CkptSaver
    from tests.langgraph_graphs import ChatState, chain_builder

    calls = [
        {"name": name, "args": {"order": "A-1"}, "id": f"call-{name}", "type": "tool_call"} for name in ("refund", "lookup", "escalate")
    ]
    answers = [
        ToolMessage(content="refund service down", tool_call_id="call-refund", name="refund", status="error", id="tool-refund"),
        ToolMessage(content="lost in transit", tool_call_id="call-lookup", name="lookup", id="tool-lookup"),
    ]
    b = chain_builder(
        ChatState,
        agent=lambda s: {"messages": [AIMessage(content="", id="ai-1", tool_calls=calls)]},
        tools=lambda s: {"messages": answers},
        ask=lambda s: {"messages": [AIMessage(content=str(interrupt("escalate?")), id="ai-2")]},
    )
    path = tmp_path / ".ckpt"
    with CkptSaver.open(path) as saver:
        assert b.compile(checkpointer=saver).invoke({"messages": []}, {"configurable": {"thread_id": "t1"}})["__interrupt__"]
    store = ckptcli.open_store(path)

    async def scenario(pilot: Any) -> None:
        await pilot.press("4")
        got = rows(pilot.app.screen.query_one("#tools-list", VirtualList))
        marks = [" ".join(r.split("(")[0].split()[1:]) for r in got]
        assert marks == ["✗ refund", "✓ lookup", "… escalate", "✗ refund", "✓ lookup"], got

    run(store, scenario, checkpoint=store.resolve("agent:t1"), view="checkpoint")

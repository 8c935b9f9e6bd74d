"""`ckpt tui`, the defects of issue 19, each driven by Textual's Pilot: the cursor's highlight
after a centred jump, no crash on a checkpoint that cannot be read, row styles that stay
on their parts, the Events tab's Enter, `g SEQ` outside the tail, focus after `1`-`7`,
Esc one pane back, no Timeline key without a tail, `r` (refresh), the Overview of a
checkpoint with a damaged pack, and the layout at 80x24."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.style import Style
from rich.text import Text

import ckptcli
from ckptcli.api import take
from ckptcli.store.layout import manifest_path, pack_path
from ckptcli.tui.app import CkptApp, Session, open_session
from ckptcli.tui.screens.checkpoint import CheckpointScreen
from ckptcli.tui.screens.history import HistoryScreen
from ckptcli.tui.screens.timeline import TimelineScreen
from ckptcli.tui.widgets import VirtualList
from tests.tui_data import build_demo_store, demo_events
from tests.tui_pilot import run


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    path = tmp_path_factory.mktemp("demo") / ".ckpt"
    return path, build_demo_store(path)


@pytest.fixture(scope="module")
def long(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A 1,500-event tail."""
    path = tmp_path_factory.mktemp("long") / ".ckpt"
    store = ckptcli.init_store(path)
    snap: dict[str, Any] = {"memory": {"messages": []}, "plan": [], "tools": []}
    return path, take(store, {**snap, "events": demo_events(1, 1500, 10**18)}, subject="agent:long").id


def notes(app: Any) -> list[str]:
    return [n.message for n in app._notifications]


def painted(lst: VirtualList) -> list[int]:
    """Record the rows the list draws from now on (their index in the list)."""
    got: list[int] = []
    draw = lst.render_line

    def spy(y: int) -> Any:
        got.append(int(lst.scroll_offset.y) + y)
        return draw(y)

    lst.render_line = spy  # type: ignore[method-assign]
    return got


def segments(lst: VirtualList, index: int) -> list[tuple[str, Style]]:
    """Row `index` of the list as drawn: its text pieces and their styles."""
    y = index - int(lst.scroll_offset.y)
    return [(s.text, s.style or Style()) for s in lst.render_line(y)]


def style_of(lst: VirtualList, index: int, word: str) -> Style:
    return next(style for text, style in segments(lst, index) if word in text)


# -- 1: the highlight follows the cursor after a centred jump -------------------------------------------
def test_the_highlight_follows_the_cursor_after_a_centred_jump(long: tuple[Path, bytes]) -> None:
    path, cid = long

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        events = screen.query_one("#events", VirtualList)
        await pilot.press("g", *"700", "enter")
        await pilot.pause()
        assert events.cursor == 700 and events.scroll_offset.y > 0  # centred: the list scrolled
        drawn = painted(events)
        for expected in (701, 702, 703):
            await pilot.press("down")
            await pilot.pause()
            assert events.cursor == expected
            # the row left and the row reached are drawn again (the old code refreshed
            # lines above the screen, and row #700 stayed highlighted)
            assert expected in drawn and expected - 1 in drawn, (expected, drawn)
            drawn.clear()

    run(path, scenario, checkpoint=cid, view="timeline")


def test_end_up_enter_in_the_history_opens_the_highlighted_checkpoint(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / ".ckpt")
    for i in range(80):
        take(store, {"memory": {"i": i}}, subject="agent:many", message=f"step {i}")

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        lst = screen.list
        await pilot.press("end")
        await pilot.pause()
        assert lst.scroll_offset.y > 0
        drawn = painted(lst)
        await pilot.press("up")
        await pilot.pause()
        assert lst.cursor == 78 and 78 in drawn and 79 in drawn
        await pilot.press("enter")
        assert isinstance(pilot.app.screen, CheckpointScreen) and pilot.app.screen.cid == screen.rows[78].id

    run(store, scenario)


# -- 2: a checkpoint that cannot be read is a notification ---------------------------------------------------
def test_opening_at_a_checkpoint_whose_manifest_is_gone_is_a_notification(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / ".ckpt")
    first = take(store, {"memory": {"a": 1}}, subject="agent:a").id
    gone = take(store, {"memory": {"a": 2}}, subject="agent:a").id
    history = open_session(ckptcli.open_store(tmp_path / ".ckpt")).history  # listed before the manifest goes
    (tmp_path / ".ckpt" / manifest_path(gone)).unlink()
    session = Session(ckptcli.open_store(tmp_path / ".ckpt"), history, prefill=False)
    app = CkptApp(session, checkpoint=gone, view="checkpoint", blink=False)

    async def main() -> None:
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause()
            assert isinstance(pilot.app.screen, HistoryScreen)
            assert any(gone.hex()[:12] in n for n in notes(pilot.app)), notes(pilot.app)
            await pilot.press("down", "enter")
            assert isinstance(pilot.app.screen, CheckpointScreen) and pilot.app.screen.cid == first

    asyncio.run(main())


# -- 3: row styles stay on their parts -----------------------------------------------------------------
def test_plan_statuses_and_tool_outcomes_keep_their_colours(demo: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / ".ckpt")
    plan = [{"step": "a", "status": "done"}, {"step": "b", "status": "failed"}, {"step": "c", "status": "running"}]
    tools = [
        {"call_id": "1", "tool": "search", "args": {"q": "x"}, "status": "ok", "result": "found"},
        {"call_id": "2", "tool": "refund", "args": {"id": 7}, "status": "error", "error": "refused"},
    ]
    cid = take(store, {"memory": {}, "plan": plan, "tools": tools}, subject="agent:styles").id

    async def scenario(pilot: Any) -> None:
        await pilot.press("3")
        lst = pilot.app.screen.query_one("#plan-list", VirtualList)
        # the top of the stack first: running, failed, done
        assert style_of(lst, 0, "running").color is not None and style_of(lst, 0, "running").color.name == "yellow"
        assert style_of(lst, 1, "failed").color.name == "red"
        assert style_of(lst, 2, "done").color.name == "green"
        assert style_of(lst, 2, "[0]").dim and not style_of(lst, 2, "done").bold  # the top's bold cyan stays on "▶ top"
        await pilot.press("4")
        tl = pilot.app.screen.query_one("#tools-list", VirtualList)
        ok = style_of(tl, 0, "✓")
        assert ok.color.name == "green" and not ok.dim  # the row number's dim stays on the number
        assert not style_of(tl, 0, "search").dim
        assert style_of(tl, 1, "error: refused").color.name == "red"

    run(store, scenario, checkpoint=cid, view="checkpoint")


def test_a_marked_row_keeps_its_colours(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        events = pilot.app.screen.query_one("#events", VirtualList)
        await pilot.press("down", "m")
        row = segments(events, 1)
        assert row[0][0].startswith("A") and row[0][1].reverse
        rest = [style for text, style in row[1:] if text.strip()]
        assert rest and not any(style.reverse for style in rest)  # not a reverse-magenta bar

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def test_tool_results_are_coloured_by_outcome(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        events = screen.query_one("#events", VirtualList)
        results = [r for r in range(1, 41) if screen.model.row(r).kind == "tool.result"]
        failed = [r for r in results if screen.model.event(r - 1).fields.get("status") == "error"]
        assert failed and len(failed) < len(results)
        for r in results:
            events.set_cursor(r)
            await pilot.pause()
            colour = style_of(events, r, "tool.result").color
            assert colour is not None and colour.name == ("red" if r in failed else "green"), r

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


# -- 5: Events tab, g SEQ, focus after 1-7, Esc, no Timeline without a tail ----------------------------------
def test_enter_on_an_event_opens_the_timeline_at_that_event(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        await pilot.press("5")
        lst = pilot.app.screen.query_one("#events-list", VirtualList)
        assert lst.has_focus  # the tab's key focuses its list
        await pilot.press("down", "down", "down", "down", "down", "down", "down", "down", "down", "down", "enter")
        timeline = pilot.app.screen
        assert isinstance(timeline, TimelineScreen)
        events = timeline.query_one("#events", VirtualList)
        assert events.cursor == 11 and timeline.model.seq(11) == 11  # events[10], seq 11
        assert str(timeline.query_one("#at").content).startswith("seq 11 ")

    run(path, scenario, checkpoint=ids["recorded"], view="checkpoint")


def test_goto_a_seq_outside_the_tail_says_so(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        events = pilot.app.screen.query_one("#events", VirtualList)
        await pilot.press("g", *"12", "enter")
        assert events.cursor == 12
        await pilot.press("g", *"999", "enter")
        assert events.cursor == 12  # stays
        assert any("seq 999 is not in this tail" in n and "0 (the snapshot) to 40" in n for n in notes(pilot.app)), notes(pilot.app)

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def test_the_tab_keys_focus_the_tab_so_arrows_move_in_it(demo: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / ".ckpt")
    cid = take(store, {"memory": {"k": 1}, "plan": [{"step": str(i)} for i in range(5)], "tools": []}, subject="agent:p").id

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        await pilot.press("3", "down", "down")
        plan = screen.query_one("#plan-list", VirtualList)
        assert plan.has_focus and plan.cursor == 2
        assert screen.query_one("#tabs").active == "plan"  # the arrows did not move along the tabs
        await pilot.press("2")
        assert screen.query_one("#memory-tree").has_focus

    run(store, scenario, checkpoint=cid, view="checkpoint")


def test_escape_steps_back_one_pane(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        timeline = pilot.app.screen
        await pilot.press("s")
        assert timeline.query_one("#state").has_focus
        await pilot.press("escape")
        assert pilot.app.screen is timeline and timeline.query_one("#events").has_focus
        await pilot.press("escape")
        assert isinstance(pilot.app.screen, CheckpointScreen)
        checkpoint = pilot.app.screen
        await pilot.press("3")
        checkpoint.query_one("#plan-item").focus()
        await pilot.press("escape")
        assert pilot.app.screen is checkpoint and checkpoint.query_one("#plan-list").has_focus
        await pilot.press("escape")
        assert isinstance(pilot.app.screen, HistoryScreen)
        history = pilot.app.screen
        await pilot.press("s")
        assert history.query_one("#subjects").has_focus
        await pilot.press("escape")
        assert history.list.has_focus and pilot.app.screen is history

    async def from_history(pilot: Any) -> None:
        await pilot.press("enter", "t")
        await scenario(pilot)

    async def opened(pilot: Any) -> None:
        pilot.app.screen.list.set_cursor(next(i for i, n in enumerate(pilot.app.screen.rows) if n.id == ids["recorded"]))
        await from_history(pilot)

    run(path, opened)


def test_no_timeline_key_for_a_checkpoint_without_a_tail(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, CheckpointScreen)
        assert "timeline" not in [b.binding.action for b in screen.active_bindings.values()]
        await pilot.press("t")
        assert pilot.app.screen is screen and not [n for n in pilot.app._notifications if n.severity == "error"]

    run(path, scenario, checkpoint=ids["merge"], view="checkpoint")


# -- 6: r reads the store again ----------------------------------------------------------------------------------
def test_r_shows_checkpoints_taken_and_pruned_by_another_process(tmp_path: Path) -> None:
    path = tmp_path / ".ckpt"
    store = ckptcli.init_store(path)
    ids = [take(store, {"memory": {"i": i}}, subject="agent:r", message=f"step {i}").id for i in range(3)]

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert screen.list.count == 3
        screen.list.set_cursor(1)
        await pilot.pause()
        code = (
            "import sys, ckptcli; from ckptcli.api import take; "
            "take(ckptcli.open_store(sys.argv[1]), {'memory': {'i': 3}}, subject='agent:r', message='step 3')"
        )
        subprocess.run([sys.executable, "-c", code, str(path)], check=True)
        await pilot.press("r")
        assert screen.list.count == 4 and screen.rows[0].message == "step 3"
        assert screen.rows[screen.list.cursor].id == ids[1]  # the cursor stays on its checkpoint
        assert any("refreshed" in (n.title or "") for n in pilot.app._notifications)
        cli = [sys.executable, "-m", "ckptcli", "prune", "--store", str(path), "--keep-last", "1", "--reflog-expire", "0s"]
        subprocess.run(cli, check=True, capture_output=True)
        await pilot.press("r")
        assert screen.list.count == 1 and screen.rows[0].message == "step 3"
        assert "agent:r  1" in " ".join(str(o.prompt) for o in screen.query_one("#subjects").options)

    run(store, scenario)


# -- 7: a damaged pack leaves the Overview readable ------------------------------------------------------------------
def test_overview_of_a_checkpoint_with_a_damaged_pack(tmp_path: Path) -> None:
    path = tmp_path / ".ckpt"
    store = ckptcli.init_store(path)
    memory = {f"key{i}": "x" * 100 for i in range(3000)}  # a chunk tree: the Overview reads its root node
    cid = take(store, {"memory": memory, "plan": [], "tools": []}, subject="agent:dmg", labels={"ticket": "9"}, message="damaged").id
    from ckptcli.format.values import TREE_KINDS, Ext, unpack_ev

    raw = unpack_ev(ckptcli.api.Checkpoint(store, cid).manifest.sections["memory"], "memory")
    assert type(raw) is Ext and raw.code in TREE_KINDS
    entry, _stored = store.read_stored(raw.oid)
    pack = path / pack_path(entry.pack)
    data = bytearray(pack.read_bytes())
    data[entry.offset + entry.stored_len // 2] ^= 0xFF
    pack.write_bytes(bytes(data))

    async def scenario(pilot: Any) -> None:
        plain = rendered_text(pilot.app.screen.query_one("#overview-body").content)
        assert cid.hex() in plain and "agent:dmg" in plain and "damaged" in plain and "ticket=9" in plain, plain
        assert "unreadable" in plain

    run(ckptcli.open_store(path), scenario, checkpoint=cid, view="checkpoint")


def rendered_text(renderable: Any) -> str:
    import io

    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


# -- 8: 80x24 -------------------------------------------------------------------------------------------------------
def test_at_80x24_the_footer_keeps_help_and_quit_and_the_sidebar_folds(demo: tuple[Path, dict[str, bytes]]) -> None:
    from textual.widgets._footer import FooterKey

    path, _ids = demo

    async def scenario(pilot: Any) -> None:
        app = pilot.app
        for screen_keys in ([], ["enter"], ["t"]):
            await pilot.press(*screen_keys)
            await pilot.pause()
            shown = {k.action: k.region for k in app.screen.query(FooterKey)}
            for action in ("help", "quit"):
                assert action in shown and 0 < shown[action].right <= 80, (app.screen, action, shown)
        await pilot.press("escape", "escape")
        history = app.screen
        assert isinstance(history, HistoryScreen)
        assert not history.query_one("#left").display  # folded: the rows get the width
        assert history.list.size.width >= 78
        await pilot.press("s")
        assert history.query_one("#left").display and history.query_one("#subjects").has_focus
        await pilot.press("down", "enter")  # a subject chosen: the sidebar folds again
        assert not history.query_one("#left").display and history.list.has_focus
        await pilot.press("b")
        assert history.query_one("#left").display
        await pilot.press("b")
        assert not history.query_one("#left").display

    run(path, scenario, size=(80, 24))


def test_the_cursor_stays_on_screen_when_the_terminal_shrinks(long: tuple[Path, bytes]) -> None:
    path, cid = long

    async def scenario(pilot: Any) -> None:
        events = pilot.app.screen.query_one("#events", VirtualList)
        await pilot.press(*["down"] * 25)
        assert events.cursor == 25 and events.scroll_offset.y == 0
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await pilot.pause()
        top = int(events.scroll_offset.y)
        assert top <= events.cursor < top + events.scrollable_content_region.height, (top, events.size)

    run(path, scenario, checkpoint=cid, view="timeline")


def test_machine_labels_are_shortened_and_come_after_the_message(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / ".ckpt")
    run_id = "6f1c2b9e-7d4a-4c3b-9a1e-2f5d8c7b6a90"
    thread = "ab" * 32
    take(store, {"memory": {}}, subject="agent:l", labels={"run": run_id, "thread": thread, "ticket": "4711"}, message="the message")

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        row = screen.list.render_row(0).plain
        assert row.index("the message") < row.index("run=")
        assert "run=6f1c2b9e…" in row and "thread=abababab…" in row and "ticket=4711" in row
        assert run_id not in row and thread not in row
        assert run_id in str(screen.query_one("#detail").content)  # whole in the detail pane

    run(store, scenario)


def test_text_of_a_row_with_a_base_style_is_drawn_under_its_parts() -> None:
    """VirtualList.render_line: a row's base style under its parts' styles, not over them."""
    rows = [Text.assemble(("bold", "bold"), " ", ("green", "green"), style="cyan")]
    lst = VirtualList(lambda i: rows[i].copy(), 1)

    async def main() -> None:
        from textual.app import App, ComposeResult

        class One(App[None]):
            def compose(self) -> ComposeResult:
                yield lst

        async with One().run_test(size=(40, 5)) as pilot:
            await pilot.pause()
            assert style_of(lst, 0, "green").color.name == "green"
            assert style_of(lst, 0, "bold").color.name == "cyan"

    asyncio.run(main())

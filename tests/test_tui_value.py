"""`ckpt tui`: the value viewer (Enter or v on any value: whole, searchable, copyable; a
changed value as a line diff), readable agent state (messages as `role: first words…`,
a LangGraph thread's messages as a transcript and its bookkeeping channels folded), the
vim keys, and the jumps to the next error, tool call, tool failure or plan change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import take
from ckptcli.tui.screens.timeline import TimelineScreen
from ckptcli.tui.valuetext import MISSING, diff_lines, hex_dump, message_row, short_label, value_lines, wrap
from ckptcli.tui.widgets import ValueTree, VirtualList
from tests.tui_data import build_demo_store
from tests.tui_pilot import run, settle

PROMPT = " ".join(f"Rule {i}: answer politely, cite the order number, never promise a refund." for i in range(60))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    path = tmp_path_factory.mktemp("demo") / ".ckpt"
    return path, build_demo_store(path)


async def node_at(pilot: Any, tree: ValueTree, path: tuple[Any, ...]) -> Any:
    """The node at `path`, its ancestors opened (as Enter on each would)."""
    node = tree.root
    for i in range(len(path)):
        node.expand()
        await pilot.pause()
        node = next(
            c for c in node.children if c.data is not None and c.data.path == path[: i + 1] and not c.label.plain.startswith("LangGraph")
        )
    return node


# -- the text of a value ------------------------------------------------------------------------------------
def test_value_lines_json_text_and_bytes() -> None:
    assert value_lines("a\nb") == ("text, 3 chars", ["a", "b"])
    what, lines = value_lines({"k": [1, 2], "b": b"\x00\x01"})
    assert what == "map, 2 keys" and lines[0] == "{" and '  "k": [' in lines and '    "$bytes": "AAE="' in lines
    what, lines = value_lines(bytes(range(20)))
    assert what == "bytes, 20" and lines == hex_dump(bytes(range(20)))
    assert lines[0] == "00000000  00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f  |................|"
    assert lines[1].startswith("00000010  10 11 12 13") and lines[1].endswith("|....|")


def test_diff_lines_of_a_changed_value() -> None:
    old = {"status": "pending", "args": {"order": 1}}
    new = {"status": "ok", "args": {"order": 1}, "result": "shipped"}
    got = diff_lines(old, new)
    assert ("remove", '-  "status": "pending",') in got and ("add", '+  "status": "ok",') in got
    assert ("add", '+  "result": "shipped"') in got and got[0][0] == "header"
    assert diff_lines(MISSING, "x") == [("add", "+x")] and diff_lines("x", MISSING) == [("remove", "-x")]
    assert diff_lines(1, 1) == [("same", " (no difference)")]


def test_wrap_and_short_labels() -> None:
    assert wrap(["abcdefghij", "xy"], 8) == [(0, "abcdefgh"), (0, "ij"), (1, "xy")]
    assert wrap(["one two three four"], 9) == [(0, "one two "), (0, "three "), (0, "four")]  # after a space
    assert short_label("0" * 32) == "00000000…" and short_label("6f1c2b9e-7d4a-4c3b-9a1e-2f5d8c7b6a90") == "6f1c2b9e…"
    assert short_label("4711") == "4711" and short_label("deadbeef") == "deadbeef"  # short hex: a word


def test_message_rows() -> None:
    assert message_row({"role": "user", "content": "Where   is\norder 4701?"}) == ("user", "Where is order 4701?")
    assert message_row({"role": "user", "content": "w " * 100}, 20) == ("user", "w w w w w w w w w w…")
    lc = {
        "$ext": 5,
        "data": ["langchain_core.messages.ai", "AIMessage", {"content": "", "tool_calls": [{"name": "refund", "args": {"order": "A-1"}}]}],
    }
    assert message_row(lc) == ("ai", "→ refund(order=A-1)")
    tool = {"$ext": 5, "data": ["m", "ToolMessage", {"content": "down", "name": "refund", "status": "error"}]}
    assert message_row(tool) == ("tool", "[refund failed] down")
    assert message_row({"content": "no role"}) is None and message_row([1]) is None


# -- the value viewer ---------------------------------------------------------------------------------------
def test_enter_on_a_long_leaf_shows_it_whole_with_search_and_copy(tmp_path: Path) -> None:
    from ckptcli.tui.screens.value import ValueScreen

    store = ckptcli.init_store(tmp_path / ".ckpt")
    cid = take(store, {"memory": {"system_prompt": PROMPT, "raw": bytes(range(40))}}, subject="agent:v").id
    assert len(PROMPT) > 4000

    async def scenario(pilot: Any) -> None:
        await pilot.press("2")
        tree = pilot.app.screen.query_one("#memory-tree", ValueTree)
        assert tree.has_focus
        tree.move_cursor(await node_at(pilot, tree, ("system_prompt",)))
        await pilot.press("enter")
        viewer = pilot.app.screen
        assert isinstance(viewer, ValueScreen)
        lst = viewer.query_one("#value", VirtualList)
        assert "".join(piece for _i, piece in viewer.shown) == PROMPT  # whole, wrapped
        assert all(len(piece) <= lst.scrollable_content_region.width for _i, piece in viewer.shown) and lst.count > 30
        await pilot.press("slash", *"rule 42:", "enter")
        assert "Rule 42:" in viewer.shown[lst.cursor][1] or "Rule 42:" in "".join(p for _i, p in viewer.shown[lst.cursor : lst.cursor + 2])
        at = lst.cursor
        await pilot.press("n")
        assert lst.cursor != at or "Rule 42:" in viewer.shown[at][1]
        await pilot.press("c")
        assert pilot.app.clipboard == PROMPT
        await pilot.press("escape")
        assert pilot.app.screen.query_one("#memory-tree") is tree
        tree.move_cursor(await node_at(pilot, tree, ("raw",)))
        await pilot.press("v")
        viewer = pilot.app.screen
        assert isinstance(viewer, ValueScreen) and viewer.lines == hex_dump(bytes(range(40)))
        await pilot.press("escape", "escape")

    run(store, scenario, checkpoint=cid, view="checkpoint")


def test_a_changed_value_shows_the_diff_of_before_and_after(demo: tuple[Path, dict[str, bytes]]) -> None:
    from ckptcli.tui.screens.value import ValueScreen

    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        await pilot.press("g", *"4", "enter")  # tool.result: tools[0].status pending -> ok
        step = screen.query_one("#step", VirtualList)
        step.focus()
        await pilot.press("down", "enter")
        viewer = pilot.app.screen
        assert isinstance(viewer, ValueScreen) and viewer.changed and viewer.show_diff
        assert viewer.lines == ["@@ -1 +1 @@", "-pending", "+ok"] and viewer.kinds == ["header", "remove", "add"]
        await pilot.press("d")  # the value itself
        assert not viewer.show_diff and viewer.lines == ["ok"]
        await pilot.press("escape")
        assert pilot.app.screen is screen
        # the same from the state tree: v on the changed record's status
        tree = screen.query_one("#state", ValueTree)
        tree.focus()
        tree.move_cursor(await node_at(pilot, tree, ("tools", 0, "status")))
        await pilot.press("v")
        viewer = pilot.app.screen
        assert isinstance(viewer, ValueScreen) and viewer.kinds.count("remove") == 1 and viewer.kinds.count("add") == 1
        await pilot.press("escape")
        tree.move_cursor(await node_at(pilot, tree, ("tools", 0)))
        await pilot.press("v")  # a container: its JSON, whole
        viewer = pilot.app.screen
        assert '  "tool": "orders.lookup",' in viewer.lines and '  "status": "ok",' in viewer.lines

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def test_enter_on_an_event_shows_it_whole(demo: tuple[Path, dict[str, bytes]]) -> None:
    from ckptcli.tui.screens.value import ValueScreen

    path, ids = demo

    async def scenario(pilot: Any) -> None:
        await pilot.press("down", "down", "down", "enter")
        viewer = pilot.app.screen
        assert isinstance(viewer, ValueScreen) and viewer.title_text == "event seq 3 (tool.call)"
        assert '  "tool": "orders.lookup",' in viewer.lines and '    "order": 4701' in viewer.lines

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


# -- readable agent state --------------------------------------------------------------------------------------
def test_messages_read_as_role_and_first_words(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        await pilot.press("end")
        await settle(pilot)
        tree = screen.query_one("#state", ValueTree)
        messages = await node_at(pilot, tree, ("memory", "messages"))
        messages.expand()
        await pilot.pause()
        labels = [c.label.plain for c in messages.children]
        assert labels[:2] == ["[0] user: Where is order 4701?", "[1] assistant: Order 4701 is on its way."]

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def test_a_langgraph_thread_reads_as_a_transcript_with_its_bookkeeping_folded(tmp_path: Path) -> None:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from ckptcli.adapters.langgraph.saver import CkptSaver
    from tests.langgraph_graphs import ChatState, chain_builder

    call = {"name": "refund", "args": {"order": "A-1", "amount": 12.5}, "id": "call-1", "type": "tool_call"}
    b = chain_builder(
        ChatState,
        agent=lambda s: {"messages": [AIMessage(content="Let me check.", id="ai-1", tool_calls=[call])]},
        tools=lambda s: {
            "messages": [ToolMessage(content="refund service down", tool_call_id="call-1", name="refund", status="error", id="t-1")]
        },
        answer=lambda s: {"messages": [AIMessage(content="Sorry, refunds are down right now; I will retry.", id="ai-2")]},
    )
    path = tmp_path / ".ckpt"
    with CkptSaver.open(path) as saver:
        b.compile(checkpointer=saver).invoke(
            {"messages": [HumanMessage(content="Refund order A-1 please", id="h-1")]}, {"configurable": {"thread_id": "t1"}}
        )
    store = ckptcli.open_store(path)

    async def scenario(pilot: Any) -> None:
        await pilot.press("2")
        tree = pilot.app.screen.query_one("#memory-tree", ValueTree)
        top = [c.label.plain for c in tree.root.children]
        folded = [t for t in top if t.startswith("LangGraph bookkeeping")]
        assert len(folded) == 1 and not any(t.startswith(("branch:", "__start__")) for t in top), top
        assert folded == ["LangGraph bookkeeping: 1 channel (branch:to:answer…)"]
        messages = await node_at(pilot, tree, ("messages",))
        messages.expand()
        await pilot.pause()
        assert [c.label.plain for c in messages.children] == [
            "[0] human: Refund order A-1 please",
            "[1] ai: Let me check. → refund(order=A-1, amount=12.5)",
            "[2] tool: [refund failed] refund service down",
        ]

    # the checkpoint after the tool ran: its memory still holds the channel that routes to the answer
    run(store, scenario, checkpoint=store.resolve("agent:t1~1"), view="checkpoint")


# -- navigation: vim keys, jumps ------------------------------------------------------------------------------
def test_vim_keys_move_the_cursor(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, _ids = demo

    async def scenario(pilot: Any) -> None:
        lst = pilot.app.screen.list
        await pilot.press("j", "j")
        assert lst.cursor == 2
        await pilot.press("k")
        assert lst.cursor == 1
        await pilot.press("G")
        assert lst.cursor == 10
        await pilot.press("g")
        assert lst.cursor == 0
        await pilot.press("ctrl+d")
        half = lst.cursor
        assert 0 < half < 10 or half == 10
        await pilot.press("ctrl+u")
        assert lst.cursor == 0

    run(path, scenario)


def test_vim_keys_on_the_timeline_keep_g_for_a_seq(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        events = pilot.app.screen.query_one("#events", VirtualList)
        await pilot.press("G")
        assert events.cursor == 40
        await pilot.press("g", *"7", "enter")
        assert events.cursor == 7
        await pilot.press("k", "k", "j")
        assert events.cursor == 6
        await pilot.press("g", "enter")  # nothing typed: the first row
        assert events.cursor == 0

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def test_jumps_to_the_next_and_previous_error_tool_call_failure_plan_change(demo: tuple[Path, dict[str, bytes]]) -> None:
    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, TimelineScreen)
        events = screen.query_one("#events", VirtualList)
        kinds = {r: screen.model.event(r - 1) for r in range(1, 41)}
        errors = [r for r, e in kinds.items() if e.kind == "error" or (e.kind == "tool.result" and e.fields.get("status") == "error")]
        failures = [r for r, e in kinds.items() if e.kind == "tool.result" and e.fields.get("status") == "error"]
        calls = [r for r, e in kinds.items() if e.kind == "tool.call"]
        plans = [r for r, e in kinds.items() if e.kind.startswith("plan.")]

        async def jump(*keys: str) -> int:
            await pilot.press(*keys)
            await settle(pilot)
            return int(events.cursor)

        assert screen.jump_rows is None
        assert await jump("right_square_bracket", "e") == errors[0]  # found by reading events from the cursor
        assert screen.jump_rows is not None and list(screen.jump_rows["e"]) == errors  # the index read meanwhile
        assert await jump("right_square_bracket", "e") == errors[1]  # looked up
        assert await jump("left_square_bracket", "e") == errors[0]
        assert await jump("home", "right_square_bracket", "f") == failures[0]
        assert await jump("home", "right_square_bracket", "t") == calls[0]
        assert await jump("right_square_bracket", "t") == calls[1]
        assert await jump("left_square_bracket", "t") == calls[0]
        assert await jump("right_square_bracket", "p") == next(r for r in plans if r > calls[0])
        assert await jump("end", "right_square_bracket", "t") == calls[0]  # wraps around
        at = events.cursor
        await pilot.press("right_square_bracket", "x")  # not a jump: nothing moves
        assert events.cursor == at
        screen.jump_rows = None  # the same without the index
        assert await jump("home", "right_square_bracket", "p") == plans[0]
        assert await jump("left_square_bracket", "p") == plans[-1]

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def test_enter_on_a_diff_line_shows_the_change_whole(demo: tuple[Path, dict[str, bytes]]) -> None:
    from ckptcli.tui.screens.diff import DiffScreen
    from ckptcli.tui.screens.value import ValueScreen

    path, ids = demo

    async def scenario(pilot: Any) -> None:
        await pilot.press("home", "m", "end", "d")
        await settle(pilot)
        diff = pilot.app.screen
        assert isinstance(diff, DiffScreen)
        lst = diff.query_one("#diff", VirtualList)
        at = next(i for i, (_k, t) in enumerate(diff.lines) if t.startswith("+ orders:"))
        assert diff.lines[at][1].endswith("(5 keys)")  # cut on its line
        lst.set_cursor(at)
        await pilot.press("enter")
        viewer = pilot.app.screen
        assert isinstance(viewer, ValueScreen) and viewer.title_text.endswith(": memory.orders")
        assert viewer.kinds.count("add") == len(viewer.lines) and '+  "4705": "shipped"' in viewer.lines  # whole, all added
        await pilot.press("escape")
        assert pilot.app.screen is diff
        lst.set_cursor(0)  # the header: no value
        await pilot.press("v")
        assert pilot.app.screen is diff

    run(path, scenario, checkpoint=ids["recorded"], view="timeline")


def test_enter_on_a_checkpoint_diff_line_shows_before_and_after(demo: tuple[Path, dict[str, bytes]]) -> None:
    from ckptcli.tui.screens.diff import DiffScreen
    from ckptcli.tui.screens.value import ValueScreen

    path, ids = demo

    async def scenario(pilot: Any) -> None:
        screen = pilot.app.screen
        screen.list.set_cursor(next(i for i, n in enumerate(screen.rows) if n.id == ids["fork2"]))
        await pilot.press("d")  # from its parent, the fork: memory.mood calm -> curious
        await settle(pilot)
        diff = pilot.app.screen
        assert isinstance(diff, DiffScreen)
        at = next(i for i, (_k, t) in enumerate(diff.lines) if "mood" in t)
        diff.query_one("#diff", VirtualList).set_cursor(at)
        await pilot.press("v")
        viewer = pilot.app.screen
        assert isinstance(viewer, ValueScreen) and viewer.lines == ["@@ -1 +1 @@", "-calm", "+curious"]

    run(path, scenario)

"""Snapshot tests of every screen of `ckpt tui` (pytest-textual-snapshot).

The demo store (tests/tui_data.py) has fixed times and ids, the terminal a fixed size,
the inputs' cursors do not blink, and the store is opened from the current directory so
that the header shows `.ckpt`, not a temporary path. Update the SVGs in
tests/__snapshots__/ after a deliberate change of the UI with:

    .venv/bin/python -m pytest tests/test_tui_snapshots.py --snapshot-update
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.tui.app import CkptApp, View, open_session
from tests.tui_data import build_demo_store

SIZE = (120, 34)
Factory = Callable[..., CkptApp]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("snapshots")
    return root, build_demo_store(root / ".ckpt")


@pytest.fixture
def make_app(demo: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> Factory:
    """The app factory: the demo store, opened at a named checkpoint and view."""
    root, ids = demo
    monkeypatch.chdir(root)

    def make(checkpoint: str | None = None, view: View = "history") -> CkptApp:
        session = open_session(ckptcli.open_store(Path(".ckpt")), prefill=False)
        return CkptApp(session, checkpoint=ids[checkpoint] if checkpoint else None, view=view, blink=False)

    return make


def keys(*pressed: str) -> Callable[[Any], Any]:
    """Press keys, then wait for the app's workers (a replay, a diff) to report."""

    async def run_before(pilot: Any) -> None:
        await pilot.pause()
        await pilot.press(*pressed)
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    return run_before


def test_history(snap_compare: Any, make_app: Factory) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=keys("down", "down", "down"))


def test_history_one_subject_filtered(snap_compare: Any, make_app: Factory) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=keys("s", "down", "enter", "f", *"tick", "enter", "down"))


def test_history_search_box(snap_compare: Any, make_app: Factory) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=keys("slash", *"night"))


@pytest.mark.parametrize(
    ("checkpoint", "tab"),
    [("recorded", "1"), ("recorded", "2"), ("migrated", "3"), ("migrated", "4"), ("recorded", "5"), ("merge", "6"), ("merge", "7")],
    ids=["overview", "memory", "plan", "tools", "events", "blobs", "ext"],
)
def test_checkpoint_tab(snap_compare: Any, make_app: Factory, checkpoint: str, tab: str) -> None:
    assert snap_compare(make_app(checkpoint, "checkpoint"), terminal_size=SIZE, run_before=keys(tab))


def test_timeline_step_with_changes(snap_compare: Any, make_app: Factory) -> None:
    assert snap_compare(make_app("recorded", "timeline"), terminal_size=SIZE, run_before=keys("down", "down", "down", "down"))


def test_timeline_step_with_a_removal(snap_compare: Any, make_app: Factory) -> None:
    assert snap_compare(make_app("recorded", "timeline"), terminal_size=SIZE, run_before=keys("g", *"24", "enter"))


def test_diff_of_two_checkpoints(snap_compare: Any, make_app: Factory) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=keys("down", "down", "down", "space", "home", "d"))


def test_diff_of_two_timeline_points(snap_compare: Any, make_app: Factory) -> None:
    mark, diff = keys("g", *"9", "enter", "m"), keys("g", *"16", "enter", "d")

    async def run_before(pilot: Any) -> None:
        await mark(pilot)
        # the "marked ... press d" toast lasts 4 s: whether it is still up when the diff
        # shows depends on the machine's speed, so it is not part of the picture
        pilot.app.clear_notifications()
        await diff(pilot)

    assert snap_compare(make_app("recorded", "timeline"), terminal_size=SIZE, run_before=run_before)


def test_help(snap_compare: Any, make_app: Factory) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=keys("question_mark"))


# -- issue 19: the value viewer, the chat view, 80x24 ------------------------------------------------------
PROMPT = " ".join(f"Rule {i}: answer politely, cite the order number, never promise a refund." for i in range(60))


@pytest.fixture(scope="module")
def prompt_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one checkpoint holding a 4,000-character system prompt (fixed time: a fixed id)."""
    from tests.tui_data import write

    root = tmp_path_factory.mktemp("prompt")
    store = ckptcli.init_store(root / ".ckpt")
    write(
        store,
        {"memory": {"system_prompt": PROMPT, "turns": 3}, "plan": [], "tools": []},
        subject="agent:prompted",
        at=0,
        message="long prompt",
    )
    return root


def test_value_viewer_long_text(snap_compare: Any, prompt_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(prompt_root)
    store = ckptcli.open_store(Path(".ckpt"))
    app = CkptApp(open_session(store, prefill=False), checkpoint=store.resolve("agent:prompted"), view="checkpoint", blink=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys("2", "down", "enter", "slash", *"rule 17:", "enter"))


def test_value_viewer_diff_of_a_changed_value(snap_compare: Any, make_app: Factory) -> None:
    assert snap_compare(make_app("recorded", "timeline"), terminal_size=SIZE, run_before=keys("g", *"4", "enter", "tab", "down", "enter"))


def test_chat_messages_in_the_memory_tree(snap_compare: Any, make_app: Factory) -> None:
    assert snap_compare(make_app("migrated", "checkpoint"), terminal_size=SIZE, run_before=keys("2", "down", "down", "down", "enter"))


def test_history_at_80x24(snap_compare: Any, make_app: Factory) -> None:
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=keys("down", "down", "down"))


def test_timeline_at_80x24(snap_compare: Any, make_app: Factory) -> None:
    assert snap_compare(make_app("recorded", "timeline"), terminal_size=(80, 24), run_before=keys("g", *"21", "enter"))


def test_timeline_overview_strip(snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The strip above the events: the slow first half low, the burst of the second half
    tall, errors red, checkpoints `┃`, the cursor's cell reversed (after `]e`, which builds
    the jump index the marks come from)."""
    from tests.test_tui_live import bursty_tail

    _store_dir, cid = bursty_tail(tmp_path)
    monkeypatch.chdir(tmp_path)
    app = CkptApp(open_session(ckptcli.open_store(Path(".ckpt")), prefill=False), checkpoint=cid, view="timeline", blink=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys("right_square_bracket", "e"))

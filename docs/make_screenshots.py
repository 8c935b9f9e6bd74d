"""Make the SVG screenshots of docs/tui.md with Textual itself (App.save_screenshot).

    .venv/bin/python docs/make_screenshots.py

Builds the deterministic demo store of the TUI's tests (tests/tui_data.py: fixed times,
so fixed ids) in a temporary directory, drives `ckpt tui` over it with the Pilot, and
writes docs/img/tui-<view>.svg. Running it again gives the same files.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import ckptcli  # noqa: E402 - after the path above
from ckptcli.tui.app import CkptApp, View, open_session  # noqa: E402
from tests.tui_data import build_demo_store  # noqa: E402

OUT = REPO / "docs" / "img"
SIZE = (120, 34)

#: file name -> (checkpoint to open at, view, keys to press)
SHOTS: dict[str, tuple[str | None, View, Sequence[str]]] = {
    "tui-history.svg": (None, "history", ("down", "down", "down")),
    "tui-checkpoint.svg": ("migrated", "checkpoint", ("4", "down", "down")),
    "tui-timeline.svg": ("recorded", "timeline", ("g", "4", "enter")),
    "tui-diff.svg": (None, "history", ("down", "down", "down", "space", "home", "d")),
    "tui-help.svg": (None, "history", ("question_mark",)),
    # a changed value, whole, as a line diff: seq 7 popped the plan item (Tab: the step pane)
    "tui-value.svg": ("recorded", "timeline", ("g", "7", "enter", "tab", "down", "enter")),
    # the fork at the timeline's cursor, confirmed: what will happen and the ckpt command
    "tui-confirm.svg": ("recorded", "timeline", ("g", "2", "0", "enter", "B", *"retry-20")),
    # ckpt's commands in the ctrl+p palette
    "tui-palette.svg": (None, "history", ("ctrl+p",)),
}


async def shoot(ids: dict[str, bytes], name: str, checkpoint: str | None, view: View, keys: Sequence[str]) -> None:
    session = open_session(ckptcli.open_store(Path(".ckpt")), prefill=False)
    app = CkptApp(session, checkpoint=ids[checkpoint] if checkpoint else None, view=view, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        if name == "tui-checkpoint.svg":
            await pilot.press(keys[0])
            app.screen.query_one("#tools-list").focus()
            keys = keys[1:]
        await pilot.press(*keys)
        await app.workers.wait_for_complete()
        await pilot.pause()
        app.save_screenshot(filename=name, path=str(OUT))


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the header shows the store as ".ckpt"
        try:
            ids = build_demo_store(Path(tmp) / ".ckpt")
            for name, (checkpoint, view, keys) in SHOTS.items():
                asyncio.run(shoot(ids, name, checkpoint, view, keys))
                print(f"wrote docs/img/{name}")
        finally:
            os.chdir(cwd)
    return 0


if __name__ == "__main__":
    sys.exit(main())

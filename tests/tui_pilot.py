"""Driving the real TUI with Textual's Pilot in the TUI's tests: one app per scenario."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import ckptcli
from ckptcli.checkpoint import CheckpointFile
from ckptcli.store.repository import Store
from ckptcli.tui.app import CkptApp, View
from ckptcli.tui.session import open_session

SIZE = (120, 36)


def run(
    source: Path | Store | CheckpointFile,
    scenario: Callable[[Any], Awaitable[None]],
    *,
    checkpoint: bytes | None = None,
    view: View = "history",
    size: tuple[int, int] = SIZE,
    prefill: bool = False,
    follow: bool = False,
) -> CkptApp:
    """Run `scenario(pilot)` in the app opened on `source` (a store's path, a store or a
    checkpoint file) at the terminal size `size`; returns the app once it ended."""
    src = source if isinstance(source, (Store, CheckpointFile)) else ckptcli.open_store(source)
    app = CkptApp(open_session(src, prefill=prefill, follow=follow), checkpoint=checkpoint, view=view, blink=False)

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await scenario(pilot)

    asyncio.run(main())
    return app


async def settle(pilot: Any) -> None:
    """Let the workers finish and their messages land."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()

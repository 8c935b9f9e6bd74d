"""The `ckpt tui` application: the screens on a stack, over one store or checkpoint file.

    history (the store's checkpoints, per subject, as a graph)
      └ checkpoint (metadata, memory, plan, tools, events, blobs, ext)
          └ timeline (the event tail, the state at the cursor, what each step changed)
      └ diff (two checkpoints, or two timeline points)
    help (every key, over any screen)

Opening a checkpoint file shows the history of its one checkpoint with the checkpoint
screen on top. The screens import ckptcli.tui.session (what they work on), never this
module. Everything the screens show comes from ckptcli.history (graph, timeline, diff,
render) and ckptcli.api; this package only draws it.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from textual import events
from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from ckptcli.errors import CkptError
from ckptcli.history.events import Reducers
from ckptcli.store.repository import Store
from ckptcli.store.single import CheckpointFile
from ckptcli.tui.actions import ACTION_KEYS
from ckptcli.tui.messages import ViewValue
from ckptcli.tui.palette import CkptCommands
from ckptcli.tui.session import APP_BINDINGS, Session, View, open_session

__all__ = ["INPUT_WINDOW", "CkptApp", "Session", "View", "open_session", "run"]

#: For this long after a key or mouse event, replays in worker threads give way to the app.
INPUT_WINDOW = 0.5


class CkptApp(App[None]):
    """Browse a store's history, inspect checkpoints, scrub through event tails, diff."""

    TITLE = "ckpt"
    COMMANDS = App.COMMANDS | {CkptCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        *APP_BINDINGS,
        *(Binding(k, f"act('{kind}')", what, show=False) for k, kind, what in ACTION_KEYS),
    ]
    CSS = """
    Screen { layout: vertical; }
    .pane-title { background: $boost; color: $text-muted; height: 1; padding: 0 1; }
    .hidden { display: none; }
    """

    def __init__(
        self, session: Session, *, checkpoint: bytes | None = None, view: View = "history", blink: bool = True, tune_gc: bool = False
    ) -> None:
        super().__init__()
        self.session = session
        self.tune_gc = tune_gc
        self._last_activity = time.monotonic()
        self._gc_dirty = True
        self.start_checkpoint = (
            checkpoint if checkpoint is not None else (session.source.id if isinstance(session.source, CheckpointFile) else None)
        )
        self.start_view: View = "checkpoint" if view == "history" and isinstance(session.source, CheckpointFile) else view
        self.blink = blink
        self.sub_title = session.where
        self.last_input = 0.0
        self._refs_seen: tuple[tuple[str, int], ...] = ()  # --follow: the latest refs' directories, as last seen

    def on_view_value(self, message: ViewValue) -> None:
        """Enter or v on a value (a tree node, a list row, a change), bubbled up from any
        screen: the value viewer (here, not in the screens' base, which the viewer is one of)."""
        message.stop()
        from ckptcli.tui.screens.value import ValueScreen

        self.push_screen(ValueScreen(self.session, message.title, message.value, old=message.old, changed=message.changed))

    def history_screen(self, session: Session, focus: bytes | None) -> Screen[None]:
        """The history screen, its cursor on `focus` (for screens.base, which the history's
        module imports)."""
        from ckptcli.tui.screens.history import HistoryScreen

        return HistoryScreen(session, focus=focus)

    def on_mount(self) -> None:
        from ckptcli.tui.screens.history import HistoryScreen

        if self.tune_gc:
            self.set_interval(1.0, self._collect_when_idle)
        if self.session.follow and isinstance(self.session.source, Store) and self.session.source.directory is not None:
            self._refs_seen = self._refs_signature()
            self.set_interval(1.0, self._follow_history)
        if self.start_checkpoint is not None and self.start_view == "timeline":
            # alone: the history is made when Esc leaves the timeline (BaseScreen.leave), at
            # its checkpoint; composing it (or the checkpoint screen) underneath would only
            # delay the first paint
            from ckptcli.tui.screens.timeline import TimelineScreen

            try:
                self.push_screen(TimelineScreen(self.session, self.start_checkpoint))
                return
            except CkptError as exc:  # gone since the command checked it: the history, and why
                self.notify(str(exc), title="error", severity="error", timeout=8)
        self.push_screen(HistoryScreen(self.session, focus=self.start_checkpoint))
        if self.start_checkpoint is not None and self.start_view == "checkpoint":
            from ckptcli.tui.screens.checkpoint import CheckpointScreen

            try:
                self.push_screen(CheckpointScreen(self.session, self.start_checkpoint))
            except CkptError as exc:  # gone since the command checked it: the history, and why
                self.notify(str(exc), title="error", severity="error", timeout=8)

    def on_ready(self) -> None:
        """The first frame is drawn: `ckpt tui` turned the garbage collector off until now
        (ckptcli/cli/commands/tui.py); what is alive is frozen out of its way, and it is on again."""
        if not gc.isenabled():
            gc.freeze()
            gc.enable()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.MouseEvent)):
            self.last_input = time.monotonic()
        await super().on_event(event)

    def input_pending(self) -> bool:
        """Whether the user pressed a key or used the mouse in the last INPUT_WINDOW
        seconds: a replay in a worker thread then lets the app's threads go first."""
        return time.monotonic() - self.last_input < INPUT_WINDOW

    def on_unmount(self) -> None:
        if self.tune_gc:
            gc.unfreeze()

    def note_activity(self) -> None:
        """A cursor moved (VirtualList calls this): not idle."""
        self._last_activity = time.monotonic()
        self._gc_dirty = True

    def settle(self) -> None:
        """Long-lived data was just loaded (the history, a timeline's kept states)."""
        self._gc_dirty = True

    def _collect_when_idle(self) -> None:
        """Once the user is idle for a second after something happened: a full cyclic
        collection, then gc.freeze() of what is alive. The collector's automatic runs
        then skip the long-lived data (a full one walks every kept state of a long
        timeline: 100-200 ms for a 100,000-event tail, bench/tui.py) and only walk what
        was made since; the pause of the full collection falls on an idle moment.
        Only with `tune_gc` (the `ckpt tui` process, not an app under test)."""
        if not self._gc_dirty or time.monotonic() - self._last_activity < 1.0:
            return
        self._gc_dirty = False
        gc.unfreeze()
        gc.collect()
        gc.freeze()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "act":  # fork, tag, restore, export: where a checkpoint is under the cursor
            from ckptcli.tui.actions import available

            return available(self.screen)
        return True

    def action_act(self, kind: str) -> None:
        """B, T, R, E: fork, tag, restore or export what the screen has under its cursor (confirmed first)."""
        from ckptcli.tui.actions import run_on

        run_on(self.screen, kind)

    def _refs_signature(self) -> tuple[tuple[str, int], ...]:
        """When each directory of `latest` refs last changed (a take moves a ref by renaming
        a file into it): a few stats, read every second while following."""
        assert isinstance(self.session.source, Store) and self.session.source.directory is not None
        root = self.session.source.directory / "refs" / "latest"
        out: list[tuple[str, int]] = []
        try:
            out.append(("", root.stat().st_mtime_ns))
            out += [(e.name, e.stat().st_mtime_ns) for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
        except OSError:
            pass
        return tuple(sorted(out))

    def _follow_history(self) -> None:
        """`--follow`: the history shows the checkpoints taken since (its `r`) once a
        subject's latest moved, when it is the screen shown (else when it is next shown)."""
        from ckptcli.tui.screens.history import HistoryScreen

        if not isinstance(self.screen, HistoryScreen):
            return
        now = self._refs_signature()
        if now != self._refs_seen:
            self._refs_seen = now
            self.screen.action_refresh()

    def action_help(self) -> None:
        from ckptcli.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def copy_id(self, text: str, what: str = "id") -> None:
        """Copy to the terminal's clipboard (OSC 52) and say so."""
        self.copy_to_clipboard(text)
        self.notify(f"copied {what} {text[:64]}", title="clipboard", timeout=3)


def run(
    source: Store | CheckpointFile,
    *,
    checkpoint: bytes | None = None,
    view: View = "history",
    reducers: Reducers | None = None,
    follow: bool = False,
    journal: Path | None = None,
    reducer_specs: Sequence[str] = (),
) -> None:
    """Run the TUI in this terminal until the user quits (`follow`: timelines tail the run,
    `journal` the recorder's journal to tail; `reducers` loaded from `reducer_specs`, the
    `--reducers` the printed commands repeat)."""
    session = open_session(source, reducers=reducers, follow=follow, journal=journal, reducer_specs=reducer_specs)
    CkptApp(session, checkpoint=checkpoint, view=view, tune_gc=True).run()

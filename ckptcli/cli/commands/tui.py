"""ckpt tui: the terminal UI (Textual), over a store or a checkpoint file."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from ckptcli.cli._common import open_source
from ckptcli.cli.app import ReducersOpt, StoreOpt, app
from ckptcli.cli.output import exit_status
from ckptcli.errors import ExitCode

if TYPE_CHECKING:
    from ckptcli.api import Checkpoint


@app.command(
    "tui",
    epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.CORRUPT, ExitCode.UNSUPPORTED_VERSION, ExitCode.NO_STORE),
)
def tui_cmd(
    target: Annotated[
        str | None,
        typer.Argument(
            metavar="[STORE|FILE|REF]",
            help=(
                "A store directory or URL, a checkpoint file (.ckpt), or a checkpoint of the store to open at. Default: the nearest store."
            ),
            show_default=False,
        ),
    ] = None,
    timeline: Annotated[
        bool, typer.Option("--timeline", help="Open the checkpoint's event timeline (needs a checkpoint: a file or a REF).")
    ] = False,
    reducers: ReducersOpt = None,
    store: StoreOpt = None,
) -> None:
    """Browse a store in the terminal: history, checkpoints, event timelines, diffs.

    The history shows each subject's checkpoints newest first as a graph of their
    parents: forks, migrations and merges, with tags, branches and labels; filter (f)
    and search (/) it. Enter opens a checkpoint: its metadata, memory tree, plan stack,
    tool-call log, event tail and blobs. t opens the timeline of a checkpoint's event
    tail: moving the cursor shows the state at that event with what the step changed
    highlighted. Mark one checkpoint or point with space (m on the timeline) and press d
    on another to diff them. c copies an id, ? shows every key.

    A store of 10,000 checkpoints opens from its catalog (what ckpt ls reads) and a
    tail of 100,000 events is read only where it is shown (docs/tui.md). ckpt tui needs
    a terminal; use ckpt ls, show, replay or diff --json for output a program reads.

    Examples:

      ckpt tui

      ckpt tui /srv/ckpt

      ckpt tui s3://team-bucket/agents

      ckpt tui support-bot.ckpt

      ckpt tui agent:bot --timeline

      ckpt tui latest --reducers myagent.reducers:REDUCERS
    """
    from ckptcli import api
    from ckptcli.errors import UsageError

    source, checkpoint = open_source(target, store, directory=True)
    from ckptcli.history.replay import load_reducers

    red = load_reducers(reducers or [])
    # everything the first screen reads is read here, so that a missing manifest or a
    # tail that breaks formats/events.md is one line and its exit code, not a crash in the app
    opened = api.Checkpoint(source, checkpoint) if checkpoint is not None else None
    if timeline:
        if opened is None:
            raise UsageError("--timeline needs a checkpoint", hint="give a checkpoint file or a reference: ckpt tui latest --timeline")
        _check_tail(opened)
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        raise UsageError(
            "ckpt tui draws on a terminal, and stdin or stdout is not one",
            hint="run it in a terminal; for output a program reads, use ckpt ls, show, replay or diff with --json",
        )
    from ckptcli.tui.app import run  # Textual is imported here only: other commands start without it

    run(
        source,
        checkpoint=checkpoint,
        view="timeline" if timeline else ("checkpoint" if checkpoint is not None else "history"),
        reducers=red,
    )


def _check_tail(opened: Checkpoint) -> None:
    """The snapshot and the events of a checkpoint the timeline opens on: a tail that breaks
    formats/events.md is one line and its exit code here, not a crash in the app."""
    from ckptcli.errors import InvalidInputError
    from ckptcli.history.events import STATE_KEYS
    from ckptcli.history.lazylist import LazyList
    from ckptcli.history.timeline import Timeline, events_root

    where = f"checkpoint {opened.hex[:12]}"
    bad = [k for k in opened.manifest.layout.get("keys", []) if k not in (*STATE_KEYS, "events")]
    if bad:
        raise InvalidInputError(
            f"{where}: the snapshot has a key {bad[0]!r}",
            hint="a snapshot is a state: memory, plan, tools, ext (formats/events.md#terminology)",
        )
    # the events only (the snapshot is decoded once, by the timeline screen)
    Timeline(LazyList(opened.source, events_root(opened), f"{where}: events"), {}, id=opened.hex).check()

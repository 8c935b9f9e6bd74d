"""ckpt tui: the terminal UI (Textual), over a store or a checkpoint file."""

from __future__ import annotations

import sys
from pathlib import Path
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
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-F",
            help="Follow a running agent: open the checkpoint's timeline (default: the latest) and append the events its "
            "recorder writes and the checkpoints it takes as they come, as tail -f does.",
        ),
    ] = False,
    journal: Annotated[
        Path | None,
        typer.Option(
            "--journal",
            metavar="FILE",
            help="The recorder's journal to follow (default: the subject's journal found beside the store, in it, "
            "or in the current directory).",
            show_default=False,
        ),
    ] = None,
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

      ckpt tui agent:bot --follow

      ckpt tui agent:bot --follow --journal bot.journal
    """
    import gc

    # no collection until the first frame (CkptApp.on_ready turns it on again): what is made
    # until then lives on (the store's index: 57,000 objects for a 100,000-event tail), and
    # full collections over it were 0.1 s of the first paint (bench/tui.py)
    gc.disable()
    from ckptcli import api
    from ckptcli.errors import UsageError
    from ckptcli.store.repository import Store

    source, checkpoint = open_source(target, store, directory=True)
    from ckptcli.history.replay import load_reducers

    red = load_reducers(reducers or [])
    # everything the first screen reads is read here, so that a missing manifest or a
    # tail that breaks formats/events.md is one line and its exit code, not a crash in the app
    if journal is not None and not follow:
        raise UsageError("--journal is the journal --follow tails", hint="add --follow: ckpt tui agent:bot --follow --journal bot.journal")
    if follow and checkpoint is None:
        if not isinstance(source, Store):
            raise UsageError("--follow needs a store", hint="follow a running agent in its store: ckpt tui agent:bot --follow")
        checkpoint = source.resolve("latest")
    if journal is not None:
        from ckptcli.history.recorder import read_journal

        read_journal(journal, follow=True)  # a file that is no journal: one line and its exit code, now
    opened = api.Checkpoint(source, checkpoint) if checkpoint is not None else None
    if timeline or follow:
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
        view="timeline" if timeline or follow else ("checkpoint" if checkpoint is not None else "history"),
        reducers=red,
        reducer_specs=reducers or [],
        follow=follow,
        journal=journal,
    )


#: Events of a tail read before the timeline starts (all of a shorter tail). Each costs ~20 us:
#: 20,000 were 0.4 s of the first paint of a 100,000-event tail (bench/tui.py).
CHECKED_EVENTS = 1_000


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
    # the events only (the snapshot is decoded once, by the timeline screen); a long tail's
    # first and last CHECKED_EVENTS // 2, what the first screen shows and more (the rest are
    # checked as they are drawn: a row that breaks the spec says so in red, docs/tui.md)
    Timeline(LazyList(opened.source, events_root(opened), f"{where}: events"), {}, id=opened.hex).check(CHECKED_EVENTS)

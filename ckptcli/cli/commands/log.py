"""ckpt log: a subject's checkpoints, newest first; with --path, those that changed it."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ckptcli.cli._common import open_store, refuse_checkpoint_file
from ckptcli.cli.app import JsonOpt, ReducersOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe
from ckptcli.errors import ExitCode

STYLES = {"header": "bold yellow", "section": "bold cyan", "add": "green", "remove": "red", "change": "yellow", "summary": ""}


@app.command(
    "log",
    epilog=exit_status(
        ExitCode.USAGE, ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.CORRUPT, ExitCode.LIMIT_EXCEEDED
    ),
)
def log_cmd(
    ref: Annotated[
        str, typer.Argument(metavar="SUBJECT|REF", help="A subject (KIND:NAME: from its latest) or any checkpoint reference to start from.")
    ],
    section: Annotated[
        str | None,
        typer.Option(
            "--section",
            help="Only checkpoints whose state changed in this section (memory, plan, tools, events, ext:NS).",
            show_default=False,
        ),
    ] = None,
    path: Annotated[
        str | None,
        typer.Option(
            "--path",
            metavar="JSON-POINTER",
            help="Only checkpoints whose state changed at this JSON Pointer (e.g. /memory/user/name).",
            show_default=False,
        ),
    ] = None,
    patch: Annotated[
        bool, typer.Option("--patch", "-p", help="Show each checkpoint's changes and, for a recorded one, the events that made them.")
    ] = False,
    number: Annotated[
        int | None,
        typer.Option(
            "--limit",
            "--max-count",
            metavar="N",
            min=0,
            help="Show at most N checkpoints, N >= 0 (git log -n: -n is --dry-run in ckpt).",
            show_default=False,
        ),
    ] = None,
    reducers: ReducersOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List a subject's checkpoints, newest first, following first parents (like git log).

    Each checkpoint is spoken of at its state: a recorded one's snapshot with its event
    tail applied (docs/replay.md "The state at a checkpoint"). With --path or --section,
    only the checkpoints where the state there differs from the parent's are listed, like
    `git log -- PATH`; -p adds what changed and, for a recorded checkpoint, the events of
    its tail that changed it, each with its change. The value at the path is found by
    walking the stored encodings by hash, and only checkpoints whose tail may touch the
    path are replayed, so a long history costs little more than reading its manifests.

    --json prints a list of {"id", "created_ns", "subject", "parents", "message",
    "labels", "state" (recorded ones), "changes": [{"op", "path", "old", "new"}] (with
    --path, --section or -p), "events": [{"seq", "ts", "kind", "changes"}] (with -p)}.

    Examples:

      ckpt log agent:bot

      ckpt log agent:bot --path /memory/user/email -p

      ckpt log known-good --section plan --limit 5

      ckpt log agent:bot --path /memory/refund --json | jq '.[0].id'
    """
    from ckptcli.history.query import log, render_entry
    from ckptcli.history.replay import load_reducers

    red = load_reducers(reducers or [])
    st = open_store(store)
    refuse_checkpoint_file(
        ref, "log", st, f"`ckpt show {ref}` shows the checkpoint it holds; to follow its history, `ckpt import {ref}` and log its subject"
    )
    entries = log(st, ref, path=path, section=section, patch=patch, limit=number, reducers=red)
    if as_json:
        emit_json([e.to_dict() for e in entries])
        return
    console = out()
    first = True
    for entry in entries:
        # messages, subjects and keys come from whoever made the checkpoints: controls escaped
        lines = ([] if first else [("summary", "")]) + [
            (kind, safe(text, backslash=False)) for kind, text in render_entry(entry, patch=patch)
        ]
        first = False
        if console.color_system is None:
            sys.stdout.writelines(text + "\n" for _kind, text in lines)
            sys.stdout.flush()
        else:
            from rich.text import Text

            for kind, text in lines:
                console.print(Text(text, style=STYLES.get(kind, "")))

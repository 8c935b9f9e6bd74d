"""ckpt import: copy a checkpoint file into the store, or a LangGraph SqliteSaver database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import BarProgress, emit_json, exit_status, out
from ckptcli.errors import ExitCode, UsageError

LANGGRAPH = "langgraph"


@app.command(
    "import",
    epilog=exit_status(
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.NO_STORE,
        ExitCode.CORRUPT,
        ExitCode.UNSUPPORTED_VERSION,
        ExitCode.LIMIT_EXCEEDED,
        ExitCode.IO_ERROR,
    ),
)
def import_(
    source: Annotated[
        list[str],
        typer.Argument(
            metavar="FILE | langgraph DB",
            help="A checkpoint file made by `ckpt export`; or the word `langgraph` and a SqliteSaver database.",
            show_default=False,
        ),
    ],
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread", metavar="ID", help="With `langgraph`: import this thread only (default: every thread).", show_default=False
        ),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Import a checkpoint file into the store (checked whole before anything is kept),
    or the histories of a LangGraph SqliteSaver database.

    `ckpt import langgraph DB` reads a SqliteSaver database (read-only) and writes each
    of its checkpoints as the LangGraph saver of ckpt would have (docs/langgraph.md):
    one checkpoint per LangGraph checkpoint, subject agent:THREAD, with its parent
    link, metadata and pending writes, values stored exactly as LangGraph serialized
    them. Checkpoints the store has already are skipped, so importing again adds only
    what is new. A file that is not SQLite (or is damaged) exits 5; a SQLite database
    that is not a SqliteSaver one exits 4.

    --json prints {"id"} for a file; {"threads", "checkpoints", "already_present",
    "writes"} for a LangGraph database.

    Examples:

      ckpt import agent.ckpt

      ckpt import agent.ckpt --store /srv/ckpt --json

      ckpt import langgraph checkpoints.sqlite

      ckpt import langgraph checkpoints.sqlite --thread support-42 && ckpt ls
    """
    from ckptcli import api

    file, db = source[0], (Path(source[1]) if len(source) > 1 else None)
    if len(source) > 2 or (db is not None and file != LANGGRAPH):
        raise UsageError(f"unexpected argument {source[-1]!r}", hint="ckpt import FILE, or ckpt import langgraph DB")
    if file == LANGGRAPH and db is not None:
        api.refuse_url(source[1], "the database to import")
        from ckptcli.adapters.langgraph.importer import import_sqlite

        st = open_store(store)
        report = import_sqlite(st, db, thread=thread, progress=BarProgress())
        if as_json:
            emit_json(report.to_dict())
        else:
            threads = f"{len(report.threads)} thread{'s' if len(report.threads) != 1 else ''}"
            again = f"; {report.already} were in the store already" if report.already else ""
            if report.checkpoints or report.writes:
                out().print(
                    f"imported {report.checkpoints} checkpoints ({report.writes} pending writes) of {threads} into {st.location}{again}",
                    markup=False,
                )
            else:
                out().print(f"nothing new to import: {st.location} has the {report.already} checkpoints of {threads} already", markup=False)
        return
    if file == LANGGRAPH and not Path(file).is_file():
        raise UsageError("`ckpt import langgraph` needs the database to read", hint="ckpt import langgraph checkpoints.sqlite")
    if thread is not None:
        raise UsageError("--thread is for `ckpt import langgraph DB` only", hint="ckpt import FILE imports one checkpoint file")
    api.refuse_url(file, "the checkpoint file to import")
    st = open_store(store)
    cid = api.import_checkpoint(st, file, progress=BarProgress())
    if as_json:
        emit_json({"id": cid.hex()})
    else:
        out().print(cid.hex(), markup=False)

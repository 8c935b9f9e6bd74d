"""ckpt ls: list checkpoints, newest first."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, short
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.CORRUPT))
def ls(
    source: Annotated[str | None, typer.Argument(help="A checkpoint file to list instead of the store.", show_default=False)] = None,
    subject: Annotated[str | None, typer.Option("--subject", "-S", help="Only this subject (KIND:NAME).", show_default=False)] = None,
    label: Annotated[list[str] | None, typer.Option("--label", "-l", help="Only checkpoints with KEY=VALUE; repeatable.", show_default=False)] = None,
    since: Annotated[str | None, typer.Option("--since", help="Only newer than this: ISO time or an age such as 2h, 7d.", show_default=False)] = None,
    until: Annotated[str | None, typer.Option("--until", help="Only older than this: ISO time or an age.", show_default=False)] = None,
    limit: Annotated[int | None, typer.Option("--limit", "-n", help="At most this many.", show_default=False)] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List checkpoints, newest first.

    Examples:

      ckpt ls

      ckpt ls --subject agent:bot --since 2d -n 20

      ckpt ls --label run=42 --json

      ckpt ls exported.ckpt
    """
    from ckptcli import api
    from ckptcli.timeparse import parse_time

    if source is not None:
        ck = api.open_checkpoint(source, store_path=store)
        rows = [(ck.id, ck.manifest)]
    else:
        flt = api.ListFilter(
            subject=subject,
            labels=api.parse_labels(label),
            since_ns=parse_time(since) if since else None,
            until_ns=parse_time(until) if until else None,
            limit=limit,
        )
        rows = api.list_checkpoints(api.open_store(store), flt)
    if as_json:
        emit_json([api.info_dict(cid, m) for cid, m in rows])
        return
    if not rows:
        out().print("no checkpoints", markup=False)
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("ID", "CREATED (UTC)", "SUBJECT", "PARENT", "LABELS", "MESSAGE"):
        table.add_column(col, no_wrap=col != "MESSAGE", overflow="fold")
    for cid, m in rows:
        table.add_row(
            short(cid.hex()),
            api.format_time(m.created_ns)[:19].replace("T", " "),
            str(m.subject),
            ",".join(short(p.hex()) for p in m.parents) or "-",
            ",".join(f"{k}={v}" for k, v in m.labels.items()),
            m.message,
        )
    out().print(table)

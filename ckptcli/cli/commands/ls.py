"""ckpt ls: list checkpoints, newest first."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, short
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.CORRUPT))
def ls(
    source: Annotated[str | None, typer.Argument(help="A checkpoint file to list instead of the store.", show_default=False)] = None,
    subject: Annotated[str | None, typer.Option("--subject", "-S", help="Only this subject (KIND:NAME).", show_default=False)] = None,
    label: Annotated[list[str] | None, typer.Option("--label", "-l", help="Only checkpoints with KEY=VALUE; repeatable.", show_default=False)] = None,
    since: Annotated[str | None, typer.Option("--since", help="Only newer than this: ISO time or an age such as 2h, 7d.", show_default=False)] = None,
    until: Annotated[str | None, typer.Option("--until", help="Only older than this: ISO time or an age.", show_default=False)] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many.", show_default=False)] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List checkpoints, newest first.

    Examples:

      ckpt ls

      ckpt ls --subject agent:bot --since 2d --limit 20

      ckpt ls --label run=42 --json

      ckpt ls exported.ckpt
    """
    from ckptcli import listing
    from ckptcli.store.repository import Store
    from ckptcli.timeparse import parse_time

    rows: list[tuple[bytes, Any]]
    if source is not None:
        from ckptcli import api  # a checkpoint file: the full API

        ck = api.open_checkpoint(source, store_path=store)
        rows = [(ck.id, ck.manifest)]
    else:
        flt = listing.ListFilter(
            subject=subject,
            labels=listing.parse_labels(label),
            since_ns=parse_time(since) if since else None,
            until_ns=parse_time(until) if until else None,
            limit=limit,
        )
        rows = list(listing.list_checkpoints(Store.open(store), flt))
    if as_json:
        emit_json([listing.info_dict(cid, m) for cid, m in rows])
        return
    if not rows:
        sys.stdout.write("no checkpoints\n")
        return
    table = [("ID", "CREATED (UTC)", "SUBJECT", "PARENT", "LABELS", "MESSAGE")]
    for cid, m in rows:
        table.append(
            (
                short(cid.hex()),
                listing.format_time(m.created_ns)[:19].replace("T", " "),
                str(m.subject),
                ",".join(short(p.hex()) for p in m.parents) or "-",
                ",".join(f"{k}={v}" for k, v in m.labels.items()),
                m.message.replace("\n", " "),
            )
        )
    # plain aligned columns: a rich table of 10,000 rows takes seconds to lay out
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
    sys.stdout.writelines(
        "  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] + "\n" for r in table
    )

"""ckpt ls: list checkpoints, newest first."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from ckptcli.cli._common import open_checkpoint, open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, human_size, safe, short
from ckptcli.errors import ExitCode

Row = tuple[bytes, Any, list[str]]  # id, manifest or summary, the refs naming it


def _labels(m: Any, machine: bool) -> str:
    shown = [f"{k}={v}" for k, v in m.labels.items() if machine or not _is_machine(k)]
    hidden = len(m.labels) - len(shown)
    return " ".join(shown) + (f" +{hidden}" if hidden else "")


def _is_machine(key: str) -> bool:
    from ckptcli.listing import is_machine_label

    return is_machine_label(key)


def _refs(names: list[str]) -> str:
    out = []
    for n in names:
        ns, _, rest = n.partition("/")
        out.append("latest" if ns == "latest" else f"{'tag' if ns == 'tags' else 'branch'}:{rest}")
    return ",".join(out)


def _created(m: Any) -> str:
    from ckptcli.listing import format_time

    return format_time(m.created_ns)[:19].replace("T", " ")


def _size(m: Any) -> str:
    """SIZE: the logical size the take recorded (manifest stats.logical_bytes: checkpoint.logical_size), the files it did
    not read again (unchanged since the parent) and the sections it carries from another
    checkpoint included. A checkpoint taken before they were counted (no reused_bytes in
    its stats) that has a parent may hold more than it says: "+" (at least this much)."""
    n = m.stats.get("logical_bytes")
    if type(n) is not int:
        return "-"
    return human_size(n) + ("+" if m.parents and "reused_bytes" not in m.stats else "")


# name -> (header, cell)
COLUMNS: dict[str, tuple[str, Callable[[bytes, Any, list[str]], str]]] = {
    "id": ("ID", lambda cid, m, r: short(cid.hex())),
    "created": ("CREATED (UTC)", lambda cid, m, r: _created(m)),
    "subject": ("SUBJECT", lambda cid, m, r: str(m.subject)),
    "parent": ("PARENT", lambda cid, m, r: ",".join(short(p.hex()) for p in m.parents) or "-"),
    "refs": ("REFS", lambda cid, m, r: _refs(r)),
    "size": ("SIZE", lambda cid, m, r: _size(m)),
    "added": ("ADDED", lambda cid, m, r: human_size(m.stats["new_bytes"]) if "new_bytes" in m.stats else "-"),
    "schema": ("SCHEMA", lambda cid, m, r: "-" if m.schema_version is None else str(m.schema_version)),
    "labels": ("LABELS", lambda cid, m, r: _labels(m, machine=False)),
    "all-labels": ("LABELS", lambda cid, m, r: _labels(m, machine=True)),
    "message": ("MESSAGE", lambda cid, m, r: m.message.replace("\n", " ")),
}
DEFAULT_COLUMNS = "id,created,subject,refs,size,labels,message"
SHRINK_ORDER = ("message", "all-labels", "labels", "parent", "refs", "subject")  # to fit a terminal


@app.command(epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.CORRUPT))
def ls(
    source: Annotated[
        str | None,
        typer.Argument(
            help="One checkpoint to show alone: a checkpoint file, or a checkpoint of the store (id or prefix, tag, branch, "
            "KIND:NAME for its latest, latest, REF~N). Every checkpoint of a subject: --subject.",
            show_default=False,
        ),
    ] = None,
    subject: Annotated[str | None, typer.Option("--subject", "-S", help="Only this subject (KIND:NAME).", show_default=False)] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", "-l", help="Only checkpoints with KEY=VALUE; repeatable.", show_default=False)
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only newer than this: ISO time or an age such as 2h, 7d.", show_default=False)
    ] = None,
    until: Annotated[str | None, typer.Option("--until", help="Only older than this: ISO time or an age.", show_default=False)] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many.", show_default=False)] = None,
    columns: Annotated[
        str, typer.Option("--columns", metavar="A,B,...", help=f"Columns to show, of: {', '.join(COLUMNS)}.")
    ] = DEFAULT_COLUMNS,
    no_pager: Annotated[
        bool, typer.Option("--no-pager", help="Never page the list (it is paged only on a terminal, by $PAGER or less).")
    ] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List checkpoints, newest first.

    On a terminal the table fits its width (long cells end in ...) and a list longer
    than the screen goes through $PAGER (default: less -FRX); piped, every cell is
    whole and nothing is paged. REFS are the refs naming a checkpoint (latest, tag:NAME,
    branch:NAME); SIZE is the size of the strings and bytes of its state and of the
    contents of its files, those it shares with the checkpoint it was taken after or
    carries from another included (map keys, numbers, structure and the names of its
    files are not counted: a state of numbers alone is 0 B); "+" after it: at least
    that, a checkpoint taken by a ckpt that did not count them. LABELS leaves out labels
    programs write for themselves (ckpt.*, langgraph.*, recorder.*, events.*, fork.*:
    "+N" says how many); the column all-labels shows them. --json prints every field of
    every checkpoint, with "refs".

    With an argument, ls shows that one checkpoint, with the same columns (REFS too, for
    a checkpoint of the store): `ckpt ls agent:bot` is the subject's latest, `ckpt ls -S
    agent:bot` every checkpoint of the subject.

    Examples:

      ckpt ls

      ckpt ls --subject agent:bot --since 2d --limit 20

      ckpt ls agent:bot        # the subject's latest alone

      ckpt ls --columns id,created,parent,all-labels

      ckpt ls --label run=42 --json

      ckpt ls exported.ckpt
    """
    from ckptcli import listing
    from ckptcli._util.timeparse import parse_time
    from ckptcli.errors import UsageError

    chosen = [c.strip() for c in columns.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in COLUMNS]
    if unknown or not chosen:
        raise UsageError(f"--columns: no column {unknown[0] if unknown else columns!r}", hint=f"choose among {', '.join(COLUMNS)}")
    rows: list[Row]
    if source is not None:
        from ckptcli.store.repository import Store

        ck = open_checkpoint(source, store)
        # a checkpoint of the store: the refs naming it, as in the list (a file has none)
        refs = listing.refs_by_target(ck.source).get(ck.id, []) if isinstance(ck.source, Store) else []
        rows = [(ck.id, ck.manifest, refs)]
    else:
        flt = listing.ListFilter(
            subject=subject,
            labels=listing.parse_labels(label),
            since_ns=parse_time(since) if since else None,
            until_ns=parse_time(until) if until else None,
            limit=limit,
        )
        st = open_store(store)
        found = listing.list_checkpoints(st, flt)
        named = listing.refs_by_target(st) if found else {}
        rows = [(cid, m, named.get(cid, [])) for cid, m in found]
    if as_json:
        emit_json([{**listing.info_dict(cid, m), "refs": refs} for cid, m, refs in rows])
        return
    if not rows:
        sys.stdout.write("no checkpoints\n")
        return
    lines = _table(rows, chosen, _width())
    _page(lines, no_pager)


def _width() -> int | None:
    """The width to fit: the terminal's (COLUMNS wins, as for every tool), none when piped."""
    import shutil

    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def _table(rows: list[Row], chosen: list[str], width: int | None) -> list[str]:
    # plain aligned columns: a rich table of 10,000 rows takes seconds to lay out
    table = [[COLUMNS[c][0] for c in chosen]]
    table += [[safe(COLUMNS[c][1](cid, m, refs)) for c in chosen] for cid, m, refs in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(chosen))]
    if width is not None:
        # shorten the least telling columns first, each down to its header or 8 characters
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        for name in SHRINK_ORDER:
            if excess <= 0:
                break
            for i, c in enumerate(chosen):
                if c == name and excess > 0:
                    cut = min(excess, max(0, widths[i] - max(8, len(table[0][i]))))
                    widths[i] -= cut
                    excess -= cut
    ell = "…" if (sys.stdout.encoding or "").lower().replace("-", "") == "utf8" else "~"
    out = []
    for r in table:
        cells = [cell if len(cell) <= w else cell[: w - 1] + ell for cell, w in zip(r, widths, strict=True)]
        out.append(
            ("  ".join(c.ljust(w) for c, w in zip(cells[:-1], widths[:-1], strict=True)) + "  " + cells[-1]).rstrip()
            if len(cells) > 1
            else cells[0]
        )
    return out


def _page(lines: list[str], no_pager: bool) -> None:
    """Write `lines`, through a pager only when stdout is a terminal the list overflows."""
    import shutil

    text = "\n".join(lines) + "\n"
    if no_pager or not sys.stdout.isatty() or len(lines) < shutil.get_terminal_size().lines:
        sys.stdout.write(text)
        return
    import shlex
    import subprocess

    command = os.environ.get("CKPT_PAGER") or os.environ.get("PAGER") or "less"
    env = {**os.environ, "LESS": os.environ.get("LESS", "FRX")}
    try:
        argv = shlex.split(command)
        if not argv or argv == ["cat"]:
            raise ValueError("no pager")
        sys.stdout.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env)
    except (OSError, ValueError):
        sys.stdout.write(text)  # no pager to be found: the list as it is
        return
    assert proc.stdin is not None
    try:
        proc.stdin.write(text.encode(sys.stdout.encoding or "utf-8", "replace"))
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the reader quit the pager early
    proc.wait()

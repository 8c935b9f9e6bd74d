"""ckpt reflog: every move of a ref (a subject's latest, a tag, a branch), newest first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ckptcli.cli._common import locked, open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe, short
from ckptcli.errors import ExitCode

if TYPE_CHECKING:
    from ckptcli.store.repository import Store


@app.command(
    epilog=exit_status(ExitCode.USAGE, ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.LOCKED, ExitCode.NO_STORE, ExitCode.IO_ERROR)
)
def reflog(
    name: Annotated[
        str | None, typer.Argument(help="A subject (KIND:NAME: its latest), a tag or a branch; default: every ref.", show_default=False)
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", metavar="N", min=1, help="At most this many entries (N >= 1).", show_default=False)
    ] = None,
    expire: Annotated[
        str | None,
        typer.Option(
            "--expire",
            metavar="AGE",
            help="Trim the reflog instead: drop entries older than AGE (90d, 0s), keeping each ref's newest.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="With --expire: say what would be trimmed; change nothing.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show how refs moved, newest first: each subject's latest, tags and branches.

    Every change of a ref (a take, a migrate, a reset, a tag, a prune, a repair) is
    appended to the store's reflog (logs/refs/..., formats/reflog.md) with the old and
    new checkpoint, the time, what moved it (the command line), the host and the pid;
    not the commits of a LangGraph saver, which move a thread's latest at each one (the
    thread's history is its chain: `ckpt ls --subject agent:THREAD`). NAME@{N} names
    what NAME pointed at N moves ago (NAME@{0} is now), in every command that takes a
    checkpoint reference; `ckpt reset SUBJECT 'SUBJECT@{1}'` undoes the last move of
    its latest.

    The reflog is trimmed by `ckpt prune` (entries older than 90 days, and all but the
    newest 1000 of a ref) or by --expire AGE here, which trims every ref's log (NAME
    and --limit do not apply) and keeps each existing ref's newest entry. A checkpoint
    a ref was moved away from (a reset back) is kept by prune only while the entry
    that left it is in the reflog (formats/reflog.md, "Expiry"). With --expire,
    --json prints {"dry_run", "entries", "logs"} (entries trimmed, from how many logs).

    --json prints a list of {"ref", "old", "new", "time", "time_ns", "reason",
    "command", "host", "pid"} (full ids; old is null for a ref created, new for one
    deleted).

    Examples:

      ckpt reflog

      ckpt reflog agent:bot

      ckpt reflog known-good --json

      ckpt reset agent:bot 'agent:bot@{1}'

      ckpt reflog --expire 30d --dry-run
    """
    st = open_store(store)
    if expire is not None:
        if name is not None or limit is not None:
            from ckptcli.errors import UsageError

            raise UsageError("--expire trims every ref's log: it takes no NAME and no --limit", hint="ckpt reflog --expire 90d --dry-run")
        _expire(st, expire, dry_run, as_json)
        return
    if dry_run:
        from ckptcli.errors import UsageError

        raise UsageError("--dry-run goes with --expire", hint="ckpt reflog --expire 90d --dry-run")
    path = st.ref_path_of(name) if name is not None else None
    entries = st.ref_log(path)
    if limit is not None:
        entries = entries[:limit]
    if as_json:
        emit_json([e.to_dict() for e in entries])
        return
    if not entries:
        out().print("no ref moves recorded", markup=False)
        return
    seen: dict[str, int] = {}
    c = out()
    for e in entries:
        when = e.to_dict()["time"][:19].replace("T", " ")
        ref, reason = safe(e.ref), safe(e.reason)
        if e.old is not None and e.old == e.new:  # no move: a new checkpoint left it here
            c.print(f"{ref + ' (kept)':<{len(ref) + 4}}  {when}  {short(e.new):<12}    {'':<12}  {reason}", markup=False)
            continue
        n = seen.get(e.ref, 0)
        seen[e.ref] = n + 1
        move = f"{short(e.old) if e.old else '(new)':<12} -> {short(e.new) if e.new else '(deleted)':<12}"
        c.print(f"{ref}@{{{n}}}  {when}  {move}  {reason}", markup=False)


def _expire(st: Store, age: str, dry_run: bool, as_json: bool) -> None:
    import time

    from ckptcli._util.timeparse import parse_duration
    from ckptcli.store import reflog as log

    cutoff = time.time_ns() - parse_duration(age) * 1_000_000_000
    # the refs lock is the one the writers of entries hold (on object storage there is
    # none: logs are trimmed by compare-and-swap, reflog.expire); the store lock, shared, keeps
    # a prune (which clears tmp/) from removing the new text before it is renamed
    with locked(st, "refs"):
        trimmed = log.expire(st.backend, cutoff_ns=cutoff, dry_run=dry_run, warn=st.warn)
    entries = sum(t.dropped for t in trimmed)
    logs = sum(1 for t in trimmed if t.dropped)
    if as_json:
        emit_json({"dry_run": dry_run, "entries": entries, "logs": logs})
        return
    verb = "would trim" if dry_run else "trimmed"
    out().print(f"{verb} {entries} entr{'y' if entries == 1 else 'ies'} older than {age} from {logs} log(s)", markup=False)

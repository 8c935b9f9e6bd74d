"""ckpt prune: remove checkpoints a retention policy does not keep, then unneeded objects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import BarProgress, emit_json, exit_status, human_size, out, safe
from ckptcli.errors import ExitCode

if TYPE_CHECKING:
    from ckptcli.store.prune import PruneReport


@app.command(
    epilog=exit_status(ExitCode.USAGE, ExitCode.LOCKED, ExitCode.CORRUPT, ExitCode.UNSAFE_PATH, ExitCode.NO_STORE, ExitCode.IO_ERROR)
)
def prune(
    keep_last: Annotated[int, typer.Option("--keep-last", metavar="N", help="Keep the N newest checkpoints of each subject.")] = 0,
    keep_hourly: Annotated[
        int, typer.Option("--keep-hourly", metavar="N", help="Keep the newest checkpoint of each of the last N hours that have one.")
    ] = 0,
    keep_daily: Annotated[int, typer.Option("--keep-daily", metavar="N", help="... of each of the last N days that have one.")] = 0,
    keep_weekly: Annotated[int, typer.Option("--keep-weekly", metavar="N", help="... of each of the last N ISO weeks that have one.")] = 0,
    keep_monthly: Annotated[int, typer.Option("--keep-monthly", metavar="N", help="... of each of the last N months that have one.")] = 0,
    keep_yearly: Annotated[int, typer.Option("--keep-yearly", metavar="N", help="... of each of the last N years that have one.")] = 0,
    keep_within: Annotated[
        str | None,
        typer.Option("--keep-within", metavar="AGE", help="Keep everything taken within AGE (30m, 12h, 7d, 2w) of the subject's newest."),
    ] = None,
    keep_tag: Annotated[
        list[str] | None,
        typer.Option("--keep-tag", metavar="T", help="Keep checkpoints tagged T, or labelled T (key or key=value). Repeatable."),
    ] = None,
    langgraph_ttl: Annotated[
        str | None,
        typer.Option(
            "--langgraph-ttl", metavar="AGE", help="Expire LangGraph threads whose newest checkpoint is older than AGE (30m, 12h, 7d, 2w)."
        ),
    ] = None,
    langgraph_ttl_strategy: Annotated[
        str,
        typer.Option(
            "--langgraph-ttl-strategy",
            metavar="STRATEGY",
            help="What an expired thread loses: delete (all of it) or keep_latest (all but what it resumes from).",
        ),
    ] = "delete",
    reflog_expire: Annotated[
        str,
        typer.Option(
            "--reflog-expire",
            metavar="AGE",
            help="Trim reflog entries older than AGE (and all but each ref's newest 1000); 0s trims all but each ref's newest.",
        ),
    ] = "90d",
    subject: Annotated[
        list[str] | None, typer.Option("--subject", "-S", metavar="KIND:NAME", help="Only these subjects (repeatable).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Say what would be removed and why each survivor stays; change nothing.")
    ] = False,
    allow_remove_all: Annotated[bool, typer.Option("--allow-remove-all", help="Allow removing every checkpoint of a subject.")] = False,
    max_unused: Annotated[
        float, typer.Option("--max-unused", metavar="FRACTION", help="Rewrite a pack when more than this fraction of it is unneeded.")
    ] = 0.1,
    utc: Annotated[bool, typer.Option("--utc", help="Calendar buckets in UTC (default: local time).")] = False,
    lock_wait: Annotated[
        float, typer.Option("--lock-wait", metavar="SECONDS", help="How long to wait for running takes to finish.")
    ] = 300.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="List kept checkpoints too, with their reasons.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove checkpoints a retention policy does not keep, then the data only they needed.

    The policy applies to each subject on its own, newest first, as restic's forget
    does: --keep-last N keeps the N newest; each calendar rule keeps the newest
    checkpoint of each of its last N buckets (hours, days, ISO weeks, months, years
    that have a checkpoint); --keep-within keeps everything taken within that long of
    the subject's newest; --keep-tag keeps tagged or labelled ones. A checkpoint that
    any rule keeps stays. Checkpoints that a tag or a branch points at always stay.
    A subject whose every checkpoint would go is refused unless --allow-remove-all.
    Adapters keep what the kept checkpoints need with them: a LangGraph thread keeps
    the checkpoints it resumes from (its subgraphs' too) and those its delta channels
    are rebuilt from (docs/langgraph.md); --dry-run -v says why each stays.

    The reflog is trimmed first, as git's gc expires it: entries older than
    --reflog-expire (90 days) go, and each ref keeps at most its newest 1000 entries
    (and always its newest, while the ref exists). A checkpoint a ref was moved away
    from by an unexpired entry without going on from it (a `ckpt reset` back, a
    migration of an older checkpoint made latest, a tag moved or deleted) stays, so
    `ckpt reset SUBJECT 'SUBJECT@{1}'` still works; --dry-run shows the reason
    ("reflog latest/...: moved off it ..."). Moves by takes and imports keep
    nothing: the policy prunes that history. `--reflog-expire 0s` lets such
    checkpoints go now (formats/reflog.md, "Expiry").

    --langgraph-ttl is LangGraph Platform's thread TTL, applied once: a LangGraph
    thread whose newest checkpoint is older than AGE is expired, and loses every
    checkpoint (--langgraph-ttl-strategy delete, the default) or all but what it
    resumes from (keep_latest: its newest checkpoint, a subgraph's it is paused in,
    and what their delta channels are rebuilt from), whatever the --keep-* rules
    say. A thread whose runs gave their own TTL (thread_ttl minutes, 0 for never,
    and thread_ttl_strategy, in the run's config) has that one instead. Other
    threads and subjects are left to those rules, or kept whole without any. A
    thread a running saver holds is in use, and left alone; savers that hold
    none of the pruned ones read them again. A saver running with its own ttl option
    sweeps the same way by itself.

    Then objects no surviving checkpoint needs are deleted: packs holding only such
    objects are removed, packs more than --max-unused unneeded are rewritten, small
    packs (one per small take) are merged, and the index is rewritten as one file. Bytes
    of objects no index names count as unneeded: a damaged copy `ckpt repair index` left
    out, once the object is back from a copy, goes with its pack's rewrite
    (docs/runbooks/store-damaged.md).

    Safe while other processes take checkpoints: prune holds the store lock
    exclusively, waiting up to --lock-wait seconds for running takes; takes started
    meanwhile wait for it (up to 30 s, then exit 9 with nothing written). A crash at
    any point loses nothing a kept checkpoint needs; run prune again to finish.

    Examples:

      ckpt prune --keep-last 10 --dry-run

      ckpt prune --keep-daily 7 --keep-weekly 4 --keep-tag release

      ckpt prune --keep-within 2d -S agent:support-bot --json

      ckpt prune --langgraph-ttl 30d --dry-run

      ckpt prune --keep-last 10 --reflog-expire 30d

      ckpt prune --langgraph-ttl 7d --langgraph-ttl-strategy keep_latest --keep-last 50
    """
    from datetime import UTC

    from ckptcli._util.timeparse import parse_duration
    from ckptcli.format.manifest import Subject
    from ckptcli.store.locking import check_lock_wait
    from ckptcli.store.prune import Policy
    from ckptcli.store.prune import prune as run_prune

    policy = Policy(
        keep_last=keep_last,
        keep_hourly=keep_hourly,
        keep_daily=keep_daily,
        keep_weekly=keep_weekly,
        keep_monthly=keep_monthly,
        keep_yearly=keep_yearly,
        keep_within_s=parse_duration(keep_within) if keep_within is not None else None,
        keep_tags=list(keep_tag or []),
        tz=UTC if utc else None,
        langgraph_ttl_s=parse_duration(langgraph_ttl) if langgraph_ttl is not None else None,
        langgraph_ttl_strategy=langgraph_ttl_strategy,
        reflog_expire_s=parse_duration(reflog_expire),
    )
    policy.check()
    check_lock_wait(lock_wait)
    st = open_store(store)
    subjects = [str(Subject.parse(s)) for s in subject] if subject else None
    report = run_prune(
        st,
        policy,
        subjects=subjects,
        dry_run=dry_run,
        allow_remove_all=allow_remove_all,
        max_unused=max_unused,
        lock_wait=lock_wait,
        progress=BarProgress(),
    )
    if as_json:
        emit_json(report.to_dict())
        return
    _print_report(report, dry_run=dry_run, verbose=verbose, strategy=langgraph_ttl_strategy)


def _print_report(report: PruneReport, *, dry_run: bool, verbose: bool, strategy: str) -> None:
    """What was expired, kept and removed (every kept one with --dry-run or -v), then the objects."""
    from ckptcli.listing import format_time

    c = out()
    verb = "would remove" if dry_run else "removed"
    for subj, idle in sorted(report.expired.items()):
        c.print(f"expired {safe(subj)}: no write for {_age(idle)} ({report.expired_strategy.get(subj, strategy)})", markup=False)
    for subj in report.in_use:
        c.print(
            f"left alone {safe(subj)}: expired, but a running LangGraph saver holds it (or died before committing it; "
            "opening the store replays it)",
            markup=False,
        )
    for d in report.decisions:
        if d.keep and not (verbose or dry_run):
            continue
        what = (
            f"keep    {d.id.hex()[:12]}  {format_time(d.created_ns)}  {d.subject}  ({', '.join(d.reasons)})"
            if d.keep
            else (f"remove  {d.id.hex()[:12]}  {format_time(d.created_ns)}  {d.subject}")
        )
        c.print(what, markup=False)
    c.print(f"{verb} {len(report.removed)} checkpoint(s), kept {len(report.kept)}", markup=False)
    if report.reflog_dropped:
        trimmed = "would trim" if dry_run else "trimmed"
        c.print(
            f"reflog: {trimmed} {report.reflog_dropped} expired entr{'y' if report.reflog_dropped == 1 else 'ies'} from "
            f"{report.reflog_logs} log(s)",
            markup=False,
        )
    for name, target in report.refs_moved.items():
        c.print(
            f"moved {safe(name)} to {target[:12]}" if target else f"deleted {safe(name)} (its subject has no checkpoint left)", markup=False
        )
    _print_objects(report)


def _print_objects(report: PruneReport) -> None:
    c = out()
    if report.gc and report.gc.writers_alive:
        c.print(
            f"objects: none removed: {report.gc.writers_alive} other writer(s) (a LangGraph saver) are alive and may name them again; "
            "a prune run while none is alive reclaims the space",
            markup=False,
        )
    elif report.gc:
        g = report.gc
        c.print(
            f"packs: {g.packs_deleted} deleted ({g.packs_repacked} of them rewritten into {g.packs_written}), "
            f"{g.objects_removed} object(s) and {human_size(g.bytes_freed)} freed; "
            f"index files {g.index_files_before} -> {g.index_files_after}",
            markup=False,
        )


def _age(seconds: int) -> str:
    """An idle time, rounded down to its largest unit."""
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{seconds // n}{unit}"
    return f"{seconds}s"

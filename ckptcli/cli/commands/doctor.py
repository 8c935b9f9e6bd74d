"""ckpt doctor: named checks of the store, the LangGraph saver's files and the optional components."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe
from ckptcli.errors import DoctorFailed, DoctorNoStore, ExitCode


@app.command(epilog=exit_status(ExitCode.FAILURE, ExitCode.USAGE, ExitCode.NO_STORE))
def doctor(
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    journal_dir: Annotated[
        Path | None,
        typer.Option(
            "--journal-dir",
            help="Where this host keeps the LangGraph saver's journal of a store on object storage, "
            "when the application gives CkptSaver journal_dir= (default: this host's directory for the store's URL).",
        ),
    ] = None,
    adapter: Annotated[
        list[str] | None,
        typer.Option(
            "--adapter",
            metavar="NAME",
            help="Ask about this installed adapter only (repeatable): exit 0 when it loads and can work here, 1 when not.",
            show_default=False,
        ),
    ] = None,
    backend: Annotated[
        list[str] | None,
        typer.Option(
            "--backend",
            metavar="SCHEME",
            help="Ask about the backend of SCHEME:// only (repeatable; e.g. s3): exit 0 when it can work here, 1 when not.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Say whether ckpt works here, and what to watch.

    Runs named checks, each ok, warn or fail with a one-line detail and a hint:
    store (found, its format version; a quick look at its config, index files, refs
    and manifests: `ckpt verify` checks every object), locks (who holds the store's
    locks: a prune's exclusive lock makes other commands wait), free space (of the
    disk a local store is on), langgraph journals (the
    LangGraph saver's journals beside the store: how many, their size, the backlog
    of puts that live savers have not committed yet, journals left by savers that
    are gone, which the next saver to open the store replays; a file named as a
    journal that is no journal: a FIFO, a link, a directory, garbage), langgraph
    journal damage (bytes that are no record between records), langgraph thread
    leases (threads held by live savers, threads whose saver died before committing
    them, entries that are no lease), langgraph memory store (the logs of
    CkptStore, checked as `ckpt verify` does). A langgraph check fails for what
    makes CkptSaver.open (or CkptStore.open) refuse the store, with the error it
    raises: a journal of a saver that is gone with a malformed record or written by
    a newer ckpt, a directory of the saver's that is a symbolic link or no
    directory, a recovery lock it cannot open; and for an entry of the leases that
    stops a saver taking its thread. What a saver reads past or sets aside (a hole
    in a journal, a file named as a journal that is none) is a warning. Then
    component ... (the optional packages installed, their versions, and what
    each one not installed would enable), and plugins (the entry points installed
    packages register with ckpt: adapters' hooks, more checks). Then adapter NAME
    for each installed adapter (entry-point group ckptcli.adapters): its kind, whether
    it can work here and, when not, why (a warning; "not installed" when all it lacks
    is an optional package), and its importers; backend SCHEME:// for each registered
    store backend (ok when it imports; "not installed" when an optional package it
    needs is missing). An adapter or backend whose own package does not load fails.
    Then python (its version and executable) and versions (each dependency's
    installed version, or "not installed"). --json adds "adapters", "backends" and
    "versions" as data.

    --adapter NAME and --backend SCHEME ask about those alone (no store is looked at):
    each fails unless it works here, so the exit status answers the question. An
    adapter or scheme that is not installed exits 2, naming those that are.

    On a store on object storage (--store s3://bucket/prefix) the store check says
    whether it is reachable and its format version; locks lists each lock object with
    its holder (host, pid, age) and the stale ones, which `ckpt unlock` removes; free
    space (of a local store's disk) does not apply there; the langgraph checks look
    at this host's journal directory of the store (under $XDG_STATE_HOME/ckpt/journals,
    or --journal-dir when the application gives CkptSaver journal_dir=) and say where.

    Installed packages add their own checks (entry-point group ckptcli.doctor).
    Nothing is changed. Exit status 10 when no store is found or reached (none here,
    a missing bucket, an endpoint that does not answer), 1 when another check fails
    (with --adapter/--backend: when one asked about cannot work here); warnings
    alone exit 0.

    Examples:

      ckpt doctor

      ckpt doctor --store /srv/app/.ckpt --json

      ckpt doctor --store s3://bucket/agents

      ckpt doctor --store s3://bucket/agents --journal-dir /var/lib/app/journal

      ckpt doctor --adapter langgraph --json

      ckpt doctor --backend s3 && echo "S3 stores work here"
    """
    from ckptcli import doctor as lib

    if journal_dir is not None:
        from ckptcli.checkpoint import refuse_url

        refuse_url(journal_dir, "--journal-dir")
    report = lib.run(store, journal_dir=journal_dir, adapters=adapter, backends=backend)
    if as_json:
        emit_json(report.to_dict())
    else:
        c = out()
        width = max((len(ch.name) for ch in report.checks), default=0)
        for ch in report.checks:
            # a detail quotes what the store holds (a lock's host and command, labels): escaped
            c.print(f"{ch.status:<4}  {safe(ch.name, backslash=False):<{width}}  {safe(ch.detail, backslash=False)}", markup=False)
            if ch.hint and ch.status != lib.OK:
                c.print(f"      {'':<{width}}  hint: {safe(ch.hint, backslash=False)}", markup=False, highlight=False)
    if report.no_store is not None:
        err = report.no_store
        raise DoctorNoStore(f"no store: {err.message}", hint=err.hint or "check --store or CKPT_STORE")
    if report.failed:
        first = report.failed[0]
        raise DoctorFailed(f"{len(report.failed)} check(s) failed, first {first.name}: {first.detail}", hint=first.hint or "see above")

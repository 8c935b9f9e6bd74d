"""ckpt compat: do old checkpoints still restore under the current code? (the CI step)"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ckptcli.cli._common import is_path, open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe
from ckptcli.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from ckptcli.schema.compat import CompatCheck, CompatReport, CompatResult


@app.command(epilog=exit_status(ExitCode.FAILURE, ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.IO_ERROR))
def compat(
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            help="Directories of .ckpt files (searched recursively), .ckpt files, or checkpoints of the store (default: all of the store).",
            show_default=False,
        ),
    ] = None,
    migrations: Annotated[
        str | None,
        typer.Option(
            "--migrations",
            "-M",
            metavar="SPEC",
            help="The project's migrations: MODULE, MODULE:NAME, or ep:NAME (entry point in ckpt.migrations).",
            show_default=False,
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            "-t",
            metavar="N",
            help="Schema version the current code reads (default: the migrations' SCHEMA_VERSION).",
            show_default=False,
        ),
    ] = None,
    validator: Annotated[
        str | None,
        typer.Option(
            "--validator",
            metavar="MODULE:FUNC",
            help="MODULE:FUNCTION that loads a state document into the current code's objects, raising if it cannot.",
            show_default=False,
        ),
    ] = None,
    # the name of --validator before 0.3, kept working (hidden); remove in 0.4
    adapter: Annotated[str | None, typer.Option("--adapter", "-a", metavar="MODULE:FUNC", hidden=True, show_default=False)] = None,
    assume_version: Annotated[
        str | None,
        typer.Option(
            "--assume-version",
            metavar="N",
            help="Treat checkpoints without a schema_version as this version (default: they are incompatible).",
            show_default=False,
        ),
    ] = None,
    subject: Annotated[
        str | None,
        typer.Option("--subject", "-S", metavar="KIND:NAME", help="In a store, only this subject (KIND:NAME).", show_default=False),
    ] = None,
    workflow: Annotated[
        list[str] | None,
        typer.Option(
            "--workflow",
            metavar="MODULE:CLASS",
            help="Replay Temporal histories (.json files, or the store's Temporal imports) against this workflow class (repeatable).",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="With --workflow: kill a replay (exit 7) that takes longer (default 60; each runs in a process of its own).",
            show_default=False,
        ),
    ] = None,
    junit: Annotated[
        Path | None,
        typer.Option(
            "--junit", metavar="PATH", help="Also write a JUnit XML report here (one testcase per checkpoint).", show_default=False
        ),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check that old checkpoints still restore under the current code.

    Each checkpoint is compatible as-is (at the target schema version, and the validator
    accepts its state), compatible after migration (the project's migrations lead to
    the target, every step succeeds, and the validator accepts the result), or
    incompatible, with the reason: unreadable or damaged, a newer format, no
    schema_version, no migration path, a migration that raised, or the validator
    refusing the state (adapter-rejected). An argument that is a directory, holds a "/" or ends in .ckpt is
    a path; anything else names a checkpoint of the store. Migrations run in memory: nothing is written anywhere but the
    --junit report. MODULE specs are imported from the current directory too, as
    `python -m` does. Exit status 1 when any checkpoint is incompatible.

    --workflow MODULE:CLASS (repeatable) checks Temporal workflow code instead: each
    history (a .json file as `temporal workflow show --output json` writes it, the .json
    files of a directory, or the store's Temporal imports: the last checkpoint of each
    run by default) is replayed against the classes with temporalio's Replayer, offline;
    one that diverges (a NondeterminismError) is incompatible, naming the event.

    Examples:

      ckpt compat fixtures/ --migrations myapp.migrations --validator myapp.state:load

      ckpt compat fixtures/ -M myapp.migrations --junit compat.xml

      ckpt compat --subject agent:bot --migrations ep:myapp --json

      ckpt compat histories/ --workflow myapp.workflows:OrderWorkflow --junit replay.xml
    """
    from ckptcli.schema.compat import INCOMPATIBLE, CompatFailed, CompatReport

    if junit is not None:
        from ckptcli.checkpoint import refuse_url

        refuse_url(junit, "--junit")
    if workflow:
        if migrations or validator or adapter or target or assume_version:
            raise UsageError("--workflow replays Temporal histories; it takes no --migrations, --validator, --target or --assume-version")
        report = CompatReport(None, _workflow_results(workflow, sources or [], store, subject, timeout))
    elif timeout is not None:
        raise UsageError("--timeout bounds the replay of Temporal histories", hint="give it with --workflow")
    else:
        check = _check(migrations, target, _validator(validator, adapter), assume_version)
        report = check.report(_results(check, sources or [], store, subject))
    if junit is not None:
        report.write_junit(junit)
    if os.environ.get("CKPT_DEBUG"):
        _show_causes(report)
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_report(report)
    if not report.ok:
        bad = report.counts()[INCOMPATIBLE]
        raise CompatFailed(
            f"{bad} of {len(report.results)} checkpoint(s) incompatible", hint="see above" + (f" and {junit}" if junit else "")
        )


def _workflow_results(
    specs: list[str], sources: list[str], store: str | None, subject: str | None, timeout: float | None = None
) -> list[CompatResult]:
    """--workflow: the replay check of Temporal histories (ckptcli/adapters/temporal/check.py):
    the .json files and directories among `sources`, the store's checkpoints the others
    name, or the last checkpoint of each Temporal run in the store when none is given."""
    from ckptcli.adapters.temporal.check import compat_results, replay_timeout
    from ckptcli.api import refuse_url
    from ckptcli.errors import NotFoundError
    from ckptcli.schema.migrations import cwd_importable

    seconds = replay_timeout(timeout)
    cwd_importable()
    paths = [s for s in sources if is_path(s, store) or s.endswith(".json")]
    refs = [s for s in sources if s not in paths]
    for p in paths:
        refuse_url(p, "a Temporal history")
    st = open_store(store) if refs or not paths else None
    results: list[CompatResult] = compat_results(specs, [Path(p) for p in paths], st, refs, subject, seconds)
    if not results:
        raise NotFoundError("no Temporal histories found in the store", hint="import one with `ckpt import temporal HISTORY.json`")
    return results


def _validator(validator: str | None, adapter: str | None) -> str | None:
    """The --validator spec, or the one given as --adapter (its name before 0.3)."""
    if validator is not None and adapter is not None and validator != adapter:
        raise UsageError("--validator and --adapter (its old name) are both given", hint="give --validator alone")
    return validator if validator is not None else adapter


def _check(migrations: str | None, target: str | None, validator: str | None, assume_version: str | None) -> CompatCheck:
    from ckptcli.adapters.compat import CompatAdapter
    from ckptcli.schema.compat import CompatCheck
    from ckptcli.schema.migrations import cwd_importable, load_migrations

    cwd_importable()
    return CompatCheck(
        migrations=load_migrations(migrations) if migrations else None,
        target=target,
        validator=CompatAdapter.load(validator) if validator else None,
        assume_version=assume_version,
    )


def _results(check: CompatCheck, sources: list[str], store: str | None, subject: str | None) -> list[CompatResult]:
    """The verdicts on the files among `sources`, then on the checkpoints of the store the
    others name (all of the store when `sources` names none)."""
    from ckptcli.api import refuse_url
    from ckptcli.errors import NotFoundError

    paths: list[Path] = []
    refs: list[str] = []
    for s in sources:
        refuse_url(s, "a source of checkpoint files")
        if is_path(s, store):
            paths.append(Path(s))
        else:
            refs.append(s)
    results = check.files(paths) if paths else []
    if refs or not paths:
        results += check.store(open_store(store), refs, subject)
    if not results:
        where = ", ".join(str(p) for p in paths) if paths else "the store"
        raise NotFoundError(f"no checkpoints found in {where}", hint="make fixtures with `ckpt export REF -o fixtures/NAME.ckpt`")
    return results


def _show_causes(report: CompatReport) -> None:
    """CKPT_DEBUG: the traceback of each failure of the project's code."""
    import traceback

    for r in report.results:
        if r.cause is not None:
            sys.stderr.write(f"{r.name}:\n" + "".join(traceback.format_exception(r.cause)))


def _print_report(report: CompatReport) -> None:
    """Plain aligned columns (as ckpt ls), each row coloured by its verdict unless NO_COLOR."""
    from ckptcli.schema.compat import AFTER_MIGRATION, AS_IS, INCOMPATIBLE

    rows = [("RESULT", "CHECKPOINT", "SUBJECT", "VERSION", "DETAIL")]
    for r in report.results:
        detail = f"via {', '.join(r.steps)}" if r.status == AFTER_MIGRATION else r.reason
        version = "-" if r.schema_version is None else str(r.schema_version)
        rows.append((r.status, safe(r.name), safe(r.subject or "-"), safe(version), safe(detail.replace("\n", " "), backslash=False)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    styles = {AS_IS: "green", AFTER_MIGRATION: "yellow", INCOMPATIBLE: "red"}
    c = out()
    for row in rows:
        line = "  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
        c.print(line.rstrip(), markup=False, style=styles.get(row[0]))
    n = report.counts()
    goal = f" against schema version {report.target}" if report.target is not None else ""
    c.print(
        f"{len(report.results)} checkpoint(s) checked{goal}: {n[AS_IS]} compatible as-is, {n[AFTER_MIGRATION]} after migration, "
        f"{n[INCOMPATIBLE]} incompatible",
        markup=False,
    )

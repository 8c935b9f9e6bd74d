"""ckpt migrate: carry a checkpoint to a new version of its subject's state schema."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe
from ckptcli.errors import ExitCode

if TYPE_CHECKING:
    from ckptcli.schema.migrations import MigrationSet, Version
    from ckptcli.store.repository import Store


@app.command(
    epilog=exit_status(
        ExitCode.FAILURE,
        ExitCode.USAGE,
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.NO_STORE,
        ExitCode.CORRUPT,
        ExitCode.CONFLICT,
        ExitCode.IO_ERROR,
        ExitCode.LOCKED,
    )
)
def migrate(
    ref: Annotated[
        str | None,
        typer.Argument(
            help=(
                "The checkpoint to migrate (id, prefix, tag, branch, KIND:NAME, latest); with --format, "
                "a store directory or checkpoint file."
            ),
            show_default=False,
        ),
    ] = None,
    migrations: Annotated[
        str | None,
        typer.Option(
            "--migrations",
            "-M",
            metavar="SPEC",
            help="Your migrations: MODULE, MODULE:REGISTRY, or ep:NAME (entry point group ckpt.migrations).",
            show_default=False,
        ),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option("--to", metavar="VERSION", help="Target schema version (default: the one your migrations declare current)."),
    ] = None,
    assume_version: Annotated[
        str | None, typer.Option("--assume-version", metavar="VERSION", help="The version of a checkpoint that records none.")
    ] = None,
    message: Annotated[str | None, typer.Option("--message", "-m", metavar="TEXT", help="Message of the new checkpoint.")] = None,
    branch: Annotated[
        str | None, typer.Option("--branch", "-b", metavar="NAME", help="Also point this branch at the new checkpoint.")
    ] = None,
    move_latest: Annotated[
        bool, typer.Option("--move-latest", help="Point the subject's latest at the new checkpoint even when an older one was migrated.")
    ] = False,
    format_: Annotated[
        bool,
        typer.Option(
            "--format", help="Upgrade the container format of a store (default: this one) or a checkpoint file to the newest version."
        ),
    ] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the container-format migrations (and yours, with --migrations).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Show what would be done and check it runs; write nothing.")] = False,
    lock_wait: Annotated[
        float, typer.Option("--lock-wait", metavar="SECONDS", help="With --format: how long to wait for running takes.")
    ] = 300.0,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Migrate a checkpoint to a new version of its state schema, or a store or file
    to the newest container format.

    Schema: applies the chain of your migrations from the checkpoint's schema version
    to the target (see docs/migrations.md for declaring them) and writes a NEW
    checkpoint: its parent is the old one, its schema version the target; it keeps the
    subject, labels and config hash, and shares the old blobs without reading them
    again. The old checkpoint is never modified. If any step raises, nothing is
    written (exit 1; CKPT_DEBUG=1 shows the traceback of your migration). --dry-run
    runs the chain in memory and says what it would write. A checkpoint already at
    the target version is left as it is (exit 0, "nothing to migrate").

    The subject's latest moves to the new checkpoint only when the migrated one was
    its latest (an upgrade in place): migrating an older checkpoint leaves latest on
    the newest state, unless --move-latest. `ckpt reflog` shows every move of latest,
    and `ckpt reset` moves it back.

    Format (--format): runs every container-format migration that applies (see
    --list). A store is upgraded in place under its exclusive lock: old packs and
    index files are deleted only after their replacements are written, and checkpoint
    ids do not change; an interrupted upgrade leaves the store readable and running it
    again finishes it. A checkpoint file is rewritten beside itself, verified, then
    renamed over the original.

    Examples:

      ckpt migrate agent:support-bot --to 3 --migrations myapp.migrations

      ckpt migrate 4f2a9c --migrations myapp.migrations:REGISTRY --dry-run

      ckpt migrate latest --to 2 --migrations ep:myapp --assume-version 1 --json

      ckpt migrate --list

      ckpt migrate --format                  # this store

      ckpt migrate --format old.ckpt --dry-run
    """
    from ckptcli.errors import UsageError

    if list_:
        _list(migrations, as_json)
        return
    if format_:
        if migrations or to or assume_version or message or branch or move_latest:
            raise UsageError("--format upgrades the container format; it takes no schema options", hint="run the two migrations separately")
        from ckptcli.store.locking import check_lock_wait

        _format(ref, store, dry_run, check_lock_wait(lock_wait), as_json)
        return
    if ref is None:
        raise UsageError("which checkpoint?", hint="give a REF (and --migrations SPEC), or use --format or --list")
    if migrations is None:
        raise UsageError("--migrations SPEC is needed to migrate a checkpoint's schema", hint="see docs/migrations.md")
    ms, target, assumed = _schema_options(migrations, to, assume_version)
    st = open_store(store)
    if dry_run:
        _dry_run(st, ref, target, ms, assumed, as_json)
        return
    _migrate(st, ref, target, ms, assumed, as_json, message=message, branch=branch, move_latest=move_latest)


def _schema_options(migrations: str, to: str | None, assume_version: str | None) -> tuple[MigrationSet, Version, Version | None]:
    """The project's migrations, the target version (--to, else theirs) and --assume-version."""
    from ckptcli.errors import UsageError
    from ckptcli.schema.migrations import cwd_importable, load_migrations, parse_version

    cwd_importable()
    ms = load_migrations(migrations)
    target = parse_version(to, "--to") if to is not None else ms.current
    if target is None:
        raise UsageError("no target version", hint="pass --to N, or declare SCHEMA_VERSION in your migrations module")
    assumed = parse_version(assume_version, "--assume-version") if assume_version is not None else None
    return ms, target, assumed


def _dry_run(st: Store, ref: str, target: Version, ms: MigrationSet, assumed: Version | None, as_json: bool) -> None:
    """The chain of migrations that would run, checked in memory: nothing is written."""
    from ckptcli.schema.migrations import prepare_migration, storable_problem

    prep = prepare_migration(st, ref, target, ms, assume_version=assumed)
    ck, start, steps = prep.checkpoint, prep.start, prep.steps
    problem = storable_problem(prep.state) if steps else None
    if problem:
        from ckptcli.errors import InvalidInputError

        raise InvalidInputError(f"after migration {' '.join(s.name for s in steps)}: {problem}")
    doc = {
        "id": ck.hex,
        "from": start,
        "to": target,
        "steps": [{"name": s.name, "description": s.description} for s in steps],
        "dry_run": True,
    }
    if as_json:
        emit_json(doc)
    else:
        c = out()
        chain = " then ".join(f"{s.name} ({s.description})" for s in steps) or "nothing to do"
        c.print(f"would migrate {ck.hex[:12]} from schema {safe(start)} to {safe(target)}: {safe(chain, backslash=False)}", markup=False)


def _migrate(
    st: Store,
    ref: str,
    target: Version,
    ms: MigrationSet,
    assumed: Version | None,
    as_json: bool,
    *,
    message: str | None,
    branch: str | None,
    move_latest: bool,
) -> None:
    """Take the migrated checkpoint (a child of the original, which is unchanged) and say so."""
    from ckptcli.schema.migrations import AlreadyMigratedError, migrate_checkpoint

    try:
        result = migrate_checkpoint(
            st, ref, target, ms, assume_version=assumed, message=message, branch=branch, move_latest=True if move_latest else None
        )
    except AlreadyMigratedError as done:
        if as_json:
            emit_json({"id": done.checkpoint, "migrated": False, "schema_version": done.version})
        else:
            out().print(f"{done.checkpoint[:12]} is already at schema version {safe(done.version)}; nothing to migrate", markup=False)
        return
    parent = result.manifest.parents[0].hex()
    if as_json:
        emit_json(
            {
                "id": result.hex,
                "migrated": True,
                "parent": parent,
                "schema_version": result.manifest.schema_version,
                "latest_moved": result.latest_moved,
                "new_objects": result.new_objects,
                "new_bytes": result.new_bytes,
            }
        )
    else:
        where = (
            f"latest of {result.manifest.subject} moved to it"
            if result.latest_moved
            else f"latest of {result.manifest.subject} unchanged (--move-latest moves it)"
        )
        out().print(
            f"migrated {parent[:12]} -> {result.hex[:12]} (schema {result.manifest.schema_version}); the original is unchanged; {where}",
            markup=False,
        )


def _list(spec: str | None, as_json: bool) -> None:
    from ckptcli.store.upgrade import MIGRATIONS

    doc: dict[str, object] = {"format": [m.to_dict() for m in MIGRATIONS]}
    if spec is not None:
        from ckptcli.schema.migrations import cwd_importable, load_migrations

        cwd_importable()
        ms = load_migrations(spec)
        doc["schema"] = [{"name": m.name, "description": m.description, "from": m.from_version, "to": m.to_version} for m in ms]
        doc["schema_current"] = ms.current
    if as_json:
        emit_json(doc)
        return
    c = out()
    c.print("container format:", markup=False)
    for m in MIGRATIONS:
        c.print(f"  {m.name}  {m.from_version} -> {m.to_version}  {m.description}", markup=False)
    if spec is not None:
        c.print(f"schema ({spec}; current {doc['schema_current']}):", markup=False)
        for row in doc["schema"]:  # type: ignore[attr-defined]
            c.print(f"  {row['name']}  {row['from']} -> {row['to']}  {row['description']}", markup=False)


def _format(path: str | None, store: object, dry_run: bool, lock_wait: float, as_json: bool) -> None:
    from pathlib import Path

    from ckptcli.cli.output import BarProgress
    from ckptcli.store.repository import store_location
    from ckptcli.store.upgrade import target_of, upgrade

    given = path if path is not None else store if isinstance(store, str) else None
    target = target_of(store_location(given) if given is not None else None)
    try:
        rep = upgrade(target, dry_run=dry_run, lock_wait=lock_wait, progress=BarProgress())
    finally:
        if not isinstance(target, Path):
            target.close()
    if as_json:
        emit_json(rep.to_dict())
        return
    c = out()
    if not rep.steps:
        c.print(f"{rep.target}: already format version {rep.version_after}; nothing to do", markup=False)
        return
    if rep.version_before == rep.version_after:  # its commit point was passed, then it was cut short
        steps = ", ".join(f"{step}: {why}" for step, why in zip(rep.steps, rep.reasons, strict=True))
        verb = "would finish" if dry_run else "finished"
        line = f"{verb} the upgrade of {rep.kind} {rep.target} to format version {rep.version_after} that was cut short ({steps})"
    else:
        verb = "would upgrade" if dry_run else "upgraded"
        line = f"{verb} {rep.kind} {rep.target} from format version {rep.version_before} to {rep.version_after} ({', '.join(rep.steps)})"
    if rep.kind == "store" and not dry_run:
        line += f"; {rep.packs_rewritten} pack(s) rewritten, {rep.index_files_before} index file(s) now {rep.index_files_after}"
    c.print(line, markup=False)

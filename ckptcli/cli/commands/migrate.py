"""ckpt migrate: carry a checkpoint to a new version of its subject's state schema."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.FAILURE, ExitCode.USAGE, ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE))
def migrate(
    ref: Annotated[str, typer.Argument(help="The checkpoint to migrate (id, prefix, tag, branch, KIND:NAME, latest).")],
    migrations: Annotated[
        str, typer.Option("--migrations", "-m", metavar="SPEC", help="Your migrations: MODULE, MODULE:REGISTRY, or ep:NAME (entry point group ckpt.migrations).")
    ],
    to: Annotated[str | None, typer.Option("--to", metavar="VERSION", help="Target schema version (default: the one your migrations declare current).")] = None,
    assume_version: Annotated[
        str | None, typer.Option("--assume-version", metavar="VERSION", help="The version of a checkpoint that records none.")
    ] = None,
    message: Annotated[str | None, typer.Option("--message", metavar="TEXT", help="Message of the new checkpoint.")] = None,
    branch: Annotated[str | None, typer.Option("--branch", "-b", metavar="NAME", help="Also point this branch at the new checkpoint.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Show the chain of migrations and check it runs; write nothing.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Migrate a checkpoint to a new version of its state schema.

    Applies the chain of your migrations from the checkpoint's schema version to the
    target (see docs/migrations.md for declaring them) and writes a NEW checkpoint:
    its parent is the old one, its schema version the target; it keeps the subject,
    labels and config hash, and shares the old blobs without reading them again. The
    old checkpoint is never modified. If any step raises, nothing is written (exit 1;
    CKPT_DEBUG=1 shows the traceback of your migration). --dry-run runs the chain in
    memory and says what it would write.

    Examples:

      ckpt migrate agent:support-bot --to 3 --migrations myapp.migrations

      ckpt migrate 4f2a9c --migrations myapp.migrations:REGISTRY --dry-run

      ckpt migrate latest --to 2 --migrations ep:myapp --assume-version 1 --json
    """
    from ckptcli import api
    from ckptcli.schema import cwd_importable, load_migrations, migrate_checkpoint, parse_version, prepare_migration, storable_problem

    cwd_importable()
    ms = load_migrations(migrations)
    target = parse_version(to, "--to") if to is not None else ms.current
    if target is None:
        from ckptcli.errors import UsageError

        raise UsageError("no target version", hint="pass --to N, or declare SCHEMA_VERSION in your migrations module")
    assumed = parse_version(assume_version, "--assume-version") if assume_version is not None else None
    st = api.open_store(store)
    if dry_run:
        prep = prepare_migration(st, ref, target, ms, assume_version=assumed)
        ck, start, steps = prep.checkpoint, prep.start, prep.steps
        problem = storable_problem(prep.state) if steps else None
        if problem:
            from ckptcli.errors import InvalidInputError

            raise InvalidInputError(f"after migration {' '.join(s.name for s in steps)}: {problem}")
        doc = {"id": ck.hex, "from": start, "to": target, "steps": [{"name": s.name, "description": s.description} for s in steps], "dry_run": True}
        if as_json:
            emit_json(doc)
        else:
            c = out()
            chain = " then ".join(f"{s.name} ({s.description})" for s in steps) or "nothing to do"
            c.print(f"would migrate {ck.hex[:12]} from schema {start} to {target}: {chain}", markup=False)
        return
    result = migrate_checkpoint(st, ref, target, ms, assume_version=assumed, message=message, branch=branch)
    parent = result.manifest.parents[0].hex()
    if as_json:
        emit_json({"id": result.hex, "parent": parent, "schema_version": result.manifest.schema_version, "new_objects": result.new_objects, "new_bytes": result.new_bytes})
    else:
        out().print(f"migrated {parent[:12]} -> {result.hex[:12]} (schema {result.manifest.schema_version}); the original is unchanged", markup=False)

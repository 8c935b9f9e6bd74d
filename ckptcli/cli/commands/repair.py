"""ckpt repair: rebuild what a damaged or interrupted store can rebuild from itself."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import BarProgress, emit_json, exit_status, out
from ckptcli.errors import CorruptError, ExitCode


class What(StrEnum):
    INDEX = "index"
    REFS = "refs"


@app.command(epilog=exit_status(ExitCode.CORRUPT, ExitCode.LOCKED, ExitCode.NO_STORE, ExitCode.IO_ERROR))
def repair(
    what: Annotated[What, typer.Argument(metavar="index|refs", help="What to rebuild: index (from the packs' own tables) or refs (each subject's latest).")],
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Say what would change; change nothing.")] = False,
    lock_wait: Annotated[float, typer.Option("--lock-wait", metavar="SECONDS", help="How long to wait for running takes to finish.")] = 300.0,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild the index or the latest refs of a store from what it holds.

    index: reads every pack's own table (each object decompressed and hashed, each
    pack checked as `ckpt verify --read-data` checks it), writes one index file naming
    every object that reads back, then deletes the old index files. Run it when a
    command warns that an index file is damaged. An object that does not decode is
    left out, and so is a pack whose table cannot be read (unless a readable index
    file named its objects); both are listed, and the exit status is then 5.

    refs: points each subject's latest at its newest committed checkpoint, e.g. after
    a take was killed between writing its checkpoint and moving latest (`ckpt verify`
    notes such a checkpoint), or when a latest ref is damaged. Damaged tags and
    branches are listed, not changed: what they named cannot be known.

    Both hold the store lock exclusively, waiting up to --lock-wait seconds for
    running takes. A crash at any point leaves the store readable (the new index is
    written before any old file goes); run the command again to finish.

    Examples:

      ckpt repair index --dry-run

      ckpt repair index --json

      ckpt repair refs
    """
    from ckptcli import api
    from ckptcli import repair as lib

    st = api.open_store(store)
    st.on_warning = None  # the damage it would warn about is what this reports
    c = out()
    if what is What.INDEX:
        rep = lib.repair_index(st, dry_run=dry_run, lock_wait=lock_wait, progress=BarProgress())
        if as_json:
            emit_json(rep.to_dict())
            return
        for name in rep.damaged_index:
            c.print(f"damaged index file {name}: {'would be replaced' if dry_run else 'replaced'}", markup=False)
        for path, msg in rep.damaged_packs.items():
            c.print(f"damaged pack {path}: {msg}", markup=False)
        verb = "would write" if dry_run else "wrote"
        c.print(
            f"read {rep.packs} pack(s) ({rep.unindexed_packs} named by no readable index file); {verb} one index file naming "
            f"{rep.objects} object(s); index files {rep.index_files_before} -> {rep.index_files_after}",
            markup=False,
        )
        if rep.damaged_packs:
            raise CorruptError(
                f"{len(rep.damaged_packs)} pack(s) are damaged: what cannot be read from them is named by no index",
                hint="run `ckpt verify --read-data` to see which checkpoints need it",
            )
        return
    refs = lib.repair_refs(st, dry_run=dry_run, lock_wait=lock_wait)
    if as_json:
        emit_json(refs.to_dict())
        return
    verb = "would move" if dry_run else "moved"
    for name, move in refs.moved.items():
        was = (move["from"] or "nothing")[:12]
        to = move["to"]
        c.print(f"{verb} {name}: {was} -> {to[:12]}" if to else f"{'would delete' if dry_run else 'deleted'} {name} (no checkpoint of its subject is left)", markup=False)
    for path, msg in refs.damaged.items():
        c.print(f"damaged {path}: {msg} (left alone; delete or re-create it with ckpt tag/branch)", markup=False)
    if not refs.moved:
        c.print("every latest ref names its subject's newest checkpoint", markup=False)

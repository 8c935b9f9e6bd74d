"""ckpt repair: rebuild what a damaged or interrupted store can rebuild from itself."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import BarProgress, emit_json, exit_status, out, safe
from ckptcli.errors import CkptError, CorruptError, ExitCode, UnsupportedVersionError, UsageError

if TYPE_CHECKING:
    from ckptcli.store.repair import CheckpointsRepair, IndexRepair, RefsRepair


class What(StrEnum):
    INDEX = "index"
    REFS = "refs"
    CHECKPOINTS = "checkpoints"


@app.command(
    epilog=exit_status(
        ExitCode.USAGE,
        ExitCode.CORRUPT,
        ExitCode.UNSUPPORTED_VERSION,
        ExitCode.UNSAFE_PATH,
        ExitCode.LOCKED,
        ExitCode.NO_STORE,
        ExitCode.IO_ERROR,
    )
)
def repair(
    what: Annotated[
        What,
        typer.Argument(
            metavar="index|refs|checkpoints",
            help=(
                "What to rebuild: index (from the packs' own tables), refs (each subject's latest) or checkpoints "
                "(those whose objects are gone)."
            ),
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Say what would change; change nothing (checkpoints: the default).")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="checkpoints: rewrite (or drop) them; without it, only say what would change.")
    ] = False,
    drop: Annotated[bool, typer.Option("--drop", help="checkpoints: remove damaged checkpoints instead of rewriting them.")] = False,
    forget: Annotated[bool, typer.Option("--forget", help="checkpoints: remove each damaged original once its repair is written.")] = False,
    lock_wait: Annotated[
        float, typer.Option("--lock-wait", metavar="SECONDS", help="How long to wait for running takes to finish.")
    ] = 300.0,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild the index, the latest refs or damaged checkpoints of a store from what it holds.

    index: reads every pack's own table (each object decompressed and hashed, each
    pack checked as `ckpt verify --read-data` checks it), writes one index file naming
    every object that reads back, then deletes the old index files. Run it when a
    command warns that an index file is damaged. An object that does not decode is
    left out, and so is a pack whose table cannot be read (unless a readable index
    file named its objects); both are listed, and the exit status is then 5. Import
    what is left out from a copy (`ckpt import FILE`), or rewrite the checkpoints that
    need it (`repair checkpoints`); then `ckpt prune` removes the damaged bytes.

    checkpoints: finds checkpoints that need objects the store no longer holds (a pack
    lost or damaged beyond `repair index`) and writes each again without what is gone:
    a section, or single blobs of the blobs section. The new checkpoint has the same
    subject, time and labels, the same parents (a damaged parent's repair in its
    place), plus repaired.from=ID and repaired.dropped=WHAT; every ref that named the
    damaged one moves to it (--forget also removes the original). --drop removes
    damaged checkpoints instead: a latest ref or a branch moves to the dropped one's
    nearest intact ancestor (a latest with none: to the subject's newest intact
    checkpoint), a tag is removed; each change is in the reflog. The checkpoints below a
    dropped one keep it as their parent, so their history breaks there: `ckpt log` stops
    at it (and says so on stderr), `ckpt bisect` cannot reach the older ones from them,
    which stay in the store under their own ids and refs; rewriting (no --drop) keeps the
    history whole. --drop also removes a manifest that cannot be read (its bytes are
    damaged, or are not the ones its name is the hash of): nothing can be rewritten from
    it; a latest ref naming it moves to its subject's newest intact checkpoint, a tag or
    branch naming it is removed. Restore such a file from a copy of the store first if
    there is one (docs/runbooks/store-damaged.md). It only
    says what it would do unless --force. New objects and the new checkpoint are
    written before any ref moves, and refs move before anything is removed: a kill
    leaves a readable store; run it again to finish. When packs the index names are
    gone, run `ckpt repair index` too.

    refs: points each subject's latest at its newest committed checkpoint, e.g. after
    a take was killed between writing its checkpoint and moving latest (`ckpt verify`
    notes such a checkpoint), or when a latest ref is damaged. Damaged tags and
    branches are listed, not changed: what they named cannot be known.

    All hold the store lock exclusively, waiting up to --lock-wait seconds for
    running takes. A crash at any point leaves the store readable (the new index is
    written before any old file goes); run the command again to finish.

    Examples:

      ckpt repair index --dry-run

      ckpt repair index --json

      ckpt repair refs

      ckpt repair checkpoints

      ckpt repair checkpoints --force --json
    """
    from ckptcli.store import repair as lib
    from ckptcli.store.locking import check_lock_wait

    if what is not What.CHECKPOINTS:
        for given, name in ((force, "--force"), (drop, "--drop"), (forget, "--forget")):
            if given:
                raise UsageError(f"{name} is an option of `ckpt repair checkpoints`", hint="leave it out, or repair checkpoints")
    if drop and forget:
        raise UsageError(
            "--drop and --forget exclude each other",
            hint="--drop removes damaged checkpoints; --forget removes the originals of repaired ones",
        )
    check_lock_wait(lock_wait)
    st = open_store(store)
    st.on_warning = None  # the damage it would warn about is what this reports
    if what is What.CHECKPOINTS:
        _checkpoints(
            lib.repair_checkpoints(st, dry_run=dry_run or not force, drop=drop, forget=forget, lock_wait=lock_wait, progress=BarProgress()),
            as_json,
        )
    elif what is What.INDEX:
        _index(lib.repair_index(st, dry_run=dry_run, lock_wait=lock_wait, progress=BarProgress()), dry_run, as_json)
    else:
        _refs(lib.repair_refs(st, dry_run=dry_run, lock_wait=lock_wait), dry_run, as_json)


def _index(rep: IndexRepair, dry_run: bool, as_json: bool) -> None:
    if as_json:
        emit_json(rep.to_dict())
        return
    c = out()
    for name in rep.damaged_index:
        c.print(f"damaged index file {name}: {'would be replaced' if dry_run else 'replaced'}", markup=False)
    for path, msg in rep.damaged_packs.items():
        c.print(f"damaged pack {safe(path)}: {safe(msg, backslash=False)}", markup=False)
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


def _refs(refs: RefsRepair, dry_run: bool, as_json: bool) -> None:
    if as_json:
        emit_json(refs.to_dict())
    else:
        _print_refs(refs, dry_run)
    if refs.newer:
        first = next(iter(refs.newer))
        more = f" (and {len(refs.newer) - 1} more)" if len(refs.newer) > 1 else ""
        raise UnsupportedVersionError(
            f"{first}{more} was left alone: {refs.newer[first]}", hint="upgrade ckpt (pip install -U ckptcli) to repair it"
        )


def _print_refs(refs: RefsRepair, dry_run: bool) -> None:
    c = out()
    verb = "would move" if dry_run else "moved"
    for name, move in refs.moved.items():
        was = (move["from"] or "nothing")[:12]
        to = move["to"]
        c.print(
            f"{verb} {safe(name)}: {was} -> {to[:12]}"
            if to
            else f"{'would delete' if dry_run else 'deleted'} {safe(name)} (no checkpoint of its subject is left)",
            markup=False,
        )
    for path, msg in refs.damaged.items():
        c.print(
            f"damaged {safe(path)}: {safe(msg, backslash=False)} (left alone; delete or re-create it with ckpt tag/branch)", markup=False
        )
    if not refs.moved:
        newer = f", but for {len(refs.newer)} of a newer format (below)" if refs.newer else ""
        c.print(f"every latest ref names its subject's newest checkpoint{newer}", markup=False)


def _checkpoints(rep: CheckpointsRepair, as_json: bool) -> None:
    if as_json:
        emit_json(rep.to_dict())
    else:
        c = out()
        would = "would " if rep.dry_run else ""
        for cid, d in rep.damaged.items():
            for where, problem in d.problems.items():
                c.print(f"checkpoint {cid[:12]} ({safe(d.subject)}): {safe(where)}: {safe(problem, backslash=False)}", markup=False)
            if d.action == "drop":
                c.print(f"  {would}drop {cid[:12]}", markup=False)
            else:
                into = f" as {d.new[:12]}" if d.new else ""
                c.print(f"  {would}rewrite {cid[:12]}{into} without {', '.join(d.dropped) or 'nothing'}", markup=False)
        for name, move in rep.refs.items():
            to = move["to"]
            c.print(
                f"{would}move {safe(name)}: {(move['from'] or '')[:12]} -> {to[:12] if to and not to.startswith('(') else to}"
                if to
                else f"{would}remove {safe(name)}",
                markup=False,
            )
        for path in rep.dropped_unreadable:
            c.print(f"damaged manifest: {safe(rep.unreadable[path], backslash=False)}", markup=False)  # (the message names it)
            if rep.dry_run:
                c.print("  would remove it", markup=False)  # (done: "removed ID" below)
        for cid in rep.forgotten:
            c.print(f"removed {cid[:12]}", markup=False)
        if not rep.damaged:
            c.print(f"all {rep.checked} readable checkpoint(s) have every object they need", markup=False)
        if rep.dry_run and (rep.damaged or rep.dropped_unreadable):
            c.print("nothing was changed; run again with --force to do it", markup=False)
        if rep.missing_packs:
            c.print(
                f"{len(rep.missing_packs)} pack(s) the index names are gone; run `ckpt repair index` so that it names only what is there",
                markup=False,
            )
    from ckptcli.store.repository import DAMAGED_MANIFEST_HINT

    left = {path: why for path, why in rep.unreadable.items() if path not in rep.dropped_unreadable}
    if left:
        first = next(iter(left))
        if rep.mode == "drop" or set(left) <= set(rep.newer):  # none that --drop removes: a newer format's, or not a file
            error = UnsupportedVersionError if set(left) <= set(rep.newer) else CkptError
            raise error(f"{len(left)} checkpoint manifest(s) cannot be read and were left alone, e.g. {first}: {left[first]}")
        raise CorruptError(
            f"{len(left)} checkpoint manifest(s) cannot be read, e.g. {first}: {left[first]}; a damaged manifest cannot be rewritten",
            hint=DAMAGED_MANIFEST_HINT,
        )

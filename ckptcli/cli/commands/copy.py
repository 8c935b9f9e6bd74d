"""ckpt copy: checkpoints from one store to another, ids kept."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, app
from ckptcli.cli.output import BarProgress, emit_json, exit_status, human_size, out
from ckptcli.errors import CorruptError, ExitCode, UsageError

if TYPE_CHECKING:
    from ckptcli.copy import CopyResult
    from ckptcli.store.repository import Store
    from ckptcli.store.single import CheckpointFile


@app.command(
    epilog=exit_status(
        ExitCode.USAGE,
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.NO_STORE,
        ExitCode.CORRUPT,
        ExitCode.UNSUPPORTED_VERSION,
        ExitCode.LOCKED,
        ExitCode.IO_ERROR,
    )
)
def copy(
    src: Annotated[str, typer.Argument(metavar="SRC", help="The store to copy from (or a checkpoint file made by `ckpt export`).")],
    dst: Annotated[str, typer.Argument(metavar="DST", help="The store to copy into (`ckpt init DST` first).")],
    refs: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[REF]...",
            help="Checkpoints of SRC to copy: id or prefix, tag, branch, KIND:NAME, latest, REF~N (default: every one).",
            show_default=False,
        ),
    ] = None,
    copy_refs: Annotated[
        bool, typer.Option("--refs", help="Also copy SRC's tags and branches that name a copied checkpoint (never moving one DST has).")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Say what would be copied and sent; change nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Copy checkpoints from store SRC into store DST, keeping their ids.

    Only the objects DST lacks are sent; each is read from SRC, re-hashed and refused
    (exit 5, naming the object and the checkpoint) when it does not match its id, before
    anything of that checkpoint is committed in DST. A checkpoint whose tree records a
    length for a chunk other than the chunk's is refused the same way (as `ckpt verify`
    finds it), whether the chunk is sent or DST has it already; the copy stops there,
    and the checkpoints copied before it are kept. Objects land first, the manifest
    last (as a take writes), and checkpoints are committed in batches (up to 256
    checkpoints or 64 MiB): a copy that is interrupted leaves DST consistent, the next
    copy skips the batches committed before, and sends the interrupted batch again (what
    it had sent is unreferenced in DST; `ckpt prune` removes it). Checkpoints are copied oldest first; each
    moves its subject's latest in DST when it is newer than the one there (or DST has
    none), as `ckpt import` does. Tags and branches are copied only with --refs, and a
    tag or branch DST has at another checkpoint is left as it is (listed as skipped).
    Parents are not copied unless named: a copied checkpoint's parent link may name one
    DST does not have. A checkpoint of SRC whose manifest cannot be read is left out and
    the others are copied; the copy then exits 5, naming it (docs/runbooks/store-damaged.md).

    A checkpoint DST has already is checked, not trusted: every object it needs must
    be in DST's index, in a pack that exists, and what DST lost is sent again (said as
    "repaired N objects DST had lost"; the index no longer names the lost pack for
    them); its manifest in DST must be SRC's (its size, from one listing; its bytes on
    a local store, or when at most 64 checkpoints DST has are copied from object
    storage), and one that is not is written again. Run the copy again to repair what
    an interrupted or damaged DST lost.

    --json prints {"checkpoints", "copied", "already_present", "objects_sent",
    "bytes_sent", "objects_present", "objects_repaired", "manifests_rewritten",
    "latest_moved", "refs_copied", "refs_skipped", "damaged", "dry_run"} ("damaged":
    checkpoint id -> why its manifest cannot be read).

    Examples:

      ckpt copy .ckpt /mnt/backup/ckpt

      ckpt copy /srv/ckpt ./ckpt agent:support-bot v1.2 --refs

      ckpt copy /srv/ckpt /mnt/backup/ckpt --dry-run --json

      ckpt copy agent.ckpt /srv/ckpt

      ckpt copy .ckpt s3://team-bucket/agents   # a local store to object storage
    """
    from ckptcli.copy import copy_checkpoints
    from ckptcli.store.repository import same_location
    from ckptcli.store.single import CheckpointFile

    source: Store | CheckpointFile
    if Path(src).is_file():  # a store is a directory: a file is a checkpoint file (or refused as not one)
        if refs:
            raise UsageError("a checkpoint file holds one checkpoint: name no REF with a file as SRC", hint=f"ckpt copy {src} {dst}")
        source = CheckpointFile(Path(src))
        target = open_store(dst)
    else:
        source = open_store(src)
        target = open_store(dst)
        if same_location(source.location, target.location):
            raise UsageError(f"SRC and DST are the same store ({target.location})", hint="name two different stores")
    result = copy_checkpoints(source, target, refs or None, copy_refs=copy_refs, dry_run=dry_run, progress=BarProgress())
    if as_json:
        emit_json(result.to_dict())
    else:
        _print(result, dst)
    if result.damaged:
        from ckptcli.store.repository import damaged_manifest_hint

        first, why = next(iter(result.damaged.items()))
        more = f" (and {len(result.damaged) - 1} more)" if len(result.damaged) > 1 else ""
        raise CorruptError(
            f"checkpoint {first.hex()[:12]}{more} of {source.location} was not copied: {why}; "
            f"the other {len(result.checkpoints)} {'would be' if dry_run else 'were'} (see above)",
            hint=damaged_manifest_hint(source.location),
        )


def _print(result: CopyResult, dst: str) -> None:
    copied = len(result.checkpoints) - len(result.already_present)
    would = "would copy" if result.dry_run else "copied"
    there = f"; {len(result.already_present)} were in DST already" if result.already_present else ""
    out().print(f"{would} {copied} of {len(result.checkpoints)} checkpoints into {dst}{there}", markup=False)
    sent = "would send" if result.dry_run else "sent"
    out().print(
        f"{sent} {result.objects_sent} objects ({human_size(result.bytes_sent)}); {result.objects_present} were in DST already",
        markup=False,
    )
    if result.objects_repaired:
        fixed = "would repair" if result.dry_run else "repaired"
        out().print(f"{fixed} {result.objects_repaired} objects DST had lost (sent again, counted above)", markup=False)
    for cid in result.manifests_rewritten:
        fixed = "would rewrite" if result.dry_run else "rewrote"
        out().print(f"{fixed} the manifest of {cid.hex()[:12]}: DST's was not that checkpoint's", markup=False)
    for subject in result.latest_moved:
        out().print(f"latest of {subject} moved", markup=False)
    for name in result.refs_copied:
        out().print(f"{'would copy' if result.dry_run else 'copied'} {name}", markup=False)
    for name in result.refs_skipped:
        out().print(f"left {name}: DST has it at another checkpoint", markup=False)

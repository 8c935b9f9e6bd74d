"""ckpt verify: check a store or a checkpoint file; --read-data re-hashes every byte."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli._common import open_source
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import BarProgress, emit_json, exit_status, human_size, out, safe
from ckptcli.errors import ExitCode, UnsupportedVersionError, VerifyFailed


@app.command(
    epilog=exit_status(
        ExitCode.CORRUPT, ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.UNSAFE_PATH, ExitCode.NO_STORE, ExitCode.UNSUPPORTED_VERSION
    )
)
def verify(
    refs: Annotated[
        list[str] | None, typer.Argument(help="Checkpoints to check, or one .ckpt file (default: all).", show_default=False)
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Check every checkpoint (the default when none is named).")] = False,
    read_data: Annotated[bool, typer.Option("--read-data", help="Also re-hash every byte of every pack and object.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check checkpoints for damage.

    By default checks structure: every manifest, index and ref matches its checksum,
    every object a checkpoint needs is present, every tree node hashes right, and
    every length a tree node records for a chunk is the length the index (or the
    file's table) holds for it, which is what restore checks; beside a local store,
    the LangGraph saver's journals have no damaged bytes between their records.
    --read-data re-hashes all data as well, and so also proves each chunk holds the
    length the index says. Each damaged file or object is named with the checkpoints
    that need it; exit status 5 when anything is damaged, 6 when the only problems are
    files a newer ckpt wrote (a ref or manifest of a format version this one does not
    read: upgrade ckpt; nothing here replaces them). A symbolic link anywhere in a
    local store is named too (one under tmp/ as a harmless note); a directory of the
    store that is one is not listed through, and stops verify with exit status 8, as
    does a linked locks/store.lock: verify takes that lock (shared, so that no prune
    deletes what it reads) and cannot, as every command that takes it cannot. A linked
    locks/refs.lock, which verify does not take, is one of the problems it names (5).
    On object storage the index files and manifests are read from the store, never
    from this host's cache of them (CKPT_CACHE_DIR), and a damaged one whose good
    copy the cache holds is said to be so.

    Examples:

      ckpt verify

      ckpt verify --read-data --json

      ckpt verify exported.ckpt --read-data
    """
    from ckptcli import api
    from ckptcli.store.single import CheckpointFile

    names = list(refs or [])
    source, _ = open_source(names[0] if len(names) == 1 else None, store, resolve=False)
    if isinstance(source, CheckpointFile):
        names = []  # the file's one checkpoint
    report = api.verify(source, None if (all_ or not names) else names, read_data=read_data, progress=BarProgress())
    if as_json:
        emit_json(report.to_dict())
    else:
        c = out()
        for p in report.problems:
            affected = (
                f" (needed by {len(p.checkpoints)} checkpoint(s): "
                f"{', '.join(x[:12] for x in p.checkpoints[:8])}{' ...' if len(p.checkpoints) > 8 else ''})"
                if p.checkpoints
                else ""
            )
            what = "newer" if p.newer_version else "damaged"
            c.print(f"{what} {p.kind} {safe(p.name)}: {safe(p.message, backslash=False)}{affected}", markup=False)
        for n in report.notes:
            c.print(f"note: {safe(n, backslash=False)}", markup=False)
        what = f", {human_size(report.bytes_read)} read" if read_data else ""
        status = "no problems found" if report.ok else f"{len(report.problems)} problem(s) found"
        c.print(f"checked {report.checkpoints} checkpoint(s), {report.objects} object(s){what}: {status}", markup=False)
    if not report.ok:
        where = "they are listed in the JSON on stdout" if as_json else "see above (with --json, as JSON)"
        if report.only_newer:  # nothing is damaged: this ckpt cannot read what a newer one wrote
            raise UnsupportedVersionError(
                f"verify found {len(report.problems)} file(s) written by a newer ckpt, nothing damaged",
                hint=f"upgrade ckpt (pip install -U ckptcli) to check them; {where}",
            )
        raise VerifyFailed(f"verify found {len(report.problems)} problem(s)", hint=where)

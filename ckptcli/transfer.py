"""Export and import: a checkpoint as a single checkpoint file (formats/v2.md, "Checkpoint
files") and back. Objects are copied verbatim, so the id does not change; an import
checks the whole file before anything lands in the store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from ckptcli.checkpoint import Checkpoint, PathLike, refuse_output_into_source
from ckptcli.errors import CorruptError, UnsupportedVersionError
from ckptcli.format.manifest import is_nested
from ckptcli.format.walk import walk_checkpoint
from ckptcli.progress import NULL, Progress
from ckptcli.store.backend import write_file_atomic
from ckptcli.store.repository import Store
from ckptcli.store.single import CheckpointFile, write_checkpoint_file

__all__ = ["export_checkpoint", "import_checkpoint"]


def export_checkpoint(ck: Checkpoint, out: PathLike | IO[bytes], progress: Progress = NULL) -> int:
    """Write `ck` as a single checkpoint file; returns its size in bytes."""
    from ckptcli.store.verify import structure_problems

    src = ck.source
    walked = walk_checkpoint(src, ck.manifest)
    # what verify, import and copy refuse, export refuses too (`structure_problems`, before
    # anything is written): a file made of a checkpoint whose tree names a chunk with a
    # wrong length would be refused by every reader it is sent to
    table = src.entries if isinstance(src, CheckpointFile) else src.index()
    entries = {oid: e for oid in walked.objects if (e := table.get(oid)) is not None}
    bad, wrong_length = structure_problems(walked, entries, "the store does not hold it")
    if bad:
        oid = min(wrong_length) if wrong_length else min(bad)
        more = f" (and {len(bad) - 1} more problem(s))" if len(bad) > 1 else ""
        raise CorruptError(
            f"checkpoint {ck.hex[:12]}: {bad[oid]}{more}; nothing was exported",
            hint=f"`ckpt verify {ck.hex[:12]}` lists every problem",
        )
    objects = []
    progress.start("exporting", len(walked.objects))
    for oid, (typ, _section) in walked.objects.items():
        entry, stored = src.read_stored(oid)
        objects.append((oid, typ, entry.codec, stored, entry.raw_len))
        progress.advance(1)
    progress.finish()
    manifest_bytes = src.manifest_bytes if isinstance(src, CheckpointFile) else src.manifest_bytes(ck.id)
    if not isinstance(out, (str, os.PathLike)):
        return write_checkpoint_file(out, manifest_bytes, objects)
    path = Path(out)
    refuse_output_into_source(ck, path, "the export")
    size = 0

    def write(fh: IO[bytes]) -> None:
        nonlocal size
        size = write_checkpoint_file(fh, manifest_bytes, objects)

    write_file_atomic(path, write)  # (through a descriptor or a device, too)
    return size


def import_checkpoint(store: Store, path: PathLike, progress: Progress = NULL) -> bytes:
    """Copy a checkpoint file into `store` (objects verbatim); returns the checkpoint id."""
    from ckptcli.store.verify import verify_file

    f = CheckpointFile(Path(path))
    try:
        # what `verify --read-data` refuses, import refuses, before anything lands: the
        # structural check here (checksum, object checks, every object present, data sizes
        # as their nodes say), the read-data part as each object is copied (read_checked)
        report = verify_file(f, read_data=False)
        if report.problems:
            first = report.problems[0]
            more = f" (and {len(report.problems) - 1} more problem(s))" if len(report.problems) > 1 else ""
            message = first.message if first.kind == "file" else f"{path}: {first.message}"
            raise CorruptError(
                message + more, hint="the file is damaged; `ckpt verify --read-data FILE` lists every problem; export it again"
            )
        written = f.manifest().format_version
        if written > store.version:
            raise UnsupportedVersionError(
                f"{path} holds a checkpoint written in format version {written}; the store at {store.location} is version {store.version}",
                hint="upgrade the store first: ckpt migrate --format",
            )
        with store.backend.lock("store", shared=True):
            txn = store.transaction()
            try:
                progress.start("importing", len(f.entries))
                for oid, entry in f.entries.items():
                    _e, stored, raw = f.read_checked(oid)  # the hash is checked before anything lands in the store
                    txn.put_stored(oid, entry.obj_type, entry.codec, stored, len(raw))
                    progress.advance(1)
                progress.finish()
                txn.commit()
            except BaseException:
                txn.abort()
                raise
            cid = store.add_manifest_bytes(f.manifest_bytes)
            m = f.manifest()
            store.advance_latest(m.subject, cid, m.created_ns, nested=is_nested(m.labels), reason="import")
        return cid
    finally:
        f.close()

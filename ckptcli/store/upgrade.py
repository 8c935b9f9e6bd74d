"""Container-format migrations: carry a store or a checkpoint file to a newer format version.

A registry (`MIGRATIONS`) of migrations, each with a name, a description, a `check` (does
it apply to this target, and why) and an `apply`; `ckpt migrate --list` shows them and
`ckpt migrate --format [TARGET]` runs every one that applies, in order (docs/migrations.md,
"Upgrading the container format").

Invariants: what a migration rewrites is kept until the rewrite has succeeded, so a crash
anywhere leaves every checkpoint readable and running it again finishes. A store's config
moves first, then old packs are copied (objects verbatim, each checked against its id)
and one new index names them before anything old is deleted; manifests are never
rewritten, so checkpoint ids never change. A checkpoint file is rewritten beside itself,
fsynced, read back and verified, then renamed over the original."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ckptcli.errors import CorruptError, InvalidInputError, StoreIOError
from ckptcli.format import limits
from ckptcli.format.walk import walk_checkpoint
from ckptcli.progress import NULL, Progress
from ckptcli.store import layout, single
from ckptcli.store.backend import create_temp, fsync_dir
from ckptcli.store.pack import pack_version
from ckptcli.store.repack import upgrade_packs
from ckptcli.store.repository import Store, find_store
from ckptcli.store.single import CheckpointFile

__all__ = ["MIGRATIONS", "FormatMigration", "UpgradeReport", "pending", "rewrite_file", "target_of", "upgrade"]

Target = Store | Path


@dataclass
class UpgradeReport:
    target: str
    kind: str  # "store" | "file"
    steps: list[str] = field(default_factory=list)
    #: why each step applies, in the order of `steps`
    reasons: list[str] = field(default_factory=list)
    version_before: int = 0
    version_after: int = 0
    packs_rewritten: int = 0
    packs_deleted: int = 0
    index_files_before: int = 0
    index_files_after: int = 0
    bytes_written: int = 0
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class FormatMigration:
    name: str
    description: str
    from_version: int
    to_version: int
    #: why the migration applies to the target, or None when it does not
    check: Callable[[Target], str | None]
    apply: Callable[[Target, UpgradeReport, Progress], None]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "from": self.from_version, "to": self.to_version}


# -- v1 -> v2 ---------------------------------------------------------------------------------


def _old_packs(store: Store, version: int) -> list[bytes]:
    out = []
    for path in store.backend.list(layout.PACKS):
        name = path.rsplit("/", 1)[-1]
        if len(name) != 64:
            continue
        pid = bytes.fromhex(name)
        with contextlib.suppress(CorruptError):  # a damaged header is verify's business
            if pack_version(store.backend, pid) < version:
                out.append(pid)
    return out


def _check_v1_v2(target: Target) -> str | None:
    if isinstance(target, Path):
        f = CheckpointFile(target)
        try:
            return "the file is in format version 1" if f.version < 2 else None
        finally:
            f.close()
    if target.version < 2:
        return "the store is in format version 1"
    old = _old_packs(target, 2)
    if old:
        return f"{len(old)} pack(s) are still in version 1 (an upgrade was interrupted)"
    return None


def _apply_v1_v2(target: Target, rep: UpgradeReport, progress: Progress) -> None:
    if isinstance(target, Path):
        rep.bytes_written = rewrite_file(target, target, 2, progress)
        return
    if target.version < 2:
        target.set_config(replace(target.config, version=2))  # the commit point of the upgrade
    gc = upgrade_packs(target, progress)
    rep.packs_rewritten = gc.packs_repacked
    rep.packs_deleted = gc.packs_deleted
    rep.index_files_before = gc.index_files_before
    rep.index_files_after = gc.index_files_after


V1_TO_V2 = FormatMigration(
    name="v1-to-v2",
    description=(
        "packs and checkpoint files name and check their objects without hashing their bytes twice: "
        "pack ids hash header, object ids and trailer; an XXH3-64 per object covers the stored bytes"
    ),
    from_version=1,
    to_version=2,
    check=_check_v1_v2,
    apply=_apply_v1_v2,
)

#: Every container-format migration, oldest first.
MIGRATIONS: tuple[FormatMigration, ...] = (V1_TO_V2,)


def pending(target: Target) -> list[tuple[FormatMigration, str]]:
    """The migrations that apply to `target`, in order, each with the reason."""
    out = []
    for m in MIGRATIONS:
        why = m.check(target)
        if why is not None:
            out.append((m, why))
    return out


def upgrade(target: Target, *, dry_run: bool = False, lock_wait: float = 300.0, progress: Progress = NULL) -> UpgradeReport:
    """Run every pending format migration on a store (under its exclusive lock) or a file."""
    if isinstance(target, Path):
        f = CheckpointFile(target)
        before = f.version
        f.close()
        rep = UpgradeReport(str(target), "file", version_before=before, version_after=before, dry_run=dry_run)
        todo = pending(target)
        rep.steps, rep.reasons = [m.name for m, _why in todo], [why for _m, why in todo]
        if not dry_run:
            for m, _why in todo:
                m.apply(target, rep, progress)
                rep.version_after = m.to_version
        elif todo:
            rep.version_after = todo[-1][0].to_version
        return rep
    with target.backend.lock("store", shared=False, wait=lock_wait):
        rep = UpgradeReport(target.location, "store", version_before=target.version, version_after=target.version, dry_run=dry_run)
        todo = pending(target)
        rep.steps, rep.reasons = [m.name for m, _why in todo], [why for _m, why in todo]
        for m, _why in todo:
            if not dry_run:
                m.apply(target, rep, progress)
            rep.version_after = m.to_version
        return rep


def rewrite_file(source: Path, dest: Path, version: int = limits.FORMAT_VERSION, progress: Progress = NULL) -> int:
    """Write the checkpoint in `source` as a file of `version` at `dest` (which may be
    `source`): checked whole first, written beside `dest` under a temporary name, read
    back and verified, then renamed into place. Returns the new file's size."""
    f = CheckpointFile(source)
    try:
        problem = f.check_whole_file()
        if problem:
            raise CorruptError(problem, hint="nothing was written; restore the file from another copy")
        walk_checkpoint(f, f.manifest())  # every object the manifest needs is there
        objects = []
        progress.start("rewriting", len(f.entries))
        for oid in sorted(f.entries):
            e, stored, _raw = f.read_checked(oid)  # hash-checked before it is carried over
            objects.append((oid, e.obj_type, e.codec, stored, e.raw_len))
            progress.advance(1)
        progress.finish()
        manifest_bytes = f.manifest_bytes
    finally:
        f.close()
    tmp: Path | None = None
    try:
        # a new file under a random name (O_EXCL|O_NOFOLLOW): nothing planted beside
        # `dest` is followed or truncated
        name, fd = create_temp(dest.parent, suffix=".ckpt-upgrade", mode=0o666)
        tmp = dest.parent / name
        with os.fdopen(fd, "wb") as fh:
            single.write_checkpoint_file(fh, manifest_bytes, objects, version)
            fh.flush()
            os.fsync(fh.fileno())
        check = CheckpointFile(tmp)
        try:
            problem = check.check_whole_file()
            if problem is None:
                for oid in check.entries:
                    check.get(oid)
            if check.id != f.id or check.version != version:
                problem = "the rewritten file does not hold the same checkpoint"
        finally:
            check.close()
        if problem:
            raise CorruptError(f"{tmp}: {problem}", hint="the original is unchanged")
        os.replace(tmp, dest)
        tmp = None
        fsync_dir(dest.parent)
    except OSError as exc:
        raise StoreIOError(f"cannot write {dest}: {exc.strerror}", hint="the original is unchanged") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
    return dest.stat().st_size


def target_of(path: Path | str | None) -> Target:
    """A store (a directory or a URL) or a checkpoint file for `ckpt migrate --format [PATH]`."""
    if path is None:
        return Store.open(find_store())
    if isinstance(path, str):
        return Store.open(path)
    if path.is_file():
        if not single.is_checkpoint_file(path):
            raise InvalidInputError(f"{path} is neither a ckpt store nor a checkpoint file")
        return path
    return Store.open(path)

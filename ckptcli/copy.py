"""Copying checkpoints from one store to another, keeping their ids (`ckpt copy`, as
restic's `copy`).

For each checkpoint, oldest first: its objects are found by walking it in SRC
(format.walk), every length its nodes record for a chunk is checked against the index's
(verify's check, for every chunk it names: sent now, sent for an earlier checkpoint, or in
DST already), each object DST lacks is read from SRC, re-hashed (a mismatch, like a wrong
length, stops the copy with CorruptError naming the object and the checkpoint) and
written to DST as stored, never recompressed; then the manifest bytes, verbatim, so the id is the same.
The write order is a take's: objects and their index first, the manifest (the commit
point) last, then the subject's `latest` in DST moves to it when it is newer than the
one there (as `ckpt import` does). Checkpoints go in batches (_Copier): the objects of
several share one pack and one index file, then their manifests follow, so copying many
small checkpoints does not cost a pack, an index file and their syncs each. A copy
killed at any instant leaves DST readable; the next copy sends what is still missing.

A checkpoint DST has already (its manifest is there) is checked, not taken on trust
(_DstCheck): its manifest in DST must be SRC's bytes (sizes from one listing of
manifests/; the bytes themselves compared on a local store, or when few checkpoints are
checked), and every object it needs must be in DST's index in a pack that exists (one
listing of packs/). What DST lost is sent again (an object whose pack is gone is written
into a new pack, and the index files that named it for the lost pack are rewritten
without it: Store.drop_index_rows), and a manifest that is not the checkpoint's is
written again; the same object check holds for the checkpoints copied anew. The walk of
those checkpoints in SRC is the cost of the check: node objects are read, data is not.

Only Store's public methods are used on both sides, so the copy works between any two
stores whatever they are stored on. A checkpoint file (`ckpt export`) is a source too.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ckptcli.errors import CkptError, CorruptError, InvalidInputError, LimitExceededError, UnsupportedVersionError
from ckptcli.format.manifest import Manifest, is_nested
from ckptcli.format.walk import WalkResult, walk_checkpoint
from ckptcli.progress import NULL, Progress
from ckptcli.store import layout
from ckptcli.store.index import IndexEntry
from ckptcli.store.repository import Store, Transaction
from ckptcli.store.single import CheckpointFile
from ckptcli.store.verify import structure_problems

__all__ = ["CopyResult", "copy_checkpoints"]

#: a batch of checkpoints is committed (objects, index, manifests, refs) when it has
#: this many stored bytes or checkpoints (see _Copier)
BATCH_BYTES = 64 * 1024 * 1024
BATCH_CHECKPOINTS = 256

#: the ref kinds `--refs` copies (refs/tags/NAME, refs/branches/NAME)
_NAMED_REFS = ("tags", "branches")


@dataclass
class CopyResult:
    """What a copy did (or, with `dry_run`, would do)."""

    #: ids of the checkpoints copied (or already in DST), oldest first
    checkpoints: list[bytes] = field(default_factory=list)
    #: of those, the ones DST had already (their manifest was there)
    already_present: list[bytes] = field(default_factory=list)
    objects_sent: int = 0
    bytes_sent: int = 0  # stored (compressed) bytes of the objects sent
    objects_present: int = 0  # objects the checkpoints need that DST had already
    #: of objects_sent: those DST had lost (its index named them in a pack that is gone, or
    #: a checkpoint it had already needed them and no index named them)
    objects_repaired: int = 0
    #: checkpoints DST had whose manifest there was not theirs (damaged, or other bytes): written again
    manifests_rewritten: list[bytes] = field(default_factory=list)
    latest_moved: list[str] = field(default_factory=list)  # subjects whose latest moved in DST
    refs_copied: list[str] = field(default_factory=list)  # with `refs`: "tags/NAME", "branches/NAME"
    refs_skipped: list[str] = field(default_factory=list)  # with `refs`: named in DST already, at another checkpoint
    #: checkpoints of SRC whose manifest is damaged (left out: nothing of them is copied) -> what is wrong
    damaged: dict[bytes, str] = field(default_factory=dict)
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkpoints": [c.hex() for c in self.checkpoints],
            "copied": len(self.checkpoints) - len(self.already_present),
            "already_present": len(self.already_present),
            "objects_sent": self.objects_sent,
            "bytes_sent": self.bytes_sent,
            "objects_present": self.objects_present,
            "objects_repaired": self.objects_repaired,
            "manifests_rewritten": [c.hex() for c in self.manifests_rewritten],
            "latest_moved": self.latest_moved,
            "refs_copied": self.refs_copied,
            "refs_skipped": self.refs_skipped,
            "damaged": {c.hex(): why for c, why in self.damaged.items()},
            "dry_run": self.dry_run,
        }


Source = Store | CheckpointFile


def copy_checkpoints(
    src: Source,
    dst: Store,
    refs: list[str] | None = None,
    *,
    copy_refs: bool = False,
    dry_run: bool = False,
    progress: Progress = NULL,
) -> CopyResult:
    """Copy the checkpoints `refs` names in `src` (every one when None or empty) into `dst`.

    `copy_refs`: also copy the tags and branches of `src` that name a copied checkpoint,
    unless `dst` has one of that name at another checkpoint (then it is left and listed in
    `refs_skipped`). `dry_run`: send nothing, count what would be sent.
    A checkpoint whose manifest is damaged is left out, named in `damaged`, and the
    others are copied: the caller says so (`ckpt copy` exits 5).
    Raises: CorruptError (an object of `src` is damaged: nothing of that checkpoint is
    committed in `dst`, the ones copied before it stay),
    UnsupportedVersionError, InvalidInputError (SRC and DST are one store), NotFoundError."""
    if isinstance(src, Store) and src.location == dst.location:
        raise InvalidInputError(f"SRC and DST are the same store ({dst.location})", hint="name two different stores")
    result = CopyResult(dry_run=dry_run)
    with _reading(src), contextlib.ExitStack() as held:
        if not dry_run:
            held.enter_context(dst.backend.lock("store", shared=True))  # no prune of DST meanwhile
        chosen = _choose(src, refs, result)
        for cid, manifest in chosen:  # before anything is sent
            _check_version(src, dst, cid, manifest)
        check = _DstCheck(src, dst)
        wrong = check.wrong_manifests([cid for cid, _m in chosen if cid in check.present])
        copier = _Copier(src, dst, result, dry_run, progress, check)
        try:
            for cid, manifest in chosen:
                result.checkpoints.append(cid)
                if cid in check.present:
                    result.already_present.append(cid)
                    copier.add(cid, manifest, had=True, rewrite=cid in wrong)
                else:
                    copier.add(cid, manifest)
            copier.flush()
        except CkptError:
            copier.keep_complete()  # the checkpoints before the failing one are committed
            raise
        except BaseException:
            copier.abort()
            raise
        if copy_refs:
            _copy_named_refs(src, dst, {cid for cid, _m in chosen}, result, dry_run)
    return result


@contextlib.contextmanager
def _reading(src: Source) -> Iterator[None]:
    """SRC's store lock, shared, while its objects are read: no prune removes one meanwhile."""
    if isinstance(src, Store):
        with src.backend.reading_lock("store"):
            yield
    else:
        yield


def _choose(src: Source, refs: list[str] | None, result: CopyResult) -> list[tuple[bytes, Manifest]]:
    """(id, manifest) of the checkpoints to copy, oldest first (parents before children,
    so that DST's latest only ever moves forward). One whose manifest is damaged is left
    out and named in `result.damaged`."""
    ids = list(dict.fromkeys(src.resolve(r) for r in refs)) if refs else src.manifest_ids()
    chosen = []
    for cid in ids:
        try:
            chosen.append((cid, src.manifest(cid)))
        except (CorruptError, LimitExceededError) as exc:  # (a checkpoint file's was read when it was opened)
            result.damaged[cid] = exc.message
    chosen.sort(key=lambda c: (c[1].created_ns, c[0]))
    return chosen


def _check_version(src: Source, dst: Store, cid: bytes, manifest: Manifest) -> None:
    if manifest.format_version > dst.version:
        raise UnsupportedVersionError(
            f"checkpoint {cid.hex()[:12]} of {src.location} is written in format version {manifest.format_version}; "
            f"the store at {dst.location} is version {dst.version}",
            hint="upgrade DST first: ckpt migrate --format --store DST",
        )


def _manifest_bytes(src: Source, cid: bytes) -> bytes:
    data = src.manifest_bytes if isinstance(src, CheckpointFile) else src.manifest_bytes(cid)
    if hashlib.sha256(data).digest() != cid:  # (the id is the manifest's hash: copied verbatim)
        raise CorruptError(f"checkpoint {cid.hex()[:12]} in {src.location}: its manifest does not match its id; nothing of it was copied")
    return data


class _DstCheck:
    """What DST holds of the checkpoints it has already, checked rather than trusted: a
    manifest at `manifests/<id>` that is not SRC's bytes of that checkpoint (damaged,
    planted), an object whose pack is gone."""

    #: on object storage, the bytes of the manifests DST has are compared only when this
    #: few are checked (a GET each); above it, their sizes (one listing) are
    COMPARE_REMOTE = 64

    def __init__(self, src: Source, dst: Store) -> None:
        self.src, self.dst = src, dst
        self.local = dst.directory is not None
        # a local store's names (sizes are not needed: its bytes are compared), else one
        # listing that gives each manifest's size with its name
        self.sizes: dict[bytes, int] = {}
        if self.local:
            self.present = set(dst.manifest_ids())
        else:
            for name, size in dst.backend.sizes(layout.MANIFESTS).items():
                with contextlib.suppress(ValueError):
                    if len(name) == 64:
                        self.sizes[bytes.fromhex(name)] = size
            self.present = set(self.sizes)
        self._packs: set[bytes] | None = None  # DST's packs, listed once when first needed
        self.lost_packs: set[bytes] = set()

    def wrong_manifests(self, ids: list[bytes]) -> set[bytes]:
        """Of `ids` (in SRC and DST), those whose manifest in DST is not SRC's bytes."""
        compare = self.local or len(ids) <= self.COMPARE_REMOTE
        wrong = set()
        for cid in ids:
            data = _manifest_bytes(self.src, cid)
            if not compare:
                if self.sizes.get(cid) != len(data):
                    wrong.add(cid)
                continue
            try:
                theirs = self.dst.backend.read_stored_copy(layout.manifest_path(cid))
            except CkptError:
                theirs = None  # gone since the listing, a link, unreadable: written again
            if theirs != data:
                wrong.add(cid)
        return wrong

    def has(self, oid: bytes) -> tuple[bool, bytes | None]:
        """(whether DST holds object `oid`, the lost pack its index names it in, if so)."""
        entry = self.dst.index().get(oid)
        if entry is None:
            return False, None
        if self._packs is None:
            self._packs = set()
            for path in self.dst.backend.list(layout.PACKS):
                with contextlib.suppress(ValueError):
                    self._packs.add(bytes.fromhex(path.rsplit("/", 1)[-1]))
        pack = entry.pack
        if pack in self._packs:
            return True, None
        if pack not in self.lost_packs:
            # not listed: written since the listing (this copy's, another writer's), or lost
            if self.dst.backend.exists(layout.pack_path(pack)):
                self._packs.add(pack)
                return True, None
            self.lost_packs.add(pack)
        return False, pack


class _Copier:
    """Sends checkpoints into DST in batches: the objects of several checkpoints go into one
    transaction (one pack, one index file, not one per checkpoint), then their manifests,
    oldest first, then their latest refs. A batch is committed when it holds BATCH_BYTES or
    BATCH_CHECKPOINTS, so a long copy commits as it goes."""

    def __init__(self, src: Source, dst: Store, result: CopyResult, dry_run: bool, progress: Progress, check: _DstCheck) -> None:
        self.src, self.dst, self.result, self.dry_run, self.progress = src, dst, result, dry_run, progress
        self.check = check
        self.walked = WalkResult()  # shared: an object several checkpoints need is walked once
        self.txn: Transaction | None = None
        #: (id, manifest bytes, manifest, what to do with the manifest in DST: "add", "rewrite"
        #: or "keep" (DST has it right)), complete
        self.batch: list[tuple[bytes, bytes, Manifest, str]] = []
        self.drop: dict[bytes, set[bytes]] = {}  # lost pack -> its objects sent again in this batch

    def add(self, cid: bytes, manifest: Manifest, *, had: bool = False, rewrite: bool = False) -> None:
        """Send what DST lacks of checkpoint `cid`; its manifest follows at the next flush.
        `had`: DST has the checkpoint already (what it lacks of it is what it lost);
        `rewrite`: ... but its manifest there is not the checkpoint's.
        Raises CorruptError, with nothing of `cid` in the batch."""
        where = f"checkpoint {cid.hex()[:12]} of {self.src.location}"
        data = _manifest_bytes(self.src, cid)
        missing = self._missing(manifest, where)
        repaired = len(missing) if had else sum(1 for _oid, lost in missing if lost is not None)
        self.result.objects_repaired += repaired
        if rewrite:
            self.result.manifests_rewritten.append(cid)
        if self.dry_run:
            self.result.bytes_sent += sum(_stored_len(self.src, oid) for oid, _lost in missing)
            self.result.objects_sent += len(missing)
            return
        if missing:
            if self.txn is None:
                self.txn = self.dst.transaction()
            self.progress.start(f"{'repairing' if had else 'copying'} {cid.hex()[:12]}", len(missing))
            try:
                for oid, lost in missing:
                    entry, stored, raw = self._read(oid, where)
                    self.txn.put_stored(oid, entry.obj_type, entry.codec, stored, len(raw), again=lost is not None)
                    if lost is not None:
                        self.drop.setdefault(lost, set()).add(oid)
                    self.result.objects_sent += 1
                    self.result.bytes_sent += len(stored)
                    self.progress.advance(1)
            finally:
                self.progress.finish()
        self.batch.append((cid, data, manifest, "rewrite" if rewrite else "keep" if had else "add"))
        if (self.txn is not None and self.txn.new_stored_bytes >= BATCH_BYTES) or len(self.batch) >= BATCH_CHECKPOINTS:
            self.flush()

    def _missing(self, manifest: Manifest, where: str) -> list[tuple[bytes, bytes | None]]:
        """The objects of `manifest` DST lacks, among those no earlier checkpoint of this copy
        reached (those were sent then, or were in DST: the walk does not read them again),
        each with the lost pack DST's index names it in (None: no index names it).
        Raises CorruptError when a node of it names a data object with a wrong length."""
        seen_before = len(self.walked.objects)  # (the walk only adds, in order)
        try:
            walk_checkpoint(self.src, manifest, result=self.walked)
        except CkptError as exc:
            raise CorruptError(f"{where}: {exc.message}; {self._stopped()}", hint="run `ckpt verify --read-data` on SRC") from None
        reached = list(itertools.islice(self.walked.objects, seen_before, None))
        self._check_lengths(reached, where)
        missing = []
        for oid in reached:
            there, lost = self.check.has(oid)
            if there:
                self.result.objects_present += 1
            else:
                missing.append((oid, lost))
        return missing

    def _check_lengths(self, reached: list[bytes], where: str) -> None:
        """Every length a node of this checkpoint records for a data object must be the
        object's, as verify checks it (`structure_problems`), whether the object is sent now,
        was sent for an earlier checkpoint of this copy, or is in DST already: a wrong one
        refuses the checkpoint before anything of it is sent. The lengths are the index's
        (SRC's, else DST's for an object only DST has), so no data is read.

        The walk is shared, so this checkpoint's nodes name two kinds of data objects: those
        it reached first (`reached`), and ones an earlier checkpoint reached. A node naming
        one of the latter with another length than the earlier node did puts it in
        `other_sizes`, and only then: since each earlier checkpoint passed this check (or the
        copy stopped there), `other_sizes` was empty before this walk and every length in
        `data_sizes` of those objects is right."""
        walked = self.walked
        named = dict.fromkeys(oid for oid in reached if oid in walked.data_sizes)
        named.update(dict.fromkeys(walked.other_sizes))
        if not named:
            return
        view = WalkResult(
            objects={oid: walked.objects[oid] for oid in named},
            data_sizes={oid: walked.data_sizes[oid] for oid in named},
            other_sizes={oid: walked.other_sizes[oid] for oid in named if oid in walked.other_sizes},
        )
        entries = {oid: e for oid in named if (e := self._entry(oid)) is not None}
        bad, wrong_length = structure_problems(view, entries, "SRC and DST lack it")
        # (an object neither has is refused when it is read, as a damaged one is)
        if wrong_length:
            oid = min(wrong_length)
            raise CorruptError(
                f"{where}: {bad[oid]}; {self._stopped()}",
                hint="run `ckpt verify` on SRC" + self._kept(),
            )

    def _stopped(self) -> str:
        """What a refused checkpoint left in DST, in the words of a copy or of a dry run."""
        return "a copy would stop there (nothing is copied in a dry run)" if self.dry_run else "nothing of the checkpoint was copied"

    def _kept(self) -> str:
        # a dry run copied nothing before it either: there is nothing kept to speak of
        return "" if self.dry_run else "; the checkpoints copied before it are kept in DST"

    def _entry(self, oid: bytes) -> IndexEntry | None:
        """An object's index entry, SRC's (or the file's table), else DST's."""
        entry = self.src.entries.get(oid) if isinstance(self.src, CheckpointFile) else self.src.index().get(oid)
        return entry if entry is not None else self.dst.index().get(oid)

    def _read(self, oid: bytes, where: str) -> tuple[IndexEntry, bytes, bytes]:
        """An object of SRC, re-hashed (and its size checked) before anything lands in DST."""
        try:
            entry, stored, raw = self.src.read_checked(oid)  # (raw is entry.raw_len bytes: _check_lengths held)
        except CkptError as exc:
            raise CorruptError(
                f"{where}: {exc.message}; {self._stopped()}", hint="run `ckpt verify --read-data` on SRC" + self._kept()
            ) from None
        return entry, stored, raw

    def flush(self) -> None:
        """Commit the batch: objects and their index first, the manifests (each the commit
        point of its checkpoint) next, oldest first, then the latest refs."""
        if self.txn is not None:
            txn, self.txn = self.txn, None
            try:
                txn.commit()
            except BaseException:
                txn.abort()
                self.batch, self.drop = [], {}
                raise
        if self.drop:  # the lost packs' rows of what was sent again, now that its new index is committed
            # (a lost pack whose objects were all sent again, alone, is written again under
            # its own name, with the same index file: nothing to drop then)
            drop, self.drop = self.drop, {}
            drop = {pack: oids for pack, oids in drop.items() if not self.dst.backend.exists(layout.pack_path(pack))}
            if drop:
                self.dst.drop_index_rows(drop)
        batch, self.batch = self.batch, []
        for _cid, data, _m, how in batch:
            if how == "add":
                self.dst.add_manifest_bytes(data)
            elif how == "rewrite":
                self.dst.replace_manifest_bytes(data)
        for cid, _d, manifest, _how in batch:
            self.advance_latest(cid, manifest)

    def keep_complete(self) -> None:
        """After a failure: commit the complete checkpoints of the batch (the objects the
        failing one sent land unreferenced, as a killed take's do), or nothing if none is."""
        if not self.batch:
            self.abort()
            return
        with contextlib.suppress(CkptError):  # the failure that brought us here is the one to report
            self.flush()
        self.abort()

    def abort(self) -> None:
        if self.txn is not None:
            self.txn.abort()
            self.txn = None
        self.batch, self.drop = [], {}

    def advance_latest(self, cid: bytes, manifest: Manifest) -> None:
        if not self.dry_run and _advance_latest(self.dst, cid, manifest) and str(manifest.subject) not in self.result.latest_moved:
            self.result.latest_moved.append(str(manifest.subject))


def _stored_len(src: Source, oid: bytes) -> int:
    """An object's stored size, from the index (a dry run reads no object's bytes)."""
    entry = src.entries.get(oid) if isinstance(src, CheckpointFile) else src.index().get(oid)
    return entry.stored_len if entry is not None else src.read_stored(oid)[0].stored_len


def _advance_latest(dst: Store, cid: bytes, manifest: Manifest) -> bool:
    """Move the subject's latest in DST to `cid` when it is newer than the one there (or
    there is none); returns whether it moved."""
    cur, _reset = dst.latest_state(manifest.subject)
    if cur == cid:
        return False
    return dst.advance_latest(manifest.subject, cid, manifest.created_ns, nested=is_nested(manifest.labels), reason="copy")


def _copy_named_refs(src: Source, dst: Store, copied: set[bytes], result: CopyResult, dry_run: bool) -> None:
    if not isinstance(src, Store):
        return  # a checkpoint file has no refs
    for kind in _NAMED_REFS:
        for name, target in sorted(src.refs(prefix=f"{layout.REFS}/{kind}").items()):
            if target not in copied:
                continue
            short = name.split("/", 1)[1]
            have = dst.read_ref(layout.ref_path(name))
            if have == target:
                continue
            if have is not None:
                result.refs_skipped.append(name)
                continue
            result.refs_copied.append(name)
            if dry_run:
                continue
            if kind == "tags":
                dst.set_tag(short, target, reason="copy")
            else:
                dst.set_branch(short, target, reason="copy")

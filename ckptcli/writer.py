"""The write side: `take` commits a state document (and files, as the blobs section) to a
store as one checkpoint, and moves the subject's `latest` and the branch.

A take encodes every section in one store transaction, commits it, then writes the
manifest (the commit point) and moves the refs, all under the store's shared lock, so a
prune (which takes it exclusively) never sees a new checkpoint without its refs. Nothing
is committed when encoding fails. Format: formats/v2.md; refs and the reflog: docs/design.md.
"""

from __future__ import annotations

import os
import platform
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptcli._version import __version__
from ckptcli.blobtree import CaptureReport, capture, tree_size
from ckptcli.checkpoint import Checkpoint, PathLike
from ckptcli.document import split_document
from ckptcli.errors import CkptError, InvalidInputError, LatestMovedError, LimitExceededError
from ckptcli.format import limits
from ckptcli.format.digests import MAX_ENTRIES, MIN_KEEP, DigestMismatchError, Digests
from ckptcli.format.manifest import Manifest, Subject, check_name
from ckptcli.format.takecache import CachingEncoder, SubjectCache
from ckptcli.format.values import Encoded, Encoder
from ckptcli.listing import parse_labels
from ckptcli.progress import NULL, Progress
from ckptcli.store.digestcache import DigestFile
from ckptcli.store.repository import Store, Transaction

__all__ = ["TakeResult", "drop_take_cache", "origin_of", "take"]

#: Bounds of the take cache (docs/design.md, "The take cache"): per store, the lists of
#: at most this many subjects, least recently taken dropped first...
CACHE_SUBJECTS = 16
#: ...and at most this many bytes of memory (estimated: the lists' msgpack plus
#: ITEM_OVERHEAD a cached item); a list over CACHE_RECORD_BYTES is not kept.
CACHE_BYTES = 128 << 20
CACHE_RECORD_BYTES = 64 << 20


@dataclass
class TakeResult:
    id: bytes
    manifest: Manifest
    new_objects: int
    new_bytes: int
    capture: CaptureReport = field(default_factory=CaptureReport)
    latest_moved: bool = True  # whether the subject's latest names it (see take's move_latest)

    @property
    def hex(self) -> str:
        return self.id.hex()


def take(
    store: Store,
    state: Any,
    *,
    subject: str | Subject,
    labels: list[str] | dict[str, str] | None = None,
    parents: list[str] | None = None,
    message: str = "",
    blobs: Mapping[str, PathLike] | None = None,
    branch: str | None = None,
    schema_version: int | str | None = None,
    config_hash: str | None = None,
    producer: dict[str, str] | None = None,
    doc_format: str = "python",
    force_read: bool = False,
    carry: Mapping[str, bytes | Encoded] | None = None,
    progress: Progress = NULL,
    move_latest: bool | None = True,
    reason: str | None = None,
    cache: bool = True,
) -> TakeResult:
    """Take a checkpoint of `state` (and files under `blobs`) into `store`.

    Args:
        state: the state document (maps with string keys, lists, str, bytes, int,
            float, bool, None); see split_document for how it maps onto sections.
        subject: "KIND:NAME", e.g. "agent:support-bot".
        parents: checkpoint references; default is the branch head when `branch` is
            given, else the subject's latest; [] for a root checkpoint.
        blobs: name -> file or directory to store in the `blobs` section. Files whose
            size, mtime, ctime and inode match the first parent's are not read again
            (`force_read=True` reads everything).
        carry: section name -> encoded root (EV bytes) taken verbatim from another
            checkpoint of this store, e.g. `Checkpoint.section_ev("blobs")`, so a
            derived checkpoint (a migration, a fork) shares it without re-encoding.
            Every object it references must already be in the store. An
            `Encoded(ev, size)` counts `size` (the bytes of its strings, byte strings
            and files) in the checkpoint's logical size (stats, the SIZE of `ckpt ls`).
        move_latest: whether the subject's `latest` moves to the new checkpoint (as
            far as it is the newest: see Store.advance_latest). None: only when its
            first parent is the subject's head (a migration of the latest state moves
            it, one of an older state does not). False: latest stays where it is (a
            fork of an earlier point). The reflog records `reason` (default "take").
        cache: reuse what this process's last take of the subject into this `Store`
            made of the state's long lists (docs/design.md, "The take cache"): the
            same checkpoint, byte for byte, encoding only what changed. Every list
            is checked against an exact copy of what was taken; False encodes all.
    Returns:
        TakeResult with the new id and what it added to the store; `latest_moved`
        says whether the subject's latest now names it.
    Raises:
        InvalidInputError, LimitExceededError for state ckpt cannot store;
        StoreIOError when the disk refuses; nothing is committed then.
        LatestMovedError (a ConflictError) when the subject's latest was reset to
        another checkpoint while the take ran: the checkpoint is committed (its id is
        the error's `kept`) but latest stays where the reset put it.
    """
    subj = subject if isinstance(subject, Subject) else Subject.parse(subject)
    label_map = parse_labels(labels)
    blob_paths = {check_name(k, "blob name"): Path(v) for k, v in (blobs or {}).items()}
    if branch is not None:
        check_name(branch, "branch name")
    layout, sections = split_document(state)
    layout["format"] = doc_format
    with store.backend.lock("store", shared=True):
        store.clean_stale_temps()
        # latest as this take found it: a reset while it runs is not undone (advance_latest)
        expect = store.latest_state(subj)
        parent_ids = _parent_ids(store, subj, parents, branch)
        carried = {k: v.ev if isinstance(v, Encoded) else v for k, v in (carry or {}).items()}
        carried_bytes = sum(v.size for v in (carry or {}).values() if isinstance(v, Encoded))
        with _take_cache(store, subj, cache) as subject_cache:
            digests = None if force_read or not blob_paths else _DigestFile(store, subj)
            try:
                encoded, enc, txn, report = _encode(
                    store, sections, carried, blob_paths, parent_ids, force_read, progress, subject_cache, digests
                )
            except DigestMismatchError:
                assert digests is not None
                digests.drop()
                store.warn(
                    f"the digest cache {digests.path} named a chunk by a SHA-256 that is not its own; "
                    "it was removed and the files were read again without it (a cache: nothing of the store was lost)"
                )
                encoded, enc, txn, report = _encode(store, sections, carried, blob_paths, parent_ids, force_read, progress, subject_cache)
        manifest = Manifest(
            subject=subj,
            sections=encoded,
            layout=layout,
            parents=parent_ids,
            producer=producer or {"name": "ckptcli", "version": __version__},
            labels=label_map,
            message=message,
            schema_version=schema_version,
            config_hash=config_hash,
            deps={"ckptcli": __version__, "python": platform.python_version()},
            stats={
                "logical_bytes": enc.logical_bytes + carried_bytes,
                # of logical_bytes, what this take neither read nor encoded (files unchanged
                # since the parent, carried sections); its presence says they are counted
                "reused_bytes": report.reused_bytes + carried_bytes,
                "new_objects": txn.new_objects,
                "new_bytes": txn.new_stored_bytes,
            },
            format_version=store.version,
        )
        if move_latest is None:
            move_latest = bool(parent_ids) and parent_ids[0] == store.head(subj)
        cid, moved = _commit(store, manifest, expect, branch, move_latest, reason)
    return TakeResult(cid, manifest, txn.new_objects, txn.new_stored_bytes, report, latest_moved=moved)


def _parent_ids(store: Store, subj: Subject, parents: list[str] | None, branch: str | None) -> list[bytes]:
    """The new checkpoint's parents: those named, else the branch head, else the subject's."""
    if parents is None:
        head = store.read_ref(f"refs/branches/{branch}") if branch else None
        if head is None:
            head = store.head(subj)  # latest, or a newer checkpoint a killed take left it behind
        parent_ids = [head] if head is not None else []
    else:
        parent_ids = [store.resolve(p) for p in parents]
    if len(parent_ids) > limits.MAX_PARENTS:
        raise InvalidInputError(f"{len(parent_ids)} parents; a checkpoint may have at most {limits.MAX_PARENTS}")
    return parent_ids


def _encode(
    store: Store,
    sections: dict[str, Any],
    carry: Mapping[str, bytes] | None,
    blob_paths: dict[str, Path],
    parent_ids: list[bytes],
    force_read: bool,
    progress: Progress,
    subject_cache: SubjectCache | None = None,
    digests: _DigestFile | None = None,
) -> tuple[dict[str, bytes], Encoder, Transaction, CaptureReport]:
    """Encode the sections, the carried ones and the blobs section in one committed
    transaction (aborted on any error); returns (section -> encoded root, the encoder,
    the transaction, what capturing the files found). With `subject_cache`, the long
    lists of the sections go through it (its records are checked against the store's
    index first, and replaced by this take's once it has committed). With `digests`,
    the files' chunks are hashed through the subject's digest cache, which is written
    back once the take has committed."""
    txn = store.transaction()
    try:
        if subject_cache is not None:
            _check_cache(subject_cache, txn)
            cached = CachingEncoder(txn, subject_cache, cdc=store.config.cdc, chunker=store.config.chunker)
            encoded = {name: cached.encode_section(value, name) for name, value in sections.items()}
            enc: Encoder = cached
        else:
            enc = Encoder(txn, cdc=store.config.cdc, chunker=store.config.chunker)
            encoded = {name: enc.encode_root(value, where=name) for name, value in sections.items()}
        for name, ev in (carry or {}).items():
            if name in encoded or (name == "blobs" and blob_paths):
                raise InvalidInputError(f"section {name!r} is both carried over and given")
            encoded[name] = ev
        report = CaptureReport()
        if blob_paths:
            # files unchanged since the first parent (size, mtime, ctime, inode) are not read again
            previous = {} if force_read or not parent_ids else _parent_blobs(store, parent_ids[0])
            total = sum(tree_size(p) for p in blob_paths.values())
            progress.start("reading blobs", total)
            before = enc.logical_bytes
            if digests is not None:
                digests.digests.length_of = txn.raw_len
                enc.digests = digests.digests
            try:
                entries = {name: capture(p, enc, progress, report, previous.get(name), name) for name, p in blob_paths.items()}
            finally:
                progress.finish()
            for name, p in blob_paths.items():
                if entries[name].get("type") != "skipped":
                    entries[name]["origin"] = origin_of(p)  # where `restore --in-place` puts it back
            try:
                encoded["blobs"] = enc.encode_root(entries, where="blobs")
            except LimitExceededError as exc:
                # a directory tree is what nests there: flattening it is not the user's to do
                exc.hint = "pack the deepest directories as one file (tar) and store that"
                raise
            # the blobs count the bytes of their files, not the strings of their listing
            # (names, types, link targets, origins): what a fork or a migration that
            # carries them counts (Checkpoint.carried), the SIZE of `ckpt ls`
            enc.logical_bytes = before + report.bytes
        txn.commit()
    except BaseException:
        txn.abort()
        if subject_cache is not None:
            subject_cache.discard()
        raise
    if subject_cache is not None:
        subject_cache.commit(CACHE_RECORD_BYTES)
    if digests is not None:
        digests.save(report.bytes // store.config.cdc[1])
    return encoded, enc, txn, report


class _DigestFile:
    """A subject's digest cache (ckptcli.format.digests, kept in the user's cache
    directory: ckptcli.store.digestcache), read on the first chunk a take hashes (a take
    that reads no file never reads it), written back after the take committed. Best
    effort both ways: a cache that cannot be read, or is not whole and sound, is an
    empty one; one that cannot be written is not written."""

    def __init__(self, store: Store, subj: Subject) -> None:
        # a local store by its real path (`--store .ckpt` in two directories is two stores)
        local = store.directory
        self.file = DigestFile(os.path.realpath(local) if local is not None else str(store.location), str(subj))
        self.path = self.file.path
        self.digests = Digests(loader=self.file.load)

    def save(self, chunks: int) -> None:
        """Write this take's pairs and the earlier ones, about twice the chunks of the
        files it captured (`chunks`) and at least MIN_KEEP, at most MAX_ENTRIES."""
        if self.digests.seen:
            self.file.save(self.digests.pairs(min(MAX_ENTRIES, max(MIN_KEEP, 2 * chunks))))

    def drop(self) -> None:
        self.file.drop()


class _StoreCache:
    """The take caches of one Store object: subject -> SubjectCache, least recently
    taken first."""

    def __init__(self) -> None:
        self.subjects: OrderedDict[str, SubjectCache] = OrderedDict()
        self.lock = threading.Lock()


_CACHES: weakref.WeakKeyDictionary[Store, _StoreCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


@contextmanager
def _take_cache(store: Store, subj: Subject, use: bool) -> Iterator[SubjectCache | None]:
    """The subject's cache in this store, held for one take; None when not to be used
    (`use` is False, or another thread's take of the subject holds it)."""
    if not use:
        yield None
        return
    with _CACHES_LOCK:
        per_store = _CACHES.get(store)
        if per_store is None:
            per_store = _CACHES[store] = _StoreCache()
    with per_store.lock:
        name = str(subj)
        sc = per_store.subjects.get(name)
        if sc is None:
            sc = per_store.subjects[name] = SubjectCache()
        per_store.subjects.move_to_end(name)
    if not sc.lock.acquire(blocking=False):
        yield None
        return
    try:
        yield sc
    finally:
        sc.lock.release()
        _bound(per_store)


def _bound(per_store: _StoreCache) -> None:
    """Drop the least recently taken subjects' lists until the store's cache is within
    CACHE_SUBJECTS and CACHE_BYTES (a subject whose take is under way is skipped)."""
    with per_store.lock:
        subjects = per_store.subjects
        total = sum(sc.cost for sc in subjects.values())
        for name in list(subjects):
            if len(subjects) <= CACHE_SUBJECTS and total <= CACHE_BYTES:
                break
            sc = subjects[name]
            if sc.lock.acquire(blocking=False):
                try:
                    total -= sc.cost
                    sc.discard()
                    del subjects[name]
                finally:
                    sc.lock.release()


def _check_cache(sc: SubjectCache, txn: Transaction) -> None:
    """Before a take uses `sc`: if the store's object index was read again from scratch
    since the cache was filled (a prune, a repair or an upgrade rewrote the index files,
    in this process or another), nothing of it is used; else each list whose objects the
    index no longer names goes (`SubjectCache.check`). So a take never names an object
    the store does not have."""
    basis = sc.basis() if sc.basis is not None else None
    if basis is not txn.known:
        sc.discard()
        sc.basis = weakref.ref(txn.known)
    sc.check(txn.known.__contains__)


def drop_take_cache(store: Store) -> None:
    """Forget every take cache of `store` (the next take of each subject encodes its
    whole state)."""
    with _CACHES_LOCK:
        _CACHES.pop(store, None)


def _commit(
    store: Store, manifest: Manifest, expect: tuple[bytes | None, int | None], branch: str | None, move_latest: bool, reason: str | None
) -> tuple[bytes, bool]:
    """Write the manifest and move the refs; returns (checkpoint id, whether latest moved).
    The reflog records `reason`, by default "take" and the message's first line."""
    subj = manifest.subject
    message = manifest.message
    why = reason if reason is not None else ("take: " + message.splitlines()[0][:80] if message.strip() else "take")
    # the commit point; the head hint first, so a kill before the ref moves forks
    # nothing (none when latest stays: the next take must not adopt this one)
    cid = store.write_manifest(manifest, note_head=move_latest)
    # refs move while the store lock is still held, so a prune (which takes it
    # exclusively) never sees a new checkpoint without its refs
    try:
        moved = bool(move_latest) and store.advance_latest(subj, cid, manifest.created_ns, reason=why, expect=expect)
    except LatestMovedError:
        if branch:
            store.set_branch(branch, cid, reason=why)
        raise
    if not move_latest:
        store.keep_latest(subj, f"{why} (latest kept)")
    if branch:
        store.set_branch(branch, cid, reason=why)
    return cid, moved


def origin_of(path: Path) -> str:
    """The absolute path a blob is taken from, as recorded in its entry (`origin`):
    normalized, symlinks in it not resolved (the path the user named)."""
    p = os.path.abspath(path)
    return "/" + p.lstrip("/")  # POSIX keeps a leading "//"; the recorded path never has one


def _parent_blobs(store: Store, parent: bytes) -> dict[str, Any]:
    """The parent's blob entries (file data left in the store), or {} if it has none
    or cannot be read: then every file is simply read again."""
    try:
        return Checkpoint(store, parent).blobs()
    except CkptError:
        return {}

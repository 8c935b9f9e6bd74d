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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptcli._version import __version__
from ckptcli.blobtree import CaptureReport, capture, tree_size
from ckptcli.checkpoint import Checkpoint, PathLike
from ckptcli.document import split_document
from ckptcli.errors import CkptError, InvalidInputError, LatestMovedError
from ckptcli.format import limits
from ckptcli.format.manifest import Manifest, Subject, check_name
from ckptcli.format.values import Encoder
from ckptcli.listing import parse_labels
from ckptcli.progress import NULL, Progress
from ckptcli.store.repository import Store, Transaction

__all__ = ["TakeResult", "origin_of", "take"]


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
    carry: Mapping[str, bytes] | None = None,
    progress: Progress = NULL,
    move_latest: bool | None = True,
    reason: str | None = None,
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
            Every object it references must already be in the store.
        move_latest: whether the subject's `latest` moves to the new checkpoint (as
            far as it is the newest: see Store.advance_latest). None: only when its
            first parent is the subject's head (a migration of the latest state moves
            it, one of an older state does not). False: latest stays where it is (a
            fork of an earlier point). The reflog records `reason` (default "take").
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
        encoded, enc, txn, report = _encode(store, sections, carry, blob_paths, parent_ids, force_read, progress)
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
            stats={"logical_bytes": enc.logical_bytes, "new_objects": txn.new_objects, "new_bytes": txn.new_stored_bytes},
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
) -> tuple[dict[str, bytes], Encoder, Transaction, CaptureReport]:
    """Encode the sections, the carried ones and the blobs section in one committed
    transaction (aborted on any error); returns (section -> encoded root, the encoder,
    the transaction, what capturing the files found)."""
    txn = store.transaction()
    try:
        enc = Encoder(txn, cdc=store.config.cdc)
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
            try:
                entries = {name: capture(p, enc, progress, report, previous.get(name)) for name, p in blob_paths.items()}
            finally:
                progress.finish()
            for name, p in blob_paths.items():
                if entries[name].get("type") != "skipped":
                    entries[name]["origin"] = origin_of(p)  # where `restore --in-place` puts it back
            encoded["blobs"] = enc.encode_root(entries, where="blobs")
        txn.commit()
    except BaseException:
        txn.abort()
        raise
    return encoded, enc, txn, report


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

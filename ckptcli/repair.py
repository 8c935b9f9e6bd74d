"""Putting a damaged store right again (`ckpt repair`): what can be rebuilt from what
the store still holds, never by guessing.

* `repair_index`: one fresh index file from the packs' own tables (formats/v1.md and
  v2.md, "Pack files": every pack lists its objects; their ids are recovered by
  hashing), then the old index files go. Each pack is checked as verify checks it; an
  object that does not decode is left out, and a pack whose table cannot be read is
  reported and named by no index. Crash-safe: the new index is committed before any
  old file is deleted, and an index naming a pack twice, or an object twice, is fine
  to read, so a kill at any point leaves a readable store; running it again finishes.
* `repair_refs`: each subject's `latest` ref points at its newest committed
  checkpoint (after a take was killed between its manifest and its ref, or after a
  `latest` ref was damaged). Tags and branches name a choice the store cannot
  recover; a damaged one is reported, never rewritten.

Both hold the store lock exclusively, so no take or prune runs meanwhile.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ckptcli.errors import CkptError, NotFoundError
from ckptcli.format.manifest import Manifest, Subject, head_order, is_nested
from ckptcli.progress import NULL, Progress
from ckptcli.store.repository import Store


@dataclass
class IndexRepair:
    dry_run: bool
    packs: int = 0  # pack files read
    objects: int = 0  # objects the new index names
    index_files_before: int = 0
    index_files_after: int = 0
    damaged_index: list[str] = field(default_factory=list)  # index files that could not be read
    damaged_packs: dict[str, str] = field(default_factory=dict)  # pack path -> what is wrong
    unindexed_packs: int = 0  # packs no readable index file named before
    new_index: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def repair_index(store: Store, *, dry_run: bool = False, lock_wait: float = 300.0, progress: Progress = NULL) -> IndexRepair:
    """Replace the store's index files with one built from the packs' own tables.
    Raises LockError when takes keep the store busy for `lock_wait` seconds."""
    from ckptcli.integrity import read_pack  # verify's pack reader: each pack is checked as verify does

    rep = IndexRepair(dry_run)
    with store.backend.lock("store", shared=False, wait=lock_wait):
        store.reset_index()
        store.refresh_index()  # which index files are damaged, which packs they name
        rep.damaged_index = sorted(store.damaged_index)
        old_rows: dict[bytes, list[list[Any]]] = defaultdict(list)
        for oid, e in store.index().items():
            old_rows[e.pack].append([oid, *e[1:]])
        old_index = store.backend.list("index")
        rep.index_files_before = len(old_index)
        paths = store.backend.list("packs")
        total = sum(store.backend.size(p) for p in paths)
        whole: list[tuple[bytes, list[list[Any]]]] = []
        partial: list[tuple[bytes, list[list[Any]]]] = []
        progress.start("reading packs", total)
        try:
            for path in paths:
                hexname = path.rsplit("/", 1)[-1]
                try:
                    pack_id = bytes.fromhex(hexname)
                    if len(pack_id) != 32:
                        raise ValueError(hexname)
                except ValueError:
                    rep.damaged_packs[path] = "the file name is not a pack id"
                    continue
                try:
                    data = store.backend.read(path)
                    table = read_pack(data, path)
                except NotFoundError:
                    continue
                except CkptError as exc:
                    # its own table is unreadable: what a readable index file said of it
                    # stays (each object is still hash-checked when read)
                    kept = old_rows.get(pack_id)
                    rep.damaged_packs[path] = exc.message + ("; the rows a readable index file had for it are kept" if kept else "")
                    if kept:
                        partial.append((pack_id, kept))
                    progress.advance(store.backend.size(path))
                    continue
                rep.packs += 1
                rep.unindexed_packs += pack_id not in old_rows
                own = hashlib.sha256(data).digest() if table.version == 1 else table.pack_id()
                if table.errors:
                    first = next(iter(table.errors.values()))
                    rep.damaged_packs[path] = f"{len(table.errors)} damaged object(s) left out of the index; first: {first}"
                    partial.append((pack_id, table.rows))
                elif own != pack_id:
                    rep.damaged_packs[path] = "content does not match its name; its objects that decode are indexed"
                    partial.append((pack_id, table.rows))
                else:
                    whole.append((pack_id, table.rows))
                progress.advance(len(data))
        finally:
            progress.finish()
        # an object in an intact pack is named first (readers take the first entry)
        packs = whole + partial
        rep.objects = len({row[0] for _pid, rows in packs for row in rows})
        if dry_run:
            rep.index_files_after = 1
            return rep
        from ckptcli.prune import write_index

        rep.new_index = write_index(store, packs)  # committed before any old file goes
        for name in old_index:
            if name != rep.new_index:
                store.backend.delete(name)
        store.reset_index()
        rep.index_files_after = len(store.backend.list("index"))
    return rep


def dangling_heads(
    manifests: dict[bytes, Manifest], latest: dict[Subject, bytes], moved_ns: dict[Subject, int] | None = None
) -> list[tuple[bytes, Subject, bytes | None]]:
    """(checkpoint, subject, its latest or None) for each subject whose newest committed
    checkpoint is newer than its `latest` ref and not in its history: a take was
    killed between its manifest (the commit point) and its ref. A subject with
    checkpoints and no latest ref counts too. `moved_ns`: when each latest ref was last
    moved or deliberately kept (Store.last_moved_ns); a checkpoint committed before
    that was left behind on purpose (`ckpt reset`, a fork, a migration of an older
    checkpoint) and is not dangling."""
    newest: dict[Subject, tuple[tuple[int, int], bytes]] = {}
    for cid, m in manifests.items():
        cur = newest.get(m.subject)
        if cur is None or (head_order(m.labels, m.created_ns), cid) > cur:
            newest[m.subject] = (head_order(m.labels, m.created_ns), cid)
    out: list[tuple[bytes, Subject, bytes | None]] = []
    for subject, (order, cid) in sorted(newest.items(), key=lambda kv: str(kv[0])):
        head = latest.get(subject)
        if head == cid:
            continue
        if head is not None:
            at = manifests.get(head)
            if at is None or head_order(at.labels, at.created_ns) >= order or cid in _ancestors(manifests, head):
                continue  # latest names a checkpoint that is not here (verify says so) or is as new
            deliberate = moved_ns is not None and moved_ns.get(subject, -1) >= manifests[cid].created_ns
            if deliberate and not (is_nested(at.labels) and not is_nested(manifests[cid].labels)):
                continue  # the ref moved (or was kept) after it was committed: on purpose
        out.append((cid, subject, head))
    return out


def _ancestors(manifests: dict[bytes, Manifest], cid: bytes) -> set[bytes]:
    seen: set[bytes] = set()
    todo = [cid]
    while todo:
        m = manifests.get(todo.pop())
        for p in m.parents if m is not None else []:
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


@dataclass
class RefsRepair:
    dry_run: bool
    moved: dict[str, dict[str, str | None]] = field(default_factory=dict)  # ref -> {"from", "to"}
    damaged: dict[str, str] = field(default_factory=dict)  # tag or branch -> what is wrong (left alone)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def repair_refs(store: Store, *, dry_run: bool = False, lock_wait: float = 300.0) -> RefsRepair:
    """Point each subject's latest ref at its newest committed checkpoint (a damaged
    latest ref is rewritten; one naming a subject with no checkpoint left is deleted),
    unless the reflog says it was left behind on purpose (dangling_heads). Damaged
    tags and branches are reported, not touched."""
    rep = RefsRepair(dry_run)
    with store.backend.lock("store", shared=False, wait=lock_wait):
        manifests: dict[bytes, Manifest] = {}
        for cid in store.manifest_ids():
            try:
                manifests[cid] = store.manifest(cid)
            except CkptError:
                continue  # a damaged manifest is verify's business
        newest: dict[str, tuple[tuple[int, int], bytes]] = {}
        for cid, m in manifests.items():
            path = store.latest_ref(m.subject)
            if path not in newest or (head_order(m.labels, m.created_ns), cid) > newest[path]:
                newest[path] = (head_order(m.labels, m.created_ns), cid)
        current: dict[str, bytes | None] = {}
        for path in store.backend.list("refs"):
            try:
                current[path] = store.read_ref(path)
            except NotFoundError:
                continue
            except CkptError as exc:
                if path.startswith("refs/latest/"):
                    current[path] = None
                else:
                    rep.damaged[path] = exc.message
        # a readable latest naming a checkpoint of its subject moves only to a dangling
        # head: a newer checkpoint it was not moved (or kept) past on purpose
        latest: dict[Subject, bytes] = {}
        moved_ns: dict[Subject, int] = {}
        for path, have in current.items():
            if have is not None and have in manifests and path == store.latest_ref(manifests[have].subject):
                latest[manifests[have].subject] = have
                if (when := store.last_moved_ns(path)) is not None:
                    moved_ns[manifests[have].subject] = when
        dangling = {cid for cid, _s, _h in dangling_heads(manifests, latest, moved_ns)}
        for path in sorted(set(newest) | {p for p in current if p.startswith("refs/latest/")}):
            want = newest[path][1] if path in newest else None
            have = current.get(path)
            if (path in current and have == want) or (path not in current and want is None):
                continue
            if have is not None and have in latest.values() and want is not None and want not in dangling:
                continue  # left on an older checkpoint on purpose (ckpt reset, a fork, a migration)
            rep.moved[path[len("refs/") :]] = {"from": have.hex() if have else None, "to": want.hex() if want else None}
            if dry_run:
                continue
            with store.backend.lock("refs", shared=False):
                if want is None:
                    store.remove_ref(path, "repair refs")
                else:
                    store.write_ref(path, want, "repair refs")
    return rep

"""Putting a damaged store right again (`ckpt repair`): what can be rebuilt from what the
store still holds, never by guessing.

* `repair_index`: one fresh index file from the packs' own tables (formats/v1.md, "Pack
  files"); an object that does not decode is left out, a pack whose table cannot be read
  is reported. The new index is committed before any old file is deleted, and an index
  naming a pack or an object twice is fine to read, so a kill at any point leaves a
  readable store, and running it again finishes.
* `repair_refs`: each subject's `latest` ref points at its newest committed checkpoint.
  Tags and branches name a choice the store cannot recover: a damaged one is reported,
  never rewritten.

Both hold the store lock exclusively."""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ckptcli.errors import CkptError, CorruptError, LimitExceededError, NotFoundError, UnsupportedVersionError
from ckptcli.format import framing
from ckptcli.format.manifest import Manifest, Subject, head_order, is_nested
from ckptcli.format.values import EXT_REF, OBJ_DATA, Encoded, Encoder, Ext, packable, unpack_ev
from ckptcli.format.walk import walk_checkpoint
from ckptcli.progress import NULL, Progress
from ckptcli.store import layout
from ckptcli.store.index import write_index
from ckptcli.store.layout import pack_path
from ckptcli.store.pack import read_pack
from ckptcli.store.repository import Store
from ckptcli.store.stats import NodeCache


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
    rep = IndexRepair(dry_run)
    with store.backend.lock("store", shared=False, wait=lock_wait):
        store.reset_index()
        store.refresh_index()  # which index files are damaged, which packs they name
        rep.damaged_index = sorted(store.damaged_index)
        old_rows: dict[bytes, list[list[Any]]] = defaultdict(list)
        for oid, e in store.index().items():
            old_rows[e.pack].append([oid, *e[1:]])
        old_index = store.backend.list(layout.INDEX)
        rep.index_files_before = len(old_index)
        paths = store.backend.list(layout.PACKS)
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
                if path != pack_path(pack_id):  # never read: a pack ckpt wrote is not there
                    rep.damaged_packs[path] = f"not where ckpt keeps a pack ({pack_path(pack_id)}); ckpt wrote no such file"
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
        rep.new_index = write_index(store.backend, packs, store.version)  # committed before any old file goes
        for name in old_index:
            if name != rep.new_index:
                store.backend.delete(name)
        store.reset_index()
        rep.index_files_after = len(store.backend.list(layout.INDEX))
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
    newer: dict[str, str] = field(default_factory=dict)  # ref a newer ckpt wrote -> why (left alone)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def repair_refs(store: Store, *, dry_run: bool = False, lock_wait: float = 300.0) -> RefsRepair:
    """Point each subject's latest ref at its newest committed checkpoint (a damaged
    latest ref is rewritten; one naming a subject with no checkpoint left is deleted),
    unless the reflog says it was left behind on purpose (dangling_heads). Damaged
    tags and branches are reported, not touched; so is a ref a newer ckpt wrote
    (`newer`: the caller refuses, exit 6)."""
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
        for path in store.backend.list(layout.REFS):
            try:
                current[path] = store.read_ref(path)
            except NotFoundError:
                continue
            except UnsupportedVersionError as exc:
                rep.newer[path] = exc.message  # never replaced by a ckpt that cannot read it
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
        for path in sorted(set(newest) - set(rep.newer) | {p for p in current if p.startswith("refs/latest/")}):
            want = newest[path][1] if path in newest else None
            have = current.get(path)
            if (path in current and have == want) or (path not in current and want is None):
                continue
            if have is not None and have in latest.values() and want is not None and want not in dangling:
                continue  # left on an older checkpoint on purpose (ckpt reset, a fork, a migration)
            rep.moved[path[len("refs/") :]] = {"from": have.hex() if have else None, "to": want.hex() if want else None}
            if dry_run:
                continue
            with store.ref_lock():
                if want is None:
                    store.remove_ref(path, "repair refs")
                else:
                    store.write_ref(path, want, "repair refs")
    return rep


# -- checkpoints whose objects are gone -----------------------------------------------------------
#: labels of a checkpoint `repair_checkpoints` wrote in place of a damaged one
LABEL_REPAIRED_FROM = "repaired.from"
LABEL_REPAIRED_DROPPED = "repaired.dropped"


@dataclass
class DamagedCheckpoint:
    subject: str
    problems: dict[str, str]  # section (or "blobs/NAME") -> first problem found
    action: str  # "rewrite" or "drop"
    dropped: list[str] = field(default_factory=list)  # sections and blobs/NAME left out
    new: str | None = None  # the repaired checkpoint (rewrite; None in a dry run)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CheckpointsRepair:
    dry_run: bool
    mode: str  # "rewrite" or "drop"
    checked: int = 0
    damaged: dict[str, DamagedCheckpoint] = field(default_factory=dict)  # checkpoint id -> what
    unreadable: dict[str, str] = field(default_factory=dict)  # manifest path -> what is wrong
    #: of those, the damaged ones `drop` removes (or, in a dry run, would remove)
    dropped_unreadable: list[str] = field(default_factory=list)
    newer: list[str] = field(default_factory=list)  # of those, the ones a newer ckpt wrote (never removed)
    refs: dict[str, dict[str, str | None]] = field(default_factory=dict)  # ref -> {"from", "to"} ("to": None removed)
    forgotten: list[str] = field(default_factory=list)  # damaged originals removed
    missing_packs: list[str] = field(default_factory=list)  # packs the index names that are gone

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["damaged"] = {k: v.to_dict() for k, v in self.damaged.items()}
        return out


def _quiet(_oid: bytes, _section: str, _exc: CkptError) -> None:
    """walk_checkpoint's on_error: the errors are collected in its result."""


def _problems(store: Store, manifest: Manifest, packs: dict[bytes, bool], source: Any = None) -> dict[str, str]:
    """Section -> the first object it needs that cannot be read (a node that does not
    decode, an object no index or pack table names, or one in a pack that is gone).
    `packs`: pack id -> whether its file is there, filled as packs are looked at;
    `source`: where nodes are read (default the store; a stats.NodeCache)."""
    res = walk_checkpoint(source if source is not None else store, manifest, on_error=_quiet)
    bad: dict[str, str] = {}
    for _oid, (section, message) in res.errors.items():
        bad.setdefault(section, message)
    for oid, (typ, section) in res.objects.items():
        if typ != OBJ_DATA or section in bad:
            continue
        entry = store.index().get(oid)
        if entry is None:
            bad[section] = f"object {oid.hex()[:12]} is missing from the store"
        elif not packs.setdefault(entry.pack, store.backend.exists(pack_path(entry.pack))):
            bad[section] = f"object {oid.hex()[:12]} is in pack {entry.pack.hex()[:12]}, which is missing"
    return bad


def _damaged_blobs(store: Store, manifest: Manifest, packs: dict[bytes, bool]) -> tuple[dict[str, bytes], dict[str, str]] | None:
    """(blob name -> the EV of each entry that reads whole, blob name -> problem of the
    others), or None when the blobs map itself cannot be read (or is a chunked map)."""
    try:
        value = unpack_ev(manifest.sections["blobs"], "section blobs")
        if isinstance(value, Ext) and value.code == EXT_REF:
            value = unpack_ev(store.get(value.oid), "section blobs")
    except CkptError:
        return None
    if not isinstance(value, dict):
        return None
    good: dict[str, bytes] = {}
    bad: dict[str, str] = {}
    for name, entry in value.items():
        ev = framing.pack(packable(entry))
        found = _problems(store, Manifest(subject=manifest.subject, sections={"blobs": ev}, layout={}), packs)
        if found:
            bad[str(name)] = next(iter(found.values()))
        else:
            good[str(name)] = ev
    return good, bad


def repair_checkpoints(
    store: Store, *, dry_run: bool = True, drop: bool = False, forget: bool = False, lock_wait: float = 300.0, progress: Progress = NULL
) -> CheckpointsRepair:
    """Find checkpoints that need objects the store no longer holds, and rewrite each
    without what is gone (a section, or single blobs of the blobs section), labelled
    repaired.from / repaired.dropped, every ref that named it moved to the new one
    (`forget`: the damaged original is removed then); or, with `drop`, remove them
    (a latest ref moves to its subject's newest intact checkpoint, a branch to its
    nearest intact ancestor, a tag naming one is removed), and remove every damaged
    manifest too (its bytes do not decode, or are not the ones its name is the hash
    of: nothing can be rewritten from it; a ref naming it moves as for a dropped
    checkpoint with no intact ancestor). Nothing changes when `dry_run` (the default).

    Kill-safe: new objects and the new manifest are committed before any ref moves, and
    refs move before anything is removed; a kill leaves a readable store (at worst an
    extra checkpoint, or a damaged one still there), and running it again finishes.
    Holds the store lock exclusively."""
    rep = CheckpointsRepair(dry_run, "drop" if drop else "rewrite")
    with store.backend.lock("store", shared=False, wait=lock_wait):
        store.reset_index()
        store.find_in_packs()  # objects a damaged index file named are still found
        manifests, damaged_manifests = _readable_manifests(store, rep)
        order = sorted(manifests, key=lambda c: (manifests[c].created_ns, c))  # parents before children
        packs: dict[bytes, bool] = {}
        damaged = _find_damaged(store, manifests, order, packs, rep.mode, progress)
        replaced: dict[bytes, bytes | None] = {}  # damaged id -> its repair (None: dropped)
        for cid in order:
            d = damaged.get(cid)
            if d is None:
                continue
            rep.damaged[cid.hex()] = d
            if drop:
                replaced[cid] = None
                continue
            replaced[cid] = _rewrite(store, cid, manifests[cid], d, packs, replaced, dry_run)
        if drop:
            for cid in damaged_manifests:
                rep.dropped_unreadable.append(layout.manifest_path(cid))
                replaced[cid] = None
        for pack in {e.pack for e in store.index().values()}:
            packs.setdefault(pack, store.backend.exists(pack_path(pack)))
        rep.missing_packs = sorted(pack_path(p) for p, there in packs.items() if not there)
        _move_refs(store, rep, manifests, replaced, dry_run)
        if not dry_run and (drop or forget):
            for cid in replaced:
                store.backend.delete(layout.manifest_path(cid))
                store.forget_manifest(cid)
                rep.forgotten.append(cid.hex())
    return rep


def _readable_manifests(store: Store, rep: CheckpointsRepair) -> tuple[dict[bytes, Manifest], list[bytes]]:
    """(every manifest that can be read, the ids of those whose bytes are damaged); the
    others are recorded in `rep.unreadable` (a damaged one, a newer format's, one that
    cannot be read at all: a directory, a FIFO)."""
    manifests: dict[bytes, Manifest] = {}
    damaged: list[bytes] = []
    for cid in store.manifest_ids():
        try:
            manifests[cid] = store.manifest(cid)
        except NotFoundError:
            continue  # removed since the listing
        except (CorruptError, LimitExceededError) as exc:
            rep.unreadable[layout.manifest_path(cid)] = exc.message
            damaged.append(cid)
        except CkptError as exc:
            rep.unreadable[layout.manifest_path(cid)] = str(exc)  # with its hint (a newer format's: upgrade ckpt)
            if isinstance(exc, UnsupportedVersionError):
                rep.newer.append(layout.manifest_path(cid))
    rep.checked = len(manifests)
    return manifests, damaged


def _find_damaged(
    store: Store, manifests: dict[bytes, Manifest], order: list[bytes], packs: dict[bytes, bool], mode: str, progress: Progress
) -> dict[bytes, DamagedCheckpoint]:
    """The checkpoints that need something the store does not hold (`_problems`)."""
    progress.start("checking checkpoints", len(order))
    damaged: dict[bytes, DamagedCheckpoint] = {}
    nodes = NodeCache(store)  # checkpoints share most of their trees: each node read once
    try:
        for cid in order:
            m = manifests[cid]
            problems = _problems(store, m, packs, nodes)
            progress.advance(1)
            if problems:
                damaged[cid] = DamagedCheckpoint(str(m.subject), problems, mode)
    finally:
        progress.finish()
    return damaged


def _rewrite(
    store: Store,
    cid: bytes,
    m: Manifest,
    d: DamagedCheckpoint,
    packs: dict[bytes, bool],
    replaced: dict[bytes, bytes | None],
    dry_run: bool,
) -> bytes:
    """Write the repair of the damaged checkpoint `cid` (its parents replaced by their
    repairs): every section but the damaged ones, and of a damaged blobs section the
    blobs that read whole. Returns its id (`cid` itself when `dry_run`: nothing written)."""
    sections = {n: ev for n, ev in m.sections.items() if n not in d.problems}
    d.dropped = sorted(n for n in d.problems if n != "blobs")
    blobs_kept: dict[str, bytes] | None = None
    if "blobs" in d.problems:
        split = _damaged_blobs(store, m, packs)
        if split is None or not split[1] or not split[0]:
            d.dropped.append("blobs")
        else:
            blobs_kept = split[0]
            for name, problem in split[1].items():
                d.problems[f"blobs/{name}"] = problem
                d.dropped.append(f"blobs/{name}")
            del d.problems["blobs"]
    if dry_run:
        return cid  # stands for the repair it would write
    txn = store.transaction()
    try:
        if blobs_kept is not None:
            enc = Encoder(txn, cdc=store.config.cdc, chunker=store.config.chunker)
            sections["blobs"] = enc.encode_root({name: Encoded(ev) for name, ev in blobs_kept.items()}, where="blobs")
        txn.commit()
    except BaseException:
        txn.abort()
        raise
    labels = {**m.labels, LABEL_REPAIRED_FROM: cid.hex(), LABEL_REPAIRED_DROPPED: ",".join(d.dropped)}
    new_m = Manifest(
        subject=m.subject,
        sections=sections,
        layout=m.layout,
        parents=[p for p in (replaced.get(p, p) for p in m.parents) if p is not None],
        created_ns=m.created_ns,
        producer=m.producer,
        labels=labels,
        message=m.message,
        schema_version=m.schema_version,
        config_hash=m.config_hash,
        deps=m.deps,
        stats=m.stats,
        format_version=m.format_version,
    )
    new = store.write_manifest(new_m)  # the commit point of this one
    d.new = new.hex()
    return new


def _move_refs(
    store: Store, rep: CheckpointsRepair, manifests: dict[bytes, Manifest], replaced: dict[bytes, bytes | None], dry_run: bool
) -> None:
    """Every ref naming a damaged checkpoint: to its repair; when it was dropped, a
    latest or a branch to its nearest intact ancestor (a latest with none: to the
    subject's newest intact checkpoint), a tag removed. Each move is in the reflog with
    the reason `repair checkpoints`; a latest moved back to an ancestor records it as a
    reset does (the checkpoints newer than it were left behind on purpose)."""
    if not replaced:
        return
    refs = store.refs()  # (a damaged ref, or a newer format's, is left out and left alone)
    intact = {cid: m for cid, m in manifests.items() if cid not in replaced}
    for name, target in sorted(refs.items()):
        if target not in replaced:
            continue
        to = replaced[target]
        if to is None and name.startswith(("latest/", "branches/")):
            todo, seen = list(manifests[target].parents) if target in manifests else [], set()
            while todo and to is None:
                p = todo.pop(0)
                if p in seen:
                    continue
                seen.add(p)
                if p in intact:
                    to = p
                elif p in manifests:
                    todo.extend(manifests[p].parents)
            if to is None and name.startswith("latest/"):  # (of a damaged manifest: the subject its path names)
                path = layout.ref_path(name)
                rest = [(head_order(m.labels, m.created_ns), cid) for cid, m in intact.items() if store.latest_ref(m.subject) == path]
                to = max(rest)[1] if rest else None
        shown = "(its repair)" if to == target else to.hex() if to else None
        rep.refs[name] = {"from": target.hex(), "to": shown}
        if dry_run:
            continue
        why = f"repair checkpoints: {target.hex()[:12]} " + ("dropped" if replaced[target] is None else "replaced by its repair")
        path = layout.ref_path(name)
        with store.ref_lock():
            if to is None:
                store.remove_ref(path, why)
            elif name.startswith("latest/") and replaced[target] is None:
                store.write_ref(path, to, why, reset=time.time_ns())  # dropped: a deliberate move back
            else:
                store.write_ref(path, to, why)

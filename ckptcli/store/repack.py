"""Rewriting packs, in one place: prune's garbage collection and format upgrades.

Given the objects that must stay, `plan` decides for each pack whether it stays, is
dropped or is repacked (its needed objects copied, stored bytes verbatim, each
checked against its id, into new packs), writes the new packs and the one index file
that replaces all the others, and returns what `finish` deletes after it: the old
index files, then the dropped packs. The caller holds the store lock exclusively;
a crash anywhere between leaves every needed object indexed (docs/design.md,
"Write order").
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ckptcli.errors import CkptError
from ckptcli.format.walk import WalkResult, walk_checkpoint
from ckptcli.progress import NULL, Progress
from ckptcli.store import layout
from ckptcli.store.index import IndexEntry, ObjectIndex, write_index
from ckptcli.store.layout import pack_path
from ckptcli.store.pack import PackWriter, pack_version, stored_bytes
from ckptcli.store.repository import Store

__all__ = ["GcReport", "RepackPlan", "copy_objects", "finish", "plan", "start", "upgrade_packs"]

SMALL_PACK = 512 * 1024  # a pack smaller than this is small ...
SMALL_PACKS_TO_MERGE = 16  # ... and this many small packs are merged into one


@dataclass
class GcReport:
    packs_before: int = 0
    packs_deleted: int = 0
    packs_repacked: int = 0
    packs_written: int = 0
    objects_removed: int = 0
    bytes_freed: int = 0
    index_files_before: int = 0
    index_files_after: int = 0
    #: other writers (savers) alive during the removal: the objects were left for a later
    #: prune or delete that runs while none is (`WriterMark`)
    writers_alive: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class RepackPlan:
    old_index_files: list[str]
    new_index_file: str
    drop_packs: list[bytes]


@dataclass
class _Sorting:
    """Where each pack goes: kept as it is (its rows), dropped, repacked (the objects to copy)."""

    keep_rows: dict[bytes, list[list[Any]]] = field(default_factory=dict)
    repack: list[tuple[bytes, IndexEntry]] = field(default_factory=list)
    drop: list[bytes] = field(default_factory=list)
    small: list[bytes] = field(default_factory=list)


def start(store: Store, rep: GcReport) -> list[str]:
    """Read the whole index (the packs a damaged index file named too: they are not
    orphans); returns the index files there are now, which the new one replaces."""
    store.refresh_index()
    if store.damaged_index:
        store.find_in_packs()
    old_index_files = store.backend.list(layout.INDEX)
    rep.index_files_before = len(old_index_files)
    return old_index_files


def plan(
    store: Store,
    needed: set[bytes] | dict[bytes, Any],
    old_index_files: list[str],
    rep: GcReport,
    max_unused: float,
    progress: Progress,
    *,
    upgrade: bool = False,
) -> RepackPlan:
    """Write the packs and the one index that replace the store's, keeping the objects
    `needed`; `upgrade` also rewrites every pack older than the store's format version."""
    index = store.index()
    by_pack: dict[bytes, list[tuple[bytes, IndexEntry]]] = defaultdict(list)
    for oid, entry in index.items():
        by_pack[entry.pack].append((oid, entry))
    pack_files = {name.rsplit("/", 1)[-1] for name in store.backend.list(layout.PACKS)}
    rep.packs_before = len(pack_files)
    sorting = _Sorting()
    for pack_id, entries in by_pack.items():
        if pack_id.hex() in pack_files:
            _sort_pack(store, pack_id, entries, needed, sorting, rep, max_unused, upgrade)
    _drop_orphans(store, pack_files, by_pack, sorting, rep)
    if len(sorting.small) >= SMALL_PACKS_TO_MERGE:
        _merge_small(index, needed, sorting, rep)
    new_packs = copy_objects(store, sorting.repack, progress)
    # a pack is named by its content: a repack can write again exactly a pack that an
    # interrupted prune wrote (then an orphan above); what the new index names stays
    kept_ids = set(sorting.keep_rows) | {pid for pid, _rows in new_packs}
    drop = [pid for pid in sorting.drop if pid not in kept_ids]
    rep.packs_written = len(new_packs)
    rep.packs_deleted = len(drop)
    name = write_index(store.backend, sorted(sorting.keep_rows.items()) + new_packs, store.version)
    return RepackPlan([n for n in old_index_files if n != name], name, drop)


def _sort_pack(
    store: Store,
    pack_id: bytes,
    entries: list[tuple[bytes, IndexEntry]],
    needed: set[bytes] | dict[bytes, Any],
    sorting: _Sorting,
    rep: GcReport,
    max_unused: float,
    upgrade: bool,
) -> None:
    total = sum(e.stored_len for _o, e in entries)
    unused = sum(e.stored_len for o, e in entries if o not in needed)
    # bytes of objects no index names (a damaged object `ckpt repair index` left
    # out, whose good copy is now elsewhere): unneeded too, or the pack is kept for
    # ever and verify --read-data never passes again
    unindexed = _unindexed_bytes(store, pack_id, total)
    total += unindexed
    unused += unindexed
    if upgrade and pack_version(store.backend, pack_id) < store.version:
        sorting.drop.append(pack_id)
        rep.packs_repacked += 1
        sorting.repack.extend(entries)
    elif unused == total:
        sorting.drop.append(pack_id)
        rep.objects_removed += len(entries)
        rep.bytes_freed += total
    elif unused > max_unused * total:
        sorting.drop.append(pack_id)
        rep.packs_repacked += 1
        rep.objects_removed += sum(1 for o, _e in entries if o not in needed)
        rep.bytes_freed += unused
        sorting.repack.extend((o, e) for o, e in entries if o in needed)
    else:
        if total < SMALL_PACK:
            sorting.small.append(pack_id)
        sorting.keep_rows[pack_id] = [[o, *e[1:]] for o, e in entries]


def _drop_orphans(
    store: Store, pack_files: set[str], by_pack: dict[bytes, list[tuple[bytes, IndexEntry]]], sorting: _Sorting, rep: GcReport
) -> None:
    """Packs no index names: left by takes killed before their index was written (no
    take is running now: the caller holds the store lock exclusively)."""
    for hexname in pack_files:
        pid = bytes.fromhex(hexname) if len(hexname) == 64 else None
        if pid is not None and pid not in by_pack:
            sorting.drop.append(pid)
            rep.bytes_freed += store.backend.size(pack_path(pid))


def _merge_small(index: ObjectIndex, needed: set[bytes] | dict[bytes, Any], sorting: _Sorting, rep: GcReport) -> None:
    """Many small packs (one per small take) are merged: fewer files, fewer blocks."""
    for pack_id in sorting.small:
        rows = sorting.keep_rows.pop(pack_id)
        sorting.drop.append(pack_id)
        rep.packs_repacked += 1
        dead = [r for r in rows if r[0] not in needed]
        rep.objects_removed += len(dead)
        rep.bytes_freed += sum(r[3] for r in dead)
        sorting.repack.extend((r[0], index[r[0]]) for r in rows if r[0] in needed)


def _unindexed_bytes(store: Store, pack_id: bytes, indexed: int) -> int:
    """The stored bytes of a pack's objects that no index entry names: its objects tile
    the space between the header and the trailer (formats/v2.md, "Pack files"; v1 the
    same). 0 when the pack cannot be read (verify's business; it is then judged by what
    the index names)."""
    span = stored_bytes(store.backend, pack_id)
    return 0 if span is None else max(0, span - indexed)


def copy_objects(store: Store, objects: list[tuple[bytes, IndexEntry]], progress: Progress) -> list[tuple[bytes, list[list[Any]]]]:
    """Copy objects into new packs, stored bytes verbatim, each checked against its id;
    returns (pack id, rows) of each new pack."""
    out: list[tuple[bytes, list[list[Any]]]] = []
    if not objects:
        return out
    progress.start("repacking", sum(e.stored_len for _o, e in objects))
    objects.sort(key=lambda it: (it[1].pack, it[1].offset))  # read each old pack front to back
    writer: PackWriter | None = None
    try:
        for oid, entry in objects:
            _e, stored, _raw = store.read_checked(oid)  # a damaged object is not carried on
            if writer is None:
                writer = PackWriter(store.backend, store.version)
            writer.add(oid, entry.obj_type, entry.codec, stored, entry.raw_len)
            progress.advance(entry.stored_len)
            if writer.size >= store.backend.pack_target:  # the packs a take writes there
                out.append(writer.finish()())
                writer = None
        if writer is not None:
            out.append(writer.finish()())
            writer = None
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        progress.finish()
    return out


def finish(store: Store, repack: RepackPlan, rep: GcReport) -> None:
    """Delete what `repack` replaced: the old index files, then the dropped packs, then
    what is in tmp/ (none of it is live: the caller holds the store lock)."""
    for name in repack.old_index_files:
        store.backend.delete(name)
    for pack_id in repack.drop_packs:
        with contextlib.suppress(CkptError):  # already gone: a crashed earlier prune got this far
            store.backend.delete(pack_path(pack_id))
    store.empty_tmp()
    store.reset_index()
    rep.index_files_after = len(store.backend.list(layout.INDEX))


def upgrade_packs(store: Store, progress: Progress = NULL) -> GcReport:
    """Rewrite every pack older than the store's version (objects copied verbatim, each
    checked against its id) and replace the index files with one; the caller holds the
    store lock exclusively and has already moved the config to the new version. Every
    checkpoint is walked first: a missing or damaged object stops the upgrade before
    anything is written. The old packs and index files are deleted only after the new
    index is written."""
    rep = GcReport()
    survivors = [store.manifest(cid) for cid in store.manifest_ids()]
    old_index_files = start(store, rep)
    walked = WalkResult()
    progress.start("finding needed objects", len(survivors))
    for m in survivors:
        walk_checkpoint(store, m, result=walked)  # raises on a missing or damaged object: nothing written yet
        progress.advance(1)
    progress.finish()
    repack = plan(store, set(store.index()), old_index_files, rep, 1.0, progress, upgrade=True)
    finish(store, repack, rep)
    return rep

"""How much a store holds, and how much deduplication and compression save (`ckpt stats`).

Sizes, for the whole store and per subject: standalone (each checkpoint's distinct
objects, uncompressed, tree nodes included, as if stored alone), unique (the distinct
objects needed, each once), stored (those objects compressed, in the packs) and on disk
(pack, index and manifest files). The dedup ratio is standalone / unique, the compression
ratio unique / stored. Standalone is not the sum of `ckpt ls`'s SIZE (a take's
stats.logical_bytes: the strings, byte strings and files it holds, no keys, numbers or
structure), hence not called logical; docs/cli.md
(`ckpt stats`) is the user's view. Every checkpoint's nodes are read (as `ckpt
verify` reads them); data objects are only looked up in the index."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptcli.errors import CkptError
from ckptcli.format.walk import walk_checkpoint
from ckptcli.progress import NULL, Progress
from ckptcli.store import layout
from ckptcli.store.repository import Store

#: node objects NodeCache keeps (bytes) before it stops adding
NODE_CACHE_BYTES = 256 * 1024 * 1024


class NodeCache:
    """An ObjectSource over a store that keeps the objects it read (up to NODE_CACHE_BYTES),
    so walking many checkpoints that share their trees reads each node once."""

    def __init__(self, store: Store, limit: int = NODE_CACHE_BYTES) -> None:
        self.store = store
        self.limit = limit
        self.held = 0
        self._cache: dict[bytes, bytes] = {}

    def get(self, oid: bytes) -> bytes:
        content = self._cache.get(oid)
        if content is None:
            content = self.store.get(oid)
            if self.held + len(content) <= self.limit:
                self._cache[oid] = content
                self.held += len(content)
        return content


@dataclass
class SubjectStats:
    checkpoints: int = 0
    standalone_bytes: int = 0
    unique_bytes: int = 0
    stored_bytes: int = 0
    objects: int = 0
    #: what the takes of this subject added to the store (recorded by each take)
    added_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return _with_old_name(dict(self.__dict__))


@dataclass
class StoreStats:
    location: str
    format_version: int
    checkpoints: int = 0
    subjects: int = 0
    standalone_bytes: int = 0
    unique_bytes: int = 0
    stored_bytes: int = 0
    #: objects the checkpoints need / objects the index names (the rest a prune removes)
    objects: int = 0
    indexed_objects: int = 0
    unreferenced_bytes: int = 0  # stored bytes of objects no checkpoint needs
    packs: int = 0
    pack_bytes: int = 0
    index_files: int = 0
    manifest_bytes: int = 0
    unreadable: list[str] = field(default_factory=list)  # checkpoints whose objects could not all be read
    #: checkpoints whose manifest could not be read (left out of every figure) -> why
    unreadable_manifests: dict[str, str] = field(default_factory=dict)
    per_subject: dict[str, SubjectStats] = field(default_factory=dict)

    @property
    def dedup_ratio(self) -> float:
        return self.standalone_bytes / self.unique_bytes if self.unique_bytes else 1.0

    @property
    def compression_ratio(self) -> float:
        return self.unique_bytes / self.stored_bytes if self.stored_bytes else 1.0

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "per_subject"}
        out["dedup_ratio"] = round(self.dedup_ratio, 3)
        out["compression_ratio"] = round(self.compression_ratio, 3)
        out["per_subject"] = {k: v.to_dict() for k, v in sorted(self.per_subject.items())}
        return _with_old_name(out)


def _with_old_name(out: dict[str, Any]) -> dict[str, Any]:
    """`standalone_bytes` also under the name ckpt 0.2 gave it, `logical_bytes`, for the
    scripts that read it (docs/cli.md, `ckpt stats`): the same figure, deprecated."""
    out["logical_bytes"] = out["standalone_bytes"]
    return out


def store_stats(store: Store, progress: Progress = NULL) -> StoreStats:
    """Count what `store` holds (see the module docstring for what each size means).
    A checkpoint whose objects cannot all be read is counted with what can, and named
    in `unreadable`; one whose manifest cannot be read is left out, named in
    `unreadable_manifests` with why. Raises: StoreIOError."""
    st = StoreStats(store.location, store.version)
    index = store.index()
    st.indexed_objects = len(index)
    pack_paths = store.backend.list(layout.PACKS)
    st.packs = len(pack_paths)
    st.pack_bytes = sum(store.backend.size(p) for p in pack_paths)
    st.index_files = len(store.backend.list(layout.INDEX))
    ids = store.manifest_ids()
    needed: set[bytes] = set()
    per_subject_objects: dict[str, set[bytes]] = {}
    nodes = NodeCache(store)
    progress.start("reading checkpoints", len(ids))
    try:
        for cid in ids:
            progress.advance(1)
            try:
                m = store.manifest(cid)
                size = len(store.manifest_bytes(cid))
            except CkptError as exc:  # the manifest itself (a directory, a FIFO, damaged bytes), not its objects
                st.unreadable_manifests[cid.hex()] = exc.message
                continue
            st.manifest_bytes += size
            res = walk_checkpoint(nodes, m, on_error=lambda *_a: None)
            if res.errors:
                st.unreadable.append(cid.hex())
            objs = {oid for oid in res.objects if oid in index}
            standalone = sum(index[oid].raw_len for oid in objs)
            subject = str(m.subject)
            sub = st.per_subject.setdefault(subject, SubjectStats())
            sub.checkpoints += 1
            sub.standalone_bytes += standalone
            added = m.stats.get("new_bytes", 0)
            sub.added_bytes += added if isinstance(added, int) else 0
            st.standalone_bytes += standalone
            needed |= objs
            per_subject_objects.setdefault(subject, set()).update(objs)
    finally:
        progress.finish()
    st.checkpoints = len(ids) - len(st.unreadable_manifests)  # those counted: as the per-subject rows add up
    st.subjects = len(st.per_subject)
    st.objects = len(needed)
    st.unique_bytes = sum(index[o].raw_len for o in needed)
    st.stored_bytes = sum(index[o].stored_len for o in needed)
    st.unreferenced_bytes = sum(e.stored_len for o, e in index.items() if o not in needed)
    for subject, objs in per_subject_objects.items():
        sub = st.per_subject[subject]
        sub.objects = len(objs)
        sub.unique_bytes = sum(index[o].raw_len for o in objs)
        sub.stored_bytes = sum(index[o].stored_len for o in objs)
    return st

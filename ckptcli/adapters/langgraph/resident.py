"""What the LangGraph saver holds in memory: its checkpoints (`Entry`), their channel
values (`Blob`), list values as item logs shared by every version that is a prefix of
them (`ItemLog`), and the objects made since the last commit (`Staging`).

An entry is LEAF (put; its pending writes may still come), SEALED (its manifest made,
queued for the committer) or COMMITTED (in the store; its record and values may be
dropped from memory, `unload`, and read back when used again).
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from typing import Any

from ckptcli.adapters.langgraph.layout import MSGPACK, Typed, Write
from ckptcli.format.values import ListTree, array_header
from ckptcli.store.repository import Store

__all__ = [
    "COMMITTED", "EMPTY", "LEAF", "MISSING", "SEALED", "Blob", "Blobs", "ByThread", "Entry", "ItemLog", "StagedSource", "Staging",
    "copy_log", "evict", "trim", "unload",
]  # fmt: skip

LEAF, SEALED, COMMITTED = 0, 1, 2
MISSING = object()
RECENT_NAMESPACES = 4  # a thread in use keeps the newest values of this many subgraph namespaces in memory


class ItemLog:
    """The items of a list channel value, shared by every version that is a prefix of it:
    each item's msgpack bytes, the Python object last seen there (to tell unchanged
    items by identity), its ckpt EV, and the chunk trees of the items and their tool
    records, kept up to date as the log grows."""

    __slots__ = ("__weakref__", "evs", "fp", "objs", "raw", "tool_count", "tools", "tree")

    def __init__(self) -> None:
        self.fp: bytes | None = None  # the fingerprint of objs, all of them (`fingerprint`)
        self.raw: list[bytes] = []
        self.objs: list[Any] = []
        self.evs: list[bytes] = []
        self.tree = ListTree()
        self.tools = ListTree()
        self.tool_count: list[int] = []  # tool records of items[: i + 1]

    def __len__(self) -> int:
        return len(self.raw)


class Blob:
    """One channel value at one version: serialized bytes, or items [0, n) of a log."""

    __slots__ = ("ev", "log", "n", "tools_ev", "typed")

    def __init__(self, typed: Typed | None = None, log: ItemLog | None = None, n: int = 0) -> None:
        self.typed = typed
        self.log = log
        self.n = n
        self.ev: bytes | None = None
        self.tools_ev: bytes | None = None

    @property
    def empty(self) -> bool:
        return self.typed is None and self.log is None

    def to_typed(self) -> Typed:
        if self.log is not None:
            return MSGPACK, array_header(self.n) + b"".join(self.log.raw[: self.n])
        assert self.typed is not None
        return self.typed


EMPTY = Blob()


class Entry:
    """One LangGraph checkpoint the saver knows: in memory, or committed (and then read
    from the store when needed)."""

    __slots__ = (
        "blobs_loaded", "committed", "committed_rev", "created_ns", "has_child", "key", "loaded", "manifest", "md_plain", "md_view",
        "metadata", "parent", "prepared", "rev", "seq", "skeleton", "state", "touched", "types", "versions", "writes",
    )  # fmt: skip

    def __init__(self, key: tuple[str, str, str], parent: str | None, seq: int) -> None:
        self.key = key
        self.parent = parent
        self.seq = seq  # creation order (parents before children)
        self.created_ns = 0
        self.skeleton: Typed | None = None
        self.metadata: Typed | None = None
        self.versions: dict[str, Any] = {}
        self.types: dict[str, str] | None = None  # of its channel values, once read back from the store
        self.writes: dict[tuple[str, int], Write] = {}
        self.state = LEAF
        self.manifest: bytes | None = None  # the id of the newest revision sealed
        self.committed: bytes | None = None  # the id of the newest revision committed
        self.committed_rev = 0
        self.rev = 0
        self.loaded = True  # False: committed, its data still in the store only
        self.blobs_loaded = False
        self.md_plain: Any = MISSING
        self.touched = time.monotonic()
        self.has_child = False
        self.prepared: dict[str, bytes] | None = None  # its sections but events, made when it is put
        self.md_view: Any = None


def unload(e: Entry) -> None:
    """Forget what a committed checkpoint's record and values are (`Readback.load` reads them back
    from the store when next needed): memory, and objects the garbage collector no longer
    walks on each of its full passes, follow a thread's newest state, not its history."""
    e.skeleton = e.metadata = e.prepared = e.md_view = None
    e.md_plain = MISSING
    e.versions, e.writes = {}, {}
    e.loaded = e.blobs_loaded = False


class Staging:
    """The objects made since the last commit (a sink for the encoders): kept until
    the committer has them in a pack, deduplicated against the store and each other."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.objects: dict[bytes, tuple[int, bytes]] = {}
        self.inflight: dict[bytes, tuple[int, bytes]] = {}
        #: False while the saver collects the store's garbage (`ThreadOps.collect`): an
        #: object the store has now may be one that goes, so it is staged again (the
        #: commit, after the collection, writes it only if it went)
        self.dedupe = True

    def put(self, oid: bytes, content: bytes, obj_type: int) -> None:
        if oid in self.objects or oid in self.inflight or (self.dedupe and self.store.has(oid)):
            return
        self.objects[oid] = (obj_type, content)


def copy_log(log: ItemLog, n: int) -> ItemLog:
    """A new log of the first `n` items of `log` (which went on along another branch)."""
    new = ItemLog()
    new.raw, new.objs, new.evs = log.raw[:n], log.objs[:n], log.evs[:n]
    new.tree.extend(new.evs)
    new.tools.extend(log.tools.items[: log.tool_count[n - 1] if n else 0])
    new.tool_count = log.tool_count[:n]
    return new


# -- the resident threads: memory follows the threads in use and their newest states ----------------
Blobs = dict[tuple[str, str, str, Any], Blob]  # (thread, ns, channel, version) -> value
ByThread = dict[str, dict[str, dict[str, Entry]]]  # thread -> ns -> checkpoint id -> entry


def evict(
    used: OrderedDict[str, None],
    busy: set[str],
    resident: int,
    by_thread: ByThread,
    blobs: Blobs,
    sub_objs: dict[str, weakref.WeakSet[ItemLog]],
) -> int:
    """Drop the least recently used threads of `used` beyond `resident`, but not those of
    `busy` (checkpoints not committed), from memory; returns how many. Their entries
    become what opening the store makes (committed, read on demand), their values are
    forgotten: the next use reads them back (`Readback`)."""
    drop = [t for t in used if t not in busy][: len(used) - resident]
    if not drop:
        return 0
    gone = set(drop)
    for t in drop:
        del used[t]
        for ids in by_thread.get(t, {}).values():
            for e in ids.values():
                unload(e)
    for bkey in [b for b in blobs if b[0] in gone]:
        del blobs[bkey]
    for t in drop:
        sub_objs.pop(t, None)
    return len(drop)


def trim(threads: set[str], by_thread: ByThread, blobs: Blobs) -> None:
    """Forget the values of the committed checkpoints of `threads` that the next puts do
    not build on: a thread in use keeps in memory the values of its newest checkpoint of
    the root namespace and of the few namespaces (subgraphs) used last, of what is not
    committed and of their parents; the others are read back from the store when read
    (as an evicted thread's are). So a long thread's memory follows its newest state,
    not its whole history (a subgraph's namespaces each had their own copy of the
    messages, kept for good)."""
    keep: set[tuple[str, str, str, Any]] = set()
    for thread in threads:
        by_ns = by_thread.get(thread, {})
        newest = {ns: max(ids.values(), key=lambda e: e.seq) for ns, ids in by_ns.items() if ids}
        recent = {"", *sorted(newest, key=lambda ns: newest[ns].seq)[-RECENT_NAMESPACES:]}
        for ns, ids in by_ns.items():
            if not ids:
                continue
            heads = [newest[ns]] if ns in recent else []
            opened = [e for e in ids.values() if e.state != COMMITTED]
            heads += opened + [p for p in (ids.get(h.parent) for h in opened if h.parent) if p is not None]
            for h in heads:
                keep.update((h.key[0], h.key[1], ch, ver) for ch, ver in h.versions.items())
            for e in ids.values():
                if e.state == COMMITTED and e not in heads:
                    unload(e)
    for bkey in [b for b in blobs if b[0] in threads and b not in keep]:
        del blobs[bkey]


class StagedSource:
    """Objects of the store and of a saver's staging area (EVs not committed yet)."""

    def __init__(self, staging: Staging) -> None:
        self.staging = staging

    def get(self, oid: bytes) -> bytes:
        staging = self.staging
        got = staging.objects.get(oid) or staging.inflight.get(oid)
        if got is not None:
            return got[1]
        return staging.store.get(oid)

    def has(self, oid: bytes) -> bool:
        staging = self.staging
        return oid in staging.objects or oid in staging.inflight or staging.store.has(oid)

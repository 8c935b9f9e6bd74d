"""What a LangGraph thread needs kept when some of its checkpoints are pruned, and thread TTLs.

Besides what a retention policy keeps, a thread keeps (docs/langgraph.md, "Prune and delete"):
its live heads (the newest root checkpoint and the newest of each live subgraph
namespace); for each kept checkpoint, its parents back to the one that stores each delta
channel it does not store (``counters_since_delta_snapshot``); and the newest revision
(``langgraph.rev``) of every LangGraph checkpoint it keeps.

`retain` applies these rules to a store for `ckpt prune` (entry-point group
``ckptcli.retention``, name ``langgraph``); `CkptSaver.prune` applies the same rules
(`needed`) to what it holds. `TTL` / `effective_ttl`: a thread whose last write is older
than its TTL is deleted or cut down to what it resumes from (docs/langgraph.md, "Thread
TTL"). Imports nothing of LangGraph."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ckptcli.adapters.langgraph import layout
from ckptcli.errors import CkptError, InvalidInputError
from ckptcli.format import limits
from ckptcli.format.manifest import Manifest
from ckptcli.format.values import EXT_MAP, EXT_REF, Decoder, Ext, unpack_ev
from ckptcli.store.repository import Store

Key3 = tuple[str, str, str]  # (thread, namespace, checkpoint id)
DELTA_COUNTERS = "counters_since_delta_snapshot"  # LangGraph's metadata key (langgraph.checkpoint.base)
NS_SEP = "|"  # langgraph.constants.NS_SEP: nested subgraph namespaces


TTL_STRATEGIES = ("delete", "keep_latest")
_TTL_KEYS = ("strategy", "default_ttl", "sweep_interval_minutes", "sweep_limit")


@dataclass(frozen=True)
class TTL:
    """A thread time-to-live (the module docstring). Times in seconds."""

    ttl_s: float
    strategy: str = "delete"
    sweep_interval_s: float = 300.0
    sweep_limit: int = 1000

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> TTL:
        """The TTL of a ``langgraph.json``-style mapping: ``{"strategy": "delete" |
        "keep_latest", "default_ttl": minutes, "sweep_interval_minutes": minutes (5),
        "sweep_limit": threads per sweep (1000)}``.

        Raises:
            InvalidInputError naming the key that is wrong and what it takes.
        """
        if not isinstance(config, Mapping):
            raise InvalidInputError(f"ttl must be a mapping such as {{'default_ttl': 43200}}, not {type(config).__name__}")
        unknown = sorted(str(k) for k in config if k not in _TTL_KEYS)
        if unknown:
            raise InvalidInputError(f"ttl has an unknown key {unknown[0]!r}", hint=f"use {', '.join(_TTL_KEYS)}")
        strategy = config.get("strategy", "delete")
        if strategy not in TTL_STRATEGIES:
            raise InvalidInputError(f"ttl strategy must be 'delete' or 'keep_latest', not {strategy!r}")

        def minutes(key: str, default: float | None) -> float:
            value = config.get(key, default)
            if value is None:
                raise InvalidInputError(
                    f"ttl needs {key!r}: the minutes after a thread's last write when it expires",
                    hint="e.g. ttl={'default_ttl': 43200} (30 days)",
                )
            if type(value) not in (int, float) or not value > 0 or value == float("inf"):
                raise InvalidInputError(f"ttl {key!r} must be a positive number of minutes, not {value!r}")
            return float(value) * 60

        limit = config.get("sweep_limit", 1000)
        if type(limit) is not int or limit < 1:
            raise InvalidInputError(f"ttl 'sweep_limit' must be an integer >= 1, not {limit!r}")
        return cls(minutes("default_ttl", None), strategy, minutes("sweep_interval_minutes", 5), limit)


def effective_ttl(own: tuple[float, str | None] | None, ttl_s: float, strategy: str) -> tuple[float | None, str]:
    """A thread's TTL in seconds (None: it never expires) and strategy: its own
    (`langgraph_layout.thread_ttl` of its newest checkpoint that has one), else the default."""
    if own is None:
        return ttl_s, strategy
    minutes, own_strategy = own
    return (minutes * 60 if minutes > 0 else None), own_strategy or strategy


def parent_ns(ns: str) -> str:
    return ns.rsplit(NS_SEP, 1)[0] if NS_SEP in ns else ""


def live_heads(keys: Iterable[Key3]) -> dict[Key3, str]:
    """The checkpoints each thread resumes from (see the module docstring), with why."""
    newest: dict[tuple[str, str], str] = {}
    for thread, ns, cid in keys:
        if cid > newest.get((thread, ns), ""):
            newest[(thread, ns)] = cid
    out: dict[Key3, str] = {}

    def live(thread: str, ns: str) -> bool:
        if ns == "":
            return (thread, "") in newest
        up = parent_ns(ns)
        return (thread, up) in newest and newest[(thread, ns)] > newest[(thread, up)] and live(thread, up)

    for (thread, ns), cid in newest.items():
        if live(thread, ns):
            out[(thread, ns, cid)] = "LangGraph resumes from it" if ns == "" else f"LangGraph resumes subgraph {ns.split(':')[0]} from it"
    return out


def needed(
    kept: Iterable[Key3],
    parent: Callable[[Key3], str | None],
    rebuilt: Callable[[Key3], set[str]],
    stored: Callable[[Key3], set[str]],
) -> dict[Key3, str]:
    """The checkpoints that `kept` ones rebuild delta channels from, with why (rule 2).

    Args:
        kept: checkpoints that stay.
        parent: a checkpoint's parent id (same thread and namespace), None at the root or
            when the checkpoint is not there.
        rebuilt: the delta channels a checkpoint does not store (its parents' are replayed).
        stored: the channels a checkpoint stores a value of.
    Returns:
        checkpoints not in `kept` that must stay, each with the reason.
    """
    keep = set(kept)
    out: dict[Key3, str] = {}
    walked: dict[Key3, set[str]] = {}  # channels already followed up from a checkpoint
    for start in sorted(keep):
        gaps = set(rebuilt(start))
        thread, ns, cid = start
        pid = parent(start)
        while gaps and pid is not None:
            cur = (thread, ns, pid)
            seen = walked.setdefault(cur, set())
            if gaps <= seen:
                break  # an earlier walk went on from here with these channels already
            seen |= gaps
            if cur not in keep and cur not in out:
                out[cur] = f"delta channel {', '.join(sorted(gaps))} of {cid} is rebuilt from it"
            gaps -= stored(cur)
            pid = parent(cur)
    return out


# -- in a store, for `ckpt prune` ------------------------------------------------------------------
def retain(store: Store, manifests: Mapping[bytes, Manifest], keep: set[bytes]) -> dict[bytes, str]:
    """Checkpoints of `manifests` not in `keep` that the LangGraph threads of the kept
    ones need (the module docstring), with why. Reads the ``ext:langgraph`` section of
    the checkpoints it looks at, and the channel names of their ``memory`` section."""
    revs: dict[Key3, list[tuple[int, int, bytes]]] = {}
    for mid, m in manifests.items():
        k = layout.key_of(m.subject, m.labels)
        if k is not None:
            revs.setdefault((k.thread_id, k.ns, k.checkpoint_id), []).append((k.rev, m.created_ns, mid))
    if not revs:
        return {}
    newest = {key: max(rs)[2] for key, rs in revs.items()}
    # a thread that loses nothing needs nothing kept for it (a TTL or a wide policy
    # keeps most threads whole: their checkpoints are not read)
    losing = {key[0] for key, rs in revs.items() if any(mid not in keep for _r, _c, mid in rs)}
    kept_keys = {key for key, rs in revs.items() if key[0] in losing and any(mid in keep for _r, _c, mid in rs)}
    threads = {key[0] for key in kept_keys}
    extra: dict[Key3, str] = {key: why for key, why in live_heads(k for k in revs if k[0] in threads).items() if key not in kept_keys}
    info: dict[Key3, tuple[set[str], set[str]]] = {}

    def read(key: Key3) -> tuple[set[str], set[str]]:
        got = info.get(key)
        if got is None:
            got = info[key] = _delta_info(store, manifests[newest[key]], newest[key])
        return got

    def parent(key: Key3) -> str | None:
        mid = newest.get(key)
        pid = manifests[mid].labels.get(layout.LABEL_PARENT) if mid is not None else None
        return pid if pid is not None and (key[0], key[1], pid) in newest else None

    extra.update(needed(kept_keys | set(extra), parent, lambda k: read(k)[0], lambda k: read(k)[1]))
    out: dict[bytes, str] = {}
    for key in kept_keys:
        if newest[key] not in keep:
            out[newest[key]] = "the newest revision of a kept LangGraph checkpoint"
    for key, why in extra.items():
        out.setdefault(newest[key], why)
    return out


@contextlib.contextmanager
def hold_threads(store: Store, manifests: Mapping[bytes, Manifest], subjects: set[str], renew: bool = True) -> Iterator[set[str]]:
    """Hold the leases of the LangGraph threads of `subjects` for `ckpt prune`
    (`langgraph_leases.hold_threads`); yields the subjects in use, which must be left alone."""
    from ckptcli.adapters.langgraph.leases import hold_threads as hold

    threads: dict[str, str] = {}
    for m in manifests.values():
        subj = str(m.subject)
        if subj in subjects:
            k = layout.key_of(m.subject, m.labels)
            if k is not None:
                threads[k.thread_id] = subj
    from ckptcli.adapters.langgraph.hostdir import local_root

    # a remote store's: the leases of the savers of this host (hostdir.py; none made here)
    root = local_root(store, create=False)
    if root is None:
        yield set()
        return
    with hold(root, threads, renew) as (_held, in_use):
        yield {threads[t] for t in in_use}


def _delta_info(store: Store, m: Manifest, mid: bytes) -> tuple[set[str], set[str]]:
    """(delta channels the checkpoint rebuilds, channels it stores). A checkpoint whose
    records cannot be read (damaged; or written by a serializer that is not msgpack)
    counts as rebuilding none: verify reports damage; prune does not guess."""
    if layout.EXT_SECTION not in m.sections or "memory" not in m.sections:
        return set(), set()
    where = f"checkpoint {mid.hex()[:12]}"
    try:
        ext = Decoder(store).decode(m.sections[layout.EXT_SECTION], f"{where} section {layout.EXT_SECTION}")
        have = map_keys(store, m.sections["memory"], f"{where} section memory")
    except CkptError:
        return set(), set()
    if type(ext) is not dict:
        return set(), have
    md, skel = ext.get("metadata"), ext.get("checkpoint")
    counters = md.get(DELTA_COUNTERS) if type(md) is dict else None
    versions: Any = skel.get("channel_versions") if type(skel) is dict else None
    if type(versions) is not dict:
        versions = ext.get("versions")
    if type(versions) is not dict:
        versions = {}
    if type(counters) is not dict:
        return set(), have
    return {ch for ch in counters if type(ch) is str and ch in versions and ch not in have}, have


def map_keys(store: Store, ev: bytes, where: str) -> set[str]:
    """The keys of the map an EV holds, without decoding its values."""
    dec = Decoder(store)
    raw: Any = unpack_ev(ev, where)
    for _hop in range(limits.MAX_DEPTH):
        if type(raw) is Ext and raw.code == EXT_REF:
            raw = unpack_ev(store.get(raw.oid), f"{where} object {raw.oid.hex()[:12]}")
            continue
        if type(raw) is Ext and raw.code == EXT_MAP:
            return {str(k) for k, _v in dec.tree_items(raw.oid, EXT_MAP)}
        break
    return {str(k) for k in raw} if type(raw) is dict else set()

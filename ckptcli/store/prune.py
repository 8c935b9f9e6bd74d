"""Retention policies (which checkpoints to keep) and garbage collection (which objects no
kept checkpoint needs): `prune`, and its two halves `forget_checkpoints` (remove given
checkpoints' manifests and move their refs, leaving their objects) and `collect`.

The policy (keep-last, calendar rules, keep-within, keep-tag, LangGraph thread TTLs) is
documented with `ckpt prune` (docs/cli.md) and docs/langgraph.md ("Prune and delete");
each adapter whose checkpoints are present adds what the kept ones need through its hook
in the entry-point group ``ckptcli.retention``. A survivor's reasons are recorded for
`--dry-run`.

Invariants: tags and branch heads are never removed, nor checkpoints their reflog still
reaches (formats/reflog.md, "Expiry"); threads a live LangGraph saver holds are left alone.
A prune holds the store lock exclusively throughout and writes in the order of formats/v1.md
("Concurrency", "Deleting (prune)"), so a crash anywhere loses nothing a kept checkpoint needs."""

from __future__ import annotations

import contextlib
import functools
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any, Protocol, cast

from ckptcli import plugins
from ckptcli.errors import CkptError, UsageError
from ckptcli.format.manifest import Manifest, Subject, head_order
from ckptcli.format.walk import WalkResult, walk_checkpoint
from ckptcli.progress import NULL, Progress
from ckptcli.store import catalog, layout, reflog, repack
from ckptcli.store.backend import Mark
from ckptcli.store.index import write_index as write_index  # 0.2 name, kept for one minor release
from ckptcli.store.pack import pack_version as pack_version  # 0.2 name, kept for one minor release
from ckptcli.store.repack import GcReport as GcReport
from ckptcli.store.repack import RepackPlan
from ckptcli.store.repack import upgrade_packs as upgrade_packs
from ckptcli.store.repository import Store


#: calendar rules: name -> bucket key of a local time
def _week(t: datetime) -> str:
    year, week, _day = t.isocalendar()
    return f"{year:04d}-W{week:02d}"


_BUCKETS: dict[str, Callable[[datetime], str]] = {
    "hourly": lambda t: t.strftime("%Y-%m-%d %H:00"),
    "daily": lambda t: t.strftime("%Y-%m-%d"),
    "weekly": _week,
    "monthly": lambda t: t.strftime("%Y-%m"),
    "yearly": lambda t: t.strftime("%Y"),
}


@dataclass
class Policy:
    keep_last: int = 0
    keep_hourly: int = 0
    keep_daily: int = 0
    keep_weekly: int = 0
    keep_monthly: int = 0
    keep_yearly: int = 0
    keep_within_s: int | None = None
    keep_tags: list[str] = field(default_factory=list)
    tz: tzinfo | None = None  # calendar buckets in this zone (None: local time)
    langgraph_ttl_s: int | None = None  # expire LangGraph threads idle for longer (module docstring)
    langgraph_ttl_strategy: str = "delete"  # or "keep_latest"
    reflog_expire_s: int = reflog.EXPIRE_S  # reflog entries older than this are trimmed and keep nothing
    reflog_max_entries: int = reflog.MAX_ENTRIES  # per ref, the newest

    def empty(self) -> bool:
        return self.keeps_nothing() and self.langgraph_ttl_s is None

    def keeps_nothing(self) -> bool:
        """No --keep-* rule (a TTL alone keeps what it does not expire)."""
        counts = (self.keep_last, self.keep_hourly, self.keep_daily, self.keep_weekly, self.keep_monthly, self.keep_yearly)
        return not any(counts) and self.keep_within_s is None and not self.keep_tags

    def check(self) -> None:
        for name in ("keep_last", "keep_hourly", "keep_daily", "keep_weekly", "keep_monthly", "keep_yearly"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must not be negative")
        if self.keep_within_s is not None and self.keep_within_s < 0:
            raise UsageError("--keep-within must not be negative")
        if self.langgraph_ttl_s is not None and self.langgraph_ttl_s < 0:
            raise UsageError("--langgraph-ttl must not be negative")
        if self.langgraph_ttl_strategy not in ("delete", "keep_latest"):
            raise UsageError(f"--langgraph-ttl-strategy must be delete or keep_latest, not {self.langgraph_ttl_strategy!r}")
        if self.reflog_expire_s < 0:
            raise UsageError("--reflog-expire must not be negative")
        if self.reflog_max_entries < 1:
            raise UsageError("the reflog must keep at least one entry per ref")


@dataclass
class Decision:
    id: bytes
    subject: str
    created_ns: int
    keep: bool
    reasons: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id.hex(), "subject": self.subject, "created_ns": self.created_ns, "keep": self.keep, "reasons": self.reasons}


@dataclass
class PruneReport:
    decisions: list[Decision]
    dry_run: bool
    gc: GcReport | None = None
    refs_moved: dict[str, str | None] = field(default_factory=dict)
    expired: dict[str, int] = field(default_factory=dict)  # LangGraph threads the TTL expired: subject -> idle seconds
    in_use: list[str] = field(default_factory=list)  # expired, but a saver holds them: left alone
    expired_strategy: dict[str, str] = field(default_factory=dict)  # what the expired ones lose: delete or keep_latest
    reflog_dropped: int = 0  # reflog entries expired (or beyond the cap): trimmed, or to be
    reflog_logs: int = 0  # the logs they were in

    @property
    def removed(self) -> list[Decision]:
        return [d for d in self.decisions if not d.keep]

    @property
    def kept(self) -> list[Decision]:
        return [d for d in self.decisions if d.keep]

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "kept": len(self.kept),
            "removed": len(self.removed),
            "checkpoints": [d.to_dict() for d in self.decisions],
            "refs_moved": self.refs_moved,
            "expired": self.expired,
            "in_use": self.in_use,
            "expired_strategy": self.expired_strategy,
            "reflog_expired": {"entries": self.reflog_dropped, "logs": self.reflog_logs},
            "gc": self.gc.to_dict() if self.gc else None,
        }


def decide(
    manifests: dict[bytes, Manifest],
    policy: Policy,
    protected: dict[bytes, list[str]],
    subjects: Iterable[str] | None = None,
    now_ns: int | None = None,
    expired: dict[str, int] | None = None,
    in_use: set[str] | frozenset[str] = frozenset(),
    strategy_of: dict[str, str] | None = None,
) -> list[Decision]:
    """Apply `policy` to every subject's checkpoints (only `subjects`, when given).
    `protected` maps checkpoint ids to the refs that keep them whatever the policy.
    The TTL is measured at `now_ns` (now); the threads it expires are added to
    `expired` (subject -> idle seconds), but for those `in_use`, and their strategy
    (a thread's own, or the policy's) to `strategy_of`."""
    now = time.time_ns() if now_ns is None else now_ns
    wanted = set(subjects) if subjects is not None else None
    groups: dict[str, list[tuple[bytes, Manifest]]] = defaultdict(list)
    for cid, m in manifests.items():
        subj = str(m.subject)
        if wanted is None or subj in wanted:
            groups[subj].append((cid, m))
    out: list[Decision] = []
    for subj in sorted(groups):
        items = sorted(groups[subj], key=lambda it: (it[1].created_ns, it[0]), reverse=True)
        newest = items[0][1].created_ns
        last_bucket: dict[str, str] = {}
        left = {rule: getattr(policy, f"keep_{rule}") for rule in _BUCKETS}
        for n, (cid, m) in enumerate(items):
            reasons: list[str] = []
            if n < policy.keep_last:
                reasons.append(f"last {policy.keep_last}")
            when = (
                datetime.fromtimestamp(m.created_ns / 1e9, policy.tz)
                if policy.tz
                else datetime.fromtimestamp(m.created_ns / 1e9).astimezone()
            )
            for rule, key_of in _BUCKETS.items():
                key = key_of(when)
                if left[rule] > 0 and last_bucket.get(rule) != key:
                    last_bucket[rule] = key
                    left[rule] -= 1
                    reasons.append(f"{rule} {key}")
            if policy.keep_within_s is not None and newest - m.created_ns <= policy.keep_within_s * 1_000_000_000:
                reasons.append(f"within {_fmt_age(policy.keep_within_s)} of the newest")
            for tag in policy.keep_tags:
                if f"tags/{tag}" in protected.get(cid, []) or _has_label(m, tag):
                    reasons.append(f"tag {tag}")
            if policy.keeps_nothing():
                if policy.langgraph_ttl_s is None or not _is_langgraph(m):
                    reasons.append("no --keep-* rule")
                else:
                    reasons.append("expired, but a running saver holds it" if subj in in_use else "not expired")
            reasons.extend(protected.get(cid, []))
            out.append(Decision(cid, subj, m.created_ns, bool(reasons), reasons))
        if policy.langgraph_ttl_s is None or subj in in_use or not any(_is_langgraph(m) for _c, m in items):
            continue
        labels = (m.labels for _c, m in items)  # newest first: the newest one's own TTL counts
        ttl, strategy = _langgraph_expiry().ttl(labels, policy.langgraph_ttl_s, policy.langgraph_ttl_strategy)
        idle_s = (now - newest) // 1_000_000_000
        if ttl is not None and idle_s > ttl:
            if expired is not None:
                expired[subj] = idle_s
            if strategy_of is not None:
                strategy_of[subj] = strategy
            for n, d in enumerate(out[len(out) - len(items) :]):
                d.reasons = list(protected.get(d.id, []))
                if n == 0 and strategy == "keep_latest":
                    d.reasons.insert(0, "the newest of an expired thread")
                d.keep = bool(d.reasons)
    return out


#: the reasons of moves that keep nothing they leave (`reflog_keeps`), up to a colon
_HISTORY_MOVES = frozenset({"take", "import", "prune", "repair refs"})


def reflog_keeps(trimmed: list[reflog.Trimmed], manifests: dict[bytes, Manifest], cutoff_ns: int, expire_s: int) -> dict[bytes, str]:
    """The checkpoints only the reflog reaches, with why they stay: each that an
    unexpired entry moved a ref away from without going on from it (the new target is
    not a descendant: a reset back, a move sideways, a migration of an older checkpoint
    made latest, a tag moved or deleted, a branch deleted), until that entry expires.
    A ref's moves forward (a take) keep nothing: the checkpoints they leave behind are
    the ref's history, which the policy prunes; so do the moves of takes and imports
    whatever their parents (a take that found latest moved by a concurrent take of the
    same subject leaves a sibling behind: history too), of prune itself and of `ckpt
    repair refs` (to a newer dangling head). A ref's newest entry outlives the expiry
    (`reflog.trim`), but an expired one keeps nothing (formats/reflog.md, "Expiry")."""
    ancestry: dict[bytes, set[bytes]] = {}

    def descends(new: bytes, old: bytes) -> bool:
        m = manifests.get(new)
        if m is not None and old in m.parents:
            return True  # a take: the common case, no walk
        if new not in ancestry:
            seen: set[bytes] = set()
            todo = [new]
            while todo:
                cid = todo.pop()
                if cid in seen:
                    continue
                seen.add(cid)
                if (pm := manifests.get(cid)) is not None:
                    todo.extend(pm.parents)
            ancestry[new] = seen
        return old in ancestry[new]

    out: dict[bytes, str] = {}
    for t in trimmed:
        for e in reversed(t.kept):  # newest first: the reason names the newest move away
            if e.old is None or e.old == e.new or e.time_ns < cutoff_ns or e.reason.split(":", 1)[0] in _HISTORY_MOVES:
                continue
            old = bytes.fromhex(e.old)
            if old not in manifests or old in out or (e.new is not None and descends(bytes.fromhex(e.new), old)):
                continue
            day = time.strftime("%Y-%m-%d", time.gmtime(e.time_ns // 1_000_000_000))
            until = time.strftime("%Y-%m-%d", time.gmtime(e.time_ns // 1_000_000_000 + expire_s))
            out[old] = f"reflog {t.ref}: moved off it {day} ({e.reason}), until {until}"
    return out


def _is_langgraph(m: Manifest) -> bool:
    """A checkpoint the LangGraph saver wrote (its layout names the ``langgraph`` ext namespace)."""
    ext = m.layout.get("ext")
    return type(ext) is list and "langgraph" in ext


RETENTION_GROUP = plugins.RETENTION
#: an adapter's hook: (store, every manifest, the ids kept so far) -> {id to keep as well: why}
RetentionHook = Callable[[Store, dict[bytes, Manifest], set[bytes]], dict[bytes, str]]


class ExpiryHook(Protocol):
    """An adapter's expiry of its subjects (entry-point group `ckptcli.expiry`; the
    LangGraph one: ckptcli.adapters.langgraph.plugins.Expiry)."""

    def ttl(self, labels: Iterable[Mapping[str, str]], default_s: float, default_strategy: str) -> tuple[float | None, str]:
        """(TTL in seconds or None: never, strategy) of a subject whose checkpoints'
        labels are `labels`, newest first."""
        ...

    def hold(
        self, store: Store, manifests: Mapping[bytes, Manifest], subjects: set[str], renew: bool = True
    ) -> contextlib.AbstractContextManager[set[str]]:
        """Hold `subjects` while they are pruned; yields those in use, to be left alone."""
        ...


@functools.cache
def _langgraph_expiry() -> ExpiryHook:
    """The LangGraph adapter's expiry hook, for `Policy.langgraph_ttl_s`."""
    found = plugins.load(plugins.EXPIRY, ["langgraph"])
    if not found:
        raise UsageError(
            f"--langgraph-ttl needs the LangGraph adapter's entry point `langgraph` in the group {plugins.EXPIRY}, which is not installed",
            hint="reinstall ckptcli: its entry points are registered when it is installed",
        )
    return cast(ExpiryHook, found[0][1])


def keep_what_adapters_need(store: Store, manifests: dict[bytes, Manifest], decisions: list[Decision]) -> None:
    """Keep, among `decisions`, what the adapters say the kept checkpoints need: the
    hook of each ext namespace the decided checkpoints' layouts name (entry-point group
    `ckptcli.retention`), until nothing more is added."""
    names: set[str] = set()
    for d in decisions:
        ext = manifests[d.id].layout.get("ext")
        if type(ext) is list:
            names.update(n for n in ext if type(n) is str)
    if not names:
        return  # nothing an adapter owns: no entry point is looked up
    hooks: list[RetentionHook] = [hook for _name, hook in plugins.load(RETENTION_GROUP, names)]
    by_id = {d.id: d for d in decisions}
    changed = bool(hooks)
    while changed:  # a hook's additions may need more of another's
        changed = False
        for hook in hooks:
            for cid, why in hook(store, manifests, {d.id for d in decisions if d.keep}).items():
                found = by_id.get(cid)
                if found is not None and not found.keep:
                    found.keep, changed = True, True
                    found.reasons.append(why)


def _has_label(m: Manifest, tag: str) -> bool:
    key, eq, value = tag.partition("=")
    return key in m.labels and (not eq or m.labels[key] == value)


def _fmt_age(seconds: int) -> str:
    for unit, n in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % n == 0:
            return f"{seconds // n}{unit}"
    return f"{seconds}s"


def prune(
    store: Store,
    policy: Policy,
    *,
    subjects: list[str] | None = None,
    dry_run: bool = False,
    allow_remove_all: bool = False,
    max_unused: float = 0.1,
    lock_wait: float = 300.0,
    progress: Progress = NULL,
    now_ns: int | None = None,
    writer: Mark | None = None,
) -> PruneReport:
    """Remove the checkpoints `policy` does not keep, then the objects no kept
    checkpoint needs. Raises UsageError for an empty policy, or when a subject would
    lose every checkpoint and `allow_remove_all` is not set (a thread the TTL deletes
    is meant to); LockError when takes keep the store busy for longer than `lock_wait`
    seconds. `now_ns`: when the TTL is measured (now). While a writer other than
    `writer` (the caller's own mark) is alive, the checkpoints go and their objects stay
    (`GcReport.writers_alive`)."""
    policy.check()
    if policy.empty():
        raise UsageError("no retention policy given", hint="give at least one --keep-* option, e.g. --keep-last 10, or --langgraph-ttl")
    with store.backend.lock("store", shared=False, wait=lock_wait):
        manifests = {cid: store.manifest(cid) for cid in store.manifest_ids()}
        refs = store.refs(strict=True)  # a damaged ref could be a tag that protects a checkpoint
        protected: dict[bytes, list[str]] = defaultdict(list)
        for name, target in refs.items():
            if name.startswith(("tags/", "branches/")):
                protected[target].append(name)
        now = time.time_ns() if now_ns is None else now_ns
        cutoff = now - policy.reflog_expire_s * 1_000_000_000
        with store.ref_lock(lock_wait):  # what the reflog keeps, once expired
            trimmed = reflog.expire(store.backend, cutoff_ns=cutoff, max_entries=policy.reflog_max_entries, dry_run=True, warn=store.warn)
        for cid, why in reflog_keeps(trimmed, manifests, cutoff, policy.reflog_expire_s).items():
            protected[cid].append(why)
        expired: dict[str, int] = {}
        strategy_of: dict[str, str] = {}
        decisions = decide(manifests, policy, protected, subjects, now_ns, expired, strategy_of=strategy_of)
        with contextlib.ExitStack() as leases:  # the expired threads' leases, until they are pruned
            in_use: list[str] = []
            if expired:
                hold = _langgraph_expiry().hold(store, manifests, set(expired), renew=not dry_run)
                in_use = sorted(leases.enter_context(hold))
                if in_use:
                    expired.clear()
                    decisions = decide(manifests, policy, protected, subjects, now_ns, expired, set(in_use), strategy_of)
            keep_what_adapters_need(store, manifests, decisions)
            if not allow_remove_all:
                by_subject: dict[str, bool] = defaultdict(bool)
                for d in decisions:
                    by_subject[d.subject] |= d.keep or (d.subject in expired and strategy_of.get(d.subject) == "delete")
                emptied = sorted(s for s, any_kept in by_subject.items() if not any_kept)
                if emptied:
                    raise UsageError(
                        f"the policy keeps no checkpoint of {', '.join(emptied)}",
                        hint="check the --keep-* options, or pass --allow-remove-all to remove them all",
                    )
            report = PruneReport(decisions, dry_run, expired=expired, in_use=in_use, expired_strategy=strategy_of)
            report.reflog_dropped = sum(t.dropped for t in trimmed)
            report.reflog_logs = sum(1 for t in trimmed if t.dropped)
            removed = {d.id for d in decisions if not d.keep}
            if dry_run:
                return report
            with store.ref_lock(lock_wait):  # read again: a ref may have moved since
                trimmed = reflog.expire(
                    store.backend, cutoff_ns=cutoff, max_entries=policy.reflog_max_entries, warn=store.warn, exclusive=True
                )
            report.reflog_dropped = sum(t.dropped for t in trimmed)
            report.reflog_logs = sum(1 for t in trimmed if t.dropped)
            report.gc, report.refs_moved = _remove(store, manifests, refs, removed, max_unused, progress, writer)
            return report


def remove_checkpoints(
    store: Store,
    ids: Iterable[bytes],
    *,
    max_unused: float = 0.1,
    lock_wait: float = 300.0,
    progress: Progress = NULL,
    writer: Mark | None = None,
) -> GcReport:
    """Remove exactly these checkpoints, then the objects no other checkpoint needs
    (`forget_checkpoints`, then `collect`). Ids not in the store are ignored. Raises
    LockError when takes keep the store busy for `lock_wait` seconds. Objects stay while
    a writer other than `writer` is alive, as in `prune`."""
    if not forget_checkpoints(store, ids, lock_wait=lock_wait):
        return GcReport()
    return collect(store, max_unused=max_unused, lock_wait=lock_wait, progress=progress, writer=writer)


def forget_checkpoints(
    store: Store, ids: Iterable[bytes], *, lock_wait: float = 300.0, siblings: Callable[[Subject], Iterable[bytes]] | None = None
) -> set[bytes]:
    """Remove exactly these checkpoints' manifests (for adapters that delete on their
    users' request, e.g. LangGraph's delete_thread), and nothing else: their objects stay
    until the next `collect` (`ckpt prune`), as restic's forget leaves them to its prune.
    Refs follow as in prune: a subject's latest moves to its newest remaining
    checkpoint; a tag or branch naming a removed checkpoint is deleted with it. The cost
    follows the removed checkpoints, not the store: only their manifests, their
    subjects' latest refs, the tags and branches, and the checkpoints `siblings` names
    for a subject whose latest must move (its other checkpoints; None: found in the
    catalog) are read. Ids not in the store (or whose manifest is damaged: verify's
    business) are ignored. Returns the ids removed. Raises LockError when takes keep the
    store busy for `lock_wait` seconds."""
    with store.backend.lock("store", shared=False, wait=lock_wait):
        removed: dict[bytes, Manifest] = {}
        for cid in set(ids):
            with contextlib.suppress(CkptError):  # gone already; or damaged: it stays
                removed[cid] = store.manifest(cid)
        if not removed:
            return set()
        for prefix in (
            layout.ref_path("tags"),
            layout.ref_path("branches"),
        ):  # strict: a damaged ref could be a tag that protects a checkpoint
            for name, target in store.refs(strict=True, prefix=prefix).items():
                if target in removed:
                    with store.ref_lock():  # (no other move runs: this holds the store lock exclusively)
                        store.remove_ref(layout.ref_path(name), "prune")
        for subj in sorted({m.subject for m in removed.values()}, key=str):
            path = store.latest_ref(subj)
            if store.read_ref(path) not in removed:
                continue
            rest: list[tuple[tuple[int, int], bytes]] = []
            if siblings is not None:
                for cid in set(siblings(subj)) - removed.keys():
                    with contextlib.suppress(CkptError):
                        m = store.manifest(cid)
                        if m.subject == subj:
                            rest.append((head_order(m.labels, m.created_ns), cid))
            else:
                for cid, row in catalog.rows(store).items():
                    if cid not in removed and (row[1], row[2]) == (subj.kind, subj.name) and type(row[5]) is dict:
                        rest.append((head_order(row[5], row[4]), cid))
            if rest:
                store.write_ref(path, max(rest)[1], "prune")
            else:
                store.remove_ref(path, "prune")
        for cid in removed:
            store.backend.delete(layout.manifest_path(cid))
            store.forget_manifest(cid)
        return set(removed)


def collect(
    store: Store,
    *,
    max_unused: float = 0.1,
    lock_wait: float = 300.0,
    progress: Progress = NULL,
    writer: Mark | None = None,
    finishing: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> GcReport:
    """Remove the objects no checkpoint of the store needs (what `forget_checkpoints`
    left; `prune` does the same after its removals): one walk of every checkpoint, one
    decision of which packs go, are repacked or stay, one new index. Nothing goes while
    a writer other than `writer` is alive (`GcReport.writers_alive`). `finishing` is
    entered around the last step only (old index files and packs deleted): a caller
    that reads the store from other threads holds its readers off there, not for the
    walk. Raises LockError when takes keep the store busy for `lock_wait` seconds."""
    with store.backend.lock("store", shared=False, wait=lock_wait):
        manifests = {}
        for cid in store.manifest_ids():
            with contextlib.suppress(CkptError):  # a damaged manifest is verify's business
                manifests[cid] = store.manifest(cid)
        gc = GcReport()
        alive = store.backend.live_writers(exclude=writer)
        gc.writers_alive = len(alive)
        if alive:
            return gc
        plan = _plan_gc(store, manifests, gc, max_unused, progress)
        with finishing():
            repack.finish(store, plan, gc)
        return gc


def _remove(
    store: Store,
    manifests: dict[bytes, Manifest],
    refs: dict[str, bytes],
    removed: set[bytes],
    max_unused: float,
    progress: Progress,
    writer: Mark | None = None,
) -> tuple[GcReport, dict[str, str | None]]:
    """Delete `removed` (the caller holds the store lock exclusively), in the order that
    keeps every survivor readable whenever a crash stops it."""
    survivors = {cid: m for cid, m in manifests.items() if cid not in removed}
    gc = GcReport()
    moved: dict[str, str | None] = {}
    # 1. new packs and the new index: everything a survivor needs stays readable; but
    # while another writer lives, no object goes: it may name any of them in its next
    # checkpoint without writing it again (and it finds objects where they are)
    alive = store.backend.live_writers(exclude=writer)
    gc.writers_alive = len(alive)
    plan = None if alive else _plan_gc(store, survivors, gc, max_unused, progress)
    # 2. refs: no latest may point at a removed checkpoint
    for name, target in refs.items():
        if name.startswith("latest/") and target in removed:
            subj = manifests[target].subject
            rest = [(head_order(m.labels, m.created_ns), cid) for cid, m in survivors.items() if m.subject == subj]
            path = layout.ref_path(name)
            if rest:
                new = max(rest)[1]
                store.write_ref(path, new, "prune")
                moved[name] = new.hex()
            else:
                store.remove_ref(path, "prune")
                moved[name] = None
    # 3. the removed checkpoints, then what only they needed
    for cid in removed:
        store.backend.delete(layout.manifest_path(cid))
        store.forget_manifest(cid)
    if plan is not None:
        repack.finish(store, plan, gc)
    return gc, moved


def _plan_gc(store: Store, survivors: dict[bytes, Manifest], rep: GcReport, max_unused: float, progress: Progress) -> RepackPlan:
    """Find the objects the survivors need (one walk of them all), then write the packs
    and the one index that replace the store's (`repack.plan`)."""
    old_index_files = repack.start(store, rep)
    live = WalkResult()
    progress.start("finding needed objects", len(survivors))
    for m in survivors.values():
        walk_checkpoint(store, m, result=live)  # raises on a missing or damaged object: nothing deleted yet
        progress.advance(1)
    progress.finish()
    return repack.plan(store, live.objects, old_index_files, rep, max_unused, progress)

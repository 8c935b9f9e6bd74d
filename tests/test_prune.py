"""ckpt prune: retention policies, garbage collection, and safety next to concurrent takes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

import ckptcli
from ckptcli.api import open_checkpoint, open_store, take, verify
from ckptcli.errors import UsageError
from ckptcli.format.manifest import Manifest, Subject
from ckptcli.store.prune import Policy, decide, prune
from tests.helpers_faults import child_env, ckpt_argv, fault_argv

# -- the policy, on its own -------------------------------------------------------------------


def _manifests(times: list[datetime], subject: str = "agent:a", labels: dict[int, dict[str, str]] | None = None) -> dict[bytes, Manifest]:
    out = {}
    for i, t in enumerate(times):
        m = Manifest(
            subject=Subject.parse(subject), sections={}, layout={}, created_ns=int(t.timestamp() * 1e9), labels=(labels or {}).get(i, {})
        )
        out[bytes([i]) * 32] = m
    return out


def _kept(decisions: list[Any]) -> list[int]:
    return sorted(d.id[0] for d in decisions if d.keep)


T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # a Monday


def test_keep_last_keeps_the_newest_n_per_subject() -> None:
    ms = _manifests([T0 + timedelta(minutes=i) for i in range(6)])
    assert _kept(decide(ms, Policy(keep_last=2, tz=UTC), {})) == [4, 5]


def test_calendar_buckets_keep_the_newest_of_each_of_the_last_n() -> None:
    # two checkpoints a day for 10 days: daily 3 keeps the later one of the last 3 days
    times = [T0 + timedelta(days=d, hours=h) for d in range(10) for h in (1, 5)]
    ms = _manifests(times)
    assert _kept(decide(ms, Policy(keep_daily=3, tz=UTC), {})) == [15, 17, 19]
    # weekly 2: the newest of the last two ISO weeks (T0 is a Monday: days 0-6, 7-9)
    assert _kept(decide(ms, Policy(keep_weekly=2, tz=UTC), {})) == [13, 19]
    assert _kept(decide(ms, Policy(keep_monthly=5, tz=UTC), {})) == [19]
    assert _kept(decide(ms, Policy(keep_yearly=1, tz=UTC), {})) == [19]
    hourly = decide(ms, Policy(keep_hourly=4, tz=UTC), {})
    assert _kept(hourly) == [16, 17, 18, 19]
    assert [d.reasons for d in hourly if d.id[0] == 19] == [["hourly 2026-03-11 17:00"]]


def test_buckets_skip_empty_periods_as_restic_does() -> None:
    # days 0, 1 and 30: daily 3 keeps one per day that has a checkpoint, however far apart
    ms = _manifests([T0, T0 + timedelta(days=1), T0 + timedelta(days=30)])
    assert _kept(decide(ms, Policy(keep_daily=3, tz=UTC), {})) == [0, 1, 2]


def test_keep_within_is_relative_to_the_subjects_newest() -> None:
    ms = _manifests([T0 - timedelta(days=9), T0 - timedelta(days=2), T0 - timedelta(hours=1), T0])
    d = decide(ms, Policy(keep_within_s=2 * 86400, tz=UTC), {})
    assert _kept(d) == [1, 2, 3]
    assert d[0].reasons == ["within 2d of the newest"]


def test_keep_tag_matches_named_tags_and_labels_and_refs_always_protect() -> None:
    ms = _manifests([T0 + timedelta(minutes=i) for i in range(5)], labels={0: {"release": "1.0"}, 1: {"release": "2.0"}})
    protected = {bytes([2]) * 32: ["tags/golden"], bytes([3]) * 32: ["branches/exp"]}
    assert _kept(decide(ms, Policy(keep_tags=["release=1.0"], tz=UTC), protected)) == [0, 2, 3]
    assert _kept(decide(ms, Policy(keep_tags=["release"], tz=UTC), protected)) == [0, 1, 2, 3]
    d = decide(ms, Policy(keep_tags=["golden"], tz=UTC), protected)
    assert [x.reasons for x in d if x.id[0] == 2] == [["tag golden", "tags/golden"]]


def test_rules_combine_as_a_union() -> None:
    times = [T0 + timedelta(days=d) for d in range(10)]
    ms = _manifests(times)
    assert _kept(decide(ms, Policy(keep_last=2, keep_weekly=2, tz=UTC), {})) == [6, 8, 9]


# -- prune on a store ----------------------------------------------------------------------------


def _take_many(store: ckptcli.Store, n: int, subject: str = "agent:a", seed: int = 0) -> list[tuple[bytes, Any]]:
    rng = random.Random(seed)
    shared = rng.randbytes(5000).hex()  # in every checkpoint: stored once, must survive any prune
    out = []
    for i in range(n):
        state = {"memory": {"i": i, "own": rng.randbytes(3000).hex(), "shared": shared}, "events": [{"n": k} for k in range(i % 40)]}
        out.append((take(store, state, subject=subject).id, state))
    return out


def test_prune_removes_what_the_policy_drops_and_frees_their_data(store: ckptcli.Store, tmp_path: Path) -> None:
    taken = _take_many(store, 20)
    before = sum(p.stat().st_size for p in (tmp_path / "store" / "packs").rglob("*") if p.is_file())
    rep = prune(store, Policy(keep_last=5))
    assert len(rep.removed) == 15 and len(rep.kept) == 5
    assert set(store.manifest_ids()) == {cid for cid, _s in taken[-5:]}
    after = sum(p.stat().st_size for p in (tmp_path / "store" / "packs").rglob("*") if p.is_file())
    assert after < before * 0.45
    assert rep.gc is not None and rep.gc.index_files_after == 1 and rep.gc.packs_deleted == 15
    assert verify(store, read_data=True).ok
    fresh = open_store(tmp_path / "store")
    for cid, state in taken[-5:]:
        assert open_checkpoint(cid.hex(), fresh).state() == state
    # the next take deduplicates against the rewritten index and stays readable
    res = take(store, {"memory": {"again": True}}, subject="agent:a")
    assert open_checkpoint(res.id.hex(), open_store(tmp_path / "store")).state() == {"memory": {"again": True}}
    assert verify(open_store(tmp_path / "store"), read_data=True).ok


def test_many_small_packs_are_merged(store: ckptcli.Store, tmp_path: Path) -> None:
    taken = _take_many(store, 30)
    rep = prune(store, Policy(keep_last=25))
    assert rep.gc is not None and rep.gc.packs_repacked >= 16 and rep.gc.packs_written == 1
    packs = [p for p in (tmp_path / "store" / "packs").rglob("*") if p.is_file()]
    assert len(packs) < 30 - 16
    fresh = open_store(tmp_path / "store")
    for cid, state in taken[-25:]:
        assert open_checkpoint(cid.hex(), fresh).state() == state
    assert verify(fresh, read_data=True).ok


def test_another_processs_store_notices_the_prune(store: ckptcli.Store, tmp_path: Path) -> None:
    # a long-lived Store (an agent's) has the index cached; a prune elsewhere deletes objects
    # it knows; its next take must not deduplicate against them
    rng = random.Random(3)
    blob = rng.randbytes(4000).hex()
    take(store, {"memory": {"b": blob, "n": 0}}, subject="agent:a")
    other = open_store(tmp_path / "store")
    take(other, {"memory": {"x": 1}}, subject="agent:b")
    prune(other, Policy(keep_last=1), subjects=["agent:a"], allow_remove_all=False)
    prune(other, Policy(keep_tags=["none"]), subjects=["agent:a"], allow_remove_all=True)  # agent:a's data gone
    res = take(store, {"memory": {"b": blob, "n": 1}}, subject="agent:a")  # same big item as before
    assert open_checkpoint(res.id.hex(), open_store(tmp_path / "store")).state() == {"memory": {"b": blob, "n": 1}}
    assert verify(open_store(tmp_path / "store"), read_data=True).ok


def test_refusals_and_dry_run(store: ckptcli.Store, tmp_path: Path, cli: Any) -> None:
    _take_many(store, 4)
    with pytest.raises(UsageError, match="no retention policy"):
        prune(store, Policy())
    snapshot = sorted(p.relative_to(tmp_path) for p in (tmp_path / "store").rglob("*"))
    r = cli("prune", "--keep-tag", "nope", "--store", tmp_path / "store")
    assert r.code == 2 and "keeps no checkpoint of agent:a" in r.err and "--allow-remove-all" in r.err
    r = cli("prune", "--keep-last", "1", "--dry-run", "--store", tmp_path / "store")
    assert r.code == 0, r.err
    assert r.out.count("remove  ") == 3 and "keep    " in r.out and "(last 1)" in r.out and "would remove 3" in r.out
    r = cli("prune", "--keep-last", "1", "--dry-run", "--json", "--store", tmp_path / "store")
    doc = json.loads(r.out)
    assert doc["dry_run"] is True and doc["removed"] == 3 and doc["gc"] is None
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "store").rglob("*")) == snapshot
    r = cli("prune", "--keep-last", "-1", "--store", tmp_path / "store")
    assert r.code == 2 and "must not be negative" in r.err


def test_remove_all_deletes_the_latest_ref_and_moves_it_when_needed(store: ckptcli.Store, tmp_path: Path, cli: Any) -> None:
    a = _take_many(store, 3, "agent:a")
    take(store, {"memory": {"t": 1}}, subject="agent:b", labels={"keep": "1"})
    # keep only agent:a's oldest (labelled): latest must move back to it
    store2 = open_store(tmp_path / "store")
    ckptcli.api.take(store2, {"memory": {"z": 0}}, subject="agent:c")
    r = cli("prune", "--keep-tag", "keep", "--allow-remove-all", "--json", "--store", tmp_path / "store")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["refs_moved"] == {"latest/agent/a": None, "latest/agent/c": None}
    assert [d["subject"] for d in doc["checkpoints"] if d["keep"]] == ["agent:b"]
    assert open_store(tmp_path / "store").read_ref("refs/latest/agent/a") is None
    assert a and verify(open_store(tmp_path / "store"), read_data=True).ok


# -- random interleavings of take, tag and prune -----------------------------------------------------


class PruneMachine(RuleBasedStateMachine):
    """The model: every checkpoint taken, its state, its subject, its tags. After each prune
    the store holds exactly the checkpoints the policy keeps (computed here independently),
    and every one of them restores to the state that was taken."""

    checkpoints = Bundle("checkpoints")

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.dir = Path(tempfile.mkdtemp(prefix="ckpt-prune-sm-"))
        self.store = ckptcli.init_store(self.dir / "store")
        self.states: dict[bytes, Any] = {}
        self.subject_of: dict[bytes, str] = {}
        self.order: list[bytes] = []  # in take order (= created order per subject)
        self.tags: dict[str, bytes] = {}
        self.parent_of: dict[bytes, bytes | None] = {}
        self.moved_off: list[tuple[bytes, bytes]] = []  # a tag moved from a checkpoint to another (the reflog keeps the first)
        self.pool = [random.Random(i).randbytes(300).hex() for i in range(6)]  # items shared between checkpoints

    def teardown(self) -> None:
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(
        target=checkpoints,
        subject=st.sampled_from(["agent:a", "agent:b"]),
        picks=st.lists(st.integers(0, 5), max_size=4),
        n=st.integers(0, 60),
    )
    def take_one(self, subject: str, picks: list[int], n: int) -> bytes:
        state = {"memory": {"items": [self.pool[i] for i in picks], "n": n}, "events": list(range(n))}
        mine = [c for c in self.order if self.subject_of[c] == subject and c in self.states]
        cid = take(self.store, state, subject=subject).id
        self.states[cid], self.subject_of[cid] = state, subject
        self.parent_of[cid] = mine[-1] if mine else None  # latest: the newest a prune left
        self.order.append(cid)
        return cid

    @rule(cid=checkpoints, name=st.sampled_from(["t1", "t2"]))
    def tag(self, cid: bytes, name: str) -> None:
        if cid in self.states:
            self.store.set_tag(name, cid, force=True)
            if self.tags.get(name, cid) != cid:
                self.moved_off.append((self.tags[name], cid))
            self.tags[name] = cid

    @rule(keep_last=st.integers(0, 3), keep_tag=st.sampled_from([None, "t1"]))
    def prune_some(self, keep_last: int, keep_tag: str | None) -> None:
        policy = Policy(keep_last=keep_last, keep_tags=[keep_tag] if keep_tag else [])
        if policy.empty():
            return
        expected: set[bytes] = set()
        for subject in ("agent:a", "agent:b"):
            mine = [c for c in self.order if self.subject_of[c] == subject and c in self.states]
            expected |= set(mine[::-1][:keep_last])
        expected |= set(self.tags.values())

        def descends(new: bytes, old: bytes) -> bool:
            at: bytes | None = new
            while at is not None and at in self.states:
                if at == old:
                    return True
                at = self.parent_of[at]
            return False

        # what a tag was moved off, sideways or back, stays until its reflog entry expires
        expected |= {old for old, new in self.moved_off if old in self.states and not descends(new, old)}
        prune(self.store, policy, allow_remove_all=True, max_unused=0.0)
        for cid in list(self.states):
            if cid not in expected:
                del self.states[cid]
        assert set(self.store.manifest_ids()) == set(self.states)

    @invariant()
    def every_kept_checkpoint_restores(self) -> None:
        fresh = open_store(self.dir / "store")
        for cid, state in self.states.items():
            assert open_checkpoint(cid.hex(), fresh).state() == state

    @invariant()
    def verify_is_clean(self) -> None:
        assert verify(open_store(self.dir / "store"), read_data=True).ok


TestPruneMachine = PruneMachine.TestCase
TestPruneMachine.settings = settings(max_examples=25, stateful_step_count=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- takes and prunes in separate processes, at the same time ---------------------------------------------


def test_concurrent_takes_and_prunes_lose_nothing(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    ckptcli.init_store(store_dir)
    env = child_env()
    deadline = time.monotonic() + float(os.environ.get("CKPT_PRUNE_RACE_SECONDS", "12"))
    docs: dict[str, Any] = {}  # id of every successful take -> the state it took
    prunes = 0
    procs: list[tuple[Any, subprocess.Popen[bytes]]] = []
    i = 0
    rng = random.Random(5)
    shared = rng.randbytes(2000).hex()
    # at least 3 prunes (18 takes) however loaded the machine is; more while time allows
    hard_deadline = deadline + 240
    while (time.monotonic() < deadline or prunes < 3) and time.monotonic() < hard_deadline:
        for subject in ("agent:a", "agent:b"):
            doc = {"memory": {"i": i, "shared": shared, "own": rng.randbytes(1500).hex()}, "events": list(range(i % 50))}
            path = tmp_path / f"s{i}.json"
            path.write_text(json.dumps(doc))
            argv = ckpt_argv("take", path, "-S", subject, "--store", store_dir, "--json")
            procs.append((doc, subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
            i += 1
        if i % 6 == 0:
            argv = ckpt_argv("prune", "--keep-last", "3", "--max-unused", "0", "--store", store_dir, "--json")
            procs.append((None, subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
            prunes += 1
        if len(procs) > 8:
            _reap(procs[:4], docs)
            procs = procs[4:]
    _reap(procs, docs)
    assert prunes >= 3 and len(docs) >= 12
    st = open_store(store_dir)
    rep = verify(st, read_data=True)
    assert rep.ok, rep.to_dict()
    present = set(st.manifest_ids())
    assert {cid.hex() for cid in present} <= set(docs)  # nothing but successful takes
    by_subject: dict[str, list[tuple[int, bytes]]] = {}
    for cid in present:
        m = st.manifest(cid)
        by_subject.setdefault(str(m.subject), []).append((m.created_ns, cid))
    for cid in present:  # everything still there restores exactly, whatever the prunes did
        assert open_checkpoint(cid.hex(), st).state() == docs[cid.hex()]
    # a last prune, with everything settled, keeps exactly each subject's three newest
    final = prune(st, Policy(keep_last=3))
    expected = {cid for rows in by_subject.values() for _t, cid in sorted(rows)[-3:]}
    assert {d.id for d in final.kept} == expected
    assert set(open_store(store_dir).manifest_ids()) == expected
    assert verify(open_store(store_dir), read_data=True).ok


def _reap(procs: list[tuple[Any, subprocess.Popen[bytes]]], docs: dict[str, Any]) -> None:
    for doc, p in procs:
        out, err = p.communicate(timeout=120)
        if p.returncode == 9:  # waited 30 s for the lock: refused cleanly, nothing written
            continue
        assert p.returncode == 0, err.decode()
        if doc is not None:
            docs[json.loads(out)["id"]] = doc


# -- a prune killed anywhere -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "point", ["commit_temp:1:after", "delete:1:after", "delete:3:before", "delete:8:after", "delete:20:after", "pack_add:1:after"]
)
def test_a_prune_killed_anywhere_loses_nothing_and_the_next_one_finishes(tmp_path: Path, point: str) -> None:
    store_dir = tmp_path / "store"
    st = ckptcli.init_store(store_dir)
    taken = _take_many(st, 24)
    env = child_env({"CKPT_FAULT": point})
    p = subprocess.run(fault_argv("prune", "--keep-last", "4", "--store", store_dir), env=env, capture_output=True, timeout=120)
    assert p.returncode == -9, (p.returncode, p.stderr.decode())  # it was killed at that point
    fresh = open_store(store_dir)
    rep = verify(fresh, read_data=True)
    assert rep.ok, rep.to_dict()
    present = set(fresh.manifest_ids())
    for cid, state in taken[-4:]:
        assert cid in present
        assert open_checkpoint(cid.hex(), fresh).state() == state
    for cid in present:  # whatever is still there is whole
        open_checkpoint(cid.hex(), fresh).state()
    done = subprocess.run(ckpt_argv("prune", "--keep-last", "4", "--store", store_dir), env=child_env(), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    final = open_store(store_dir)
    assert set(final.manifest_ids()) == {cid for cid, _s in taken[-4:]}
    assert verify(final, read_data=True).ok
    assert len(list((store_dir / "index").iterdir())) == 1


def test_verify_waits_for_a_prune_that_holds_the_store(tmp_path: Path) -> None:
    """verify read the store while a prune rewrote its packs, and reported the objects
    being moved as missing (exit 5 on a store that was whole): it now reads under the
    store's lock taken shared, so a prune (exclusive) finishes first."""
    import threading

    st = ckptcli.api.init_store(tmp_path / ".ckpt")
    take(st, {"memory": {"n": 1}}, subject="agent:a")
    held = threading.Event()
    release = threading.Event()

    def pruner() -> None:
        with st.backend.lock("store", shared=False):
            held.set()
            release.wait(10)

    t = threading.Thread(target=pruner)
    t.start()
    held.wait(10)
    done: list[bool] = []
    v = threading.Thread(target=lambda: done.append(verify(open_store(tmp_path / ".ckpt")).ok))
    v.start()
    v.join(0.5)
    assert v.is_alive() and done == []  # waiting for the prune
    release.set()
    t.join()
    v.join(10)
    assert done == [True]


def test_a_pack_holding_a_damaged_copy_no_index_names_is_rewritten(tmp_path: Path) -> None:
    """A byte flips in a pack; `repair index` leaves the damaged object out, an import
    brings it back into a new pack. The old pack still holds the damaged copy, which no
    index names and no checkpoint needs: it is unneeded bytes like any other, so prune
    rewrites the pack (its healthy objects kept) and `verify --read-data` passes again.
    Before, prune counted only what the index names, kept the pack for ever, and
    verify --read-data exited 5 on a store whose every checkpoint was whole."""
    from tests.conftest import run_ckpt

    store_dir = tmp_path / "store"
    store = ckptcli.init_store(store_dir)
    work = tmp_path / "work"
    work.mkdir()
    rng = random.Random(7)
    (work / "a.bin").write_bytes(bytes(rng.getrandbits(8) for _ in range(4000)))
    (work / "b.bin").write_bytes(bytes(rng.getrandbits(8) for _ in range(4000)))
    ck = take(store, {"memory": {"x": 1}}, subject="agent:a", blobs={"work": work})
    ckptcli.export_checkpoint(open_checkpoint(ck.hex, store), tmp_path / "a.ckpt")
    (pack,) = (store_dir / "packs").glob("*/*")
    data = bytearray(pack.read_bytes())
    data[2000] ^= 0xFF  # inside the first object, a.bin's or b.bin's data
    pack.write_bytes(bytes(data))
    assert run_ckpt("repair", "index", "--store", store_dir).returncode == 5
    assert run_ckpt("import", tmp_path / "a.ckpt", "--store", store_dir).returncode == 0
    assert run_ckpt("verify", "--store", store_dir).returncode == 0  # every checkpoint is whole
    assert run_ckpt("verify", "--read-data", "--store", store_dir).returncode == 5  # the old copy

    p = run_ckpt("prune", "--keep-last", "10", "--store", store_dir)
    assert p.returncode == 0, p.stderr
    v = run_ckpt("verify", "--read-data", "--store", store_dir)
    assert v.returncode == 0, v.stdout
    assert not pack.exists()
    out = tmp_path / "out"
    open_checkpoint(ck.hex, open_store(store_dir)).restore_blobs(out)
    assert {p.name: p.read_bytes() for p in (out / "work").iterdir()} == {p.name: p.read_bytes() for p in work.iterdir()}

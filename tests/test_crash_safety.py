"""Crash safety: `ckpt take` killed with SIGKILL at many points leaves a store that
verifies clean, in which every committed checkpoint restores exactly.

Real subprocesses run the real CLI. Each take stores a growing state document (long
lists, a string long enough to be chunked) and two blobs (a directory with a 3 MiB
file, a small file, a nested file, an empty directory and a symlink; and a single
file), so one take writes a pack of many objects, an index, a manifest and a ref.

Takes are killed two ways:

* at precise points of the write order, through a fault hook (tests/helpers_faults.py,
  FAULT_WRAPPER) that makes the process SIGKILL itself just before or after the n-th
  object appended to the pack, the n-th `commit_temp` (temp file -> fsync -> rename ->
  dir fsync) or the n-th rename: pack half written, pack written but not renamed, pack
  renamed but not indexed, index written, manifest written (the commit point), ref
  update under way, all done. For these the test knows whether the checkpoint must
  be committed and whether `latest` must have moved, and asserts exactly that;
* from outside, after delays spread from 0 to the measured duration of a take.

After every kill: `ckpt verify --read-data` exits 0; the checkpoints `ckpt ls --json`
lists are exactly the ones committed before plus, at most, the killed take's;
`latest` points to one of them; every checkpoint not restored before (and `latest`,
through the subject's name) restores exactly, document and blob files; and a
following take, not killed, succeeds with `latest` as its parent. At the end every
committed checkpoint's state is decoded once more and compared.

Every checkpoint is restored through the CLI when it first appears; after later kills
`verify --read-data` re-hashes every byte of every pack and follows every reference of
every manifest, which is what a later restore would read, so each old checkpoint is
not restored again after each kill (that would cost O(kills^2) subprocesses).
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint, states_equal
from tests import stress
from tests.helpers_faults import (
    Cmd,
    blob_tree,
    child_env,
    ckpt_argv,
    describe,
    fault_argv,
    run_cli,
    run_parallel,
)

SUBJECT = "agent:crash"
LATEST_REF = "latest/agent/crash"
BIG_FILE = 3 * 1024 * 1024
WINDOW = 64 * 1024
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
]
SIGKILLED = -signal.SIGKILL


def make_doc(i: int) -> dict[str, Any]:
    """The state submitted by take `i`: it grows with i and changes everywhere."""
    rng = random.Random(1000 + i)
    return {
        "memory": {
            "goal": "survive SIGKILL",
            "step": i,
            "notes": [f"note {k} of step {i}" for k in range(20 + 6 * i)],
            # > 64 KiB: a chunked string (several data objects and a tree node)
            "scratch": " ".join(rng.choice(WORDS) for _ in range(13_000 + 40 * i)),
            "vars": {"temperature": 0.25 * (i % 4), "ok": i % 2 == 0, "nothing": None, "big": 2**70 + i},
        },
        "plan": {"pointer": i, "stack": [{"step": k, "done": k < i, "what": f"do thing {k}"} for k in range(5 + i)]},
        "tools": [
            {"call": "search", "args": {"q": f"query {k}"}, "result": "r" * (k % 40), "status": "ok", "ms": 3 * k} for k in range(3 * i)
        ],
        "events": [{"seq": k, "kind": "tick", "at": 1.5 * k} for k in range(4 * i)],
    }


def same_document(got: Any, want: Any) -> bool:
    """Equal values and the same key order (restore promises the document as taken)."""
    return states_equal(got, want) and json.dumps(got) == json.dumps(want)


@dataclass
class Expected:
    doc: dict[str, Any]
    blobs: dict[str, tuple[Any, ...]]


class Rig:
    """One store, the takes made into it, and what each must restore to."""

    def __init__(self, root: Path, subject: str = SUBJECT) -> None:
        self.root = root
        self.subject = subject
        self.store = root / "store"
        self.src = root / "src"  # holds exactly the two blobs: ws/ and cfg
        self.docs = root / "docs"
        self.restored_dir = root / "restored"
        for d in (self.src / "ws" / "sub", self.src / "ws" / "empty", self.docs, self.restored_dir):
            d.mkdir(parents=True, exist_ok=True)
        (self.src / "ws" / "link").symlink_to("small.txt")
        self.base = random.Random(12345).randbytes(BIG_FILE)
        r = run_cli("init", self.store)
        assert r.returncode == 0, describe(r)
        self.expected: dict[int, Expected] = {}
        self.committed: dict[str, int] = {}  # checkpoint id -> take number
        self.unrestored: set[str] = set()
        self.latest: str | None = None
        self.head: str | None = None  # the newest committed checkpoint: the next take's parent
        self.next_take = 0
        self.kills = 0
        self.restores = 0
        self.last_duration = 0.0  # wall time of the last take that was not killed

    # -- takes -------------------------------------------------------------------------------
    def prepare(self) -> tuple[int, list[str]]:
        """Write take i's document and blob files; record what it must restore to."""
        i = self.next_take
        self.next_take += 1
        doc = make_doc(i)
        doc_path = self.docs / f"take-{i}.json"
        doc_path.write_text(json.dumps(doc))
        big = bytearray(self.base)
        off = (i * 262_147) % (BIG_FILE - WINDOW)
        big[off : off + WINDOW] = random.Random(i).randbytes(WINDOW)
        ws = self.src / "ws"
        (ws / "big.bin").write_bytes(bytes(big) + i.to_bytes(4, "big"))
        (ws / "small.txt").write_text(f"take {i}\n")
        (ws / "sub" / "data.json").write_text(json.dumps({"take": i, "pad": "p" * (i % 7)}))
        (ws / "small.txt").chmod(0o640 if i % 2 else 0o644)
        (self.src / "cfg").write_text(f"setting={i}\n" * 20)
        self.expected[i] = Expected(doc, blob_tree(self.src))
        blobs = ["--blob", f"ws={ws}", "--blob", f"cfg={self.src / 'cfg'}"]
        return i, ["take", str(doc_path), "--subject", self.subject, "--label", f"take={i}", *blobs, "--store", str(self.store), "--json"]

    def take_ok(self, *, trace: Path | None = None) -> None:
        """A take that is not killed: it must succeed, with the subject's newest committed
        checkpoint as its parent (`latest`, or what a take killed before moving it committed)."""
        i, args = self.prepare()
        t0 = time.monotonic()
        if trace is None:
            r = run_cli(*args)
        else:
            r = subprocess.run(
                fault_argv(*args), capture_output=True, env=child_env({"CKPT_FAULT_TRACE": str(trace)}), timeout=120, check=False
            )
        elapsed = time.monotonic() - t0
        self.last_duration = elapsed
        assert r.returncode == 0, f"take {i} after the kills failed:\n{describe(r)}"
        info = json.loads(r.stdout)
        assert info["parents"] == ([self.head] if self.head else []), f"take {i}: parents {info['parents']}, newest was {self.head}"
        self.committed[info["id"]] = i
        self.unrestored.add(info["id"])
        self.latest = self.head = info["id"]

    def killed_take(self, *, fault: str | None = None, delay: float | None = None) -> tuple[int, int]:
        """Start take i and SIGKILL it (by the hook `fault`, or after `delay` seconds)."""
        i, args = self.prepare()
        if fault is not None:
            p = subprocess.Popen(fault_argv(*args), env=child_env({"CKPT_FAULT": fault}), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            _out, err = p.communicate(timeout=120)
        else:
            assert delay is not None
            p = subprocess.Popen(ckpt_argv(*args), env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            time.sleep(delay)
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)  # a zombie until communicate() reaps it, so the pid is still ours
            _out, err = p.communicate(timeout=120)
        assert p.returncode in (0, SIGKILLED), f"take {i} exited {p.returncode}: {err.decode(errors='replace')}"
        if p.returncode == SIGKILLED:
            self.kills += 1
        return i, p.returncode

    # -- checks ------------------------------------------------------------------------------
    def check(self, i: int | None, rc: int | None, *, label: str, committed: bool | None = None, ref_moved: bool | None = None) -> None:
        """The store after take i ended with `rc` (killed or not); i None: no take in flight.

        `latest` is read by restoring the subject by name: the restored document says
        which take it is (memory.step), and must then be exactly that take's document.
        """
        st = str(self.store)
        pending = sorted(self.unrestored)
        restores = [(self.subject, None), *((cid, cid) for cid in pending)]
        dirs = [self._restore_dir() for _ in restores]
        cmds = [Cmd(["verify", "--read-data", "--store", st]), Cmd(["ls", "--json", "--store", st])]
        cmds += [Cmd(["restore", ref, "--store", st, "--blobs", str(d)]) for (ref, _), d in zip(restores, dirs, strict=True)]
        verify, ls, *restored = run_parallel(cmds)
        assert verify.returncode == 0, f"[{label}] verify --read-data after the kill:\n{describe(verify)}"
        assert ls.returncode == 0, describe(ls)
        now = {row["id"]: int(row["labels"]["take"]) for row in json.loads(ls.stdout)}
        lost = {c: t for c, t in self.committed.items() if now.get(c) != t}
        assert not lost, f"[{label}] committed checkpoints are gone: {lost}"
        new = {c: t for c, t in now.items() if c not in self.committed}
        assert len(new) <= 1 and set(new.values()) <= {i}, f"[{label}] unexpected checkpoints appeared: {new}"
        if i is not None and rc != SIGKILLED:
            assert new, f"[{label}] take {i} exited 0 but its checkpoint is not listed"
        if committed is not None:
            assert bool(new) == committed, f"[{label}] the killed take {'should' if committed else 'should not'} be committed; new: {new}"
        self.committed.update(new)
        by_take = {t: c for c, t in self.committed.items()}

        # latest: one of the committed checkpoints (the previous latest, or the new one)
        r = restored[0]
        assert r.returncode == 0, f"[{label}] restore {self.subject} (its latest):\n{describe(r)}"
        latest_take = json.loads(r.stdout)["memory"]["step"]
        assert latest_take in by_take, f"[{label}] latest restores to take {latest_take}, which is not a listed checkpoint"
        latest = by_take[latest_take]
        assert latest in {self.latest, *new}, (
            f"[{label}] latest moved to take {latest_take}, neither the previous latest nor the new checkpoint"
        )
        if ref_moved is not None:
            assert (latest != self.latest) == ref_moved, f"[{label}] latest {'should' if ref_moved else 'should not'} have moved"
        self.latest = latest
        # the next take's parent: a checkpoint the killed take committed is newer than latest
        self.head = next(iter(new)) if new else latest
        self._compare(r, dirs[0], latest, f"[{label}] restore {self.subject}")
        for (ref, cid), d, r in zip(restores[1:], dirs[1:], restored[1:], strict=True):
            assert cid is not None
            self._compare(r, d, cid, f"[{label}] restore {ref[:12]}")
        # a checkpoint committed by the killed take that latest does not point to
        rest = sorted(set(new) - {latest})
        if rest:
            dirs = [self._restore_dir() for _ in rest]
            out = run_parallel([Cmd(["restore", cid, "--store", st, "--blobs", str(d)]) for cid, d in zip(rest, dirs, strict=True)])
            for cid, d, r in zip(rest, dirs, out, strict=True):
                self._compare(r, d, cid, f"[{label}] restore {cid[:12]}")
        self.unrestored.clear()

    def _restore_dir(self) -> Path:
        self.restores += 1
        return self.restored_dir / f"r{self.restores}"

    def _compare(self, r: subprocess.CompletedProcess[bytes], d: Path, cid: str, what: str) -> None:
        assert r.returncode == 0, f"{what}:\n{describe(r)}"
        t = self.committed[cid]
        want = self.expected[t]
        assert same_document(json.loads(r.stdout), want.doc), f"{what} ({cid[:12]}, take {t}) gave a different document"
        got_blobs = blob_tree(d)
        assert got_blobs == want.blobs, f"{what} ({cid[:12]}, take {t}) gave different blob files: {_tree_diff(got_blobs, want.blobs)}"
        shutil.rmtree(d)

    def final_check(self) -> None:
        """Every committed checkpoint decodes to its document once more (in process)."""
        st = str(self.store)
        r = run_cli("verify", "--read-data", "--store", st)
        assert r.returncode == 0, describe(r)
        store = ckptcli.open_store(self.store)
        try:
            for cid, t in self.committed.items():
                assert same_document(open_checkpoint(cid, store).state(), self.expected[t].doc), f"checkpoint {cid[:12]} (take {t})"
        finally:
            store.close()


def _tree_diff(got: dict[str, Any], want: dict[str, Any]) -> str:
    keys = sorted(set(got) | set(want))
    return "; ".join(f"{k}: got {got.get(k)} want {want.get(k)}" for k in keys if got.get(k) != want.get(k))[:2000]


# -- kill points -------------------------------------------------------------------------------------


@dataclass
class Point:
    label: str
    fault: str
    committed: bool
    ref_moved: bool


def precise_points(trace: Path) -> tuple[list[Point], int]:
    """Kill points along the write order that a traced take actually went through, and
    how many objects it appended to its pack."""
    lines = [ln.split(" ", 1) for ln in trace.read_text().splitlines()]
    commits = [detail for point, detail in lines if point == "commit_temp"]
    renames = [detail for point, detail in lines if point == "replace"]
    adds = [detail for point, detail in lines if point == "pack_add"]
    kinds = [c.split("/", 1)[0] for c in commits]
    # The documented write order: packs, then the index naming them, then the manifest
    # (the commit point), then the subject's latest ref.
    assert kinds == ["packs", "index", "manifests", "refs"], f"write order was {commits}"
    assert commits[3] == f"refs/{LATEST_REF}"
    assert len(renames) == len(commits) and all(r.endswith(c) for r, c in zip(renames, commits, strict=True)), (renames, commits)
    assert len(adds) >= 4, f"a take should write several objects, wrote {len(adds)}"
    points = [
        Point("pack: header only", "pack_add:1:before", False, False),
        Point("pack: two objects written", "pack_add:2:after", False, False),
    ]
    # commit_temp n / rename n: 1 = pack, 2 = index, 3 = manifest, 4 = ref. The checkpoint
    # exists once the manifest is renamed into place; latest moves once the ref is.
    for n, what in enumerate(("pack", "index", "manifest", "ref"), start=1):
        for fault, sub, committed, moved in (
            (f"commit_temp:{n}:before", "temp file written, not synced", n > 3, n > 4),
            (f"replace:{n}:before", "synced, not renamed", n > 3, n > 4),
            (f"replace:{n}:after", "renamed, directory not synced", n >= 3, n >= 4),
            (f"commit_temp:{n}:after", "committed, next step not begun", n >= 3, n >= 4),
        ):
            points.append(Point(f"{what}: {sub}", fault, committed, moved))
    return points, len(adds)


#: Delay kills: a few at fixed, very early times (during start-up and the first reads),
#: then at fractions of the duration of the take just before (so the spread follows the
#: machine's current speed), from a third of the way to just before the end.
EARLY_DELAYS = [0.0, 0.003, 0.02, 0.06]
LATE_FRACTIONS = [0.3 + 0.68 * k / 8 for k in range(9)]
MIN_KILLS = 30


def warm_up(rig: Rig) -> tuple[list[Point], int]:
    rig.take_ok()
    trace = rig.root / "trace.txt"
    rig.take_ok(trace=trace)
    points, objects = precise_points(trace)
    rig.take_ok()
    rig.check(None, None, label="warm-up")
    return points, objects


def delay_kill(rig: Rig, *, seconds: float | None = None, fraction: float | None = None) -> None:
    duration = rig.last_duration
    delay = seconds if seconds is not None else (fraction or 0.0) * duration
    i, rc = rig.killed_take(delay=delay)
    rig.check(i, rc, label=f"killed after {delay:.3f}s (the take before took {duration:.3f}s)")


def point_kill(rig: Rig, p: Point) -> None:
    i, rc = rig.killed_take(fault=p.fault)
    assert rc == SIGKILLED, f"the take was not killed at {p.label} ({p.fault}): the hook was never reached"
    rig.check(i, rc, label=f"{p.label} [{p.fault}]", committed=p.committed, ref_moved=p.ref_moved)


def test_sigkill_during_take_at_many_points(tmp_path: Path) -> None:
    """A take killed at every precise point and at spread delays, 30 kills at least (the
    bounded run, tests/stress.py: a third of them, spread over the same range)."""
    rig = Rig(tmp_path)
    points, _objects = warm_up(rig)
    points = stress.sample(points, max(4, len(points) // 3))
    delays: list[tuple[float | None, float | None]] = [(d, None) for d in EARLY_DELAYS] + [(None, f) for f in LATE_FRACTIONS]
    delays = stress.sample(delays, 5)
    for k in range(max(len(points), len(delays))):
        if k < len(points):
            point_kill(rig, points[k])
            rig.take_ok()
        if k < len(delays):
            delay_kill(rig, seconds=delays[k][0], fraction=delays[k][1])
            rig.take_ok()
    # a delay kill lands after the end when the machine was briefly faster: top up
    extra = 0
    least = stress.count(MIN_KILLS, 10)
    while rig.kills < least and extra < 10:
        delay_kill(rig, fraction=(0.4, 0.6, 0.8)[extra % 3])
        rig.take_ok()
        extra += 1
    assert rig.kills >= least, f"only {rig.kills} takes were actually killed"
    rig.final_check()


@pytest.mark.slow
def test_sigkill_sweep(tmp_path: Path) -> None:
    """More kills at random (seeded) points: delays up to past the end of a take, the
    precise points, and positions in the pack being written. Scaled by CKPT_STRESS_SCALE
    (tests/stress.py): 8 x SCALE kills, 3 bounded."""
    rng = random.Random(20_240_601 + stress.SCALE)
    rig = Rig(tmp_path)
    points, objects = warm_up(rig)
    for _ in range(stress.count(8, 3)):
        kind = rng.random()
        if kind < 0.45:
            delay_kill(rig, fraction=rng.uniform(0.0, 1.05))
        elif kind < 0.7:
            n = rng.randint(1, max(1, objects // 2))
            point_kill(rig, Point(f"pack with {n} objects", f"pack_add:{n}:after", committed=False, ref_moved=False))
        else:
            point_kill(rig, rng.choice(points))
        rig.take_ok()
    rig.final_check()


# -- concurrent takes --------------------------------------------------------------------------------


def test_concurrent_takes_into_one_store(tmp_path: Path) -> None:
    """4 processes take 5 checkpoints each into one store at the same time, of their own
    subject and of one shared subject, with a shared blob (the same objects written by
    several processes at once). Nothing is lost, the store verifies, every checkpoint
    restores exactly, and each subject's latest is its newest checkpoint."""
    workers, per_worker = 4, 5
    store = tmp_path / "store"
    assert run_cli("init", store).returncode == 0
    shared_blob = tmp_path / "shared.bin"
    shared_blob.write_bytes(random.Random(7).randbytes(1024 * 1024))
    shared_text = " ".join(random.Random(8).choice(WORDS) for _ in range(15_000))
    docs: dict[tuple[int, int], dict[str, Any]] = {}
    subjects: dict[tuple[int, int], str] = {}
    for w in range(workers):
        for k in range(per_worker):
            docs[w, k] = {
                "memory": {"worker": w, "k": k, "shared": shared_text, "own": [f"w{w}k{k}-{j}" for j in range(200 + 10 * k)]},
                "events": [{"seq": j, "by": w} for j in range(50 * k)],
            }
            subjects[w, k] = "agent:shared" if k % 2 == 0 else f"agent:w{w}"
            (tmp_path / f"doc-{w}-{k}.json").write_text(json.dumps(docs[w, k]))
    barrier = threading.Barrier(workers)

    def worker(w: int) -> list[subprocess.CompletedProcess[bytes]]:
        barrier.wait()
        out = []
        for k in range(per_worker):
            labels = ["--label", f"w={w}", "--label", f"k={k}"]
            doc = tmp_path / f"doc-{w}-{k}.json"
            out.append(
                run_cli("take", doc, "--subject", subjects[w, k], *labels, "--blob", f"shared={shared_blob}", "--store", store, "--json")
            )
        return out

    with ThreadPoolExecutor(max_workers=workers) as ex:
        results = list(ex.map(worker, range(workers)))
    ids: dict[str, tuple[int, int]] = {}
    for w, rs in enumerate(results):
        for k, r in enumerate(rs):
            assert r.returncode == 0, f"worker {w} take {k}:\n{describe(r)}"
            ids[json.loads(r.stdout)["id"]] = (w, k)
    assert len(ids) == workers * per_worker

    verify, ls, refs = run_parallel(
        [
            Cmd(["verify", "--read-data", "--store", store]),
            Cmd(["ls", "--json", "--store", store]),
            Cmd(["refs", "--json", "--store", store]),
        ]
    )
    assert verify.returncode == 0, describe(verify)
    rows = json.loads(ls.stdout)
    assert {r["id"] for r in rows} == set(ids), "ls does not list exactly the checkpoints taken"
    for r in rows:
        assert (int(r["labels"]["w"]), int(r["labels"]["k"])) == ids[r["id"]]
        assert r["subject"] == subjects[ids[r["id"]]]

    # each subject's latest is its newest checkpoint
    latest = json.loads(refs.stdout)
    newest: dict[str, int] = {}
    for r in rows:
        newest[r["subject"]] = max(newest.get(r["subject"], 0), r["created_ns"])
    created = {r["id"]: r["created_ns"] for r in rows}
    for subject, ns in newest.items():
        kind, name = subject.split(":")
        target = latest.get(f"latest/{kind}/{name}")
        assert target in created, f"{subject}: latest is {target}"
        assert created[target] == ns, f"{subject}: latest {target[:12]} is not the newest checkpoint"

    # every checkpoint restores exactly (and the shared subject's latest, by name)
    order = sorted(ids)
    cmds = [Cmd(["restore", cid, "--store", store, "--blobs", tmp_path / f"r-{cid[:12]}"]) for cid in order]
    cmds.append(Cmd(["restore", "agent:shared", "--store", store, "--blobs", tmp_path / "r-shared"]))
    out = run_parallel(cmds)
    expected = [*(docs[ids[cid]] for cid in order), docs[ids[latest["latest/agent/shared"]]]]
    targets = [*(tmp_path / f"r-{cid[:12]}" for cid in order), tmp_path / "r-shared"]
    for c, r, doc, target in zip(cmds, out, expected, targets, strict=True):
        assert r.returncode == 0, f"ckpt {c.args[1]}:\n{describe(r)}"
        assert same_document(json.loads(r.stdout), doc), f"restore {c.args[1]} gave a different document"
        assert (target / "shared").read_bytes() == shared_blob.read_bytes()

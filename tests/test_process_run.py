"""`ckpt run` with real programs, killed with real signals (docs/processes.md).

The program is tests/process_programs/sim.py, a deterministic simulation that keeps its
state in one file written IN PLACE, piece by piece, hundreds of times a second: two slots
of pieces behind a header; each step writes every piece of the inactive slot with a new
generation, then flips the header to it. The file is crash-consistent at every instant
(the header always names a complete slot), but a copy read while the program writes can
tear: it reads the header (generation g, slot A) and then slot A, which the program has
meanwhile rewritten with generation g+2 in part. `sim.validate` names the torn piece.

The must-show tests:
- killed with SIGKILL at random moments (KILLS per mode, 3 modes: at least 30 in all), the
  program always starts again from the subject's newest checkpoint (CKPT_RESTORED is that
  checkpoint and the step it resumes from is the one in that checkpoint's copy of the
  file), never from a torn file (every checkpoint's copy validates), and its final output
  equals an uninterrupted run's: with the cooperative protocol (and no freeze at all),
  with the cgroup freeze and with SIGSTOP;
- the same program copied without a freeze does tear, and with one does not;
- a program that ignores the cooperative request is frozen and checkpointed after the
  timeout; one that crashes on a bad checkpoint falls back to the one before after K
  failed starts, which is tagged and recorded;
- hostile input: a state path outside the root or through a symlink, a program that floods
  or garbles the control socket, a stale supervisor record: one line, a documented exit
  code, nothing half-written.

The kills per mode: 10 in the bounded default run (30 in all), 30 with CKPT_STRESS_SCALE=1,
N x 30 with N (tests/stress.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ckptcli.adapters.process import freeze as freezing
from ckptcli.api import Checkpoint
from ckptcli.store.repository import Store
from tests import stress

PROGRAMS = Path(__file__).parent / "process_programs"
SIM = PROGRAMS / "sim.py"
SUBJECT = "process:sim"
KILLS = stress.count(30, 10)  # per mode: 30 each at full size (CKPT_STRESS_SCALE=1), 10 each (30 in all) bounded
STEPS = 2500
sys.path.insert(0, str(PROGRAMS))
import sim  # noqa: E402


@dataclass
class Env:
    work: Path
    runtime: Path
    procs: list[subprocess.Popen[bytes]]
    cli_pids: list[int]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CKPT_RUNTIME_DIR": str(self.runtime), "NO_COLOR": "1"}

    def ckpt(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`ckpt ARGS` in the foreground (its pid kept: a `ckpt run` killed at the timeout
        leaves its cgroup to the fixture)."""
        argv = [sys.executable, "-m", "ckptcli", *args]
        p = subprocess.Popen(argv, cwd=self.work, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.cli_pids.append(p.pid)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def run(self, args: list[str], cmd: list[str]) -> subprocess.Popen[bytes]:
        """`ckpt run -S process:sim ARGS -- CMD` in the background, its stderr in sup.log."""
        with open(self.work / "sup.log", "ab") as log:
            p = subprocess.Popen(
                [sys.executable, "-m", "ckptcli", "run", "-S", SUBJECT, *args, "--", *cmd],
                cwd=self.work,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        self.procs.append(p)
        return p

    def sup_log(self) -> str:
        return (self.work / "sup.log").read_text(errors="replace")

    def starts(self) -> list[dict[str, str]]:
        path = self.work / "log.txt"
        lines = path.read_text().splitlines() if path.exists() else []
        return [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in lines if line.startswith("start ")]

    def log_lines(self) -> list[str]:
        path = self.work / "log.txt"
        return path.read_text().splitlines() if path.exists() else []

    def store(self) -> Store:
        return Store.open(self.work / ".ckpt")

    def checkpoints(self) -> list[tuple[int, str, dict[str, str]]]:
        """(created_ns, hex, labels) of the subject's checkpoints, oldest first."""
        st = self.store()
        out = []
        for cid in st.manifest_ids():
            m = st.manifest(cid)
            if str(m.subject) == SUBJECT:
                out.append((m.created_ns, cid.hex(), dict(m.labels)))
        return sorted(out)

    def state_copy(self, hexid: str) -> bytes | None:
        """The checkpoint's copy of state.bin (None: the program had not made it yet)."""
        ck = Checkpoint(self.store(), bytes.fromhex(hexid))
        if "state0" not in ck.blobs():
            return None
        buf = io.BytesIO()
        ck.write_blob("state0", buf)
        return buf.getvalue()

    def copy_of(self, hexid: str) -> bytes:
        data = self.state_copy(hexid)
        assert data is not None, f"checkpoint {hexid[:12]} has no copy of state.bin"
        return data


def _pids_in(work: Path) -> list[int]:
    """Every process whose working directory is `work` (what a test started there)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{name}/cwd") == str(work):
                    out.append(int(name))
    return out


def _cgroups_of(pids: list[int]) -> list[Path]:
    out = []
    mounts = freezing.cgroup_mounts()
    for sup in pids:
        for mount in (mounts.v2, mounts.v1_freezer):
            if mount is not None:
                out += [p for p in mount.rglob(f"ckpt-{sup}-*") if p.is_dir()]
    return out


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    runtime = Path(tempfile.mkdtemp(prefix="ckrt-", dir="/tmp"))  # short: socket paths are limited to 108 bytes
    work = tmp_path / "w"
    work.mkdir()
    Store.init(work / ".ckpt")
    e = Env(work, runtime, [], [])
    try:
        yield e
    finally:
        sups = [p.pid for p in e.procs] + e.cli_pids
        groups = _cgroups_of(sups)
        for g in groups:
            freezing.thaw_cgroup(g, 2 if (g / "cgroup.freeze").exists() else 1)
        for p in e.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for pid in _pids_in(work):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        for p in e.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
        for g in _cgroups_of(sups):
            with contextlib.suppress(OSError):
                g.rmdir()
        shutil.rmtree(runtime, ignore_errors=True)


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _wait(cond: Any, what: str, timeout: float = 30.0, detail: Callable[[], str] | None = None) -> Any:
    """cond()'s first true value; on timeout an AssertionError naming `what` (and `detail()`:
    what the run said, so a failure under load can be told from the outside)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}" + (f"\n{detail()}" if detail is not None else ""))


def _supervised(env: Env, sup: subprocess.Popen[bytes]) -> int:
    """The pid of the program `sup` runs now: the one that wrote the newest start line,
    once it is sup's child (the pid the run counts restarts by, never a guess among children)."""

    def current() -> int | None:
        starts = env.starts()
        pid = int(starts[-1]["pid"]) if starts else None
        return pid if pid is not None and pid in _children(sup.pid) and not _gone(pid) else None

    return int(_wait(current, "the program", detail=lambda: _what_the_run_said(env, sup)))


def _what_the_run_said(env: Env, sup: subprocess.Popen[bytes]) -> str:
    return f"supervisor {sup.pid} (exit {sup.poll()}), children {_children(sup.pid)}\nsup.log:\n{env.sup_log()}\nlog.txt:\n" + "\n".join(
        env.log_lines()[-20:]
    )


def _sim(*extra: str) -> list[str]:
    return [sys.executable, str(SIM), "state.bin", "out.txt", "log.txt", *extra]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The output of an uninterrupted run, without ckpt."""
    d = tmp_path_factory.mktemp("ref")
    subprocess.run([sys.executable, str(SIM), "state.bin", "out.txt", "log.txt", "--steps", str(STEPS)], cwd=d, check=True, timeout=120)
    return (d / "out.txt").read_text()


def _modes() -> list[Any]:
    why = freezing.available()
    return [
        pytest.param("cooperative", id="cooperative"),
        pytest.param(
            "cgroup", id="cgroup", marks=pytest.mark.skipif(bool(why["cgroup"]), reason=f"no cgroup freezer here: {why['cgroup']}")
        ),
        pytest.param(
            "freezer", id="freezer", marks=pytest.mark.skipif(bool(why["freezer"]), reason=f"no v1 freezer here: {why['freezer']}")
        ),
        pytest.param("sigstop", id="sigstop"),
    ]


@pytest.mark.parametrize("mode", _modes())
def test_sigkill_at_random_moments_resumes_from_the_last_checkpoint(env: Env, reference: str, mode: str) -> None:
    """KILLS SIGKILLs of the program at random moments; every start is from the newest checkpoint."""
    if mode == "cooperative":
        args, prog, how = ["--freeze", "none", "--timeout", "30s"], _sim("--steps", str(STEPS), "--cooperate"), {"cooperative"}
    else:
        args, prog = ["--freeze", mode, "--timeout", "0.5"], _sim("--steps", str(STEPS))
        how = {"cgroup": {"cgroup", "freezer"}, "freezer": {"freezer"}}.get(mode, {"sigstop"})
    sup = env.run([*args, "--state", "state.bin", "--every", "0.1", "--backoff", "0.05:0.05", "--bad-after", "1000"], prog)
    rng = random.Random(f"kills-{mode}")
    _wait(lambda: env.checkpoints(), "the first checkpoint")  # from then on every start is a restore
    killed, last = 0, None
    while killed < KILLS:
        time.sleep(rng.uniform(0.05, 0.3))
        assert sup.poll() is None, f"the supervisor ended before {KILLS} kills ({killed} done): {env.sup_log()[-2000:]}"
        kids = [k for k in _children(sup.pid) if k != last]
        if not kids:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(kids[0], signal.SIGKILL)
            killed += 1
            last = kids[0]
    try:
        rc = sup.wait(timeout=150)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the supervisor did not end: {env.sup_log()[-3000:]}\n{env.log_lines()[-5:]}") from None
    assert rc == 0, env.sup_log()[-3000:]
    assert killed >= KILLS
    # never from a torn state: the program validates its file at every start, and every copy validates
    lines = env.log_lines()
    assert not [line for line in lines if line.startswith("torn")], lines
    checkpoints = env.checkpoints()
    steps = {}
    for _ns, hexid, labels in checkpoints:
        data = env.state_copy(hexid)
        steps[hexid] = sim.validate(data)[0] if data is not None else 0
        if labels["process.reason"] != "exit":
            assert labels["process.how"] in how, labels
    # always from the last checkpoint: the newest one taken before that start, at its step
    # always from the last checkpoint: the newest one taken before the supervisor started
    # that program (its process:start event, recorded in the tails), at that checkpoint's step
    spawned = {}
    for _ns, hexid, _labels in checkpoints:
        for ev in Checkpoint(env.store(), bytes.fromhex(hexid)).section("events") or []:
            if ev["kind"] == "process:start":
                spawned[ev["pid"]] = ev
    starts = env.starts()
    assert starts[0]["restored"] == "none" and starts[0]["step"] == "0"
    assert len(starts) >= 2
    for s in starts[1:]:
        ev = spawned[int(s["pid"])]
        newest = [c for c in checkpoints if c[0] < ev["ts"]][-1][1]
        assert s["restored"] == ev["restored"] == newest, (s, ev, [c[1][:12] for c in checkpoints])
        assert int(s["step"]) == steps[newest]
    assert (env.work / "out.txt").read_text() == reference


def _torn(env: Env, hexid: str) -> bool:
    data = env.state_copy(hexid)
    if data is None:
        return False
    try:
        sim.validate(data)
    except ValueError:
        return True
    return False


def test_copying_without_a_freeze_tears_the_file_and_the_freeze_is_what_prevents_it(env: Env) -> None:
    """The same program, checkpointed every 20 ms while it writes flat out: without a freeze
    some copy tears; with SIGSTOP, as many copies never do."""
    prog = _sim("--steps", "100000000", "--pace", "0")
    sup = env.run(["--freeze", "none", "--timeout", "0.1", "--state", "state.bin", "--every", "0.02"], prog)
    seen: set[str] = set()
    torn: list[str] = []
    deadline = time.monotonic() + 30
    while not torn and time.monotonic() < deadline and len(seen) < 400:
        time.sleep(0.1)
        for _ns, hexid, labels in env.checkpoints():
            if hexid not in seen:
                seen.add(hexid)
                if labels.get("process.how") == "none" and _torn(env, hexid):
                    assert labels["process.consistency"] == "none", labels  # a copy not held still says so
                    torn.append(hexid)
    r = env.ckpt("halt", SUBJECT)
    assert r.returncode == 0, r.stderr
    sup.wait(30)
    assert torn, f"none of {len(seen)} copies taken without a freeze tore"
    compared = len(seen)

    shutil.rmtree(env.work / ".ckpt")
    Store.init(env.work / ".ckpt")
    sup = env.run(["--freeze", "sigstop", "--timeout", "0.1", "--state", "state.bin", "--every", "0.02"], prog)
    _wait(lambda: len(env.checkpoints()) >= min(compared, 60), "the frozen copies")
    r = env.ckpt("halt", SUBJECT)
    assert r.returncode == 0, r.stderr
    sup.wait(30)
    copies = [hexid for _ns, hexid, _l in env.checkpoints()]
    assert len(copies) >= min(compared, 60)
    assert not [h for h in copies if _torn(env, h)]


def test_a_program_that_ignores_the_request_is_frozen_after_the_timeout(env: Env) -> None:
    prog = _sim("--steps", "100000000", "--ignore-requests")
    sup = env.run(["--state", "state.bin", "--every", "0.2", "--timeout", "0.3"], prog)
    _wait(lambda: env.checkpoints(), "a checkpoint")
    r = env.ckpt("halt", SUBJECT)
    assert r.returncode == 0, r.stderr
    assert sup.wait(30) == 0
    first = env.checkpoints()[0][2]
    assert first["process.how"] in ("cgroup", "freezer", "sigstop")
    assert first["process.consistency"] == "crash"
    assert "did not say ready within 0.3 s; freezing it" in env.sup_log()


def test_a_checkpoint_the_program_keeps_failing_on_is_marked_bad_and_the_one_before_is_used(env: Env) -> None:
    """B is taken before the program poisons its state, C after; killed, it fails twice
    starting from C (--bad-after 2): C is tagged bad, `process:bad` is recorded, and the
    next start is from B."""
    marker, trigger = env.work / "poisoned-once", env.work / "poison-now"
    # poisoned on the test's word, not at a step: on a loaded machine the program ran past
    # any fixed step before the first `ckpt checkpoint` was taken
    prog = _sim("--steps", "100000000", "--poison-when", str(trigger), "--marker", str(marker))
    sup = env.run(["--state", "state.bin", "--every", "1h", "--backoff", "0.05:0.05", "--bad-after", "2", "--freeze", "sigstop"], prog)
    _wait(lambda: env.starts(), "the program's start")
    r = env.ckpt("checkpoint", SUBJECT, "--json")
    assert r.returncode == 0, r.stderr
    good = json.loads(r.stdout)["id"]
    assert sim.validate(env.copy_of(good))[2] == 0, "the first checkpoint came after the poison"
    trigger.touch()
    _wait(marker.exists, "the poison")
    r = env.ckpt("checkpoint", SUBJECT, "--json")
    assert r.returncode == 0, r.stderr
    bad = json.loads(r.stdout)["id"]
    assert sim.validate(env.copy_of(bad))[2] == sim.FLAG_POISON
    os.kill(_children(sup.pid)[0], signal.SIGKILL)
    _wait(lambda: len(env.starts()) >= 4, "the restarts")
    r = env.ckpt("halt", SUBJECT)
    assert r.returncode == 0, r.stderr
    assert sup.wait(30) == 0
    restored = [s["restored"] for s in env.starts()]
    assert restored[:4] == ["none", bad, bad, good], restored
    assert env.log_lines().count("poisoned") == 2
    tags = env.store().refs(prefix="refs/tags")
    assert tags == {f"tags/process-bad-{bad[:16]}": bytes.fromhex(bad)}
    latest = env.checkpoints()[-1][1]
    kinds = [(e["kind"], e.get("checkpoint")) for e in Checkpoint(env.store(), bytes.fromhex(latest)).section("events")]
    assert ("process:bad", bad) in kinds
    ls = env.ckpt("ls")
    assert f"tag:process-bad-{bad[:16]}" in ls.stdout
    # the process's life replays through the `process` reducers (entry point group ckptcli.reducers)
    r = env.ckpt("replay", latest, "--json")
    assert r.returncode == 0, r.stderr
    view = json.loads(r.stdout)["state"]["ext"]["process"]
    assert view["bad"] == [bad] and view["restarts"] >= 3 and view["last_restart"]["from"] == good
    # and the TUI's timeline shows it, row by row
    from ckptcli.history.timeline import Timeline

    tl = Timeline.open(Checkpoint(env.store(), bytes.fromhex(latest)))
    tl.check()
    rows = [tl.event(i).kind for i in range(len(tl) - 1)]
    assert "process:bad" in rows and "process:restart" in rows and "process:start" in rows
    assert tl.state(len(tl) - 1)["ext"]["process"]["bad"] == [bad]
    # the mark survives the supervisor: a new `ckpt run` starts from the good line, not from C
    sup = env.run(["--state", "state.bin", "--every", "1h", "--freeze", "sigstop"], prog)
    _wait(lambda: len(env.starts()) >= 5, "the start of the second supervisor")
    assert env.starts()[4]["restored"] not in (bad, "none")
    assert env.ckpt("halt", SUBJECT).returncode == 0
    sup.wait(30)


@pytest.mark.parametrize("how", ["outside", "through-symlink", "is-symlink"])
def test_a_state_path_outside_the_root_or_through_a_symlink_is_refused_before_the_program_starts(env: Env, how: str) -> None:
    outside = env.work.parent / "outside"
    outside.mkdir()
    (outside / "s.bin").write_text("theirs")
    if how == "outside":
        path = "../outside/s.bin"
    elif how == "through-symlink":
        (env.work / "link").symlink_to(outside)
        path = "link/s.bin"
    else:
        (env.work / "s.bin").symlink_to(outside / "s.bin")
        path = "s.bin"
    started = env.work / "started"
    r = env.ckpt("run", "-S", SUBJECT, "--state", path, "--", sys.executable, "-c", f"open({str(started)!r}, 'w')")
    assert r.returncode == 8, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt: error: --state "), lines
    assert "symlink" in lines[0] if how != "outside" else "outside the allowed root" in lines[0]
    assert not started.exists()
    assert env.checkpoints() == []
    assert (outside / "s.bin").read_text() == "theirs"


@pytest.mark.parametrize("mode", ["lines", "garbage", "long"])
def test_a_program_that_floods_its_control_socket_is_said_once_and_frozen(env: Env, mode: str) -> None:
    sup = env.run(
        ["--state", "state.bin", "--every", "0.2", "--timeout", "10s", "--freeze", "sigstop"],
        [sys.executable, str(PROGRAMS / "flood.py"), mode, "state.bin"],
    )
    _wait(lambda: len(env.checkpoints()) >= 2, "two checkpoints")
    r = env.ckpt("halt", SUBJECT)
    assert r.returncode == 0, r.stderr
    assert sup.wait(30) == 0
    said = [line for line in env.sup_log().splitlines() if "control socket" in line]
    assert len(said) == 1, env.sup_log()
    assert all(labels["process.how"] == "sigstop" for _ns, _h, labels in env.checkpoints())
    # the supervisor read a bounded amount: its memory stayed small
    assert "Traceback" not in env.sup_log()


def test_checkpoint_and_halt_without_a_supervisor_and_with_a_stale_record(env: Env) -> None:
    r = env.ckpt("checkpoint", SUBJECT)
    assert r.returncode == 3 and r.stderr.count("\n") == 1 and "no `ckpt run` supervises process:sim" in r.stderr
    # a record of a supervisor that is gone, which left a program stopped
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=env.work, start_new_session=True)
    env.procs.append(victim)
    os.kill(victim.pid, signal.SIGSTOP)
    _wait(lambda: Path(f"/proc/{victim.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T", "the stop")
    from ckptcli.adapters.process import supervisor

    os.environ["CKPT_RUNTIME_DIR"] = str(env.runtime)
    try:
        path, _rec = supervisor.find_record(env.store(), supervisor.Subject.parse(SUBJECT))
    finally:
        del os.environ["CKPT_RUNTIME_DIR"]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = {"pid": dead.pid, "started": 1, "socket": str(env.runtime / "x.sock"), "frozen": {"how": "sigstop", "pgid": victim.pid}}
    record["child"] = {"pid": victim.pid, "pgid": victim.pid, "started": supervisor._start_time(victim.pid)}
    path.write_text(json.dumps(record))
    r = env.ckpt("run", "-S", SUBJECT, "--", sys.executable, "-c", "pass")
    assert r.returncode == 9, r.stderr
    assert f"the program of an earlier `ckpt run` of process:sim (pid {victim.pid}) still runs" in r.stderr
    assert "sent SIGCONT" in r.stderr
    assert Path(f"/proc/{victim.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T"
    victim.kill()
    victim.wait()
    r = env.ckpt("halt", SUBJECT)
    assert r.returncode == 3 and "is gone; its stale record was cleared" in r.stderr, r.stderr
    assert not path.exists()


def test_sigterm_takes_a_final_checkpoint_and_is_forwarded(env: Env) -> None:
    sup = env.run(["--state", "state.bin", "--every", "1h", "--freeze", "sigstop"], _sim("--steps", "100000000"))
    _wait(lambda: env.starts(), "the start")
    os.kill(sup.pid, signal.SIGTERM)
    assert sup.wait(30) == 128 + signal.SIGTERM  # the program died of the forwarded SIGTERM
    ((_ns, hexid, labels),) = env.checkpoints()
    assert labels["process.reason"] == "exit" and labels["process.how"] == "sigstop"
    sim.validate(env.copy_of(hexid))
    assert _pids_in(env.work) == []


def test_the_cgroup_v1_freezer_freezes_a_real_program() -> None:
    name = f"ckpt-{os.getpid()}-v1test"
    try:
        fr = freezing.choose("cgroup", name, versions=(1,))
    except Exception as exc:  # noqa: BLE001 - the reason is the skip's
        pytest.skip(f"no v1 freezer here: {exc}")
    with tempfile.TemporaryDirectory() as d:
        counter = Path(d) / "n"
        child = subprocess.Popen(
            [sys.executable, "-c", f"import itertools,os\nfor i in itertools.count(): open({str(counter)!r}, 'w').write(str(i))"],
            preexec_fn=fr.prepare_child,
            process_group=0,
        )
        try:
            fr.attach(child.pid)
            _wait(counter.exists, "the counter")
            with fr.frozen():
                assert (fr.path / "freezer.state").read_text().strip() == "FROZEN"  # type: ignore[attr-defined]
                a = counter.read_text()
                time.sleep(0.3)
                assert counter.read_text() == a
            _wait(lambda: counter.read_text() != a, "the thawed counter to move")
        finally:
            child.kill()
            child.wait()
            fr.cleanup()
    assert not fr.path.exists()  # type: ignore[attr-defined]


def test_the_program_side_is_a_no_op_outside_ckpt_run_and_imports_nothing_else() -> None:
    code = (
        "import os, sys\n"
        "os.environ.pop('CKPT_CONTROL_FD', None); os.environ.pop('CKPT_RESTORED', None)\n"
        "import ckptcli.process as p\n"
        "ctl = p.connect()\n"
        "assert not ctl.active and ctl.restored is None and not ctl.need_checkpoint()\n"
        "with ctl.checkpoint(): pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('ckptcli')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "['ckptcli', 'ckptcli.process']"


@pytest.mark.parametrize("where", ["the path", "a directory on the way"])
def test_a_state_directory_replaced_by_a_symlink_is_not_restored_through_it(env: Env, where: str) -> None:
    """The program swaps its declared state directory (or the directory holding it) for a
    symlink to a directory outside the root, then dies. The path itself: the link is
    removed (not followed) and the directory restored as it was taken. A directory on the
    way: the restore refuses (one line, exit 8). Either way nothing is written outside."""
    (env.work / "sub" / "d").mkdir(parents=True)
    (env.work / "sub" / "d" / "s.txt").write_text("mine")
    outside = env.work.parent / "outside"
    outside.mkdir()
    script = "import os, sys, time\nif os.environ.get('CKPT_RESTORED'): sys.exit(0)\ntime.sleep(30)\n"
    sup = env.run(["--state", "sub/d", "--every", "1h", "--backoff", "0.05", "--freeze", "sigstop"], [sys.executable, "-c", script])
    _wait(lambda: _children(sup.pid), "the program")
    r = env.ckpt("checkpoint", SUBJECT)
    assert r.returncode == 0, r.stderr
    swapped = env.work / "sub" / "d" if where == "the path" else env.work / "sub"
    os.rename(swapped, swapped.with_name(swapped.name + ".old"))
    swapped.symlink_to(outside)
    os.kill(_children(sup.pid)[0], signal.SIGKILL)
    if where == "the path":
        assert sup.wait(30) == 0, env.sup_log()
        restored = env.work / "sub" / "d"
        assert not restored.is_symlink() and (restored / "s.txt").read_text() == "mine"
    else:
        assert sup.wait(30) == 8, env.sup_log()
        errors = [line for line in env.sup_log().splitlines() if line.startswith("ckpt: error:")]
        assert len(errors) == 1 and "symlink" in errors[0], env.sup_log()
    assert list(outside.iterdir()) == []


def _restored_run(env: Env, state: list[str], script: str) -> subprocess.Popen[bytes]:
    args = [a for p in state for a in ("--state", p)]
    return env.run([*args, "--every", "1h", "--backoff", "0.05", "--freeze", "sigstop"], [sys.executable, "-c", script])


def test_state_is_restored_by_its_path_and_a_path_the_checkpoint_does_not_hold_is_refused(env: Env) -> None:
    """Declared in another order, each path gets its own copy back (they were matched by
    position: a.txt got b.txt's bytes); a path the checkpoint holds no copy of is refused
    before anything is written (important.txt got a.txt's bytes)."""
    for name, text in (("a.txt", "AAAA"), ("b.txt", "BBBB"), ("important.txt", "IMPORTANT")):
        (env.work / name).write_text(text)
    assert env.ckpt("run", "-S", SUBJECT, "-q", "--state", "a.txt", "--state", "b.txt", "--", "true").returncode == 0
    (env.work / "a.txt").write_text("changed")
    assert env.ckpt("run", "-S", SUBJECT, "-q", "--state", "b.txt", "--state", "a.txt", "--", "true").returncode == 0
    assert ((env.work / "a.txt").read_text(), (env.work / "b.txt").read_text()) == ("AAAA", "BBBB")
    r = env.ckpt("run", "-S", SUBJECT, "-q", "--state", "important.txt", "--", "true")
    assert r.returncode == 4 and "holds no copy of --state important.txt" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr  # one line: the error and its hint
    assert (env.work / "important.txt").read_text() == "IMPORTANT"


def test_a_file_written_where_the_checkpoint_skipped_a_link_is_gone_after_a_restore(env: Env) -> None:
    """A state directory's link leaving it is skipped by the checkpoint; the program then
    writes a regular file there and is started again: that file is from after the
    checkpoint and goes, as every other file made since does (it was kept). A link still
    there may be the one skipped, and stays."""
    sd = env.work / "sd"
    sd.mkdir()
    (sd / "keep.txt").write_text("kept")
    (sd / "x").symlink_to("/etc/passwd")
    (sd / "y").symlink_to("/etc/hosts")
    assert env.ckpt("run", "-S", SUBJECT, "-q", "--state", "sd", "--", "true").returncode == 0
    (sd / "x").unlink()
    (sd / "x").write_text("POST-CHECKPOINT")
    look = "import os; open('seen.txt', 'w').write(' '.join(sorted(os.listdir('sd'))))"
    r = env.ckpt("run", "-S", SUBJECT, "-q", "--state", "sd", "--", sys.executable, "-c", look)
    assert r.returncode == 0, r.stderr
    assert (env.work / "seen.txt").read_text() == "keep.txt y"
    assert os.readlink(sd / "y") == "/etc/hosts"


def test_a_fifo_declared_as_state_is_one_line_exit_4_saying_what_to_declare(env: Env) -> None:
    os.mkfifo(env.work / "pipe")
    r = env.ckpt("run", "-S", SUBJECT, "-q", "--state", "pipe", "--", "true")
    assert r.returncode == 4, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert "--state pipe: " in r.stderr and "is a FIFO, neither a regular file nor a directory" in r.stderr, r.stderr
    assert "declare the regular files or directories the program keeps its state in" in r.stderr, r.stderr


_WRITES_FOR_3S = [
    sys.executable,
    "-c",
    "import pathlib, time\nfor i in range(10):\n    pathlib.Path('sd/keep.txt').write_text(str(i)); time.sleep(0.3)",
]


def test_the_supervisor_warns_once_of_a_link_its_checkpoints_skip(env: Env) -> None:
    # `ckpt take` warns of what it skips; the supervisor said nothing
    (env.work / "sd").mkdir()
    (env.work / "sd" / "keep.txt").write_text("kept")
    (env.work / "sd" / "out").symlink_to("/etc/passwd")
    r = env.ckpt(
        "run", "-S", SUBJECT, "--state", "sd", "--every", "300ms", "--freeze", "sigstop", "--timeout", "0.1", "--", *_WRITES_FOR_3S
    )
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if "warning:" in line]
    assert len(warned) == 1 and "holds no copy of " in warned[0] and "sd/out (symlink to /etc/passwd" in warned[0], r.stderr
    assert len(env.checkpoints()) >= 2, r.stderr  # it said so once, not at every checkpoint


def test_a_restored_directory_holds_what_its_copy_holds_and_no_leftover(env: Env) -> None:
    """Files the program made in its state directory after the checkpoint, and the
    temporary file of a restore killed midway, are gone after a restore."""
    (env.work / "d").mkdir()
    (env.work / "d" / "a").write_text("1")
    (env.work / "top.bin").write_bytes(b"x" * 10)
    script = (
        "import os, pathlib, sys, time\n"
        "if os.environ.get('CKPT_RESTORED'):\n"
        "    pathlib.Path('seen.txt').write_text(' '.join(sorted(os.listdir('d'))) + '|' + ' '.join(sorted(os.listdir('.'))))\n"
        "    sys.exit(0)\n"
        "time.sleep(30)\n"
    )
    sup = _restored_run(env, ["d", "top.bin"], script)
    _wait(lambda: _children(sup.pid), "the program")
    assert env.ckpt("checkpoint", SUBJECT).returncode == 0
    (env.work / "d" / "b").write_text("new")
    (env.work / "d" / "sub").mkdir()
    (env.work / "d" / "sub" / "c").write_text("new")
    (env.work / ".top.bin.ckpt-restore-4242").write_bytes(b"half")  # as a restore killed midway leaves it
    os.kill(_children(sup.pid)[0], signal.SIGKILL)
    assert sup.wait(30) == 0, env.sup_log()
    inside, top = (env.work / "seen.txt").read_text().split("|")
    assert inside == "a" and ".top.bin.ckpt-restore-4242" not in top.split(), (inside, top)


def test_doctor_hook_thaws_what_a_dead_supervisor_left_frozen(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """supervisor.thaw_stale_records (for `ckpt doctor`): a stopped program whose supervisor
    is gone runs again, and the record of it says so."""
    from ckptcli.adapters.process import supervisor

    monkeypatch.setenv("CKPT_RUNTIME_DIR", str(env.runtime))
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=env.work, start_new_session=True)
    env.procs.append(victim)
    os.kill(victim.pid, signal.SIGSTOP)
    _wait(lambda: Path(f"/proc/{victim.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T", "the stop")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = {"subject": SUBJECT, "pid": dead.pid, "started": 1, "frozen": {"how": "sigstop", "pgid": victim.pid}, "child": None}
    (env.runtime / "0123.json").write_text(json.dumps(record))
    live = {"subject": "process:other", "pid": os.getpid(), "started": supervisor._start_time(os.getpid())}
    (env.runtime / "4567.json").write_text(json.dumps(live))
    said = supervisor.thaw_stale_records()
    assert said == [f"{SUBJECT}: its supervisor (pid {dead.pid}) is gone; sent SIGCONT to process group {victim.pid}"]
    assert Path(f"/proc/{victim.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T"
    assert not (env.runtime / "0123.json").exists() and (env.runtime / "4567.json").exists()


@pytest.mark.parametrize("mode", _modes()[1:])
def test_a_supervisor_killed_with_sigkill_leaves_a_record_the_next_run_clears(env: Env, mode: str) -> None:
    """SIGKILL to `ckpt run`: its program runs on; the next `ckpt run` refuses (exit 9) naming
    it; once it is stopped, the next one clears the stale record (and the cgroup the dead
    supervisor made) and resumes from the last checkpoint."""
    prog = _sim("--steps", "100000000")
    sup = env.run(["--state", "state.bin", "--every", "1h", "--freeze", mode, "--timeout", "0.1"], prog)
    _wait(lambda: env.starts(), "the start")
    assert env.ckpt("checkpoint", SUBJECT).returncode == 0
    seen = json.loads(env.ckpt("doctor", "--json").stdout)["checks"]
    assert any(c["name"] == "process supervisors" and f"{SUBJECT} (pid {sup.pid})" in c["detail"] for c in seen), seen
    # (killed while it is not frozen: a group orphaned while stopped gets SIGHUP from the kernel)
    orphan = _children(sup.pid)[0]
    os.kill(sup.pid, signal.SIGKILL)
    sup.wait()
    groups = _cgroups_of([sup.pid])
    seen = json.loads(env.ckpt("doctor", "--json").stdout)["checks"]
    (stale,) = [c for c in seen if c["name"] == f"supervisor {SUBJECT}"]
    assert stale["status"] == "warn" and f"(pid {sup.pid}) is gone" in stale["detail"], stale
    assert f"its program (pid {orphan}) still runs, unsupervised" in stale["detail"]
    # halt refuses while the program runs (below): the hint says to stop it first
    assert stale["hint"].startswith(f"stop its program first (kill -TERM -{orphan}); then `ckpt halt {SUBJECT}`"), stale
    r = env.ckpt("checkpoint", SUBJECT)  # it said "its stale record was cleared", and kept it
    assert r.returncode == 3 and f"its program (pid {orphan}) still runs" in r.stderr and f"kill -TERM -{orphan}" in r.stderr, r.stderr
    r = env.ckpt("run", "-S", SUBJECT, "--state", "state.bin", "--", *prog)
    assert r.returncode == 9, r.stderr
    assert f"the program of an earlier `ckpt run` of process:sim (pid {orphan}) still runs" in r.stderr
    os.kill(orphan, signal.SIGKILL)
    _wait(
        lambda: not Path(f"/proc/{orphan}").exists() or "Z" in Path(f"/proc/{orphan}/stat").read_text().rsplit(")", 1)[1][:3], "the orphan"
    )
    last = env.checkpoints()[-1][1]
    sup = env.run(["--state", "state.bin", "--every", "1h", "--freeze", mode], prog)
    _wait(lambda: len(env.starts()) >= 2, "the new start")
    assert env.starts()[1]["restored"] == last
    assert all(not g.exists() for g in groups)
    assert env.ckpt("halt", SUBJECT).returncode == 0
    assert sup.wait(30) == 0


def test_a_store_spelled_another_way_is_the_same_store_to_the_supervisor(env: Env) -> None:
    """`-s .ckpt` and `-s /abs/.ckpt/` (or a link to it) name one store: a second `ckpt run`
    of the subject is refused, and checkpoint and halt reach the first (a second
    supervisor ran beside the first, and both checkpointed the same state)."""
    (env.work / "alias").symlink_to(env.work / ".ckpt")
    sup = env.run(["--state", "state.bin", "--every", "1h", "--freeze", "sigstop"], _sim("--steps", "100000000"))
    _wait(lambda: env.starts(), "the start")
    for spelling in (str(env.work / ".ckpt") + "/", "./alias"):
        r = env.ckpt("-s", spelling, "run", "-S", SUBJECT, "--state", "state.bin", "--", "true")
        assert r.returncode == 9 and "is already supervised" in r.stderr, (spelling, r.stderr)
        asked = env.ckpt("-s", spelling, "checkpoint", SUBJECT)
        assert asked.returncode == 0, (spelling, asked.stderr)
    assert env.ckpt("-s", "./alias", "halt", SUBJECT).returncode == 0
    assert sup.wait(30) == 0


def test_sigusr1_asks_for_a_checkpoint(env: Env) -> None:
    sup = env.run(["--state", "state.bin", "--every", "1h", "--freeze", "sigstop"], _sim("--steps", "100000000"))
    _wait(lambda: env.starts(), "the start")
    os.kill(sup.pid, signal.SIGUSR1)
    ((_ns, hexid, labels),) = _wait(lambda: env.checkpoints(), "the requested checkpoint")
    assert labels["process.reason"] == "request" and labels["process.how"] == "sigstop"
    sim.validate(env.copy_of(hexid))
    assert env.ckpt("halt", SUBJECT).returncode == 0
    assert sup.wait(30) == 0


def test_sigusr1_while_ckpt_run_still_loads_is_answered_not_fatal(env: Env) -> None:
    # the docs offer `kill -USR1` to ask for a checkpoint; sent before the supervisor's
    # handler was in place (ckpt still importing), it ended ckpt with no word (exit 138)
    sup = env.run(["--state", "state.bin", "--every", "1h", "--freeze", "sigstop"], _sim("--steps", "100000000"))
    # sent once ckpt's first line has run (it holds the signal back: SigBlk in /proc says
    # so) and long before the CLI has loaded and the supervisor's handler is in place;
    # before that first line, in the interpreter's own start, nothing can be done
    _wait(lambda: _blocked(sup.pid) & (1 << (signal.SIGUSR1 - 1)), "ckpt holding SIGUSR1 back", timeout=30, detail=env.sup_log)
    os.kill(sup.pid, signal.SIGUSR1)
    _wait(lambda: env.starts() or sup.poll() is not None, "the start", detail=lambda: env.sup_log())
    assert sup.poll() is None, env.sup_log()
    ((_ns, _hexid, labels),) = _wait(lambda: env.checkpoints(), "the requested checkpoint")
    assert labels["process.reason"] == "request"
    assert env.ckpt("halt", SUBJECT).returncode == 0
    assert sup.wait(30) == 0


def test_a_halt_that_stops_waiting_for_a_program_ignoring_sigterm_says_the_final_checkpoint_is_taken(env: Env) -> None:
    # it said only "did not answer within 2 s", as if the halt had failed, while the final
    # checkpoint was committed and the supervisor was waiting out the program's grace time
    (env.work / "state.bin").write_bytes(b"x")
    deaf = ["sh", "-c", 'trap "" TERM; while :; do sleep 0.05; done']
    sup = env.run(["--state", "state.bin", "--every", "1h", "--freeze", "sigstop"], deaf)
    _wait(lambda: _children(sup.pid), "the program")
    halt = env.ckpt("halt", SUBJECT, "--timeout", "3s")
    assert halt.returncode == 9, halt.stderr
    ((_ns, hexid, _labels),) = env.checkpoints()
    err = halt.stderr
    assert f"took the final checkpoint {hexid[:12]}" in err and "SIGKILL" in err and "30 s of SIGTERM" in err, err
    assert len(err.strip().splitlines()) <= 2, err  # the line and its hint
    for pid in _children(sup.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert sup.wait(30) == 0  # the halt it was asked for: 0 once the program is gone


def _blocked(pid: int) -> int:
    """The signals `pid`'s main thread blocks (SigBlk of /proc/PID/status), 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return int(re.search(r"^SigBlk:\s*([0-9a-f]+)", status, re.M).group(1), 16)  # type: ignore[union-attr]


def test_the_command_word_is_found_past_ckpts_own_options() -> None:
    from ckptcli.cli.boot import _command

    assert _command(["run", "-S", "process:x"]) == "run"
    assert _command(["-s", "run", "ls"]) == "ls"  # a store named run
    assert _command(["--store", "/s", "--store-option", "a=b", "--json", "run"]) == "run"
    assert _command(["--store=/s", "-q", "run"]) == "run"
    assert _command(["help", "run"]) == "help"
    assert _command(["--version"]) is None


def test_max_restarts_ends_with_the_programs_status_and_the_backoff_doubles(env: Env) -> None:
    sup = env.run(["--max-restarts", "3", "--backoff", "0.01:0.03"], [sys.executable, "-c", "import sys; sys.exit(7)"])
    assert sup.wait(60) == 7
    delays = re.findall(r"restarting in ([0-9.]+) s", env.sup_log())
    assert delays == ["0.01", "0.02", "0.03"], env.sup_log()
    assert "gave up after 3 restarts (--max-restarts)" in env.sup_log()


def test_halt_during_the_backoff_ends_supervision(env: Env) -> None:
    sup = env.run(["--backoff", "1h"], [sys.executable, "-c", "import sys; sys.exit(5)"])
    _wait(lambda: "restarting in 3600 s" in env.sup_log(), "the backoff")
    r = env.ckpt("halt", SUBJECT, "--json")
    assert r.returncode == 0, r.stderr
    said = json.loads(r.stdout)
    assert said["subject"] == SUBJECT and [said["id"]] == [hexid for _ns, hexid, _labels in env.checkpoints()]  # the exit, stored
    assert sup.wait(30) == 0
    assert "Traceback" not in env.sup_log() and "internal error" not in env.sup_log()


def test_a_program_that_only_handles_a_signal_answers_from_a_shell(env: Env) -> None:
    """--on-signal USR1: a bash program that never says hello traps the signal and answers on
    the same socket, as docs/processes.md shows; its checkpoints are cooperative."""
    script = (
        'trap \'read -r line <&$CKPT_CONTROL_FD; echo "ready ${line#checkpoint }" >&$CKPT_CONTROL_FD; '
        'read -r resume <&$CKPT_CONTROL_FD; echo "$resume" >> resumed.txt\' USR1\n'
        "echo 1 > state.txt\n"
        "while :; do sleep 0.05; done\n"
    )
    sup = env.run(["--state", "state.txt", "--every", "1h", "--on-signal", "USR1", "--timeout", "20s"], ["bash", "-c", script])
    _wait(lambda: (env.work / "state.txt").exists(), "the program")
    r = env.ckpt("checkpoint", SUBJECT, "--json")
    assert r.returncode == 0, r.stderr
    hexid = json.loads(r.stdout)["id"]
    assert env.ckpt("halt", SUBJECT).returncode == 0
    sup.wait(30)
    first = env.checkpoints()[0]
    assert first[1] == hexid and first[2]["process.how"] == "cooperative" and first[2]["process.consistency"] == "application"
    assert (env.work / "resumed.txt").read_text().split("\n")[0] == f"resume 1 {hexid}"


def _process_section(env: Env, hexid: str) -> dict[str, Any]:
    section = Checkpoint(env.store(), bytes.fromhex(hexid)).section("ext:process")
    assert isinstance(section, dict)
    return section


def test_every_auto_shortens_while_failures_rise_and_advise_reads_the_run(env: Env) -> None:
    """`--every auto`: the schedule is Daly's interval from what the run measures
    (ckptcli.history.advise.AdaptiveSchedule); each failure of the program shortens it.
    Every checkpoint holds /proc's view of the program; `ckpt advise SUBJECT` reads the
    failures the run recorded."""
    sup = env.run(["--state", "state.bin", "--every", "auto", "--freeze", "sigstop", "--backoff", "0.05"], _sim("--steps", "100000000"))
    _wait(lambda: env.starts(), "the start")
    os.kill(sup.pid, signal.SIGUSR1)
    first = _wait(lambda: env.checkpoints(), "the first checkpoint")[-1][1]
    view = _process_section(env, first)
    before = view["schedule"]
    assert before["kind"] == "adaptive" and before["recent_failures"] == 0, before
    proc = view["proc"]
    assert proc["pid"] == int(env.starts()[-1]["pid"]) and "sim.py" in " ".join(proc["argv"]), proc
    for k in range(3):
        kid = _supervised(env, sup)
        os.kill(kid, signal.SIGKILL)
        _wait(lambda n=k: len(env.starts()) >= n + 2, f"restart {k + 1}", detail=lambda: _what_the_run_said(env, sup))  # type: ignore[misc]
    os.kill(sup.pid, signal.SIGUSR1)
    last = _wait(lambda: [c for c in env.checkpoints() if c[1] != first], "the checkpoint after the failures")[-1][1]
    after = _process_section(env, last)["schedule"]
    assert after["recent_failures"] == 3 and after["next_delay_seconds"] < before["next_delay_seconds"], (before, after)
    assert env.ckpt("halt", SUBJECT).returncode == 0
    assert sup.wait(30) == 0
    r = env.ckpt("advise", SUBJECT, "--json")
    assert r.returncode == 0, r.stderr
    measured = json.loads(r.stdout)
    assert measured["measured"]["failures"] == 3, measured


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def test_what_is_left_of_a_dead_program_s_group_goes_with_it(env: Env) -> None:
    """A program that starts a child writing its state and then dies: the child is killed
    with it, so the restarted program is the only writer (both generations' children wrote on)."""
    script = (
        "import os, subprocess, sys, time\n"
        "loop = 'import time\\nwhile True:\\n    open(\\'s.txt\\', \\'a\\').write(\\'x\\')\\n    time.sleep(0.05)'\n"
        "kid = subprocess.Popen([sys.executable, '-c', loop])\n"
        "open('kids.txt', 'a').write(f'{kid.pid}\\n')\n"
        "time.sleep(0.3)\n"
        "os._exit(1)\n"
    )
    (env.work / "s.txt").write_text("")
    sup = env.run(["--state", "s.txt", "--freeze", "sigstop", "--backoff", "0.1", "--max-restarts", "1"], [sys.executable, "-c", script])
    assert sup.wait(60) == 1, env.sup_log()
    kids = [int(x) for x in (env.work / "kids.txt").read_text().split()]
    assert len(kids) == 2
    _wait(lambda: all(_gone(k) for k in kids), "the children's end", timeout=5)


def test_when_every_checkpoint_is_bad_supervision_gives_up_instead_of_a_cold_start_on_the_same_files(env: Env) -> None:
    """The program poisons its state, is checkpointed, and fails from then on: the
    checkpoint is marked bad, and with none before it ckpt gives up (it looped for ever,
    "cold starting" on the poisoned file)."""
    script = (
        "import pathlib, sys, time\n"
        "s = pathlib.Path('s.txt')\n"
        "if s.exists() and s.read_text() == 'poison':\n"
        "    sys.exit(3)\n"
        "s.write_text('poison')\n"
        "pathlib.Path('poisoned').write_text('')\n"
        "time.sleep(30)\n"
    )
    sup = env.run(
        ["--state", "s.txt", "--freeze", "sigstop", "--backoff", "0.05", "--bad-after", "1", "--every", "1h"],
        [sys.executable, "-c", script],
    )
    _wait(lambda: (env.work / "poisoned").exists(), "the poison")
    assert env.ckpt("checkpoint", SUBJECT).returncode == 0
    os.kill(_children(sup.pid)[0], signal.SIGKILL)
    assert sup.wait(60) == 3, env.sup_log()
    log = env.sup_log()
    assert "marked bad" in log and "failed 1 time after" in log and "every checkpoint back to the first is marked bad" in log, log
    assert log.count("started ") == 2, log  # the cold start and the one restore: no cold start on the poison


@pytest.mark.parametrize("sig", ["KILL", "SIGSTOP", "9"])
def test_on_signal_refuses_a_signal_no_program_can_handle(env: Env, sig: str) -> None:
    """--on-signal KILL killed the program at every checkpoint request; STOP stopped it."""
    r = env.ckpt("run", "-S", SUBJECT, "--on-signal", sig, "--", sys.executable, "-c", "open('ran', 'w')")
    assert r.returncode == 2 and "cannot be handled by a program" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (env.work / "ran").exists() and env.checkpoints() == []


@pytest.mark.parametrize("declared", [".ckpt", ".", "sub/..", ".ckpt/refs"])
def test_a_state_path_that_holds_the_store_or_lies_in_it_is_refused(env: Env, declared: str) -> None:
    """`--state .ckpt` copied the store into itself at every checkpoint and restored it over itself."""
    (env.work / "sub").mkdir(exist_ok=True)
    r = env.ckpt("run", "-S", SUBJECT, "--state", declared, "--", sys.executable, "-c", "open('ran', 'w')")
    assert r.returncode == 8 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert not (env.work / "ran").exists() and env.checkpoints() == []


def test_the_command_line_is_stored_with_its_secrets_redacted(env: Env) -> None:
    """The program's argv goes into every checkpoint (ext:process) and its process:start
    event: a secret on it is stored as its placeholder, and the program still gets it."""
    script = "import sys; open('args.txt', 'w').write(' '.join(sys.argv[1:]))"
    argv = [sys.executable, "-c", script, "--api-key", "sk-proj-abcdefghijklmnopqrstuvwxyz", "-H", "Authorization: Bearer tok12345"]
    r = env.ckpt("run", "-S", SUBJECT, "-q", "--", *argv)
    assert r.returncode == 0, r.stderr
    assert (env.work / "args.txt").read_text() == " ".join(argv[3:])
    ((_ns, hexid, _labels),) = env.checkpoints()
    ck = Checkpoint(env.store(), bytes.fromhex(hexid))
    stored = json.dumps([ck.section("ext:process"), ck.section("events")])
    assert "abcdefghijklmnopqrstuvwxyz" not in stored and "tok12345" not in stored, stored
    assert "[REDACTED:" in stored


def test_the_program_s_secrets_stay_out_of_the_reflog(env: Env) -> None:
    """The reflog entry of each take names the command: `ckpt run -- mysql -psecret` kept the
    password there (and in lock records), though the checkpoint itself had it redacted."""
    script = "import sys; open('args.txt', 'w').write(' '.join(sys.argv[1:]))"
    argv = [sys.executable, "-c", script, "-u", "bob:hunter2-user", "--password", "hunter2-flag", "PGPASSWORD=hunter2-env"]
    r = env.ckpt("run", "-S", SUBJECT, "-q", "--", *argv)
    assert r.returncode == 0, r.stderr
    assert (env.work / "args.txt").read_text() == " ".join(argv[3:])  # the program still got them
    log = env.ckpt("reflog", SUBJECT, "--json")
    assert log.returncode == 0 and "ckpt run" in log.stdout, log.stdout + log.stderr
    assert "hunter2" not in log.stdout and "[REDACTED:" in log.stdout, log.stdout


@pytest.mark.parametrize("mode", [m for m in _modes() if m.id in ("cgroup", "freezer")])
def test_under_a_cgroup_freeze_a_child_that_left_the_group_goes_with_the_program(env: Env, mode: str) -> None:
    """A child that called setsid is out of the program's process group but in its cgroup:
    it is killed when the program dies (it wrote on beside the restarted program)."""
    script = (
        "import os, sys, time\n"
        "if os.environ.get('CKPT_RESTORED') or os.path.exists('started'):\n"
        "    time.sleep(30)\n"
        "open('started', 'w')\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    open('kid.txt', 'w').write(str(os.getpid()))\n"
        "    while True:\n"
        "        time.sleep(0.05)\n"
        "time.sleep(0.3)\n"
        "os._exit(3)\n"
    )
    sup = env.run(["--freeze", mode, "--backoff", "0.05", "--every", "1h"], [sys.executable, "-c", script])
    _wait(lambda: len(env.starts()) >= 2 or "attempt 2" in env.sup_log(), "the restart")
    kid = int((env.work / "kid.txt").read_text())
    _wait(lambda: _gone(kid), "the end of the child that left the group", timeout=5)
    assert env.ckpt("halt", SUBJECT).returncode == 0
    assert sup.wait(30) == 0


def test_a_signal_during_the_backoff_ends_with_128_plus_it(env: Env) -> None:
    """SIGTERM between two starts exited 0, which a scheduler reads as success."""
    sup = env.run(["--backoff", "1h"], [sys.executable, "-c", "import sys; sys.exit(5)"])
    _wait(lambda: "restarting in 3600 s" in env.sup_log(), "the backoff")
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(30) == 128 + signal.SIGTERM, env.sup_log()
    assert "halted (SIGTERM)" in env.sup_log()


def test_a_state_file_turned_into_a_symlink_is_not_checkpointed(env: Env) -> None:
    """The program replaces its state file with a symlink: the checkpoint is refused with a
    line (it stored the link, which the next run then refused), and the restore is of the
    last checkpoint taken before."""
    (env.work / "state.bin").write_text("v1")
    (env.work / "state.real").write_text("v2")
    script = "import time\ntime.sleep(30)\n"
    sup = env.run(["--state", "state.bin", "--every", "1h", "--freeze", "sigstop", "--backoff", "0.05"], [sys.executable, "-c", script])
    _wait(lambda: _children(sup.pid), "the start")
    r = env.ckpt("checkpoint", SUBJECT, "--json")
    assert r.returncode == 0, r.stderr
    good = json.loads(r.stdout)["id"]
    os.unlink(env.work / "state.bin")
    os.symlink("state.real", env.work / "state.bin")
    r = env.ckpt("checkpoint", SUBJECT)
    assert r.returncode == 1, r.stderr
    assert "checkpoint not taken" in env.sup_log() and "symlink" in env.sup_log()
    os.kill(_children(sup.pid)[0], signal.SIGKILL)
    _wait(lambda: f"attempt 2, restored from {good[:12]}" in env.sup_log(), "the restart from the good checkpoint")
    assert not (env.work / "state.bin").is_symlink() and (env.work / "state.bin").read_text() == "v1"
    assert env.ckpt("halt", SUBJECT).returncode == 0
    sup.wait(30)


def test_many_checkpoint_requests_at_once_are_all_answered(env: Env) -> None:
    """15 `ckpt checkpoint` at once: a full listen backlog failed some at once with exit 9."""
    sup = env.run(["--state", "state.bin", "--every", "1h", "--freeze", "sigstop"], _sim("--steps", "100000000"))
    _wait(lambda: env.starts(), "the start")
    argv = [sys.executable, "-m", "ckptcli", "checkpoint", SUBJECT, "--timeout", "60s"]
    asks = [subprocess.Popen(argv, cwd=env.work, env=env.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(15)]
    codes = [(p.wait(90), p.stderr.read().decode() if p.stderr else "") for p in asks]
    for p in asks:
        for stream in (p.stdout, p.stderr):
            if stream is not None:
                stream.close()
    assert all(code == 0 for code, _err in codes), codes
    assert env.ckpt("halt", SUBJECT).returncode == 0
    sup.wait(30)


def test_two_runs_of_one_subject_started_at_once_never_both_run(env: Env) -> None:
    """The record was checked, then written, with nothing held between: started together,
    two runs both ran (4 rounds in 20). Now one of each pair exits 9."""
    script = "import os, time; open('who.txt', 'a').write(f'{os.getpid()}\\n'); time.sleep(1)"
    for _ in range(8):
        a = env.run(["--every", "1h"], [sys.executable, "-c", script])
        b = env.run(["--every", "1h"], [sys.executable, "-c", script])
        codes = sorted([a.wait(60), b.wait(60)])
        assert codes == [0, 9], (codes, env.sup_log()[-2000:])
    assert len((env.work / "who.txt").read_text().split()) == 8


def test_a_long_command_line_keeps_the_runtime_record_readable(env: Env) -> None:
    """An 80 KB command line made the record too big to read, so it was taken for none: a
    second run started, and checkpoint and halt said no supervisor ran."""
    long = ["x" * 100] * 800
    sup = env.run(["--every", "1h"], [sys.executable, "-c", "import time; time.sleep(30)", *long])
    _wait(lambda: _children(sup.pid), "the program")
    r = env.ckpt("run", "-S", SUBJECT, "--", sys.executable, "-c", "open('second', 'w')")
    assert r.returncode == 9 and not (env.work / "second").exists(), r.stderr
    assert env.ckpt("halt", SUBJECT).returncode == 0
    assert sup.wait(30) == 0


def _stale_record(env: Env, **fields: Any) -> Path:
    """A record of SUBJECT whose supervisor is gone (as a damaged or planted one may say)."""
    from ckptcli.adapters.process import supervisor

    st = env.store()
    path = env.runtime / f"{supervisor._key(st, supervisor.process_subject(SUBJECT))}.json"
    env.runtime.mkdir(mode=0o700, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "pid": 999_999_999, "started": 1, "subject": SUBJECT, **fields}))
    return path


@pytest.mark.parametrize(
    "fields",
    [
        {"socket": "RUNTIME/../victim"},
        {"cgroup": "WORK/ckpt-victim"},
        {"frozen": {"how": "cgroup", "cgroup": "WORK/ckpt-link"}},
        {"frozen": {"how": "sigstop", "pgid": 10**23}},
        {"frozen": {"how": "sigstop", "pgid": -1}},
    ],
    ids=["socket-outside", "cgroup-not-a-cgroup", "frozen-cgroup-through-a-link", "pgid-huge", "pgid-negative"],
)
def test_a_stale_record_s_fields_are_not_trusted(env: Env, fields: dict[str, Any]) -> None:
    """A stale record's paths and numbers are a dead supervisor's, or planted: a socket
    outside the runtime directory was unlinked, any empty ckpt-* directory removed, a
    cgroup path followed through a link (cgroup.freeze written there), a huge or negative
    process group an internal error."""
    victim = env.runtime.parent / "victim"
    victim.write_text("keep")
    (env.work / "ckpt-victim").mkdir()
    outside = env.work.parent / "outside"
    outside.mkdir()
    (env.work / "ckpt-link").symlink_to(outside)
    text = json.dumps(fields).replace("RUNTIME", str(env.runtime)).replace("WORK", str(env.work))
    _stale_record(env, **json.loads(text))
    for verb in ("halt", "checkpoint"):
        r = env.ckpt(verb, SUBJECT)
        assert r.returncode == 3 and "internal error" not in r.stderr, r.stderr
    assert victim.read_text() == "keep" and (env.work / "ckpt-victim").is_dir() and list(outside.iterdir()) == []


def test_an_unreadable_record_is_not_taken_for_none(env: Env) -> None:
    """A record that does not parse (or is too big) refuses a new run (exit 9) naming it."""
    path = _stale_record(env)
    path.write_text("{" * 10)
    r = env.ckpt("run", "-S", SUBJECT, "--", sys.executable, "-c", "open('ran', 'w')")
    assert r.returncode == 9 and "cannot be read" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (env.work / "ran").exists()


def _events(env: Env, hexid: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = Checkpoint(env.store(), bytes.fromhex(hexid)).section("events") or []
    return events


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "halt"])
def test_a_halt_during_the_backoff_stores_the_exit_and_the_restart(env: Env, how: str) -> None:
    """The process:exit and process:restart of a program that died were lost when
    supervision was halted during the backoff: nothing stored them."""
    (env.work / "state.bin").write_text("v1")
    flag = env.work / "die"
    script = f"import os, sys, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.01)\nsys.exit(5)\n"
    sup = env.run(["--state", "state.bin", "--every", "1h", "--freeze", "sigstop", "--backoff", "1h"], [sys.executable, "-c", script])
    _wait(lambda: _children(sup.pid), "the start")
    r = env.ckpt("checkpoint", SUBJECT, "--json")
    assert r.returncode == 0, r.stderr
    good = json.loads(r.stdout)["id"]
    (env.work / "state.bin").write_text("what the dying program left")
    flag.write_text("")
    _wait(lambda: "restarting in 3600 s" in env.sup_log(), "the backoff")
    if how == "halt":
        r = env.ckpt("halt", SUBJECT, "--json")
        assert r.returncode == 0, r.stderr
        assert sup.wait(30) == 0
    else:
        sup.send_signal(getattr(signal, how))
        assert sup.wait(30) == 128 + getattr(signal, how), env.sup_log()
    cks = env.checkpoints()
    last = cks[-1]
    assert len(cks) == 2 and last[2]["process.reason"] == "halt" and last[2]["process.state_from"] == good, cks
    kinds = [e["kind"] for e in _events(env, last[1])]
    assert kinds[-2:] == ["process:exit", "process:restart"], kinds
    assert [e["code"] for e in _events(env, last[1]) if e["kind"] == "process:exit"] == [5]
    # it holds the copy the next start restores (the good checkpoint's), not the dead program's files
    assert env.copy_of(last[1]) == env.copy_of(good) == b"v1"
    # and the next run carries on from it: its seq continues, and it starts from that copy
    sup = env.run(["--state", "state.bin", "--every", "1h", "--backoff", "1h"], [sys.executable, "-c", "import time; time.sleep(60)"])
    _wait(lambda: f"attempt 1, restored from {last[1][:12]}" in env.sup_log(), "the next run's start")
    assert (env.work / "state.bin").read_text() == "v1"
    assert env.ckpt("halt", SUBJECT).returncode == 0
    sup.wait(30)


def test_a_halt_in_the_backoff_before_any_checkpoint_stores_the_events_and_is_no_start_point(env: Env) -> None:
    sup = env.run(["--backoff", "1h"], [sys.executable, "-c", "import sys; sys.exit(5)"])
    _wait(lambda: "restarting in 3600 s" in env.sup_log(), "the backoff")
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(30) == 128 + signal.SIGTERM, env.sup_log()
    cks = env.checkpoints()
    assert len(cks) == 1 and cks[0][2]["process.state_from"] == "none", cks
    assert [e["kind"] for e in _events(env, cks[0][1])] == ["process:start", "process:exit", "process:restart"]
    # the next run starts cold (there is no copy to restore), its events continue the seq
    sup = env.run(["--backoff", "1h"], [sys.executable, "-c", "import time; time.sleep(60)"])
    _wait(lambda: env.sup_log().count("attempt 1, cold start") == 2, "the next run's cold start")
    assert env.ckpt("halt", SUBJECT).returncode == 0
    sup.wait(30)


def test_giving_up_after_max_restarts_stores_the_last_exit(env: Env) -> None:
    sup = env.run(["--max-restarts", "1", "--backoff", "0.01"], [sys.executable, "-c", "import sys; sys.exit(7)"])
    assert sup.wait(60) == 7
    cks = env.checkpoints()
    assert len(cks) == 1, cks
    kinds = [e["kind"] for e in _events(env, cks[0][1])]
    assert kinds == ["process:start", "process:exit", "process:restart", "process:start", "process:exit"], kinds

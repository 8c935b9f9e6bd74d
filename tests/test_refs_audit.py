"""What an audit of the incident commands found: a reset is not undone by a take that
was already running, by a lost reflog (verify, repair refs), by a lost head hint, or by
`repair checkpoints --drop`; an unwritable reflog does not fail a take; hostile reflog
entries and names are refused or skipped; `NAME@{N}` as `ckpt reflog` prints it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint, open_store, take
from ckptcli.errors import ExitCode, LatestMovedError
from tests.conftest import run_ckpt


@pytest.fixture
def st(tmp_path: Path) -> Path:
    ckptcli.init_store(tmp_path / "store")
    return tmp_path / "store"


def _take(store: Path, doc: Any, subject: str = "agent:bot", **kw: Any) -> str:
    return take(open_store(store), doc, subject=subject, **kw).hex


def _latest(store: Path, subject: str = "agent:bot") -> str:
    return open_checkpoint(subject, open_store(store)).hex


def _parent(store: Path, cid: str) -> str:
    return open_checkpoint(cid, open_store(store)).manifest.parents[0].hex()


def _chain(st: Path, n: int = 4) -> list[str]:
    return [_take(st, {"memory": {"v": i}}) for i in range(1, n + 1)]


class _ResetMidway:
    """A progress that runs a real `ckpt reset` (another process) while the take reads its blobs."""

    def __init__(self, st: Path, target: str) -> None:
        self.st, self.target, self.done = st, target, False

    def start(self, label: str, total: int | None) -> None:
        pass

    def advance(self, amount: int) -> None:
        if not self.done:
            self.done = True
            r = run_ckpt("reset", "agent:bot", self.target, "--store", self.st)
            assert r.returncode == 0, r.stderr

    def finish(self) -> None:
        pass


# -- 1. a take running while `ckpt reset` moves latest does not undo the reset ---------------------------------


def test_a_take_running_during_a_reset_leaves_latest_where_the_reset_put_it(st: Path, tmp_path: Path) -> None:
    c1, _c2, _c3, c4 = _chain(st)
    (tmp_path / "big.bin").write_bytes(os.urandom(300_000))
    progress = _ResetMidway(st, c1)
    with pytest.raises(LatestMovedError) as err:
        take(open_store(st), {"memory": {"v": 99}}, subject="agent:bot", blobs={"big": tmp_path / "big.bin"}, progress=progress)
    assert progress.done
    kept = err.value.kept.hex()
    assert err.value.exit_code == ExitCode.CONFLICT == 11
    assert f"latest of agent:bot moved to {c1[:12]} (a reset) while this take ran; the checkpoint is kept as {kept}" in str(err.value)
    assert f"ckpt reset agent:bot {kept[:12]}" in str(err.value)
    assert _latest(st) == c1  # was: the take's checkpoint, whose parent is c4
    assert _parent(st, kept) == c4  # kept, unreferenced
    # nothing adopts it later as a take killed before its ref moved: not verify, not
    # repair refs, not the next take (the head hint), with or without the reflog
    for logs in (True, False):
        if not logs:
            shutil.rmtree(st / "logs")
        v = run_ckpt("verify", "--store", st, "--json")
        assert v.returncode == 0, v.stderr
        assert not [n for n in json.loads(v.stdout)["notes"] if kept[:12] in n]
        r = run_ckpt("repair", "refs", "--dry-run", "--store", st, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["moved"] == {}
    nxt = _take(st, {"memory": {"v": 5}})
    assert _parent(st, nxt) == c1
    assert _latest(st) == nxt


def test_concurrent_takes_without_a_reset_still_move_latest_to_the_newest(st: Path) -> None:
    # two takes built on the same latest: the later one still moves it (no reset between)
    c1 = _take(st, {"memory": {"v": 1}})
    store = open_store(st)
    subj = ckptcli.api.Subject.parse("agent:bot")
    expect = store.latest_state(subj)
    a = _take(st, {"memory": {"v": 2}})
    b = take(store, {"memory": {"v": 3}}, subject="agent:bot", parents=[c1], move_latest=False)
    assert store.advance_latest(subj, b.id, b.manifest.created_ns, expect=expect)
    assert _latest(st) == b.hex != a


# -- 2. a reset survives a lost reflog, a lost head hint and `repair checkpoints --drop` --------------------------


def test_a_reset_is_not_undone_by_repair_refs_when_the_reflog_is_gone(st: Path) -> None:
    c1, _c2, c3 = _chain(st, 3)
    assert run_ckpt("reset", "agent:bot", c1, "--store", st).returncode == 0
    shutil.rmtree(st / "logs")  # "deleting it loses nothing but that history"
    v = run_ckpt("verify", "--store", st, "--json")
    assert v.returncode == 0, v.stderr
    assert not [n for n in json.loads(v.stdout)["notes"] if c3[:12] in n]  # was: "a take was interrupted"
    r = run_ckpt("repair", "refs", "--store", st, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["moved"] == {}
    assert _latest(st) == c1  # was: c3 again


def test_the_next_take_after_a_reset_builds_on_the_ref_not_on_a_stale_head_hint(st: Path) -> None:
    c1, _c2, c3 = _chain(st, 3)
    hint = st / "cache" / "heads" / "agent" / "bot"
    before = hint.read_bytes()
    assert before == bytes.fromhex(c3)
    assert run_ckpt("reset", "agent:bot", c1, "--store", st).returncode == 0
    hint.write_bytes(before)  # the reset's unsynced hint write lost (a power cut), or the cache restored
    c4 = _take(st, {"memory": {"v": 4}})
    assert _parent(st, c4) == c1  # was: c3, the checkpoint the reset abandoned


def test_a_take_killed_before_its_ref_moved_is_still_continued_after_a_reset(st: Path) -> None:
    # the hint is still believed for a checkpoint committed after the reset
    c1, _c2 = _chain(st, 2)
    assert run_ckpt("reset", "agent:bot", c1, "--store", st).returncode == 0
    store = open_store(st)
    dangling = take(store, {"memory": {"v": 3}}, subject="agent:bot", move_latest=False)
    store.note_head(dangling.manifest.subject, dangling.id)  # as a take killed after its manifest leaves it
    nxt = _take(st, {"memory": {"v": 4}})
    assert _parent(st, nxt) == dangling.hex


# -- 3. the reflog is optional: one it cannot write costs a warning, not the command -----------------------------


@pytest.mark.parametrize("what", ["directory", "symlink", "fifo"])
def test_a_take_succeeds_with_one_warning_when_its_reflog_cannot_be_written(st: Path, tmp_path: Path, what: str) -> None:
    c1 = _take(st, {"v": 1})
    log = st / "logs" / "refs" / "latest" / "agent" / "bot"
    log.unlink()
    if what == "directory":
        log.mkdir()
    elif what == "symlink":
        (tmp_path / "elsewhere").write_bytes(b"")
        log.symlink_to(tmp_path / "elsewhere")
    else:
        os.mkfifo(log)
    r = run_ckpt("take", "-", "-S", "agent:bot", "-q", "--store", st, input=b'{"v": 2}')
    assert r.returncode == 0, r.stderr  # was: exit 12 after the checkpoint and the ref were saved
    c2 = r.stdout.decode().strip()
    warnings = r.stderr.decode().splitlines()
    assert len(warnings) == 1 and warnings[0].startswith("ckpt: warning: the reflog logs/refs/latest/agent/bot cannot be written")
    assert "make that path a writable regular file (or remove it)" in warnings[0]
    assert _latest(st) == c2 and _parent(st, c2) == c1
    r = run_ckpt("reset", "agent:bot", c1, "--store", st)
    assert r.returncode == 0 and _latest(st) == c1
    if what == "symlink":
        assert (tmp_path / "elsewhere").read_bytes() == b""  # nothing written through the link


def test_reflog_files_are_created_honouring_the_umask(st: Path) -> None:
    import subprocess
    import sys

    for umask, mode in (("002", 0o664), ("077", 0o600)):
        subject = f"agent:u{umask}"
        r = subprocess.run(
            ["sh", "-c", f'umask {umask}; echo "{{}}" | "{sys.executable}" -m ckptcli take - -S {subject} -q --store "{st}"'],
            capture_output=True,
        )
        assert r.returncode == 0, r.stderr
        log = st / "logs" / "refs" / "latest" / "agent" / f"u{umask}"
        ref = st / "refs" / "latest" / "agent" / f"u{umask}"
        assert log.stat().st_mode & 0o777 == mode == ref.stat().st_mode & 0o777  # was: 0644 for the log whatever the umask


# -- 4-7. reflog entries, names and numbers ------------------------------------------------------------------


def _append_entry(st: Path, patch: dict[str, Any], where: str = "latest/agent/bot") -> None:
    """An entry with a valid checksum: a copy of the first with `patch` applied."""
    import hashlib

    log = st / "logs" / "refs" / where
    first = json.loads(log.read_bytes().split(b"\n")[0].rpartition(b"\t")[0])
    line = json.dumps({**first, **patch}, separators=(",", ":")).encode()
    with open(log, "ab") as fh:
        fh.write(line + b"\t" + hashlib.sha256(line).hexdigest()[:16].encode() + b"\n")


@pytest.mark.parametrize(
    "patch",
    [{"time_ns": 10**29}, {"time_ns": -(10**26)}, {"pid": 10**29}, {"reason": 5}, {"command": {"x": 1}}, {"host": None}],
    ids=["time-huge", "time-negative", "pid-huge", "reason-int", "command-map", "host-null"],
)
def test_a_reflog_entry_with_an_impossible_value_is_skipped_and_reported(st: Path, patch: dict[str, Any]) -> None:
    c1 = _take(st, {"v": 1})
    _append_entry(st, patch)
    for args in (["reflog", "agent:bot"], ["reflog", "agent:bot", "--json"], ["reflog"], ["show", "agent:bot@{0}", "--json"]):
        r = run_ckpt(*args, "--store", st)
        assert r.returncode == 0, (args, r.stderr)  # was: exit 70, an internal error, for the times
        assert "damaged reflog entry skipped (line 2)" in r.stderr.decode()
    r = run_ckpt("reflog", "agent:bot", "--json", "--store", st)
    assert [e["new"] for e in json.loads(r.stdout)] == [c1]
    v = run_ckpt("verify", "--store", st, "--json")
    assert v.returncode == ExitCode.CORRUPT
    problems = json.loads(v.stdout)["problems"]
    assert [(p["kind"], p["name"]) for p in problems] == [("reflog", "logs/refs/latest/agent/bot")]
    assert "line 2" in problems[0]["message"]


def test_the_numbers_ckpt_reflog_prints_are_the_ones_name_at_n_resolves(st: Path) -> None:
    import hashlib

    c1, c2, c3 = _chain(st, 3)
    _take(st, {"v": 1}, subject="agent:other")
    # the host that made the last move had its clock an hour behind
    log = st / "logs" / "refs" / "latest" / "agent" / "bot"
    lines = log.read_bytes().split(b"\n")[:-1]
    last = json.loads(lines[-1].rpartition(b"\t")[0])
    last["time_ns"] -= 3600 * 10**9
    body = json.dumps(last, separators=(",", ":")).encode()
    lines[-1] = body + b"\t" + hashlib.sha256(body).hexdigest()[:16].encode()
    log.write_bytes(b"\n".join(lines) + b"\n")
    for args in (["reflog"], ["reflog", "agent:bot"]):
        r = run_ckpt(*args, "--store", st)
        assert r.returncode == 0, r.stderr
        shown = {}
        for line in r.stdout.decode().splitlines():
            if line.startswith("latest/agent/bot@{"):
                n = line.split("@{")[1].split("}")[0]
                shown[n] = line.split("-> ")[1].split()[0]
        assert shown == {"0": c3[:12], "1": c2[:12], "2": c1[:12]}, r.stdout  # was: @{0} printed for c2 in `ckpt reflog`
        for n, cid in shown.items():
            res = run_ckpt("show", f"agent:bot@{{{n}}}", "--json", "--store", st)
            assert json.loads(res.stdout)["id"].startswith(cid)


@pytest.mark.parametrize(
    "name",
    [
        "latest/../../../../outside.log",
        "latest/../../../refs/latest/agent/bot",
        "latest/../../../../../../../../etc/passwd",
        "latest/agent/../../../outside.log",
        "latest/agent",
        "tags/../../refs/latest/agent/bot",
        "branches/../../../outside.log",
    ],
)
def test_a_ref_path_that_leads_outside_its_place_is_refused(st: Path, name: str) -> None:
    _take(st, {"v": 1})
    shutil.copy(st / "logs" / "refs" / "latest" / "agent" / "bot", st.parent / "outside.log")
    for args in (["reflog", name], ["show", f"{name}@{{0}}"]):
        r = run_ckpt(*args, "--store", st)
        assert r.returncode == ExitCode.INVALID_INPUT, (args, r.stdout, r.stderr)  # was: 0, reading the file as a reflog
        err = r.stderr.decode().splitlines()
        assert len(err) == 1 and err[0].startswith("ckpt: error: ") and repr(name) in err[0]


def test_reflog_limits_digits_and_missing_refs(st: Path) -> None:
    _chain(st, 3)
    for limit in ("-1", "0"):
        r = run_ckpt("reflog", "--limit", limit, "--store", st)
        assert r.returncode == ExitCode.USAGE == 2, r.stdout  # was: -1 accepted (dropping the oldest entry)
        assert ">=1" in r.stderr.decode()
    assert run_ckpt("reflog", "--limit", "1", "--store", st).stdout.decode().count("@{") == 1
    for ref in ("agent:bot@{\u0661}", "agent:bot~\u0661"):  # ARABIC-INDIC DIGIT ONE
        r = run_ckpt("show", ref, "--store", st)
        assert r.returncode == ExitCode.INVALID_INPUT, r.stdout  # was: taken as 1
    for name in ("agent:nosuch", "nosuch"):
        r = run_ckpt("reflog", name, "--store", st)
        assert r.returncode == ExitCode.NOT_FOUND, r.stdout  # was: 0 for agent:nosuch
        assert r.stderr.decode().startswith(f"ckpt: error: no such ref: {name!r}")


def test_repair_drop_after_a_reset_moves_latest_to_the_intact_parent_and_logs_every_change(st: Path, tmp_path: Path) -> None:
    c1 = _take(st, {"memory": {"v": 1}})
    before = {p.relative_to(st / "packs") for p in (st / "packs").rglob("*") if p.is_file()}
    (tmp_path / "only-c2.bin").write_bytes(os.urandom(100_000))
    c2 = _take(st, {"memory": {"v": 2}}, blobs={"data": tmp_path / "only-c2.bin"})
    only_c2 = {p.relative_to(st / "packs") for p in (st / "packs").rglob("*") if p.is_file()} - before
    c3 = _take(st, {"memory": {"v": 3, "compromised": True}})
    assert run_ckpt("reset", "agent:bot", c2, "--store", st).returncode == 0
    assert run_ckpt("tag", "known-good", c2, "--store", st).returncode == 0
    for p in only_c2:
        (st / "packs" / p).unlink()  # the pack only c2 needs is lost
    assert run_ckpt("repair", "index", "--store", st).returncode == 0
    r = run_ckpt("repair", "checkpoints", "--drop", "--force", "--store", st, "--json")
    assert r.returncode == 0, r.stderr
    assert _latest(st) == c1  # was: c3, the checkpoint the reset abandoned
    moves = json.loads(run_ckpt("reflog", "--json", "--store", st).stdout)
    latest = next(e for e in moves if e["ref"] == "latest/agent/bot")
    assert (latest["old"], latest["new"]) == (c2, c1)
    assert latest["reason"] == f"repair checkpoints: {c2[:12]} dropped"  # was: "update"
    tag = next(e for e in moves if e["ref"] == "tags/known-good")
    assert (tag["old"], tag["new"], tag["reason"]) == (c2, None, f"repair checkpoints: {c2[:12]} dropped")  # was: no entry
    # and the abandoned c3 stays abandoned, also for verify and repair refs without the reflog
    shutil.rmtree(st / "logs")
    v = run_ckpt("verify", "--store", st, "--json")
    assert not [n for n in json.loads(v.stdout)["notes"] if c3[:12] in n]
    assert json.loads(run_ckpt("repair", "refs", "--store", st, "--json").stdout)["moved"] == {}
    assert _latest(st) == c1


def test_every_later_move_of_latest_keeps_the_reset_on_record(tmp_path: Path) -> None:
    """A reset is recorded in the ref; a move by anything that does not mean to change
    that (a prune, `repair refs`, a LangGraph delete moving latest to a survivor) keeps it:
    it was dropped unless each caller read it back and passed it on, and two did not."""
    store = ckptcli.init_store(tmp_path / "s")
    a = take(store, {"memory": {"n": 1}}, subject="agent:bot").id
    b = take(store, {"memory": {"n": 2}}, subject="agent:bot").id
    subj = open_checkpoint(a.hex(), store).manifest.subject
    path = store.latest_ref(subj)
    store.set_latest(subj, a, "reset: back")
    when = store.read_ref_state(path)[1]
    assert when is not None
    with store.backend.lock("refs", shared=False):
        store.write_ref(path, b, "repair refs")  # as repair refs and forget_checkpoints move it
    assert store.read_ref_state(path) == (b, when)


def test_a_linked_directory_above_a_reflog_is_not_written_through(st: Path, tmp_path: Path) -> None:
    """O_NOFOLLOW guards the log file only: with logs/refs/latest/agent a link to a
    directory outside the store, a take appended its entry there."""
    _take(st, {"v": 1})
    agent = st / "logs" / "refs" / "latest" / "agent"
    shutil.rmtree(agent)
    outside = tmp_path / "outside"
    outside.mkdir()
    agent.symlink_to(outside)
    r = run_ckpt("take", "-", "-S", "agent:bot", "-q", "--store", st, input=b'{"v": 2}')
    assert r.returncode == 0, r.stderr
    assert list(outside.iterdir()) == []  # nothing written outside the store
    assert "is a symbolic link" in r.stderr.decode() and r.stderr.decode().count("\n") == 1

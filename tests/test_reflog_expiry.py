"""The reflog is trimmed (90 days, 1,000 entries per ref) by `ckpt prune` and `ckpt
reflog --expire`, crash-safely; and prune keeps, until their entries expire, the
checkpoints only the reflog reaches (a reset's left-behind), so `NAME@{N}` still works."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint, open_store, take
from ckptcli.errors import ExitCode
from ckptcli.store import reflog
from ckptcli.store.prune import Policy, prune
from tests.conftest import REPO

DAY_NS = 86400 * 1_000_000_000
LOG = ("logs", "refs", "latest", "agent", "bot")


@pytest.fixture
def st(tmp_path: Path) -> Path:
    ckptcli.init_store(tmp_path / "store")
    return tmp_path / "store"


def _take(store: Path, doc: Any, **kw: Any) -> str:
    return take(open_store(store), doc, subject="agent:bot", **kw).hex


def _ids(store: Path) -> set[str]:
    return {p.name for p in (store / "manifests").iterdir()}


def _reset_back(cli: Any, st: Path) -> tuple[str, str, str]:
    """a (labelled keep=1) <- b <- c, then latest reset to a: c is reachable only
    through the reflog (agent:bot@{1})."""
    a = _take(st, {"memory": {"v": 1}}, labels={"keep": "1"})
    b = _take(st, {"memory": {"v": 2}})
    c = _take(st, {"memory": {"v": 3}})
    assert cli("reset", "agent:bot", a, "--store", st).code == 0
    return a, b, c


def test_prune_keeps_what_a_reset_left_behind_and_at_1_still_works(cli: Any, st: Path) -> None:
    a, b, c = _reset_back(cli, st)
    r = cli("prune", "--keep-tag", "keep", "--dry-run", "--store", st)
    assert r.code == 0, r.err
    line = next(x for x in r.out.splitlines() if x.startswith(f"keep    {c[:12]}"))
    assert "reflog latest/agent/bot: moved off it" in line and "reset: moving to" in line and "until" in line
    r = cli("prune", "--keep-tag", "keep", "--store", st, "--json")
    assert r.code == 0, r.err
    why = {d["id"]: d["reasons"] for d in json.loads(r.out)["checkpoints"]}
    assert why[c][0].startswith("reflog latest/agent/bot") and why[b] == [] and _ids(st) == {a, c}
    # the history the policy thins (b, which a take moved forward from) went, and naming
    # it says so in one line; the reset's left-behind stayed, so the reset is undone
    # after the prune as before it
    r = cli("restore", "agent:bot@{2}", "--store", st)
    assert r.code == ExitCode.NOT_FOUND and "is no longer in the store (pruned)" in r.err and r.err.count("\n") == 1
    r = cli("reset", "agent:bot", "agent:bot@{1}", "--store", st, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["new"] == c
    assert json.loads(cli("restore", "agent:bot", "--store", st).out) == {"memory": {"v": 3}}
    assert cli("verify", "--store", st).code == 0


def test_once_its_entry_expires_prune_lets_it_go_and_at_n_says_pruned(cli: Any, st: Path) -> None:
    a, _b, _c = _reset_back(cli, st)
    d = _take(st, {"memory": {"v": 4}})  # latest moves on from a: the reset entry is no longer the newest
    r = cli("prune", "--keep-last", "1", "--keep-tag", "keep", "--reflog-expire", "0s", "--store", st)
    assert r.code == 0, r.err
    assert "reflog: trimmed" in r.out
    assert _ids(st) == {a, d}
    rows = json.loads(cli("reflog", "agent:bot", "--store", st, "--json").out)
    assert [(x["old"], x["new"]) for x in rows] == [(a, d)]  # only the newest entry stays
    r = cli("reset", "agent:bot", "agent:bot@{2}", "--store", st)
    assert r.code == ExitCode.NOT_FOUND and "has only 1 entry" in r.err and r.err.count("\n") == 1


def test_the_reset_entry_keeps_it_for_90_days_then_not(st: Path) -> None:
    a, _b, c = _reset_back_lib(st)
    now = time.time_ns()
    kept = prune(open_store(st), Policy(keep_tags=["keep"]), dry_run=True, now_ns=now + 89 * DAY_NS)
    assert {d.id.hex() for d in kept.kept} == {a, c}
    later = prune(open_store(st), Policy(keep_tags=["keep"]), now_ns=now + 91 * DAY_NS)
    # the reset is the latest ref's newest entry: it stays in the log, but keeps nothing
    assert {d.id.hex() for d in later.kept} == {a} and _ids(st) == {a}
    assert later.reflog_dropped == 3 and later.reflog_logs == 1
    entries = open_store(st).ref_log("refs/latest/agent/bot")
    assert [(e.old, e.new) for e in entries] == [(c, a)]


def _reset_back_lib(st: Path) -> tuple[str, str, str]:
    a = _take(st, {"memory": {"v": 1}}, labels={"keep": "1"})
    b = _take(st, {"memory": {"v": 2}})
    c = _take(st, {"memory": {"v": 3}})
    open_store(st).set_latest(open_checkpoint(a, open_store(st)).manifest.subject, bytes.fromhex(a), reason=f"reset: moving to {a}")
    return a, b, c


def test_moved_and_deleted_tags_keep_their_old_target_until_expiry(cli: Any, st: Path) -> None:
    a = _take(st, {"memory": {"v": 1}})
    b = _take(st, {"memory": {"v": 2}})
    assert cli("tag", "good", a, "--store", st).code == 0
    assert cli("tag", "--delete", "good", "--store", st).code == 0
    r = cli("prune", "--keep-last", "1", "--store", st, "--json")
    why = {d["id"]: d["reasons"] for d in json.loads(r.out)["checkpoints"]}
    assert why[a][0].startswith("reflog tags/good: moved off it") and _ids(st) == {a, b}
    assert cli("restore", "good@{1}", "--store", st).code == 0
    r = cli("prune", "--keep-last", "1", "--reflog-expire", "0s", "--store", st)
    assert r.code == 0, r.err
    assert _ids(st) == {b} and not (st / "logs" / "refs" / "tags" / "good").exists()  # ref gone, every entry expired


def test_a_ref_keeps_its_newest_1000_entries(st: Path) -> None:
    s = open_store(st)
    ids = [bytes([i % 256, i // 256]) * 16 for i in range(1005)]
    with s.backend.lock("refs", shared=False):
        for old, new in itertools.pairwise(ids):
            reflog.append(s.backend, "refs/tags/t", old, new, "tag")
        s.write_ref("refs/tags/t", ids[-1], "tag", log=False)
    trimmed = reflog.expire(s.backend, cutoff_ns=0)
    assert [t.dropped for t in trimmed] == [4]
    entries = s.ref_log("refs/tags/t")
    assert len(entries) == reflog.MAX_ENTRIES and entries[0].new == ids[-1].hex() and entries[-1].old == ids[4].hex()


def test_trim_keeps_damaged_lines_and_drops_a_torn_end() -> None:
    old = reflog.encode(b"\x01" * 32, b"\x02" * 32, "take")
    new = reflog.encode(b"\x02" * 32, b"\x03" * 32, "take")
    body = old.replace(b"take", b"tike")  # a flipped byte: damage, verify's to report
    t = reflog.trim(old + body + new + b'{"old": "ab', "tags/t", cutoff_ns=json.loads(new.split(b"\t")[0])["time_ns"])
    assert t.dropped == 1 and t.data == body + new
    out, damaged, torn = reflog.check(t.data or b"")
    assert [e.new for e in out] == ["03" * 32] and damaged == [1] and not torn
    assert reflog.trim(new, "tags/t", cutoff_ns=0).data is None  # nothing to drop: not rewritten


def test_reflog_expire_command(cli: Any, st: Path) -> None:
    _reset_back(cli, st)
    log = st.joinpath(*LOG)
    before = log.read_bytes()
    r = cli("reflog", "--expire", "0s", "--dry-run", "--store", st, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out) == {"dry_run": True, "entries": 3, "logs": 1} and log.read_bytes() == before
    r = cli("reflog", "--expire", "0s", "--store", st)
    assert r.code == 0 and "trimmed 3 entries older than 0s from 1 log(s)" in r.out
    assert log.read_bytes() == before.splitlines(keepends=True)[-1]
    r = cli("reflog", "--dry-run", "--store", st)
    assert r.code == ExitCode.USAGE and r.err.count("\n") == 1
    r = cli("reflog", "agent:bot", "--expire", "0s", "--store", st)  # not every log, as it would seem
    assert r.code == ExitCode.USAGE and "takes no NAME" in r.err and r.err.count("\n") == 1
    r = cli("reflog", "--expire", "soon", "--store", st)
    assert r.code == ExitCode.INVALID_INPUT and "not a duration" in r.err


def test_a_linked_directory_of_logs_is_left_out_with_a_warning_and_the_others_are_trimmed(cli: Any, st: Path, tmp_path: Path) -> None:
    _a, b, _c = _reset_back(cli, st)
    assert cli("tag", "t1", "agent:bot", "--store", st).code == 0
    assert cli("tag", "-f", "t1", b, "--store", st).code == 0  # two entries in logs/refs/tags/t1
    tags = st / "logs" / "refs" / "tags"
    outside = tmp_path / "outside-tags"
    os.rename(tags, outside)
    tags.symlink_to(outside, target_is_directory=True)
    before = outside.joinpath("t1").read_bytes()
    log = st.joinpath(*LOG)
    r = cli("reflog", "--expire", "0s", "--dry-run", "--store", st, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out) == {"dry_run": True, "entries": 3, "logs": 1}  # it was 0: every log left untrimmed
    assert r.err.count("\n") == 1 and "logs/refs/tags is a symbolic link" in r.err and "left as they are" in r.err, r.err
    r = cli("prune", "--keep-last", "1", "--reflog-expire", "0s", "--store", st)
    assert r.code == 0, r.err
    assert "logs/refs/tags is a symbolic link" in r.err and "reflog: trimmed 3 " in r.out, (r.out, r.err)
    assert len(log.read_bytes().splitlines()) < 4  # the 3 takes and the reset: trimmed
    assert outside.joinpath("t1").read_bytes() == before and tags.is_symlink()  # never followed


_KILLED = """
import os, signal, sys, time
from ckptcli.api import open_store
from ckptcli.store import reflog

real_replace = os.replace
where = sys.argv[2]

def replace(src, dst, *a, **kw):
    if "logs" in str(dst) and where == "before":
        os.kill(os.getpid(), signal.SIGKILL)  # the new text is whole in tmp/, the log untouched
    real_replace(src, dst, *a, **kw)
    if "logs" in str(dst) and where == "after":
        os.kill(os.getpid(), signal.SIGKILL)  # renamed, its directory not yet synced

os.replace = replace
s = open_store(sys.argv[1])
with s.backend.lock("refs", shared=False):
    reflog.expire(s.backend, cutoff_ns=time.time_ns())
"""


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_killed_expiry_leaves_the_old_log_or_the_new_one_whole(cli: Any, st: Path, where: str) -> None:
    _reset_back(cli, st)
    log = st.joinpath(*LOG)
    before = log.read_bytes()
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(_KILLED), str(st), where], cwd=REPO, capture_output=True, env={**os.environ})
    assert p.returncode == -9, p.stderr
    assert log.read_bytes() == (before if where == "before" else before.splitlines(keepends=True)[-1])
    r = cli("verify", "--store", st, "--json")
    assert r.code == 0, r.out + r.err
    # the next prune finishes the job, and removes the temp file the kill left
    assert cli("prune", "--keep-last", "5", "--reflog-expire", "0s", "--store", st).code == 0
    assert log.read_bytes() == before.splitlines(keepends=True)[-1] and not list((st / "tmp").iterdir())


_READER = """
import sys
from pathlib import Path
from ckptcli.store import reflog

log, stop = Path(sys.argv[1]), Path(sys.argv[2])
reads = 0
while not stop.exists() or reads < 50:
    try:
        data = log.read_bytes()
    except FileNotFoundError:
        continue
    entries, damaged, torn = reflog.check(data)
    if damaged or torn or not entries:
        sys.exit(f"read {reads}: {len(entries)} entries, damaged {damaged}, torn {torn}")
    reads += 1
print(reads)
"""


def test_a_reader_never_sees_a_log_being_trimmed_in_part(st: Path) -> None:
    s = open_store(st)
    log = st / "logs" / "refs" / "tags" / "t"
    ids = [bytes([i]) * 32 for i in range(256)]
    with s.backend.lock("refs", shared=False):
        reflog.append(s.backend, "refs/tags/t", None, ids[0], "tag")
    stop = st.parent / "stop"
    with subprocess.Popen(
        [sys.executable, "-c", _READER, str(log), str(stop)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as reader:
        try:
            for i in range(1, 200):  # every pass appends one entry and trims the log to its newest 3
                with s.backend.lock("refs", shared=False):
                    reflog.append(s.backend, "refs/tags/t", ids[i - 1], ids[i], "tag --force")
                    reflog.expire(s.backend, cutoff_ns=0, max_entries=3)
        finally:
            stop.touch()
        out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    assert int(out) >= 50
    assert [e.new for e in s.ref_log("refs/tags/t")] == [ids[199].hex(), ids[198].hex(), ids[197].hex()]

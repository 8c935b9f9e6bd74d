"""`ckpt doctor` on real stores: none at all, a live saver's journal, a journal left by a
saver that is gone, a journal with a hole punched in it; and its registry of checks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckptcli import doctor
from ckptcli.adapters.langgraph.journal import MAGIC, frame, read_journal
from ckptcli.adapters.langgraph.saver import CkptSaver
from ckptcli.adapters.langgraph.store import CkptStore
from ckptcli.errors import CkptError, CorruptError, StoreIOError, UnsupportedVersionError
from tests.conftest import REPO, run_ckpt
from tests.langgraph_graphs import chat_builder, chat_message
from tests.test_langgraph_journal import _abandoned_journal, _record_starts


def _checks(res: Any) -> list[dict[str, str]]:
    return list(json.loads(res.out)["checks"])


def _one(checks: list[dict[str, str]], name: str, status: str | None = None) -> dict[str, str]:
    (found,) = [c for c in checks if c["name"] == name and (status is None or c["status"] == status)]
    return found


def test_no_store_fails_the_store_check_and_still_lists_the_components(tmp_path: Path) -> None:
    r = run_ckpt("doctor", cwd=tmp_path)
    assert r.returncode == 10  # no store found: as every command that needs one
    out, err = r.stdout.decode(), r.stderr.decode()
    assert out.startswith("fail  store ") and "not found: no ckpt store in" in out and "hint: run `ckpt init`" in out
    assert "component langgraph-checkpoint" in out and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("ckpt: error: no store: no ckpt store in")


def test_a_live_savers_journal_shows_its_backlog_and_its_leases(tmp_path: Path, cli: Any) -> None:
    store = tmp_path / ".ckpt"
    with CkptSaver.open(store, commit_interval=3600, seal_idle=0) as saver:  # nothing committed while it runs
        graph = chat_builder(4, words=4).compile(checkpointer=saver)
        graph.invoke({"messages": [chat_message(0, 4)]}, {"configurable": {"thread_id": "live"}})
        res = cli("doctor", "--json", "--store", store)
        assert res.code == 0, res.err
        checks = _checks(res)
        assert json.loads(res.out)["status"] == "ok"
        journals = _one(checks, "langgraph journals")
        assert (
            "1 journal(s)" in journals["detail"]
            and "1 of live savers (backlog: 5 put(s) not committed yet), 0 of savers that are gone" in journals["detail"]
        )
        assert "1 held by a live saver now" in _one(checks, "langgraph thread leases")["detail"]
        assert "0 checkpoint(s)" in _one(checks, "store structure")["detail"]
    res = cli("doctor", "--json", "--store", store)  # closed: everything committed, the journal gone
    checks = _checks(res)
    assert "0 journal(s)" in _one(checks, "langgraph journals")["detail"] and "backlog: 0" in _one(checks, "langgraph journals")["detail"]
    assert "5 checkpoint(s)" in _one(checks, "store structure")["detail"]
    assert "0 held by a live saver now" in _one(checks, "langgraph thread leases")["detail"]


def test_a_dead_savers_journal_is_a_warning_until_a_saver_replays_it(tmp_path: Path, cli: Any) -> None:
    store = tmp_path / ".ckpt"
    saver = CkptSaver.open(store, commit_interval=3600, seal_idle=0)
    chat_builder(3, words=4).compile(checkpointer=saver).invoke({"messages": [chat_message(0, 4)]}, {"configurable": {"thread_id": "d"}})
    saver.abandon()  # as if killed: the journal stays, its lease dirty
    res = cli("doctor", "--store", store)
    assert res.code == 0, res.err
    assert "0 of live savers (backlog: 0 put(s) not committed yet), 1 of savers that are gone" in res.out
    assert "was left by a saver that is gone: 7 record(s), 4 put(s) not in the store" in res.out
    assert "1 thread(s) whose last saver died before committing them" in res.out
    assert "hint: nothing is lost: the next CkptSaver to open the store" in res.out
    CkptSaver.open(store).close()  # replays it
    res = cli("doctor", "--json", "--store", store)
    assert json.loads(res.out)["status"] == "ok" and "4 checkpoint(s)" in _one(_checks(res), "store structure")["detail"]


def test_a_linked_lock_file_fails_the_doctor_naming_it(tmp_path: Path, cli: Any) -> None:
    """A lock file that is a symbolic link: every write is refused (exit 8), while doctor
    said the lock was "cannot tell" (a warning) and the store fine. It fails, naming it."""
    store = tmp_path / ".ckpt"
    assert cli("init", store).code == 0
    lock = store / "locks" / "store.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(tmp_path / "elsewhere")
    res = cli("doctor", "--json", "--store", store)
    assert res.code != 0 and json.loads(res.out)["status"] != "ok", res
    check = _one(_checks(res), "lock store")
    assert check["status"] == "fail" and str(lock) in check["detail"] and "symbolic link" in check["detail"], check


def test_another_processs_journal_is_live_until_it_is_killed(tmp_path: Path, cli: Any) -> None:
    """A real worker process mid-turn (its node waits): its journal is live; SIGKILLed,
    the journal is one of a saver that is gone, until a saver replays it."""
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.langgraph_worker", "ckpt", str(store)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        assert worker.stdin is not None and worker.stdout is not None
        assert json.loads(worker.stdout.readline()) == {"ready": True}
        worker.stdin.write(json.dumps({"op": "turn", "thread": "w", "text": "hold on"}) + "\n")
        worker.stdin.flush()
        assert json.loads(worker.stdout.readline()) == {"in_node": True}
        res = cli("doctor", "--json", "--store", store)
        assert res.code == 0, res.err
        assert ": 1 of live savers (backlog: " in _one(_checks(res), "langgraph journals", "ok")["detail"]
        assert not [c for c in _checks(res) if c["status"] != "ok"]
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        for pipe in (worker.stdin, worker.stdout):
            if pipe is not None:
                pipe.close()
    res = cli("doctor", "--json", "--store", store)
    assert res.code == 0 and json.loads(res.out)["status"] == "warn"
    assert "0 of live savers" in _one(_checks(res), "langgraph journals", "ok")["detail"]
    assert "was left by a saver that is gone" in _one(_checks(res), "langgraph journals", "warn")["detail"]
    CkptSaver.open(store).close()
    res = cli("doctor", "--json", "--store", store)
    assert json.loads(res.out)["status"] == "ok" and "0 journal(s)" in _one(_checks(res), "langgraph journals")["detail"]


def test_a_hole_in_a_journal_is_named_and_a_warning_as_the_saver_reads_past_it(tmp_path: Path, cli: Any) -> None:
    """CkptSaver.open recovers what follows a hole (with a warning): doctor warns, it does not fail."""
    store = tmp_path / ".ckpt"
    path, _values = _abandoned_journal(store)
    data = bytearray(path.read_bytes())
    starts = _record_starts(bytes(data))
    at, end = starts[len(starts) // 2] + 5, starts[len(starts) // 2 + 1]
    data[at:end] = bytes(end - at)
    path.write_bytes(bytes(data))
    assert read_journal(bytes(data)).holes
    res = cli("doctor", "--json", "--store", store)
    assert res.code == 0 and res.err == ""
    damage = _one(_checks(res), "langgraph journal damage", "warn")
    assert path.name in damage["detail"] and f"offset {at - 5}" in damage["detail"] and "recover" in damage["hint"]
    assert json.loads(res.out)["status"] == "warn"
    CkptSaver.open(store).close()  # recovery reads past it and keeps the file to look at: a warning now
    res = cli("doctor", "--json", "--store", store)
    assert res.code == 0
    assert ".journal.damaged" in _one(_checks(res), "langgraph journal damage", "warn")["detail"]


def test_checks_are_a_registry_and_a_broken_one_is_a_failure_not_a_crash(tmp_path: Path, monkeypatch: Any) -> None:
    store = tmp_path / "s"
    CkptSaver.open(store).close()

    def broken(ctx: doctor.Context) -> list[doctor.Check]:
        raise RuntimeError("boom")

    def mine(ctx: doctor.Context) -> list[doctor.Check]:
        return [doctor.Check("mine", doctor.WARN, f"saw {ctx.store_path}", "do this")]

    assert list(doctor.registered())[:6] == ["store", "locks", "free space", "langgraph", "process supervisors", "components"]
    report = doctor.run(store, {"broken": broken, "mine": mine})
    assert [(c.name, c.status) for c in report.checks] == [("broken", "fail"), ("mine", "warn")]
    assert "the check itself failed: RuntimeError: boom" in report.checks[0].detail
    assert report.checks[1].detail == f"saw {store}"
    monkeypatch.setitem(doctor.COMPONENTS, "ckpt-no-such-package", ("nothing at all", "pip install it"))
    (missing,) = [c for c in doctor.check_components(doctor.Context()) if c.name == "component ckpt-no-such-package"]
    assert (missing.status, missing.detail, missing.hint) == ("ok", "not installed: nothing at all", "pip install it")
    (plugins,) = [c for c in doctor.check_components(doctor.Context()) if c.name == "plugins"]
    assert "ckptcli.retention: langgraph (ckptcli)" in plugins.detail  # ckpt's own, registered as any other's


def test_fifos_beside_the_journals_and_leases_are_named_and_never_block(tmp_path: Path) -> None:
    """A FIFO named as a journal or as a lease: opened without O_NONBLOCK, doctor waited
    for a writer for good; it names them (the subprocess's timeout makes a hang a failure
    of this test): the journal a warning (savers skip it), the lease a failure (no saver
    can take its thread)."""
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    os.mkfifo(store / "langgraph" / "x.journal")
    os.mkfifo(store / "langgraph" / "threads" / "fifo1")
    code = "import json, sys; from ckptcli import doctor; print(json.dumps(doctor.run(sys.argv[1]).to_dict()))"
    r = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, timeout=20, cwd=REPO)
    assert r.returncode == 0, r.stderr
    checks = json.loads(r.stdout)["checks"]
    assert "x.journal is a FIFO, not a journal" in _one(checks, "langgraph journals", "warn")["detail"]
    assert "threads/fifo1 is a FIFO, not a thread lease" in _one(checks, "langgraph thread leases", "fail")["detail"]
    assert "remove it" in _one(checks, "langgraph thread leases", "fail")["hint"]


def test_what_the_saver_skips_or_cannot_read_is_named_not_passed_over(tmp_path: Path, cli: Any) -> None:
    """A directory in place of a lease, a symbolic link or a directory named as a
    journal, and a journal of garbage: each named (doctor said ok, and showed the garbage
    as a journal of 0 records of a saver that is gone); the lease a failure (no saver can
    take its thread), the journals warnings (savers skip them, or keep the garbage aside)."""
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    jdir = store / "langgraph"
    (jdir / "threads" / ("0" * 32)).mkdir()
    (jdir / "elsewhere").write_bytes(b"")
    (jdir / "link.journal").symlink_to(jdir / "elsewhere")
    (jdir / "dir.journal").mkdir()
    (jdir / "junk.journal").write_bytes(b"not a journal at all" * 100)
    res = cli("doctor", "--json", "--store", store)
    assert res.code == 1 and res.err.count("\n") == 1
    checks = _checks(res)
    lease = _one(checks, "langgraph thread leases", "fail")
    assert f"threads/{'0' * 32} is a directory, not a thread lease" in lease["detail"] and "remove it" in lease["hint"]
    details = [c["detail"] for c in checks if c["name"] == "langgraph journals" and c["status"] == "warn"]
    assert len(details) == 3
    assert any(d.startswith("dir.journal is a directory, not a journal") for d in details)
    assert any(d.startswith("link.journal is a symbolic link, not a journal") for d in details)
    assert any(d.startswith("junk.journal (") and "is damaged or no journal" in d for d in details)
    assert "0 journal(s)" in _one(checks, "langgraph journals", "ok")["detail"]


def test_a_huge_journal_is_read_up_to_a_cap_and_memory_stays_bounded(tmp_path: Path) -> None:
    """A 1 GiB journal (sparse): doctor read it whole (twice over), its memory growing
    with the file; now it counts the records of its first 64 MiB and says so."""
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    with open(store / "langgraph" / "big.journal", "wb") as fh:
        fh.truncate(1 << 30)
    code = (
        "import json, sys; from ckptcli import doctor; r = doctor.run(sys.argv[1]).to_dict()\n"
        # VmHWM, this process's own peak (ru_maxrss would count the parent's pages of the fork before the exec)
        "hwm = [int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:')][0]\n"
        "print(json.dumps({'rss_kib': hwm, **r}))"
    )
    r = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["rss_kib"] < 400 * 1024, got["rss_kib"]
    detail = _one(got["checks"], "langgraph journals", "warn")["detail"]
    assert (
        detail.startswith("big.journal was left by a saver that is gone: 0 record(s)")
        and "(records counted in its first 64.0 MiB of 1.0 GiB)" in detail
    )


def test_a_doctor_run_writes_nothing_in_the_store(tmp_path: Path, cli: Any) -> None:
    """Not even the catalog cache (doctor brought it up to date, writing cache/catalog)."""
    store = tmp_path / ".ckpt"
    saver = CkptSaver.open(store, commit_interval=3600, seal_idle=0)
    chat_builder(2, words=4).compile(checkpointer=saver).invoke({"messages": [chat_message(0, 4)]}, {"configurable": {"thread_id": "d"}})
    saver.close()
    saver = CkptSaver.open(store, commit_interval=3600, seal_idle=0)
    chat_builder(2, words=4).compile(checkpointer=saver).invoke({"messages": [chat_message(0, 4)]}, {"configurable": {"thread_id": "e"}})
    saver.abandon()  # a journal of a saver that is gone, and a dirty lease
    for p in (store / "cache").rglob("*"):
        p.unlink()

    def tree() -> dict[str, tuple[int, int, bytes]]:
        return {
            str(p): (p.lstat().st_mtime_ns, p.lstat().st_size, p.read_bytes() if p.is_file() else b"") for p in sorted(store.rglob("*"))
        }

    before = tree()
    res = cli("doctor", "--json", "--store", store)
    assert res.code == 0, res.err
    assert tree() == before


def test_the_memory_stores_logs_are_checked_as_verify_does(tmp_path: Path, cli: Any) -> None:
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    logs = store / "langgraph" / "store"
    logs.mkdir(exist_ok=True)
    (logs / f"{99:016x}.log").write_bytes(b"garbage" * 10)
    os.mkfifo(logs / f"{100:016x}.log")
    res = cli("doctor", "--json", "--store", store)
    assert res.code == 1 and res.err.count("\n") == 1
    details = [c["detail"] for c in _checks(res) if c["name"] == "langgraph memory store" and c["status"] == "fail"]
    assert (
        f"{99:016x}.log: is not a LangGraph store log (bad header)" in details[0] and f"{100:016x}.log: is not a regular file" in details[1]
    )
    assert "2 log(s)" in _one(_checks(res), "langgraph memory store", "ok")["detail"]


def test_a_held_store_lock_is_named_with_its_holder(tmp_path: Path, cli: Any) -> None:
    """A real process holding the store lock exclusively (as a prune does): doctor says
    who (its pid), without waiting and without writing; once it ends, the lock is free."""
    assert cli("--store", tmp_path / ".ckpt", "init").code == 0
    hold = (
        "import sys, time\nfrom ckptcli.api import open_store\nst = open_store(sys.argv[1])\n"
        "with st.backend.lock('store', shared=False):\n    print('held', flush=True)\n    time.sleep(600)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold, str(tmp_path / ".ckpt")], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        res = cli("doctor", "--json", "--store", tmp_path / ".ckpt")
        assert res.code == 0, res.err  # a warning: the store works, commands wait
        lock = _one(_checks(res), "lock store", "warn")
        assert f"pid {holder.pid} on host " in lock["detail"] and "held exclusively" in lock["detail"]
        assert "never delete the lock file" in lock["hint"]
        assert _one(_checks(res), "lock refs", "ok")["detail"] == "free"
        human = cli("doctor", "--store", tmp_path / ".ckpt")
        assert f"pid {holder.pid}" in human.out
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    res = cli("doctor", "--json", "--store", tmp_path / ".ckpt")
    assert _one(_checks(res), "lock store", "ok")["detail"] == "free"


# -- doctor fails for what CkptSaver.open refuses, with the saver's own error ---------------------
_PUT = {"op": "p", "t": "t", "n": "", "i": "x", "p": None, "c": 5, "k": ["msgpack", b""], "m": ["msgpack", b""], "v": {}, "b": {}}


def _dead_journal(store: Path, *records: dict[str, Any], magic: bytes = MAGIC, between: bytes = b"") -> Path:
    """A journal of a saver that is gone (no one holds its lock) in the saver's format:
    `records` framed as a saver frames them (`between` after the first)."""
    salt = os.urandom(8)
    framed = [frame(r, salt) for r in records]
    path = store / "langgraph" / "gone.journal"
    path.write_bytes(magic + salt + framed[0] + between + b"".join(framed[1:]))
    return path


def _saver_error(store: Path) -> Exception | None:
    """What CkptSaver.open raises on the store, or None when it opens it (closed again)."""
    try:
        CkptSaver.open(store).close()
    except Exception as exc:  # noqa: BLE001 - whatever it is, doctor must have failed for it
        return exc
    return None


def _fails_with(res: Any, name: str, err: Exception) -> None:
    """Doctor failed, with a check `name` whose detail is the saver's error message."""
    assert isinstance(err, CkptError), err
    assert res.code == 1 and res.err.count("\n") == 1, (res.out, res.err)
    found = _one(_checks(res), name, "fail")
    assert found["detail"].endswith(f"refuses the store: {err.message}") and found["hint"] == err.hint


@pytest.mark.parametrize(
    ("record", "why"),
    [
        ({k: v for k, v in _PUT.items() if k != "c"}, "its time is not an integer of 63 bits"),  # a field missing
        ({**_PUT, "k": "msgpack"}, "its checkpoint or metadata is not a (type, bytes) pair"),  # a field of the wrong type
        ({"op": "w", "t": "t", "n": "", "i": "x", "w": [["task", "ch", "msgpack", "not bytes", "", 0, 1]]}, "a write of it is not"),
    ],
)
def test_an_intact_but_malformed_record_in_a_dead_journal_fails_as_the_saver_refuses_it(
    tmp_path: Path, cli: Any, record: dict[str, Any], why: str
) -> None:
    """Its CRC is good, a field is missing or of the wrong type: the saver raises
    CorruptError; doctor said ok, with a warning that the next saver replays it."""
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    _dead_journal(store, record)
    res = cli("doctor", "--json", "--store", store)
    err = _saver_error(store)
    assert isinstance(err, CorruptError) and why in err.message
    _fails_with(res, "langgraph journals", err)
    assert "journal gone.journal record 1 is malformed" in res.err
    assert not [c for c in _checks(res) if "was left by a saver that is gone" in c["detail"]]  # no promise of a replay
    assert "1 journal(s)" in _one(_checks(res), "langgraph journals", "ok")["detail"] and "1 of savers that are gone" in res.out


def test_a_newer_ckpts_journal_fails_with_the_savers_error(tmp_path: Path, cli: Any) -> None:
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    _dead_journal(store, {"op": "d", "k": []}, magic=MAGIC[:-1] + b"9")
    res = cli("doctor", "--json", "--store", store)
    err = _saver_error(store)
    assert isinstance(err, UnsupportedVersionError)
    _fails_with(res, "langgraph journals", err)


def _replace(path: Path, kind: str) -> None:
    """Put `kind` in place of the directory at `path`: a symbolic link to a directory
    outside the store holding what it held, or an empty regular file."""
    if kind == "link":
        outside = path.parent.parent / f"outside-{path.name}"
        while outside.exists():
            outside = outside.with_name(outside.name + "x")
        path.rename(outside) if path.exists() else outside.mkdir()
        path.symlink_to(outside)
    else:
        shutil.rmtree(path, ignore_errors=True)
        path.write_bytes(b"")


@pytest.mark.parametrize("kind", ["link", "file"])
@pytest.mark.parametrize(
    ("sub", "name"),
    [("langgraph", "langgraph journals"), ("langgraph/threads", "langgraph thread leases"), ("langgraph/want", "langgraph thread leases")],
)
def test_a_savers_directory_that_is_a_link_or_no_directory_fails_with_the_savers_error(
    tmp_path: Path, cli: Any, sub: str, name: str, kind: str
) -> None:
    """The saver raises StoreIOError (it writes nothing outside the store); doctor
    showed every check ok, reading the journals through the link."""
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    _replace(store / sub, kind)
    res = cli("doctor", "--json", "--store", store)
    err = _saver_error(store)
    assert isinstance(err, StoreIOError) and str(store / sub) in err.message
    _fails_with(res, name, err)


@pytest.mark.parametrize("kind", ["link", "file"])
def test_the_memory_stores_directory_a_link_or_no_directory_fails_as_ckptstore_refuses_it(tmp_path: Path, cli: Any, kind: str) -> None:
    store = tmp_path / ".ckpt"
    CkptStore.open(store).close()
    _replace(store / "langgraph" / "store", kind)
    res = cli("doctor", "--json", "--store", store)
    with pytest.raises(StoreIOError) as raised:
        CkptStore.open(store)
    assert res.code == 1
    found = _one(_checks(res), "langgraph memory store", "fail")
    assert found["detail"] == f"CkptStore.open refuses the store: {raised.value.message}"
    assert ("is a symbolic link" if kind == "link" else "is a regular file, not a directory") in found["detail"]


@pytest.mark.parametrize("kind", ["link", "directory"])
def test_a_recovery_lock_the_saver_cannot_open_fails_with_its_error(tmp_path: Path, cli: Any, kind: str) -> None:
    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    lock = store / "langgraph" / "recover.lock"
    lock.unlink()
    lock.symlink_to(tmp_path / "elsewhere") if kind == "link" else lock.mkdir()
    res = cli("doctor", "--json", "--store", store)
    err = _saver_error(store)
    assert isinstance(err, StoreIOError) and "recover.lock" in err.message
    _fails_with(res, "langgraph journals", err)
    assert not (tmp_path / "elsewhere").exists()


def _damaged_stores(root: Path) -> dict[str, Path]:
    """Stores damaged in as many ways, each as it is after a saver used it."""
    out: dict[str, Path] = {}

    def fresh(what: str) -> Path:
        store = root / what / ".ckpt"
        CkptSaver.open(store).close()
        out[what] = store
        return store

    _dead_journal(fresh("malformed record"), {k: v for k, v in _PUT.items() if k != "t"})
    _replace(fresh("langgraph/ a link") / "langgraph", "link")
    _replace(fresh("threads/ a link") / "langgraph" / "threads", "link")
    _replace(fresh("want/ a file") / "langgraph" / "want", "file")
    os.mkfifo(fresh("a FIFO journal") / "langgraph" / "fifo.journal")
    _dead_journal(fresh("a newer ckpt's journal"), {"op": "d", "k": []}, magic=b"CKPTLGJ3")
    _dead_journal(fresh("a journal with a hole"), {"op": "d", "k": []}, {"op": "d", "k": []}, between=b"\x01" * 40)
    _dead_journal(fresh("a malformed record after a hole"), {"op": "d", "k": []}, {"op": "w", "t": 5}, between=b"\x01" * 40)
    (fresh("a journal of garbage") / "langgraph" / "junk.journal").write_bytes(b"junk" * 50)
    out["a dead saver's journal"] = root / "dead" / ".ckpt"
    _abandoned_journal(out["a dead saver's journal"])
    return out


def test_doctors_verdict_is_whether_the_saver_opens_the_store(tmp_path: Path, cli: Any) -> None:
    """For each damaged store: doctor fails exactly when CkptSaver.open raises, and then
    with the error it raises (doctor first: a saver that opens the store repairs it)."""
    verdicts = {}
    for what, store in _damaged_stores(tmp_path).items():
        res = cli("doctor", "--json", "--store", store)
        err = _saver_error(store)
        verdicts[what] = (res.code == 1, err is not None)
        if err is not None:
            assert any(c["status"] == "fail" and c["detail"].endswith(str(getattr(err, "message", err))) for c in _checks(res)), (what, err)
    assert all(fails == raises for fails, raises in verdicts.values()), verdicts
    assert sum(raises for _fails, raises in verdicts.values()) == 5, verdicts  # some of each


def test_the_ref_count_is_what_ckpt_refs_lists_by_kind_and_a_damaged_ref_leaves_the_others_counted(tmp_path: Path, cli: Any) -> None:
    # one damaged ref made the count "0 ref(s)", while `ckpt refs` listed every other
    store = tmp_path / "s"
    assert cli("init", store).code == 0
    doc = tmp_path / "d.json"
    doc.write_text('{"a": 1}')
    for subject in ("agent:a", "agent:b"):
        assert cli("take", doc, "-S", subject, "--store", store).code == 0
    assert cli("tag", "good", "agent:a", "--store", store).code == 0
    assert cli("tag", "bad", "agent:a", "--store", store).code == 0
    assert cli("branch", "try", "agent:b", "--store", store).code == 0

    def structure() -> dict[str, str]:
        return _one(_checks(cli("doctor", "--json", "--store", store)), "store structure")

    listed = json.loads(cli("refs", "--json", "--store", store).out)
    assert len(listed) == 5
    found = structure()
    assert found["status"] == "ok" and "5 ref(s) (2 latest, 1 branch(es), 2 tag(s))" in found["detail"], found
    (store / "refs" / "tags" / "bad").write_bytes(b"garbage")
    listed = json.loads(cli("refs", "--json", "--store", store).out)
    assert len(listed) == 4
    found = structure()
    assert found["status"] == "fail" and "4 ref(s) (2 latest, 1 branch(es), 1 tag(s))" in found["detail"], found
    assert "a ref cannot be read (refs/tags/bad: " in found["detail"], found

"""Locks held as objects in the store (ckptcli.store.objlocks) on the in-memory backend,
with real threads and real processes; each "host" has its own name and a fake clock."""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ckptcli import notices
from ckptcli.errors import CorruptError, LockError, StoreIOError, UnsupportedVersionError
from ckptcli.store import objlocks
from ckptcli.store.backends.base import ObjectInfo
from ckptcli.store.backends.memory import MemoryBackend
from ckptcli.store.layout import lock_object_path
from ckptcli.store.objlocks import (
    MAX_LOCK_BYTES,
    LockEnv,
    LockRecord,
    acquire,
    decode_lock,
    encode_lock,
    list_locks,
    remove_locks,
)

MIN = 60.0
T0 = 1_800_000_000.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def host(name: str, clock: Callable[[], float], pid: int | None = None) -> LockEnv:
    return LockEnv(host=name, pid=os.getpid() if pid is None else pid, user="tester", clock=clock)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Iterator[MemoryBackend]:
    name = f"objlocks-{request.node.name}"
    MemoryBackend.forget(name)
    yield MemoryBackend(name)
    MemoryBackend.forget(name)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def said() -> Iterator[tuple[list[str], list[str]]]:
    """(notices, warnings) said while the test runs."""
    infos: list[str] = []
    warnings: list[str] = []
    old_warning = notices.handler()
    notices.set_info_handler(infos.append)
    notices.set_handler(warnings.append)
    yield infos, warnings
    notices.set_info_handler(None)
    notices.set_handler(old_warning)


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not cond():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.002)


def live(backend: MemoryBackend, env: LockEnv) -> list[tuple[str, str]]:
    return [(i.record.host, i.record.kind) for i in list_locks(backend, env=env) if i.record and not i.stale]


def test_shared_locks_coexist_and_release_removes_them(backend: MemoryBackend, clock: FakeClock) -> None:
    h1, h2 = host("h1", clock), host("h2", clock)
    with acquire(backend, False, wait=0, env=h1, command="ckpt take"), acquire(backend, False, wait=0, env=h2):
        assert sorted(live(backend, h1)) == [("h1", "shared"), ("h2", "shared")]
        rec = next(i.record for i in list_locks(backend, env=h1) if i.record and i.record.host == "h1")
        assert (rec.pid, rec.user, rec.command, rec.created, rec.refreshed) == (os.getpid(), "tester", "ckpt take", T0, T0)
    assert backend.list_paths("locks/") == []


def test_exclusive_excludes_shared_and_exclusive(backend: MemoryBackend, clock: FakeClock) -> None:
    h1, h2 = host("h1", clock), host("h2", clock)
    with acquire(backend, True, wait=0, env=h1, command="ckpt prune"):
        for exclusive in (False, True):
            with pytest.raises(LockError) as err:
                acquire(backend, exclusive, wait=0, env=h2)
            assert "locked (exclusive) by ckpt prune" in err.value.message and "on host h1" in err.value.message
            assert "ckpt unlock" in (err.value.hint or "")
        assert live(backend, h2) == [("h1", "exclusive")]  # the refused takers left nothing behind
    with acquire(backend, False, wait=0, env=h1), pytest.raises(LockError, match=r"locked \(shared\) by .*on host h1"):
        acquire(backend, True, wait=0, env=h2)
    with acquire(backend, True, wait=0, env=h2):
        pass


class Slow(MemoryBackend):
    """Lets other threads run between a listing and what its caller does next."""

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        found = builtins.list(super().list(prefix))
        time.sleep(0.0002)
        return iter(found)


def test_racing_exclusive_takers_never_both_hold(backend: MemoryBackend) -> None:
    backend = Slow(backend.url.removeprefix("memory://"))
    holding, most, acquired = [0], [0], [0]
    count = threading.Lock()
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        env = host(f"h{i}", time.time)
        try:
            start.wait()
            for _ in range(25):
                with acquire(backend, True, wait=60, env=env) as held:
                    with count:
                        holding[0] += 1
                        most[0] = max(most[0], holding[0])
                        acquired[0] += 1
                    held.check()
                    time.sleep(0.0005)
                    with count:
                        holding[0] -= 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert acquired[0] == 100 and most[0] == 1
    assert backend.list_paths("locks/") == []


def test_a_pair_racing_with_no_wait_has_at_most_one_winner(backend: MemoryBackend) -> None:
    for _ in range(150):
        start = threading.Barrier(2)
        won: list[object] = []

        def take(name: str, start: threading.Barrier = start, won: list[object] = won) -> None:
            start.wait()
            with contextlib.suppress(LockError):
                won.append(acquire(backend, True, wait=0, env=host(name, time.time)))

        pair = [threading.Thread(target=take, args=(n,)) for n in ("a", "b")]
        for t in pair:
            t.start()
        for t in pair:
            t.join()
        assert len(won) <= 1
        for held in won:
            held.release()  # type: ignore[attr-defined]
        assert backend.list_paths("locks/") == []


def test_a_lock_not_refreshed_for_30_minutes_is_stale(backend: MemoryBackend) -> None:
    c1, c2 = FakeClock(), FakeClock()
    h1, h2 = host("h1", c1), host("h2", c2)
    with acquire(backend, True, wait=0, env=h1):  # its refresh thread does not run in this test
        c2.advance(29 * MIN)
        with pytest.raises(LockError, match="on host h1"):  # another host, refreshed 29 min ago: held
            acquire(backend, False, wait=0, env=h2)
        c2.advance(2 * MIN)
        [info] = list_locks(backend, env=h2)
        assert info.stale and info.why == "not refreshed for 31 min"
        with acquire(backend, True, wait=0, env=h2):
            pass


def test_a_lock_of_a_dead_process_of_this_host_is_stale_at_once(backend: MemoryBackend, clock: FakeClock) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        held = acquire(backend, True, wait=0, env=host("h1", clock, pid=proc.pid))
        with pytest.raises(LockError, match=f"pid {proc.pid} on host h1"):
            acquire(backend, True, wait=0, env=host("h1", clock))  # its process lives
    finally:
        proc.kill()
        proc.wait()
    try:
        with pytest.raises(LockError, match=f"pid {proc.pid} on host h1"):
            acquire(backend, True, wait=0, env=host("h2", clock))  # another host cannot tell it died
        [info] = list_locks(backend, env=host("h1", clock))
        assert info.stale and info.why == f"its process {proc.pid} on this host (h1) is gone"
        with acquire(backend, True, wait=0, env=host("h1", clock)):
            pass
    finally:
        held.release()


def test_refresh_keeps_a_lock_alive_past_30_minutes(backend: MemoryBackend, clock: FakeClock) -> None:
    h1, h2 = host("h1", clock), host("h2", clock)
    with acquire(backend, True, wait=0, env=h1, refresh_every=0.005) as held:
        for _ in range(8):  # 40 min of the fake clock, 5 at a time
            clock.advance(5 * MIN)
            now = clock()
            wait_until(lambda now=now: held.last_refresh == now, "a refresh")  # type: ignore[misc]
            held.check()
        [info] = list_locks(backend, env=h2)
        assert info.record is not None and info.record.refreshed == T0 + 40 * MIN and not info.stale
        with pytest.raises(LockError, match="on host h1"):
            acquire(backend, False, wait=0, env=h2)


def test_check_confirm_sees_a_removal_before_the_next_refresh(backend: MemoryBackend, clock: FakeClock) -> None:
    with acquire(backend, True, wait=0, env=host("h1", clock)) as held:  # no refresh runs in this test
        held.check(confirm=True)
        later = FakeClock(T0 + 31 * MIN)  # h2's clock runs ahead: it counts the lock stale
        assert [i.path for i in remove_locks(backend, env=host("h2", later))] == [held.path]
        held.check()  # without reading the store it cannot know yet
        with pytest.raises(LockError, match="was removed"):
            held.check(confirm=True)
        with pytest.raises(LockError, match="was removed"):
            held.check()


class FailingPuts(MemoryBackend):
    """A backend whose writes fail while `failing` is set (the store is unreachable)."""

    failing = False

    def put(self, path: str, data: bytes) -> ObjectInfo:
        if self.failing:
            raise StoreIOError(f"{self.url}/{path}: connection refused")
        return super().put(path, data)

    def put_if_match(self, path: str, data: bytes, etag: str | None) -> ObjectInfo | None:
        if self.failing:
            raise StoreIOError(f"{self.url}/{path}: connection refused")
        return super().put_if_match(path, data, etag)


def test_check_fails_when_refreshes_fail(backend: MemoryBackend, clock: FakeClock) -> None:
    flaky = FailingPuts(backend.url.removeprefix("memory://"))
    with acquire(flaky, False, wait=0, env=host("h1", clock), refresh_every=0.005) as held:
        clock.advance(10 * MIN)
        wait_until(lambda: held.last_refresh == T0 + 10 * MIN, "a refresh")
        flaky.failing = True
        clock.advance(15 * MIN)  # 15 min since the last good refresh: still in time
        wait_until(lambda: held.refresh_error != "", "a failed refresh")
        held.check()
        clock.advance(6 * MIN)  # 21 min: another host could count it stale before the commit is done
        with pytest.raises(LockError, match=r"could not be refreshed for 21 min \(last error: .*connection refused\)"):
            held.check()
        flaky.failing = False
        wait_until(lambda: held.last_refresh == T0 + 31 * MIN, "a refresh")
        held.check()


def test_a_lock_removed_while_held_is_lost_not_written_again(backend: MemoryBackend, clock: FakeClock) -> None:
    with acquire(backend, True, wait=0, env=host("h1", clock), refresh_every=0.005) as held:
        assert [i.path for i in remove_locks(backend, all=True, env=host("h2", clock))] == [held.path]
        with pytest.raises(LockError, match="was removed"):
            wait_until(lambda: bool(held.check()) or False, "the loss noticed")
        assert backend.list_paths("locks/") == []
    with pytest.raises(LockError, match="released"):
        held.check()


def test_remove_locks_takes_stale_ones_unless_all(backend: MemoryBackend, said: tuple[list[str], list[str]]) -> None:
    old, now = FakeClock(), FakeClock(T0 + 45 * MIN)
    backend.put("locks/store.lock", b"a local flock file")  # not a lock object: never touched
    backend.put("locks/writers/take-1-ab.lock", b"")
    stale = acquire(backend, False, wait=0, env=host("h1", old))
    fresh = acquire(backend, False, wait=0, env=host("h2", now))
    garbage = lock_object_path("0" * 32)
    backend.put(garbage, b"\x00not json")
    try:
        removed = remove_locks(backend, env=host("h3", now))
        assert sorted(i.path for i in removed) == sorted([stale.path, garbage])
        assert [i.path for i in list_locks(backend, env=host("h3", now))] == [fresh.path]
        assert [i.path for i in remove_locks(backend, all=True, env=host("h3", now))] == [fresh.path]
        assert backend.list_paths("locks/") == ["locks/store.lock", "locks/writers/take-1-ab.lock"]
    finally:
        stale.release()
        fresh.release()


def test_a_corrupt_lock_object_is_reported_and_does_not_block(
    backend: MemoryBackend, clock: FakeClock, said: tuple[list[str], list[str]]
) -> None:
    garbage = lock_object_path("f" * 32)
    backend.put(garbage, b'{"v":1,"kind":"exclusive"}')
    [info] = list_locks(backend, env=host("h1", clock))
    assert info.record is None and info.stale
    assert info.why.startswith(f"damaged: {backend.url}/{garbage}: a damaged lock object")
    assert info.to_json(clock())["why"] == info.why
    with acquire(backend, True, wait=0, env=host("h1", clock)):
        pass
    assert len(said[1]) == 1 and garbage in said[1][0] and "ckpt unlock" in said[1][0]


def test_a_lock_copied_under_another_name_is_damaged(backend: MemoryBackend, clock: FakeClock) -> None:
    with acquire(backend, True, wait=0, env=host("h1", clock)) as held:
        backend.put(lock_object_path("1" * 32), backend.get(held.path))
        with pytest.raises(LockError, match="on host h1"):  # the original still holds
            acquire(backend, True, wait=0, env=host("h2", clock))
        infos = list_locks(backend, env=host("h2", clock))
        assert [(i.path, i.stale) for i in infos] == sorted([(held.path, False), (lock_object_path("1" * 32), True)])
        assert "under another name" in next(i.why for i in infos if i.stale)


def test_a_lock_of_a_newer_ckpt_blocks(backend: MemoryBackend, clock: FakeClock) -> None:
    backend.put(lock_object_path("e" * 32), json.dumps({"v": 2, "anything": "new"}).encode())
    [info] = list_locks(backend, env=host("h1", clock))
    assert info.record is None and not info.stale and "version 2" in info.why
    with pytest.raises(LockError, match="a lock this ckpt cannot read"):
        acquire(backend, False, wait=0, env=host("h1", clock))


GOOD = json.loads(encode_lock(LockRecord("a" * 32, "shared", "h", 7, "u", T0, T0, "ckpt take")))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"v": "1"}',
        b'{"v": 0}',
        b" " * (MAX_LOCK_BYTES + 1),
        json.dumps({**GOOD, "pid": True}).encode(),
        json.dumps({**GOOD, "pid": -1}).encode(),
        json.dumps({**GOOD, "kind": "both"}).encode(),
        json.dumps({**GOOD, "id": "../x"}).encode(),
        json.dumps({**GOOD, "refreshed": "soon"}).encode(),
        json.dumps({**GOOD, "host": "h" * 10_000}).encode(),
        json.dumps({k: v for k, v in GOOD.items() if k != "user"}).encode(),
        json.dumps({**GOOD, "refreshed": float("inf")}).encode(),
    ],
)
def test_decode_refuses_garbage_with_one_line(data: bytes) -> None:
    with pytest.raises(CorruptError) as err:
        decode_lock(data, "memory://s/locks/x")
    assert str(err.value).startswith("memory://s/locks/x: ") and "\n" not in str(err.value)


def test_decode_reads_what_encode_writes_and_refuses_a_newer_version() -> None:
    record = LockRecord("a" * 32, "exclusive", "h", 7, "u", T0, T0 + 1.5, "ckpt prune")
    assert decode_lock(encode_lock(record), "x") == record
    with pytest.raises(UnsupportedVersionError, match="version 9"):
        decode_lock(json.dumps({**GOOD, "v": 9}).encode(), "x")


def test_a_waiting_taker_is_told_once_who_holds_the_lock(
    backend: MemoryBackend, clock: FakeClock, said: tuple[list[str], list[str]]
) -> None:
    with acquire(backend, True, wait=0, env=host("h1", clock), command="ckpt prune"):
        clock.advance(3 * MIN)
        with pytest.raises(LockError, match=r"ckpt prune \(pid \d+ on host h1, user tester, refreshed 3 min ago\)"):
            acquire(backend, False, wait=2.0, env=host("h2", clock))  # told after 0.5 s: a loaded machine has time
    infos = said[0]
    assert len(infos) == 1 and "held by ckpt prune" in infos[0] and "on host h1" in infos[0]


def test_the_notice_comes_even_when_a_pause_would_reach_the_deadline(
    backend: MemoryBackend, clock: FakeClock, said: tuple[list[str], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the longest jitter the pauses sum to 1.91 s, short of the notice (2 s here),
    and the next (1.5 s) would run to the deadline (3 s): the taker wakes at 2 s to say
    who holds the lock, not only to give up."""
    monkeypatch.setattr(objlocks.random, "uniform", lambda a, b: b)
    monkeypatch.setattr(objlocks, "LOCK_NOTICE_AFTER", 2.0)
    with acquire(backend, True, wait=0, env=host("h1", clock), command="ckpt prune"), pytest.raises(LockError):
        acquire(backend, False, wait=3.0, env=host("h2", clock))
    assert len(said[0]) == 1 and "held by ckpt prune" in said[0][0]


def test_a_waiting_taker_gets_the_lock_once_released(backend: MemoryBackend, clock: FakeClock) -> None:
    held = acquire(backend, True, wait=0, env=host("h1", clock))
    releaser = threading.Timer(0.2, held.release)
    releaser.start()
    with acquire(backend, True, wait=30, env=host("h2", clock)):
        assert live(backend, host("h2", clock)) == [("h2", "exclusive")]
    releaser.join()


def test_locks_of_different_names_never_conflict_and_old_records_are_the_store_lock(backend: MemoryBackend) -> None:
    with acquire(backend, True, wait=0, name="store"), acquire(backend, True, wait=0, name="refs"):
        with pytest.raises(LockError, match="exclusive"):
            acquire(backend, False, wait=0, name="refs")
        assert sorted(i.record.name for i in list_locks(backend) if i.record) == ["refs", "store"]
    # a record written before names existed has none: it is the store lock
    body = json.loads(encode_lock(LockRecord("a" * 32, "exclusive", "h", 1, "u", 1.0, 1.0)))
    del body["name"]
    assert decode_lock(json.dumps(body).encode(), "t").name == "store"
    body["name"] = "../x"
    with pytest.raises(CorruptError):
        decode_lock(json.dumps(body).encode(), "t")


def test_a_waiting_exclusive_taker_holds_new_shared_takers_off(backend: MemoryBackend) -> None:
    first = acquire(backend, False, wait=0)  # a take is running
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(acquire(backend, True, wait=30)))
    waiter.start()
    deadline = time.monotonic() + 10
    while not any(i.record and i.record.exclusive for i in list_locks(backend)):
        assert time.monotonic() < deadline, "the exclusive taker never showed its object"
        time.sleep(0.01)
    with pytest.raises(LockError, match="exclusive"):
        acquire(backend, False, wait=0)  # a new take stands back: the prune is next
    first.release()
    waiter.join(timeout=30)
    assert got and got[0].record.exclusive
    got[0].release()
    acquire(backend, False, wait=0).release()  # and after it, takes go on


class _InterruptAfterCreate(MemoryBackend):
    """A Ctrl-C or SIGTERM that lands once a lock object's create request wrote it and
    before the request returned: no caller holds the lock yet."""

    armed = True

    def put_if_match(self, path: str, data: bytes, etag: str | None) -> ObjectInfo | None:
        return _interrupt_after_create(MemoryBackend.put_if_match, self, path, data, etag)


def _interrupt_after_create(
    put: Callable[..., ObjectInfo | None], self: MemoryBackend, path: str, data: bytes, etag: str | None
) -> ObjectInfo | None:
    info = put(self, path, data, etag)
    if etag is None and path.startswith("locks/") and _InterruptAfterCreate.armed:
        _InterruptAfterCreate.armed = False
        raise KeyboardInterrupt
    return info


def test_an_interrupt_just_after_a_lock_object_is_written_leaves_nothing_once_released(
    backend: MemoryBackend, request: pytest.FixtureRequest
) -> None:
    """A SIGTERM that landed as the lock object was written left it in the bucket: every
    other host's prune was refused until the lock went stale (30 minutes)."""
    _InterruptAfterCreate.armed = True
    racy = _InterruptAfterCreate(f"objlocks-{request.node.name}")
    with pytest.raises(KeyboardInterrupt):
        acquire(racy, True, wait=0)
    assert len(list_locks(backend)) == 1  # written, and no one holds it
    objlocks.release_pending()
    assert list_locks(backend) == []
    assert objlocks.pending_locks() == set()


def test_an_interrupted_release_is_finished_by_release_pending(backend: MemoryBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    held = acquire(backend, False, wait=0)
    original, once = held._thread.join, [True]

    def interrupted_join(timeout: float | None = None) -> None:
        original(timeout)
        if once.pop() if once else False:
            raise KeyboardInterrupt  # a Ctrl-C as the refresh thread stops

    monkeypatch.setattr(held._thread, "join", interrupted_join)
    with pytest.raises(KeyboardInterrupt):
        held.release()
    assert len(list_locks(backend)) == 1
    objlocks.release_pending()
    assert list_locks(backend) == []
    held.release()  # and a later release does nothing


def test_a_cli_run_removes_the_lock_object_an_interrupt_stranded_and_keeps_the_callers_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from ckptcli.cli.app import run
    from ckptcli.errors import ExitCode

    name = "objlocks-cli-interrupt"
    MemoryBackend.forget(name)
    try:
        assert run(["init", f"memory://{name}"]) == 0
        mine = acquire(MemoryBackend(name), False, wait=0, name="refs")  # the caller's lock, held across the run
        doc = tmp_path / "s.json"
        doc.write_text('{"memory": {"k": 1}}')
        _InterruptAfterCreate.armed = True
        put = MemoryBackend.put_if_match
        monkeypatch.setattr(MemoryBackend, "put_if_match", lambda self, *a: _interrupt_after_create(put, self, *a))
        code = run(["--store", f"memory://{name}", "take", str(doc), "-S", "agent:x"])
        assert code == ExitCode.INTERRUPTED
        assert [i.path for i in list_locks(MemoryBackend(name))] == [mine.path]
        mine.release()
        assert list_locks(MemoryBackend(name)) == []
    finally:
        MemoryBackend.forget(name)


def test_an_interrupt_before_the_refresh_thread_starts_is_cleaned_up_without_an_error(
    backend: MemoryBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """release_pending joined a refresh thread that never started: RuntimeError, a traceback
    and exit 1 instead of the one line and exit 143 of a SIGTERM."""
    start, once = threading.Thread.start, [True]

    def interrupted_start(self: threading.Thread) -> None:
        if self.name.startswith("ckpt-lock-") and once and once.pop():
            raise KeyboardInterrupt
        start(self)

    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    with pytest.raises(KeyboardInterrupt):
        acquire(backend, False, wait=0)
    assert len(list_locks(backend)) == 1
    objlocks.release_pending()
    assert list_locks(backend) == []

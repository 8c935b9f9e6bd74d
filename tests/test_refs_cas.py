"""Refs on object storage move by compare-and-swap (ckptcli.store.refs, `Refs._swap`):
racing writers on one ref, with real threads, on the in-memory backend and on a real S3
server on loopback (moto). Each writer is a store opened on its own (as another host
would), and every writer of a round reads the same version of the ref before any of
them writes (a barrier in the backend), so each round is a real conflict."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ckptcli import api
from ckptcli.errors import ConflictError, LatestMovedError, NotFoundError
from ckptcli.format.manifest import Subject
from ckptcli.store import layout, reflog
from ckptcli.store.backends import open_backend
from ckptcli.store.backends.base import ObjectBackend
from ckptcli.store.backends.memory import MemoryBackend
from ckptcli.store.prune import forget_checkpoints
from ckptcli.store.remote import ObjectStoreIO
from ckptcli.store.repository import Store, read_config
from tests.helpers_backend import FaultyBackend
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures

WRITERS = 6
ROUNDS = 4
SUBJECT = Subject.parse("agent:race")
LATEST = layout.latest_ref("agent", "race")


class Gated(FaultyBackend):
    """Counts calls (FaultyBackend) and, for a thread that armed it, holds the first read
    of `path` until every writer of the round has read it too."""

    def __init__(self, inner: ObjectBackend, path: str, gate: threading.Barrier, armed: threading.local) -> None:
        super().__init__(inner)
        self.path, self.gate, self.armed = path, gate, armed
        self.first_puts: list[bool] = []  # each armed thread's first compare-and-swap: did it win?

    def get_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str]:
        try:
            return super().get_versioned(path, limit)
        finally:
            if path == self.path and getattr(self.armed, "read", False):
                self.armed.read = False
                self.armed.put = True
                self.gate.wait(timeout=60)

    def put_if_match(self, path: str, data: bytes, etag: str | None) -> Any:
        got = super().put_if_match(path, data, etag)
        if path == self.path and getattr(self.armed, "put", False):
            self.armed.put = False
            self.first_puts.append(got is not None)
        return got


@pytest.fixture(name="objects", params=["memory", "s3"])
def fixture_objects(request: pytest.FixtureRequest) -> Iterator[Callable[[], ObjectBackend]]:
    """A new client of one empty store's objects at each call (one per writer)."""
    if request.param == "memory":
        name = "refs-cas-" + request.node.originalname.removeprefix("test_")[:60]
        MemoryBackend.forget(name)
        yield lambda: MemoryBackend(name)
        MemoryBackend.forget(name)
    else:
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        yield lambda: open_backend(bucket.url)


def _store(objects: ObjectBackend) -> Store:
    io = ObjectStoreIO(objects)
    return Store(io, read_config(io, "config"), objects.url)


def _checkpoints(objects: Callable[[], ObjectBackend], n: int) -> tuple[Store, list[tuple[bytes, int]]]:
    """A new store holding `n` checkpoints of another subject, oldest first: (id, created_ns)."""
    st = api.init_store(objects().url)
    made = []
    for i in range(n):
        r = api.take(st, {"memory": {"turn": i}}, subject="agent:source")
        made.append((r.id, r.manifest.created_ns))
    assert [c for _i, c in made] == sorted(c for _i, c in made)
    return st, made


def _race(objects: Callable[[], ObjectBackend], path: str, work: Callable[[Store, int], Any]) -> tuple[list[Any], list[bool]]:
    """WRITERS threads, each with its own store and client, run work(store, i) once, all
    having read the ref at `path` before any writes. Returns: what each returned (or the
    exception it raised), and each one's first compare-and-swap result."""
    gate = threading.Barrier(WRITERS)
    armed = threading.local()
    clients = [Gated(objects(), path, gate, armed) for _ in range(WRITERS)]
    results: list[Any] = [None] * WRITERS

    def run(i: int) -> None:
        armed.read = True
        try:
            results[i] = work(_store(clients[i]), i)
        except Exception as exc:  # noqa: BLE001 - the test looks at what each writer raised
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    return results, [won for c in clients for won in c.first_puts]


def _moves(st: Store, path: str) -> list[reflog.Entry]:
    return [e for e in reflog.read(st.backend, path, st.warn) if e.old != e.new]


def test_racing_takes_move_latest_forward_only_and_every_move_is_logged(objects: Callable[[], ObjectBackend]) -> None:
    st, made = _checkpoints(objects, WRITERS * ROUNDS)
    created = dict(made)
    won: list[bytes] = []
    for r in range(ROUNDS):
        batch = made[r * WRITERS : (r + 1) * WRITERS]  # every one newer than the rounds before
        results, first = _race(objects, LATEST, lambda s, i, batch=batch: s.advance_latest(SUBJECT, batch[i][0], batch[i][1]))
        assert not [x for x in results if isinstance(x, Exception)], results
        # all read one version and all tried to write it: exactly one won that round
        assert sorted(first) == [False] * (WRITERS - 1) + [True], first
        # latest names the newest of the round, whichever order the writers ran in
        assert st.read_ref(LATEST) == max(batch, key=lambda m: m[1])[0]
        won += [batch[i][0] for i in range(WRITERS) if results[i] is True]
    moves = _moves(st, LATEST)
    # one entry per move, in the order of the moves: each starts where the one before ended
    assert sorted(bytes.fromhex(e.new) for e in moves if e.new) == sorted(won)
    assert [e.old for e in moves[1:]] == [e.new for e in moves[:-1]]
    # and latest never moved backwards
    steps = [created[bytes.fromhex(e.new)] for e in moves if e.new]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert moves[-1].new == st.read_ref(LATEST).hex()  # type: ignore[union-attr]
    # the ref's stamp grows along the moves, and the log's times follow it
    assert [e.time_ns for e in moves] == sorted(e.time_ns for e in moves)


def test_racing_tag_creation_has_exactly_one_winner(objects: Callable[[], ObjectBackend]) -> None:
    st, made = _checkpoints(objects, WRITERS)
    path = layout.tag_ref("release")
    results, first = _race(objects, path, lambda s, i: s.set_tag("release", made[i][0]))
    winners = [i for i, x in enumerate(results) if not isinstance(x, Exception)]
    assert len(winners) == 1 and first.count(True) == 1
    assert all(isinstance(x, ConflictError) and "already points at" in x.message for i, x in enumerate(results) if i not in winners)
    assert st.read_ref(path) == made[winners[0]][0]
    assert [(e.old, e.new) for e in reflog.read(st.backend, path, st.warn)] == [(None, made[winners[0]][0].hex())]


def test_racing_branch_moves_are_all_logged_and_chained(objects: Callable[[], ObjectBackend]) -> None:
    st, made = _checkpoints(objects, WRITERS)
    path = layout.branch_ref("exp")
    results, first = _race(objects, path, lambda s, i: s.set_branch("exp", made[i][0]))
    assert results == [None] * WRITERS and first.count(True) == 1
    moves = _moves(st, path)
    assert len(moves) == WRITERS and moves[0].old is None
    assert [e.old for e in moves[1:]] == [e.new for e in moves[:-1]]
    assert st.read_ref(path) == bytes.fromhex(moves[-1].new or "")


def test_a_lost_compare_and_swap_is_retried_and_no_move_is_lost() -> None:
    MemoryBackend.forget("refs-cas-conflict")
    st = api.init_store("memory://refs-cas-conflict")
    one = api.take(st, {"memory": {"turn": 1}}, subject="agent:bot").id
    two = api.take(st, {"memory": {"turn": 2}}, subject="agent:bot", move_latest=False)
    path = layout.latest_ref("agent", "bot")
    faulty = FaultyBackend(MemoryBackend("refs-cas-conflict"), conflict_once=path)
    writer = _store(faulty)
    assert writer.advance_latest(Subject.parse("agent:bot"), two.id, two.manifest.created_ns)
    assert [c for c in faulty.calls if c == ("put_if_match", path)] == [("put_if_match", path)] * 2  # lost once, then won
    assert st.read_ref(path) == two.id
    assert [(e.old, e.new) for e in _moves(st, path)] == [(None, one.hex()), (one.hex(), two.id.hex())]
    # a tag and a reset too
    faulty.conflict_once = layout.tag_ref("good")
    writer.set_tag("good", one)
    faulty.conflict_once = path
    assert writer.set_latest(Subject.parse("agent:bot"), one) == two.id
    assert st.read_ref(layout.tag_ref("good")) == one and st.read_ref(path) == one
    assert [e.new for e in _moves(st, path)][-1] == one.hex()


def test_a_take_that_raced_a_reset_leaves_latest_where_the_reset_put_it() -> None:
    MemoryBackend.forget("refs-cas-reset")
    st = api.init_store("memory://refs-cas-reset")
    subj = Subject.parse("agent:bot")
    one = api.take(st, {"memory": {"turn": 1}}, subject=subj).id
    expect = st.latest_state(subj)
    api.take(st, {"memory": {"turn": 2}}, subject=subj, move_latest=False)
    zero = api.take(st, {"memory": {"turn": 0}}, subject="agent:other", move_latest=False).id
    st.set_latest(subj, zero)  # a reset while the take of `three` ran
    three = api.take(st, {"memory": {"turn": 3}}, subject=subj, move_latest=False)
    with pytest.raises(LatestMovedError):
        st.advance_latest(subj, three.id, three.manifest.created_ns, expect=expect)
    assert st.read_ref(st.latest_ref(subj)) == zero and st.read_ref_state(st.latest_ref(subj))[1] != expect[1]
    entries = reflog.read(st.backend, st.latest_ref(subj), st.warn)
    assert [(e.old, e.new) for e in entries if e.old != e.new] == [(None, one.hex()), (one.hex(), zero.hex())]
    assert entries[-1].old == entries[-1].new == zero.hex() and "latest kept" in entries[-1].reason


def test_reflog_entries_go_in_the_order_of_the_moves_whatever_order_they_are_appended_in() -> None:
    MemoryBackend.forget("refs-cas-order")
    st = api.init_store("memory://refs-cas-order")
    a, b, c = (bytes([n]) * 32 for n in (1, 2, 3))
    path = layout.branch_ref("x")
    reflog.append(st.backend, path, None, a, "branch", time_ns=100)
    reflog.append(st.backend, path, b, c, "branch", time_ns=300)  # the later move's writer appended first
    reflog.append(st.backend, path, a, b, "branch", time_ns=200)
    reflog.append(st.backend, path, c, c, "kept")  # no move: at the end, at its own time
    got = reflog.read(st.backend, path, st.warn)
    assert [(e.old, e.new) for e in got] == [(None, a.hex()), (a.hex(), b.hex()), (b.hex(), c.hex()), (c.hex(), c.hex())]


class AppendsFirst(FaultyBackend):
    """Another writer appends to the log at `path` just before this one's first
    compare-and-swap of it (which then finds another version and must read again)."""

    def __init__(self, inner: ObjectBackend, path: str, line: tuple[bytes, bytes]) -> None:
        super().__init__(inner)
        self.path, self.line = path, line

    def put_if_match(self, path: str, data: bytes, etag: str | None) -> Any:
        if path == self.path and self.line:
            old, new = self.line
            self.line = ()  # type: ignore[assignment]
            reflog.append(ObjectStoreIO(self.inner), path[len("logs/") :], old, new, "branch", time_ns=2**62)
        return super().put_if_match(path, data, etag)


def test_reflog_expiry_by_compare_and_swap_keeps_an_entry_appended_meanwhile() -> None:
    MemoryBackend.forget("refs-cas-expire")
    st = api.init_store("memory://refs-cas-expire")
    one = api.take(st, {"memory": {"turn": 1}}, subject="agent:bot").id
    two = api.take(st, {"memory": {"turn": 2}}, subject="agent:bot").id
    path = layout.latest_ref("agent", "bot")
    log = layout.log_path(path)
    st.backend.write_atomic(log, reflog.encode(None, one, "take", time_ns=1) + st.backend.read(log))  # an old entry
    racing = AppendsFirst(MemoryBackend("refs-cas-expire"), log, (two, one))
    trimmed = reflog.expire(ObjectStoreIO(racing), cutoff_ns=2)
    assert [t.dropped for t in trimmed] == [1]
    assert [c for c in racing.calls if c == ("put_if_match", log)] == [("put_if_match", log)] * 2  # lost once, then won
    got = [(e.old, e.new) for e in reflog.read(st.backend, path, st.warn)]
    assert got == [(None, one.hex()), (one.hex(), two.hex()), (two.hex(), one.hex())]  # the old one gone, the new one kept


def test_refs_of_a_local_store_still_move_under_the_refs_lock(tmp_path: Any) -> None:
    st = api.init_store(tmp_path / "s")
    assert not st.backend.ref_cas
    one = api.take(st, {"memory": {"turn": 1}}, subject="agent:bot").id
    st.set_tag("t", one)
    assert (tmp_path / "s" / "locks" / "refs.lock").exists()
    assert st.delete_ref(layout.tag_ref("t")) == one


def test_a_take_moves_latest_by_one_read_and_one_conditional_put_without_a_refs_lock() -> None:
    MemoryBackend.forget("refs-cas-cost")
    api.init_store("memory://refs-cas-cost")
    counting = FaultyBackend(MemoryBackend("refs-cas-cost"))
    st = _store(counting)
    api.take(st, {"memory": {"turn": 1}}, subject="agent:bot")
    path = layout.latest_ref("agent", "bot")
    # read twice before the commit (as the take found it; its parent: capped reads), then swapped
    assert [m for m, p in counting.calls if p == path] == ["get_range", "get_range", "get_versioned", "put_if_match"]
    assert [m for m, p in counting.calls if p == layout.log_path(path)] == ["get_versioned", "put_if_match"]
    # one lock object: the store lock the take holds shared (no "refs" lock)
    assert len({p for _m, p in counting.calls if p.startswith("locks/") and p != "locks/"}) == 1


class SeesLocks(FaultyBackend):
    """Records, at each delete of a ref, the live store locks' kinds (object storage has
    no conditional delete: a ref may only go while no other move can run)."""

    def __init__(self, inner: ObjectBackend) -> None:
        super().__init__(inner)
        self.at_delete: list[list[str]] = []

    def delete(self, path: str) -> None:
        if path.startswith("refs/"):
            from ckptcli.store import objlocks

            held = [i.record for i in objlocks.list_locks(self.inner) if i.record is not None and not i.stale]
            self.at_delete.append([r.kind for r in held if r.name == "store"])
        super().delete(path)


def test_a_ref_is_deleted_only_under_the_store_lock_held_exclusively() -> None:
    MemoryBackend.forget("refs-cas-delete")
    st = api.init_store("memory://refs-cas-delete")
    one = api.take(st, {"memory": {"turn": 1}}, subject="agent:bot").id
    two = api.take(st, {"memory": {"turn": 2}}, subject="agent:bot").id
    st.set_tag("good", one)
    st.set_branch("exp", two)
    seeing = SeesLocks(MemoryBackend("refs-cas-delete"))
    writer = _store(seeing)
    assert writer.delete_ref(layout.tag_ref("good")) == one  # `ckpt tag --delete`: takes it itself
    # forgetting a checkpoint deletes the branch naming it and moves latest back, under
    # the store lock it holds exclusively
    assert forget_checkpoints(writer, [two]) == {two}
    assert st.read_ref(layout.branch_ref("exp")) is None and st.read_ref(st.latest_ref(Subject.parse("agent:bot"))) == one
    assert seeing.at_delete == [["exclusive"], ["exclusive"]]
    assert st.read_ref(layout.tag_ref("good")) is None
    assert [(e.old, e.new) for e in reflog.read(st.backend, layout.tag_ref("good"), st.warn)] == [(None, one.hex()), (one.hex(), None)]
    with pytest.raises(NotFoundError):
        writer.delete_ref(layout.tag_ref("good"))


def test_a_host_whose_clock_is_ahead_does_not_reorder_the_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    MemoryBackend.forget("refs-cas-clock")
    st = api.init_store("memory://refs-cas-clock")
    a, b, c = (api.take(st, {"memory": {"turn": n}}, subject="agent:src").id for n in range(3))
    path = layout.branch_ref("y")
    ahead = time.time_ns() + 3600 * 10**9
    with monkeypatch.context() as m:
        m.setattr(time, "time_ns", lambda: ahead)  # a host an hour ahead moves it first
        st.set_branch("y", a)
    st.set_branch("y", b)  # then hosts with the right time
    st.set_branch("y", c)
    got = reflog.read(st.backend, path, st.warn)
    assert [(e.old, e.new) for e in got] == [(None, a.hex()), (a.hex(), b.hex()), (b.hex(), c.hex())]
    assert [e.time_ns for e in got] == [ahead, ahead + 1, ahead + 2]
    assert st.resolve("y@{1}") == b and st.resolve("y@{2}") == a
    # a ref stamped at the end of time (damage, a broken clock): later moves still log valid entries
    with monkeypatch.context() as m:
        m.setattr(time, "time_ns", lambda: reflog.MAX_TIME_NS - 1)
        st.set_branch("y", a)
    st.set_branch("y", b)
    got = reflog.read(st.backend, path, st.warn)
    assert [e.new for e in got[-2:]] == [a.hex(), b.hex()] and not st.warnings


class NoConditionalWrites(FaultyBackend):
    """Says it has no atomic conditional writes (as the generic fsspec backend does) and
    records, in order, the names of the lock objects made and the writes of refs."""

    conditional_writes = False

    def __init__(self, inner: ObjectBackend) -> None:
        super().__init__(inner)
        self.conditional_writes = False
        self.events: list[str] = []

    def put_if_match(self, path: str, data: bytes, etag: str | None) -> Any:
        if path.startswith("locks/") and etag is None:
            from ckptcli.store import objlocks

            self.events.append("lock " + objlocks.decode_lock(data, path).name)
        return super().put_if_match(path, data, etag)

    def put(self, path: str, data: bytes) -> Any:
        if path.startswith("refs/"):
            self.events.append("put " + path)
        return super().put(path, data)


def test_a_backend_without_conditional_writes_moves_refs_under_the_refs_lock() -> None:
    MemoryBackend.forget("refs-cas-nocas")
    api.init_store("memory://refs-cas-nocas")
    plain = NoConditionalWrites(MemoryBackend("refs-cas-nocas"))
    st = _store(plain)
    assert not st.backend.ref_cas
    api.take(st, {"memory": {"turn": 1}}, subject="agent:bot")
    st.set_tag("good", st.resolve("agent:bot"))
    path = layout.latest_ref("agent", "bot")
    assert plain.events == ["lock store", "lock refs", f"put {path}", "lock refs", "put refs/tags/good"]
    assert ("put_if_match", path) not in plain.calls

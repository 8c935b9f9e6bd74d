"""The conformance suite of the object-storage contract (ckptcli/store/backends/base.py),
run by every backend (tests/test_backend_conformance.py).

Each check is a plain function taking a fresh, empty backend; CHECKS lists them in
order. RACE_CHECKS are the race properties with real threads, for the backends whose
conditional writes are atomic between threads (not moto's S3 server, whose check is
not atomic under racing writers).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest

from ckptcli.errors import InvalidInputError, NotFoundError
from ckptcli.store.backends.base import ObjectBackend, ObjectInfo

MiB = 1 << 20
BAD_PATHS = ["", "/abs", "../up", "a/../b", "a//b", "a/", "./a", "a/./b", "nul\x00byte"]


def _blob(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def put_then_get_returns_the_bytes(b: ObjectBackend) -> None:
    data = bytes(range(256)) * 3
    info = b.put("packs/ab/obj", data)
    assert info == ObjectInfo("packs/ab/obj", len(data), info.etag)
    assert b.get("packs/ab/obj") == data
    assert b.stat("packs/ab/obj") == info
    assert b.get_versioned("packs/ab/obj") == (data, info.etag)
    assert b.exists("packs/ab/obj")


def an_empty_object_is_an_object(b: ObjectBackend) -> None:
    info = b.put("empty", b"")
    assert info.size == 0
    assert b.get("empty") == b""
    assert b.get_range("empty", 0, 10) == b""
    assert b.list_paths("") == ["empty"]


def ranges_at_and_past_the_end(b: ObjectBackend) -> None:
    data = _blob(1000)
    b.put("index/x", data)
    assert b.get_range("index/x", 0, 1000) == data
    assert b.get_range("index/x", 10, 20) == data[10:30]
    assert b.get_range("index/x", 990, 100) == data[990:]  # fewer at the end
    assert b.get_range("index/x", 999, 1) == data[999:]
    assert b.get_range("index/x", 1000, 5) == b""  # at the end
    assert b.get_range("index/x", 5000, 5) == b""  # past it
    assert b.get_range("index/x", 3, 0) == b""
    # the views (no copy where the client allows it) hold the same bytes
    assert bytes(b.get_view("index/x")) == data
    for offset, length in ((0, 1000), (10, 20), (990, 100), (999, 1), (1000, 5), (5000, 5), (3, 0)):
        view = b.get_range_view("index/x", offset, length)
        assert bytes(view) == data[offset : offset + length], (offset, length)
        assert len(view) == len(data[offset : offset + length])


def a_limited_versioned_read_gives_the_first_bytes_and_the_whole_objects_etag(b: ObjectBackend) -> None:
    """get_versioned(path, limit): at most `limit` bytes, the first ones, with the etag of
    the object they came from (a compare-and-swap on it succeeds)."""
    data = _blob(1000, seed=3)
    short, long, empty = b.put("refs/short", data[:10]), b.put("refs/long", data), b.put("refs/empty", b"")
    assert b.get_versioned("refs/short", 11) == (data[:10], short.etag)  # shorter than the limit: whole
    assert b.get_versioned("refs/short", 10) == (data[:10], short.etag)  # exactly the limit
    assert b.get_versioned("refs/long", 11) == (data[:11], long.etag)  # longer: the first `limit` bytes
    assert b.get_versioned("refs/long", 1) == (data[:1], long.etag)
    assert b.get_versioned("refs/long", 0) == (b"", long.etag)
    assert b.get_versioned("refs/long", None) == (data, long.etag)
    assert b.get_versioned("refs/empty", 5) == (b"", empty.etag)  # an empty object (S3: a ranged GET is 416)
    assert b.get_versioned("refs/empty", 0) == (b"", empty.etag)
    for path in ("refs/missing", "refs/long/under"):
        with pytest.raises(NotFoundError):
            b.get_versioned(path, 11)
    with pytest.raises(InvalidInputError):
        b.get_versioned("refs/long", -1)
    moved = b.put_if_match("refs/long", b"moved", b.get_versioned("refs/long", 11)[1])  # the etag is the whole object's
    assert moved is not None and b.get("refs/long") == b"moved"
    assert b.put_if_match("refs/empty", b"x", b.get_versioned("refs/empty", 5)[1]) is not None


def a_put_replaces_and_changes_the_etag(b: ObjectBackend) -> None:
    first = b.put("refs/tags/v1", b"some bytes")
    second = b.put("refs/tags/v1", b"more bytes")
    assert first.etag != second.etag
    assert b.stat("refs/tags/v1").etag == second.etag
    third = b.put("refs/tags/v1", b"other")
    assert (b.get("refs/tags/v1"), b.stat("refs/tags/v1")) == (b"other", third)
    assert third.size == 5


def put_if_absent_writes_once(b: ObjectBackend) -> None:
    assert b.put_if_absent("manifests/m", b"first") is True
    assert b.put_if_absent("manifests/m", b"second") is False
    assert b.get("manifests/m") == b"first"
    b.put("manifests/n", b"there")
    assert b.put_if_absent("manifests/n", b"x") is False
    assert b.get("manifests/n") == b"there"


def cas_with_none_means_must_not_exist(b: ObjectBackend) -> None:
    won = b.put_if_match("refs/latest/k/n", b"v1", None)
    assert won is not None and won.size == 2
    assert b.put_if_match("refs/latest/k/n", b"v2", None) is None  # now it exists
    assert b.get("refs/latest/k/n") == b"v1"
    assert b.stat("refs/latest/k/n") == won


def a_stale_etag_loses(b: ObjectBackend) -> None:
    e1 = b.put("refs/latest/k/n", b"v1").etag
    moved = b.put_if_match("refs/latest/k/n", b"v2", e1)
    assert moved is not None and moved.etag != e1
    assert b.put_if_match("refs/latest/k/n", b"v3", e1) is None  # stale
    assert b.get_versioned("refs/latest/k/n") == (b"v2", moved.etag)
    again = b.put_if_match("refs/latest/k/n", b"v3", moved.etag)
    assert again is not None and again.etag != moved.etag
    assert b.put_if_match("refs/latest/k/n", b"v4", moved.etag) is None
    assert b.put_if_match("refs/latest/k/n", b"v4", "no-such-etag") is None
    assert b.get("refs/latest/k/n") == b"v3"


def cas_loses_to_a_plain_put_and_to_a_delete(b: ObjectBackend) -> None:
    etag = b.put("refs/branches/main", b"a").etag
    b.put("refs/branches/main", b"b")
    assert b.put_if_match("refs/branches/main", b"c", etag) is None
    etag = b.stat("refs/branches/main").etag
    b.delete("refs/branches/main")
    assert b.put_if_match("refs/branches/main", b"c", etag) is None
    assert not b.exists("refs/branches/main")
    assert b.put_if_match("refs/branches/main", b"d", None) is not None
    assert b.get("refs/branches/main") == b"d"


def the_same_bytes_again_are_a_new_version(b: ObjectBackend) -> None:
    """Not every backend promises it (S3's ETag of a plain PUT is the MD5 of the bytes):
    run by the backends that do (SAME_BYTES_NEW_ETAG in the conformance test)."""
    first = b.put("refs/tags/v1", b"same bytes")
    second = b.put("refs/tags/v1", b"same bytes")
    assert first.etag != second.etag
    third = b.put_if_match("refs/tags/v1", b"same bytes", second.etag)
    assert third is not None and third.etag not in (first.etag, second.etag)
    assert b.put_if_match("refs/tags/v1", b"same bytes", second.etag) is None


def a_large_object_streams_in_parts(b: ObjectBackend) -> None:
    parts = [_blob(MiB, seed) for seed in range(20)]
    with b.open_writer("packs/cd/big") as w:
        for n, part in enumerate(parts):
            w.write(part if n % 2 else memoryview(part))
            assert not b.exists("packs/cd/big")  # nothing visible before the commit
            assert b.list_paths("") == []
        info = w.commit()
    whole = b"".join(parts)
    assert info.size == len(whole) == 20 * MiB
    assert b.stat("packs/cd/big") == info
    assert b.get("packs/cd/big") == whole
    assert b.get_range("packs/cd/big", MiB - 7, 14) == whole[MiB - 7 : MiB + 7]  # across a part boundary
    assert b.get_range("packs/cd/big", 20 * MiB - 3, MiB) == whole[-3:]


def a_committed_writer_replaces(b: ObjectBackend) -> None:
    old = b.put("obj", b"old")
    w = b.open_writer("obj")
    w.write(b"new")
    assert b.get("obj") == b"old"
    info = w.commit()
    assert info.etag != old.etag
    assert b.get_versioned("obj") == (b"new", info.etag)


def an_abort_leaves_nothing(b: ObjectBackend) -> None:
    b.put("keep", b"kept")
    w = b.open_writer("packs/ef/gone")
    for seed in range(3):
        w.write(_blob(MiB, seed))
    w.abort()
    w.abort()  # idempotent
    assert not b.exists("packs/ef/gone")
    assert b.list_paths("") == ["keep"]
    w = b.open_writer("keep")  # an aborted replacement keeps the old object
    w.write(b"never")
    w.abort()
    assert b.get("keep") == b"kept"


def an_exception_inside_with_aborts(b: ObjectBackend) -> None:
    with pytest.raises(RuntimeError, match="boom"), b.open_writer("packs/01/x") as w:
        w.write(_blob(MiB))
        raise RuntimeError("boom")
    assert not b.exists("packs/01/x")
    assert b.list_paths("") == []


def list_is_sorted_recursive_and_by_prefix(b: ObjectBackend) -> None:
    paths = [
        "config",
        "index/aa",
        "manifests/01",
        "packs/00/0a",
        "packs/00/0b",
        "packs/ff/f0",
        "refs/branches/main",
        "refs/latest/agent/one",
        "refs/latest/agent/two",
        "refs/latest/proc/x/y",
        "refs/tags/v1",
    ]
    shuffled = paths[:]
    random.Random(7).shuffle(shuffled)
    for n, p in enumerate(shuffled):
        b.put(p, p.encode() * (n + 1))
    infos = list(b.list(""))
    assert [i.path for i in infos] == paths
    assert all(i == b.stat(i.path) for i in infos)
    assert b.list_paths("packs/") == ["packs/00/0a", "packs/00/0b", "packs/ff/f0"]
    assert b.list_paths("refs/latest/") == ["refs/latest/agent/one", "refs/latest/agent/two", "refs/latest/proc/x/y"]
    assert b.list_paths("refs/latest/proc/") == ["refs/latest/proc/x/y"]
    assert b.list_paths("refs/la") == b.list_paths("refs/latest/")
    assert b.list_paths("packs/00/0a") == ["packs/00/0a"]
    assert b.list_paths("nothing/") == []
    assert b.list_paths("config") == ["config"]


def delete_removes_and_a_missing_one_is_fine(b: ObjectBackend) -> None:
    b.put("a/b", b"x")
    b.put("a/c", b"y")
    b.delete("a/b")
    assert not b.exists("a/b")
    assert b.list_paths("a/") == ["a/c"]
    b.delete("a/b")  # again
    b.delete("never/was")
    with pytest.raises(NotFoundError):
        b.get("a/b")


def a_missing_object_is_not_found(b: ObjectBackend) -> None:
    b.put("there/x", b"x")
    for path in ("nope", "there/y", "there/x/under", "deep/er/nope"):
        for call in (b.get, b.get_view, b.get_versioned, b.stat, lambda p: b.get_range(p, 0, 1), lambda p: b.get_range_view(p, 0, 1)):
            with pytest.raises(NotFoundError):
                call(path)
        assert not b.exists(path)
    with pytest.raises(NotFoundError):
        b.get("there")  # a prefix of objects is no object


def bad_paths_are_refused(b: ObjectBackend) -> None:
    calls: list[Callable[[str], object]] = [
        b.get,
        b.stat,
        b.get_versioned,
        lambda p: b.get_range(p, 0, 1),
        b.get_view,
        lambda p: b.get_range_view(p, 0, 1),
        lambda p: b.put(p, b"x"),
        lambda p: b.put_if_absent(p, b"x"),
        lambda p: b.put_if_match(p, b"x", None),
        b.open_writer,
        b.delete,
    ]
    for path in BAD_PATHS:
        for call in calls:
            with pytest.raises(InvalidInputError):
                call(path)
    for prefix in ("/", "/abs/", "../", "a//", "a/../"):
        with pytest.raises(InvalidInputError):
            list(b.list(prefix))
    assert b.list_paths("") == []


CHECKS: list[Callable[[ObjectBackend], None]] = [
    put_then_get_returns_the_bytes,
    an_empty_object_is_an_object,
    ranges_at_and_past_the_end,
    a_limited_versioned_read_gives_the_first_bytes_and_the_whole_objects_etag,
    a_put_replaces_and_changes_the_etag,
    put_if_absent_writes_once,
    cas_with_none_means_must_not_exist,
    a_stale_etag_loses,
    cas_loses_to_a_plain_put_and_to_a_delete,
    a_large_object_streams_in_parts,
    a_committed_writer_replaces,
    an_abort_leaves_nothing,
    an_exception_inside_with_aborts,
    list_is_sorted_recursive_and_by_prefix,
    delete_removes_and_a_missing_one_is_fine,
    a_missing_object_is_not_found,
    bad_paths_are_refused,
]

# -- races, with real threads ------------------------------------------------------

THREADS = 16


def _run_threads(work: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def one_cas_winner_per_round(b: ObjectBackend, rounds: int = 50) -> None:
    """16 threads read the same version, then all compare-and-swap it: one wins."""
    b.put("refs/latest/race/x", b"start")
    barrier = threading.Barrier(THREADS, timeout=120)
    wins: list[list[int]] = [[] for _ in range(rounds)]
    seen: list[bytes] = [b""] * rounds

    def work(i: int) -> None:
        for r in range(rounds):
            barrier.wait()
            etag = b.stat("refs/latest/race/x").etag
            barrier.wait()  # nobody writes before everyone has read
            if b.put_if_match("refs/latest/race/x", f"{r}:{i}".encode(), etag) is not None:
                wins[r].append(i)
            barrier.wait()
            if i == 0:
                seen[r] = b.get("refs/latest/race/x")

    _run_threads(work)
    assert [len(w) for w in wins] == [1] * rounds
    assert seen == [f"{r}:{w[0]}".encode() for r, w in enumerate(wins)]


def one_put_if_absent_winner(b: ObjectBackend, rounds: int = 20) -> None:
    barrier = threading.Barrier(THREADS, timeout=120)
    wins: list[list[int]] = [[] for _ in range(rounds)]

    def work(i: int) -> None:
        for r in range(rounds):
            barrier.wait()
            if b.put_if_absent(f"manifests/{r:02}", f"{i}".encode()):
                wins[r].append(i)

    _run_threads(work)
    assert [len(w) for w in wins] == [1] * rounds
    assert [b.get(f"manifests/{r:02}") for r in range(rounds)] == [f"{w[0]}".encode() for w in wins]


def no_increment_is_lost(b: ObjectBackend, per_thread: int = 25) -> None:
    """Every thread adds 1 to a counter by read + compare-and-swap, retrying on conflict:
    the counter ends at the number of increments (a second winner would lose one)."""
    b.put("refs/counter", b"0")

    def work(_i: int) -> None:
        for _ in range(per_thread):
            while True:
                data, etag = b.get_versioned("refs/counter")
                if b.put_if_match("refs/counter", str(int(data) + 1).encode(), etag) is not None:
                    break

    _run_threads(work)
    assert int(b.get("refs/counter")) == THREADS * per_thread


def versioned_reads_pair_bytes_and_etag(b: ObjectBackend, puts: int = 60, readers: int = 3) -> None:
    """While one thread replaces an object again and again, every get_versioned of
    `readers` others returns bytes and the etag of those same bytes."""
    written: dict[str, bytes] = {b.put("refs/v", b"0" * 64).etag: b"0" * 64}
    seen: list[tuple[bytes, str]] = []
    done = threading.Event()
    started = threading.Barrier(readers + 1, timeout=120)

    def work(i: int) -> None:
        if i == 0:
            started.wait()
            for n in range(1, puts + 1):
                data = str(n).encode() * (1 + n % 50)
                written[b.put("refs/v", data).etag] = data
            done.set()
            return
        if i > readers:
            return
        seen.append(b.get_versioned("refs/v"))
        started.wait()
        while not done.is_set():
            seen.append(b.get_versioned("refs/v"))
            time.sleep(0)  # let the writer run

    _run_threads(work)
    assert len(written) == puts + 1  # every put a new etag
    assert len(seen) >= readers  # each reader read at least once
    assert all(written[etag] == data for data, etag in seen)


#: checks of what only some backends promise (see each one's docstring)
SAME_BYTES_CHECKS: list[Callable[[ObjectBackend], None]] = [the_same_bytes_again_are_a_new_version]

RACE_CHECKS: list[Callable[[ObjectBackend], None]] = [
    one_cas_winner_per_round,
    one_put_if_absent_winner,
    no_increment_is_lost,
    versioned_reads_pair_bytes_and_etag,
]

__all__ = ["BAD_PATHS", "CHECKS", "RACE_CHECKS", "SAME_BYTES_CHECKS"]

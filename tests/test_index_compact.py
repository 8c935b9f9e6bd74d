"""The in-memory object index: compact (bytes an object), a mapping that agrees with a
plain dict, and refreshed from the index files it has not seen, without a listing while
the index directory is unchanged (docs/design.md, "The object index in memory")."""

from __future__ import annotations

import gc
import hashlib
import itertools
import os
import random
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.store import repository
from ckptcli.store.index import IndexEntry, ObjectIndex
from ckptcli.store.prune import Policy, prune
from ckptcli.store.repository import Store


def _oid(rng: random.Random) -> bytes:
    return hashlib.sha256(rng.randbytes(16)).digest()


def _entry(rng: random.Random, packs: list[bytes]) -> IndexEntry:
    typ, codec = rng.randrange(2), rng.randrange(2)
    return IndexEntry(rng.choice(packs), typ, rng.randrange(1 << 40), rng.randrange(1 << 24), rng.randrange(1 << 24), codec)


@pytest.mark.parametrize("n", [0, 1, 7, 300, 9000])
def test_the_index_answers_as_a_dict_would(n: int) -> None:
    rng = random.Random(n)
    packs = [_oid(rng) for _ in range(5)]
    model: dict[bytes, IndexEntry] = {}
    idx = ObjectIndex()
    oids = []
    for i in range(n):
        oid, e = _oid(rng), _entry(rng, packs)
        oids.append(oid)
        assert idx.setdefault(oid, e) == model.setdefault(oid, e)
        if i % 50 == 0 and oids:  # an object named twice: the first entry stays
            again = rng.choice(oids)
            assert idx.setdefault(again, _entry(rng, packs)) == model[again]
    batch = [(_oid(rng), _entry(rng, packs)) for _ in range(n // 2)] + [(o, _entry(rng, packs)) for o in oids[:20]]
    idx.add_many(batch)
    for oid, e in batch:
        model.setdefault(oid, e)
    # one entry no fixed-size record holds (an offset past 64 bits): kept all the same
    odd_oid, odd = _oid(rng), IndexEntry(packs[0], 0, 1 << 70, 5, 5, 0)
    idx.setdefault(odd_oid, odd)
    model[odd_oid] = odd
    for stage in ("waiting", "merged"):
        assert len(idx) == len(model), stage
        assert set(idx) == set(model) and len(list(idx)) == len(model)
        assert dict(idx.items()) == model
        assert sorted(idx.values()) == sorted(model.values())
        for oid, e in model.items():
            assert oid in idx and idx[oid] == e and idx.get(oid) == e
        for _ in range(200):
            missing = _oid(rng)
            assert missing not in idx and idx.get(missing) is None
        with pytest.raises(KeyError):
            idx[_oid(rng)]
        idx.merge()
    if model:
        gone = next(iter(model))
        copy = idx.copy()
        assert idx.pop(gone) == model.pop(gone) and gone not in idx and gone in copy
        assert dict(idx.items()) == model and len(copy) == len(model) + 1


def test_an_id_spanning_two_ids_is_not_found() -> None:
    # the sorted ids are one byte string: 32 bytes that straddle two neighbours are not an id
    ids = sorted(hashlib.sha256(bytes([i])).digest() for i in range(40))
    idx = ObjectIndex()
    idx.add_many((oid, IndexEntry(b"p" * 32, 0, i, 1, 1, 0)) for i, oid in enumerate(ids))
    idx.merge()
    for a, b in itertools.pairwise(ids):
        straddle = a[16:] + b[:16]
        assert straddle not in idx and idx.get(straddle) is None
    assert all(oid in idx for oid in ids)


def test_the_index_holds_at_most_64_bytes_an_object() -> None:
    # measured, not computed: what tracemalloc sees the index allocate, over its objects
    # (a dict of tuples held about 250)
    rng = random.Random(3)
    packs = [_oid(rng) for _ in range(200)]
    n = 60_000
    entries = [(_oid(rng), _entry(rng, packs)) for _ in range(n)]
    gc.collect()
    tracemalloc.start()
    try:
        idx = ObjectIndex()
        for oid, e in entries:
            idx.setdefault(oid, e)
        gc.collect()
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(idx) == n
    assert held / n <= 64, f"{held / n:.1f} bytes an object"


def _state(i: int) -> dict[str, Any]:
    return {"memory": {"step": i, "note": f"step {i} " + "x" * 300}}


def _scans(monkeypatch: pytest.MonkeyPatch, st: Store) -> list[str]:
    """Every listing of the index directory `st` makes from now on."""
    seen: list[str] = []
    real_scandir, real_listdir, real_list = os.scandir, os.listdir, st.backend.list

    def scandir(path: Any = ".") -> Any:
        if str(path).rstrip("/").endswith("/index"):
            seen.append(str(path))
        return real_scandir(path)

    def listdir(path: Any = ".") -> Any:
        if str(path).rstrip("/").endswith("/index"):
            seen.append(str(path))
        return real_listdir(path)

    def listing(prefix: str) -> list[str]:
        if prefix.startswith("index"):
            seen.append(prefix)
        return real_list(prefix)

    monkeypatch.setattr(repository.os, "scandir", scandir)
    monkeypatch.setattr(repository.os, "listdir", listdir)
    monkeypatch.setattr(st.backend, "list", listing)
    return seen


def test_an_unchanged_settled_index_directory_is_not_listed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = ckptcli.init_store(tmp_path / "s")
    for i in range(3):
        ckptcli.take(st, _state(i), subject="agent:a")
    reader = Store.open(tmp_path / "s")
    reader.INDEX_DIR_SETTLED_NS = 0  # the directory counts as settled at once (the default waits 3 s)
    time.sleep(0.05)  # past the file system's clock tick
    objects = len(reader.index())
    scans = _scans(monkeypatch, reader)
    for _ in range(5):
        reader.refresh_index()
    assert scans == [] and len(reader.index()) == objects
    # a take by another Store changes the directory: listed again, and only the new file is read
    time.sleep(0.05)
    taken = ckptcli.take(st, _state(99), subject="agent:a")
    read: list[str] = []
    real = reader.read_index_file
    monkeypatch.setattr(reader, "read_index_file", lambda name: read.append(name) or real(name))
    time.sleep(0.05)
    scans.clear()  # the take's own store listed it too
    reader.refresh_index()
    assert len(scans) == 1 and len(read) == 1
    assert len(reader.index()) == objects + taken.new_objects
    assert ckptcli.open_checkpoint(taken.hex, reader).state() == _state(99)


def test_a_prune_elsewhere_is_seen_by_the_next_refresh(tmp_path: Path) -> None:
    # nothing is deduplicated against an object another process's prune removed
    st = ckptcli.init_store(tmp_path / "s")
    first = ckptcli.take(st, _state(1), subject="agent:a")
    ckptcli.take(st, _state(2), subject="agent:a")
    reader = Store.open(tmp_path / "s")
    reader.INDEX_DIR_SETTLED_NS = 0
    time.sleep(0.05)
    before = set(reader.index())
    pruner = Store.open(tmp_path / "s")
    prune(pruner, Policy(keep_last=1), subjects=["agent:a"])
    time.sleep(0.05)
    reader.refresh_index()
    gone = before - set(reader.index())
    assert gone, "the prune removed objects the reader's index still named"
    assert all(not reader.has(oid) for oid in gone)
    # the first checkpoint's own objects are gone: a take of its state writes them again
    again = ckptcli.take(reader, _state(1), subject="agent:a")
    assert again.new_objects >= 1 and first.id != again.id
    assert ckptcli.verify(Store.open(tmp_path / "s")).ok


def _reads_of_index_files(monkeypatch: pytest.MonkeyPatch, st: Store) -> list[str]:
    read: list[str] = []
    real = st.read_index_file
    monkeypatch.setattr(st, "read_index_file", lambda name: read.append(name) or real(name))
    return read


def test_a_snapshot_of_the_index_spares_the_next_process_every_index_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Store, "INDEX_DIR_SETTLED_NS", 0)
    monkeypatch.setattr(Store, "SNAPSHOT_MIN_FILES", 4)
    st = ckptcli.init_store(tmp_path / "s")
    taken = [ckptcli.take(st, _state(i), subject="agent:a") for i in range(6)]
    time.sleep(0.05)
    first = Store.open(tmp_path / "s")
    read = _reads_of_index_files(monkeypatch, first)
    assert not (tmp_path / "s" / "cache" / "index-snapshot").exists()
    assert len(first.index()) > 0 and len(read) == 6  # every index file, then the snapshot
    assert (tmp_path / "s" / "cache" / "index-snapshot").is_file()
    whole = dict(first.index().items())
    second = Store.open(tmp_path / "s")
    read = _reads_of_index_files(monkeypatch, second)
    assert dict(second.index().items()) == whole and read == []  # one file, not six
    assert ckptcli.open_checkpoint(taken[0].hex, second).state() == _state(0)
    # a take since: the snapshot and that one index file
    new = ckptcli.take(st, _state(50), subject="agent:a")
    time.sleep(0.05)
    third = Store.open(tmp_path / "s")
    read = _reads_of_index_files(monkeypatch, third)
    assert len(third.index()) == len(whole) + new.new_objects and len(read) == 1
    # a prune since: the files it was read from are gone, so it is not believed
    prune(Store.open(tmp_path / "s"), Policy(keep_last=1), subjects=["agent:a"])
    time.sleep(0.05)
    after = Store.open(tmp_path / "s")
    survivors = set(after.index())
    assert survivors < set(whole) | set(third.index())
    assert ckptcli.verify(after).ok and ckptcli.open_checkpoint(new.hex, after).state() == _state(50)


@pytest.mark.parametrize("damage", ["flipped", "truncated", "another version"])
def test_a_damaged_snapshot_is_read_around(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    monkeypatch.setattr(Store, "INDEX_DIR_SETTLED_NS", 0)
    monkeypatch.setattr(Store, "SNAPSHOT_MIN_FILES", 2)
    st = ckptcli.init_store(tmp_path / "s")
    for i in range(3):
        ckptcli.take(st, _state(i), subject="agent:a")
    time.sleep(0.05)
    whole = dict(Store.open(tmp_path / "s").index().items())
    snap = tmp_path / "s" / "cache" / "index-snapshot"
    data = bytearray(snap.read_bytes())
    if damage == "flipped":
        data[len(data) // 2] ^= 0x40
    elif damage == "truncated":
        del data[len(data) // 2 :]
    else:  # a later version's snapshot, its checksum holding
        data[8:12] = (99).to_bytes(4, "big")
        data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
    snap.write_bytes(bytes(data))
    reader = Store.open(tmp_path / "s")
    read = _reads_of_index_files(monkeypatch, reader)
    assert dict(reader.index().items()) == whole and len(read) == 3 and reader.warnings == []


def test_a_directory_in_the_index_directory_is_not_an_index_file(tmp_path: Path) -> None:
    st = ckptcli.init_store(tmp_path / "s")
    taken = ckptcli.take(st, _state(1), subject="agent:a")
    (tmp_path / "s" / "index" / "stray").mkdir()
    reader = Store.open(tmp_path / "s")
    assert len(reader.index()) > 0 and reader.warnings == [] and not reader.damaged_index
    assert ckptcli.open_checkpoint(taken.hex, reader).state() == _state(1)

"""The snapshot of the object index (cache/index-snapshot) is also left by a process that
read many entry rows, not only many index files: one take of a big state has one index
file of tens of thousands of rows, read again by every restore and verify after it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import ckptcli
from ckptcli.store.repository import Store


def _state(i: int) -> dict[str, object]:
    return {"memory": {"items": [f"item {i} {k}" * 40 for k in range(30)]}}


def _index_reads(monkeypatch: pytest.MonkeyPatch, st: Store) -> list[str]:
    read: list[str] = []
    real = st.read_index_file
    monkeypatch.setattr(st, "read_index_file", lambda name: read.append(name) or real(name))
    return read


def test_one_big_index_file_leaves_a_snapshot_the_next_process_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Store, "INDEX_DIR_SETTLED_NS", 0)
    st = ckptcli.init_store(tmp_path / "s")
    first = ckptcli.take(st, _state(0), subject="agent:a")
    rows = len(Store.open(tmp_path / "s").index())
    snapshot = tmp_path / "s" / "cache" / "index-snapshot"
    monkeypatch.setattr(Store, "SNAPSHOT_MIN_ROWS", rows + 1)  # one row short: no snapshot
    time.sleep(0.05)
    assert len(Store.open(tmp_path / "s").index()) == rows and not snapshot.exists()
    monkeypatch.setattr(Store, "SNAPSHOT_MIN_ROWS", rows)
    reader = Store.open(tmp_path / "s")
    assert len(_index_reads(monkeypatch, reader)) == 0 and len(reader.index()) == rows
    assert snapshot.is_file()  # one index file, but as many rows as it takes
    whole = dict(reader.index().items())
    second = Store.open(tmp_path / "s")
    read = _index_reads(monkeypatch, second)
    assert dict(second.index().items()) == whole and read == []  # the snapshot alone
    assert ckptcli.open_checkpoint(first.hex, second).state() == _state(0)
    # a small take since: the next process reads the snapshot and that file, and leaves
    # the snapshot as it was (what it read itself is a small part of the index)
    before = snapshot.read_bytes(), os.stat(snapshot).st_mtime_ns
    new = ckptcli.take(st, {"memory": {"note": "small" * 2000}}, subject="agent:a")
    assert 0 < new.new_objects < rows // 4
    time.sleep(0.05)
    third = Store.open(tmp_path / "s")
    read = _index_reads(monkeypatch, third)
    assert len(third.index()) == rows + new.new_objects and len(read) == 1
    assert (snapshot.read_bytes(), os.stat(snapshot).st_mtime_ns) == before
    assert ckptcli.open_checkpoint(new.hex, third).state() == {"memory": {"note": "small" * 2000}}


def _with_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[bytes, object]]:
    """A store with its index snapshot, and the whole index."""
    monkeypatch.setattr(Store, "INDEX_DIR_SETTLED_NS", 0)
    monkeypatch.setattr(Store, "SNAPSHOT_MIN_ROWS", 1)
    st = ckptcli.init_store(tmp_path / "s")
    ckptcli.take(st, _state(0), subject="agent:a")
    time.sleep(0.05)
    whole = dict(Store.open(tmp_path / "s").index().items())
    assert (tmp_path / "s" / "cache" / "index-snapshot").is_file()
    return tmp_path / "s", whole


@pytest.mark.parametrize("plant", ["sparse", "grown", "huge-count", "random"])
def test_a_planted_or_grown_snapshot_is_not_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plant: str) -> None:
    """A snapshot is read only as long as its head says, and only when that is no more than
    the index files could hold: a sparse 3 GiB file took 6 GB of memory (20 GiB: the OOM
    killer), being read whole before its checksum failed. The index is then read from the
    index files, whole and right."""

    from ckptcli.store import index as ix

    store, whole = _with_snapshot(tmp_path, monkeypatch)
    snapshot = store / "cache" / "index-snapshot"
    good = snapshot.read_bytes()
    if plant == "sparse":
        snapshot.unlink()
        with open(snapshot, "wb") as fh:
            fh.truncate(3 << 30)
    elif plant == "grown":
        with open(snapshot, "r+b") as fh:
            fh.truncate(len(good) + (3 << 30))
    elif plant == "huge-count":  # a head saying a billion objects in the one index file
        head = ix._SNAP_MAGIC + ix._SNAP_HEAD.pack(ix.SNAPSHOT_VERSION, 1, 1, 10**9, 8)
        snapshot.write_bytes(head + good[len(head) :])
    else:
        snapshot.write_bytes(os.urandom(1 << 20))
    from ckptcli.store.backend import LocalBackend

    asked: list[int] = []
    whole_reads: list[str] = []
    real_range, real_read = LocalBackend.read_range, LocalBackend.read

    def read_range(self: LocalBackend, path: str, offset: int, length: int) -> bytes:
        if path.endswith("index-snapshot"):
            asked.append(length)
        return real_range(self, path, offset, length)

    def read(self: LocalBackend, path: str) -> bytes:
        whole_reads.append(path)
        return real_read(self, path)

    monkeypatch.setattr(LocalBackend, "read_range", read_range)
    monkeypatch.setattr(LocalBackend, "read", read)
    reader = Store.open(store)
    assert dict(reader.index().items()) == whole
    assert not [p for p in whole_reads if p.endswith("index-snapshot")]
    assert asked and max(asked) <= len(good) + 1, asked  # never more than a true snapshot's size

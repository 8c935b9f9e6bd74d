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

"""A commit's own index rows join the process's object index when it is next used, not at
the commit (a `ckpt take` ends without using it again): the same Store then sees every
object it wrote, deduplicates against them, reads no index file again for them, and adds
them once however many threads ask at the same moment. Real stores on disk."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import ckptcli
from ckptcli.store.repository import Store


def _state(tmp_path: Path, seed: int) -> Path:
    d = tmp_path / f"files{seed}"
    d.mkdir()
    (d / "a.bin").write_bytes(os.urandom(3_000_000))
    return d


def test_the_objects_of_a_commit_are_known_to_the_store_that_wrote_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = ckptcli.init_store(tmp_path / "s")
    first = ckptcli.take(st, {"memory": {"n": 1}}, subject="agent:a", blobs={"state": _state(tmp_path, 1)})
    before = len(st.index())
    reads: list[str] = []
    real = Store.read_index_file
    monkeypatch.setattr(Store, "read_index_file", lambda self, name: reads.append(name) or real(self, name))
    again = ckptcli.take(st, {"memory": {"n": 1}}, subject="agent:a", blobs={"state": tmp_path / "files1"}, force_read=True)
    assert again.new_objects <= 2, again  # the data is deduplicated against the first take's own rows
    second = ckptcli.take(st, {"memory": {"n": 2}}, subject="agent:a", blobs={"state": _state(tmp_path, 2)})
    assert second.new_objects > 40
    idx = st.index()
    assert reads == []  # nothing of its own was read back from disk
    assert len(idx) == before + again.new_objects + second.new_objects
    # another process sees the same objects, read from the index files
    other = ckptcli.open_store(tmp_path / "s").index()
    assert len(other) == len(idx) and all(oid in other for oid in idx)
    assert first.hex != second.hex


def test_threads_that_ask_for_the_index_at_once_add_the_rows_once(tmp_path: Path) -> None:
    st = ckptcli.init_store(tmp_path / "s")
    ckptcli.take(st, {"memory": {}}, subject="agent:a", blobs={"state": _state(tmp_path, 1)})
    want = len(ckptcli.open_store(tmp_path / "s").index())
    barrier = threading.Barrier(4)
    sizes: list[int] = []

    def ask() -> None:
        barrier.wait()
        sizes.append(len(st.index()))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sizes == [want] * 4 and not st._unmerged

"""The pack writer's I/O thread: batches written with writev(2) (short writes too), the
writeback of each range started as it is written, and the same pack bytes as writing
object by object through the handle."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import IO, Any

import pytest

from ckptcli.api import init_store, open_checkpoint, open_store, take, verify
from ckptcli.store import backend as backend_mod
from ckptcli.store import layout, pack
from ckptcli.store.backend import LocalBackend


def _buffers(rng: random.Random, n: int) -> list[bytes | memoryview]:
    """Buffers of 0 to 3000 bytes, some bytes, some views into a larger buffer."""
    big = rng.randbytes(1 << 20)
    out: list[bytes | memoryview] = []
    for _ in range(n):
        size = rng.randrange(0, 3000)
        if rng.random() < 0.5:
            at = rng.randrange(0, len(big) - size)
            out.append(memoryview(big)[at : at + size])
        else:
            out.append(rng.randbytes(size))
    return out


def _writev_and_check(path: Path, bufs: list[Any]) -> None:
    """pack._writev_all of `bufs` into a new file: it says it wrote them all, and the file
    holds them, in order."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        assert pack._writev_all(fd, list(bufs)) == sum(len(b) for b in bufs)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(bytes(b) for b in bufs)


def test_writev_all_writes_every_buffer_in_order_past_iov_max(tmp_path: Path) -> None:
    bufs = _buffers(random.Random(1), 3 * pack._IOV_MAX + 17)
    _writev_and_check(tmp_path / "f", bufs)


def test_writev_all_goes_on_after_a_short_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writev that writes only part (a signal, a full pipe, a file-size limit) is
    followed by one that starts where it stopped, in the middle of a buffer."""
    real = os.writev
    rng = random.Random(2)
    calls = []

    def short(fd: int, bufs: Any) -> int:
        bufs = list(bufs)
        calls.append(len(bufs))
        cut = rng.randrange(1, sum(len(b) for b in bufs) + 1)
        keep: list[Any] = []
        for b in bufs:
            if cut <= 0:
                break
            keep.append(memoryview(b)[:cut])
            cut -= len(b)
        return real(fd, keep)

    monkeypatch.setattr(os, "writev", short)
    bufs = _buffers(rng, 500)
    _writev_and_check(tmp_path / "f", bufs)
    assert len(calls) > 5


def _tree(root: Path) -> Path:
    rng = random.Random(3)
    root.mkdir()
    (root / "a.bin").write_bytes(rng.randbytes(5 << 20))
    words = [b"alpha", b"beta", b"tool", b"call", b"result"]
    (root / "b.txt").write_bytes(b" ".join(rng.choices(words, k=1_500_000)))
    (root / "c.bin").write_bytes(rng.randbytes(4 << 20))
    return root


def _store_files(path: Path) -> dict[str, bytes]:
    return {
        str(f.relative_to(path)): f.read_bytes()
        for sub in (layout.PACKS, layout.INDEX)
        for f in sorted((path / sub).rglob("*"))
        if f.is_file()
    }


def test_packs_written_with_writev_are_the_bytes_written_through_the_handle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _tree(tmp_path / "src")
    monkeypatch.setattr(pack, "_descriptor", lambda fh: None)  # object by object, through the handle
    through = take(init_store(tmp_path / "through"), {"k": 1}, subject="process:p", blobs={"s": src})
    monkeypatch.undo()
    monkeypatch.setattr(LocalBackend, "pack_target", 4 << 20)  # several packs, each through the I/O thread
    monkeypatch.setattr(pack, "_IO_BATCH", 300_000)
    monkeypatch.setattr(pack, "_IOV_MAX", 7)  # batches of many writev calls
    through_small = take(init_store(tmp_path / "through-small"), {"k": 1}, subject="process:p", blobs={"s": src})
    monkeypatch.setattr(pack, "_descriptor", lambda fh: None)
    handle_small = take(init_store(tmp_path / "handle-small"), {"k": 1}, subject="process:p", blobs={"s": src})
    monkeypatch.undo()
    writev = take(init_store(tmp_path / "writev"), {"k": 1}, subject="process:p", blobs={"s": src})
    assert _store_files(tmp_path / "writev") == _store_files(tmp_path / "through")
    assert _store_files(tmp_path / "through-small") == _store_files(tmp_path / "handle-small")
    assert len([f for f in (tmp_path / "through-small" / layout.PACKS).rglob("*") if f.is_file()]) >= 3
    assert writev.manifest.sections == through.manifest.sections
    assert through_small.manifest.sections == handle_small.manifest.sections
    out = tmp_path / "out"
    s = open_store(tmp_path / "writev")
    assert verify(s, read_data=True).ok
    open_checkpoint(writev.id.hex(), s).restore_blobs(out)
    for name in ("a.bin", "b.txt", "c.bin"):
        assert (out / "s" / name).read_bytes() == (src / name).read_bytes()


def test_the_writeback_of_a_big_pack_is_started_range_by_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each _WRITEBACK bytes the I/O thread writes, the writeback of those bytes is
    started: contiguous ranges of the pack's temporary file, ending before its end."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    real = backend_mod.start_writeback

    def record(fd: int, offset: int, length: int) -> None:
        ranges.setdefault(fd, []).append((offset, length))
        real(fd, offset, length)  # the real call: it must accept what it is given

    monkeypatch.setattr(backend_mod, "start_writeback", record)
    monkeypatch.setattr(pack, "_WRITEBACK", 1 << 20)
    src = _tree(tmp_path / "src")
    result = take(init_store(tmp_path / "store"), {"k": 1}, subject="process:p", blobs={"s": src})
    (pack_file,) = [f for f in (tmp_path / "store" / layout.PACKS).rglob("*") if f.is_file()]
    size = pack_file.stat().st_size
    assert len(ranges) == 1
    (got,) = ranges.values()
    assert len(got) >= 5
    end = got[0][0]
    assert 0 < end < size  # from where the I/O thread took over
    for offset, length in got:
        assert offset == end and length >= 1 << 20
        end = offset + length
    assert end < size
    assert result.new_objects > 100 and verify(open_store(tmp_path / "store"), read_data=True).ok


def test_start_writeback_is_a_harmless_hint(tmp_path: Path) -> None:
    path = tmp_path / "f"
    with open(path, "wb") as fh:
        fh.write(b"x" * 100_000)
        fh.flush()
        backend_mod.start_writeback(fh.fileno(), 0, 100_000)
        backend_mod.start_writeback(fh.fileno(), 0, 0)
        LocalBackend(tmp_path).start_writeback(fh, 4096, 8192)
    fh2: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed below, then hinted: ignored
    fh2.close()
    LocalBackend(tmp_path).start_writeback(fh2, 0, 10)
    assert path.read_bytes() == b"x" * 100_000


@pytest.mark.parametrize("version", [1, 2])
def test_a_window_put_at_once_makes_the_packs_of_one_put_a_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """Transaction.put_stored_many (a window of chunks a call, take's main thread, with
    the checks taken on the chunk threads) gives byte for byte the packs and index of
    put_stored a chunk at a time, packs that fill up in the middle of a window included,
    and skips the chunks stored already; in a format-1 store too (no checks)."""
    from ckptcli.store.repository import Transaction

    src = _tree(tmp_path / "src")
    (src / "again.bin").write_bytes((src / "a.bin").read_bytes()[: 3 << 20])  # chunks the take stored already
    monkeypatch.setattr(LocalBackend, "pack_target", 3 << 20)
    monkeypatch.setattr(pack, "_IO_BATCH", 200_000)
    calls = []
    real = Transaction.put_stored_many

    def counted(self: Transaction, obj_type: int, items: Any) -> None:
        calls.append(len(items))
        real(self, obj_type, items)

    monkeypatch.setattr(Transaction, "put_stored_many", counted)
    many = take(init_store(tmp_path / "many", version), {"k": 1}, subject="process:p", blobs={"s": src})
    assert len(calls) >= 4 and max(calls) > 50
    monkeypatch.delattr(Transaction, "put_stored_many")
    one = take(init_store(tmp_path / "one", version), {"k": 1}, subject="process:p", blobs={"s": src})
    assert _store_files(tmp_path / "many") == _store_files(tmp_path / "one")
    assert len([f for f in (tmp_path / "many" / layout.PACKS).rglob("*") if f.is_file()]) >= 4
    assert (many.new_objects, many.new_bytes, many.manifest.sections) == (one.new_objects, one.new_bytes, one.manifest.sections)
    assert verify(open_store(tmp_path / "many"), read_data=True).ok


def test_a_window_that_fails_to_be_put_leaves_none_of_its_chunks_marked_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As with put_stored, a chunk counts as stored only once it is in a pack: a window
    whose pack cannot be made leaves the transaction without any of its chunks."""
    import hashlib

    from ckptcli.errors import StoreIOError

    store = init_store(tmp_path / "store")
    txn = store.transaction()
    chunks = [random.Random(i).randbytes(5000) for i in range(5)]
    items = [(hashlib.sha256(c).digest(), len(c), (0, c, 0)) for c in chunks]

    def refuse(self: LocalBackend) -> Any:
        raise StoreIOError("cannot create a temporary file in tmp: No space left on device")

    monkeypatch.setattr(LocalBackend, "open_temp", refuse)
    with pytest.raises(StoreIOError):
        txn.put_stored_many(1, items)
    assert not any(txn.has(oid) for oid, _n, _s in items)
    assert txn.new_objects == 0
    txn.abort()

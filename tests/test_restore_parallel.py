"""Restore writes the content of big files on writer threads, two at a time: the result
is the same tree, and a failure in one writer leaves nothing behind (no temporary
file, no half-restored target) and what the target held is put back."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest

from ckptcli.api import init_store, open_checkpoint, open_store, take
from ckptcli.blobs import SMALL_FILE, RestoreReport
from ckptcli.errors import CorruptError
from ckptcli.format.chunker import chunk_bytes
from ckptcli.store import layout


def _tree(root: Path) -> dict[str, bytes]:
    rng = random.Random(9)
    files: dict[str, bytes] = {}
    for i in range(5):  # big files, written on the writer threads, interleaved with small ones
        files[f"big{i}.bin"] = rng.randbytes(SMALL_FILE + 300_000 * i)
        files[f"small{i}.txt"] = f"small {i}\n".encode() * 50
    files["sub/big.bin"] = rng.randbytes(2 * SMALL_FILE)
    files["sub/deep/tiny"] = b"t"
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    os.chmod(root / "big3.bin", 0o600)
    os.utime(root / "big1.bin", ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    return files


@pytest.fixture
def taken(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    src = tmp_path / "src"
    files = _tree(src)
    store = init_store(tmp_path / "store")
    take(store, {}, subject="process:p", blobs={"w": src})
    return tmp_path / "store", src, files


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_restored_tree_is_the_taken_one(taken: tuple[Path, Path, dict[str, bytes]], tmp_path: Path) -> None:
    store, src, files = taken
    report = RestoreReport()
    open_checkpoint("latest", store_path=store).restore_blobs(tmp_path / "out", report=report)
    out = tmp_path / "out" / "w"
    assert _listing(out) == _listing(src)
    for rel, data in files.items():
        assert (out / rel).read_bytes() == data, rel
        st, so = os.stat(out / rel), os.stat(src / rel)
        assert (st.st_mode, st.st_mtime_ns) == (so.st_mode, so.st_mtime_ns), rel
    assert report.files == len(files) and report.bytes == sum(len(d) for d in files.values())
    assert report.written == sorted(report.written, key=report.written.index)  # in walk order


def _damage_a_chunk_of(store_path: Path, data: bytes) -> None:
    """Flip a byte of a data object in the middle of `data` where the store keeps it."""
    store = open_store(store_path)
    piece = chunk_bytes(data, store.config.cdc, store.config.chunker)[len(data) // 2 // 65536 // 2]
    entry, _stored = store.read_stored(hashlib.sha256(piece).digest())
    path = store_path / layout.pack_path(entry.pack)
    os.chmod(path, 0o644)
    with open(path, "r+b") as fh:
        fh.seek(entry.offset + entry.stored_len // 2)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0xFF]))


def test_a_damaged_big_file_undoes_a_fresh_target(taken: tuple[Path, Path, dict[str, bytes]], tmp_path: Path) -> None:
    store, _src, files = taken
    _damage_a_chunk_of(store, files["big3.bin"])
    with pytest.raises(CorruptError) as exc:
        open_checkpoint("latest", store_path=store).restore_blobs(tmp_path / "out")
    assert "was removed again" in (exc.value.hint or "")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damaged", ["big0.bin", "big4.bin"])
def test_a_damaged_big_file_puts_back_what_the_target_held(
    taken: tuple[Path, Path, dict[str, bytes]], tmp_path: Path, damaged: str
) -> None:
    """big0 fails while big2 waits for a writer slot; big4 once the walk has moved on
    into sub/: either way no temporary file stays and the old files are back."""
    store, _src, files = taken
    out = tmp_path / "out"
    (out / "w" / "sub").mkdir(parents=True)
    for rel in ("big0.bin", "big4.bin", "small2.txt", "sub/big.bin"):
        (out / "w" / rel).write_bytes(b"old " + rel.encode())
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    _damage_a_chunk_of(store, files[damaged])
    with pytest.raises(CorruptError):
        open_checkpoint("latest", store_path=store).restore_blobs(out, overwrite=True)
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # no temporary file left, every old file back
    assert sorted(os.listdir(out / "w")) == ["big0.bin", "big4.bin", "small2.txt", "sub"]


def test_restore_with_delete_of_big_files_over_changed_ones_replaces_them_and_removes_extras(tmp_path: Path) -> None:
    """The delete pass took the temporary file of a big file still being written for an
    extra: it moved it aside, the rename into place failed (exit 12), and the undo left the
    2 MiB temporary file in the target (the README's own rollback command)."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    files = {"a.txt": b"a\n", "blob.bin": random.Random(3).randbytes(2 * SMALL_FILE), "sub/z.bin": random.Random(4).randbytes(SMALL_FILE)}
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    store = init_store(tmp_path / "store")
    take(store, {}, subject="process:p", blobs={"w": src})
    out = tmp_path / "out"
    open_checkpoint("latest", store_path=tmp_path / "store").restore_blobs(out)
    w = out / "w"
    for rel in ("blob.bin", "sub/z.bin"):
        (w / rel).write_bytes(b"changed\n")
    (w / "new.txt").write_text("extra\n")
    (w / "sub" / "extra.bin").write_bytes(b"x" * 10)
    report = RestoreReport()
    open_checkpoint("latest", store_path=tmp_path / "store").restore_blobs(out, overwrite=True, delete=True, report=report)
    assert _listing(w) == _listing(src)
    for rel, data in files.items():
        assert (w / rel).read_bytes() == data, rel
    assert sorted(report.deleted) == ["w/new.txt", "w/sub/extra.bin"]

"""What restore checks before it writes a byte, and what a failure leaves behind.

Restore writes each piece of a big file from the pool thread that read and checked it
(`Decoder.write_into`, pwrite at the piece's offset). Two things must hold:

- every piece is checked against its SHA-256 id before it is written. A version-2 pack
  also carries an XXH3-64 of each object's stored bytes, but a hostile store can write a
  pack whose checks, trailer and name are all consistent with other content under the
  same ids (the pack id hashes the ids, not the content): only the SHA-256 of the
  content ties the bytes to the checkpoint, so restore keeps it;
- when a piece fails, no task writes to the file any more once `write_into` has raised
  (the caller closes the descriptor next, and its number may be reused at once).
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import zstandard

from ckptcli.api import init_store, open_checkpoint, open_store, take
from ckptcli.blobs import SMALL_FILE
from ckptcli.errors import CorruptError
from ckptcli.format import framing
from ckptcli.format.chunker import chunk_bytes
from ckptcli.format.decode import Decoder
from ckptcli.format.values import LazyBytes
from ckptcli.store import layout
from ckptcli.store.repository import Store
from tests.conftest import run_ckpt


def _files(root: Path) -> dict[str, bytes]:
    rng = random.Random(5)
    text = "".join(f'{{"seq": {i}, "text": "{rng.choice(["alpha", "beta", "gamma"]) * rng.randint(1, 40)}"}}\n' for i in range(60_000))
    files = {"big.bin": rng.randbytes(3 * SMALL_FILE), "events.jsonl": text.encode()[: 3 * SMALL_FILE], "small.txt": b"small\n"}
    root.mkdir(parents=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return files


@pytest.fixture(scope="module")
def taken(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("taken")
    files = _files(root / "src")
    store = init_store(root / "store")
    cid = take(store, {}, subject="process:p", blobs={"w": root / "src"}).hex
    return root / "store", cid, files


def _piece_of(store_path: Path, data: bytes) -> tuple[bytes, bytes]:
    """(id, content) of a chunk from the middle of `data`, as the store cut it."""
    store = open_store(store_path)
    pieces = chunk_bytes(data, store.config.cdc, store.config.chunker)
    piece = pieces[len(pieces) // 2]
    return hashlib.sha256(piece).digest(), piece


def _forge(src: Path, dst: Path, victim: bytes, content: bytes) -> None:
    """A copy of the store `src` at `dst` in which the object `victim` holds `content`
    (of the same length) instead: packs, trailers (with their XXH3-64 checks), pack
    names and index all consistent, as a hostile writer of the store could make them."""
    old = Store.open(src)
    init_store(dst)
    new = Store.open(dst)
    try:
        txn = new.transaction()
        for oid, entry in old.index().items():
            _entry, stored = old.read_stored(oid)
            if oid == victim:
                assert len(content) == entry.raw_len
                stored = content if entry.codec == framing.CODEC_NONE else zstandard.ZstdCompressor().compress(content)
            txn.put_stored(oid, entry.obj_type, entry.codec, stored, entry.raw_len)
        txn.commit()
        for cid in old.manifest_ids():
            new.backend.write_atomic(layout.manifest_path(cid), old.manifest_bytes(cid))
    finally:
        old.close()
        new.close()


@pytest.mark.parametrize("name", ["big.bin", "events.jsonl"])
def test_restore_refuses_other_content_under_consistent_v2_checks(
    taken: tuple[Path, str, dict[str, bytes]], tmp_path: Path, name: str
) -> None:
    """big.bin's pieces are stored as they are, events.jsonl's compressed: either way the
    forged object passes every XXH3-64 check and the pack ids, and only its SHA-256 id
    gives it away. Restore refuses it and leaves nothing behind."""
    store, cid, files = taken
    victim, piece = _piece_of(store, files[name])
    forged = bytes(b ^ 0x5A for b in piece)
    _forge(store, tmp_path / "forged", victim, forged)
    # the forgery is consistent where XXH3-64 is all that is checked: the structure
    # check passes, and the pack's checks hold (only the content's hash differs)
    assert run_ckpt("verify", "--store", tmp_path / "forged").returncode == 0
    r = run_ckpt("verify", "--read-data", "--json", "--store", tmp_path / "forged")
    assert r.returncode == 5 and b"content does not match its hash" in r.stdout, r.stdout
    assert b"its check in the trailer" not in r.stdout
    out = tmp_path / "out"
    with pytest.raises(CorruptError, match="content does not match its hash"):
        open_checkpoint(cid, store_path=tmp_path / "forged").restore_blobs(out, names=["w"])
    assert not out.exists()
    r = run_ckpt("restore", cid, "--no-state", "--blobs", out, "--store", tmp_path / "forged")
    assert r.returncode == 5 and b"Traceback" not in r.stderr
    assert not out.exists()


def test_restore_of_the_untouched_store_is_byte_identical(taken: tuple[Path, str, dict[str, bytes]], tmp_path: Path) -> None:
    store, cid, files = taken
    _forge(store, tmp_path / "copy", b"\0" * 32, b"")  # the same rewrite, nothing forged
    for source in (store, tmp_path / "copy"):
        out = tmp_path / f"out-{source.name}"
        open_checkpoint(cid, store_path=source).restore_blobs(out)
        assert {p.name: p.read_bytes() for p in (out / "w").iterdir()} == files


class _SlowFailing:
    """A store as an ObjectSource: `fail` raises CorruptError once a slow piece is being
    read; every other data piece takes `delay` seconds, so tasks are still running when
    write_into sees the failure."""

    def __init__(self, store: Store, fail: bytes, slow: set[bytes], delay: float) -> None:
        self.store, self.fail, self.slow, self.delay = store, fail, slow, delay
        self.started = threading.Event()

    def get(self, oid: bytes) -> bytes:
        if oid == self.fail:
            self.started.wait(5)
            raise CorruptError(f"object {oid.hex()[:12]}: planted failure")
        if oid in self.slow:
            self.started.set()
            time.sleep(self.delay)
        return self.store.get(oid)


def test_write_into_returns_only_once_no_task_writes(taken: tuple[Path, str, dict[str, bytes]], tmp_path: Path) -> None:
    store_path, cid, files = taken
    ck = open_checkpoint(cid, store_path=store_path)
    data: Any = ck.blobs()["w"]["entries"]["big.bin"]["data"]
    assert isinstance(data, LazyBytes)
    store = open_store(store_path)
    pieces = chunk_bytes(files["big.bin"], store.config.cdc, store.config.chunker)
    ids = [hashlib.sha256(p).digest() for p in pieces]
    # the failing piece early on; the pieces after it slow, in tasks that run meanwhile
    source = _SlowFailing(store, ids[3], set(ids[4:]), 0.02)
    path = tmp_path / "out.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with pytest.raises(CorruptError, match="planted failure"):
            Decoder(source, lazy_bytes=True).write_into(data.oid, fd)
        after = path.read_bytes()
        time.sleep(0.5)  # a task still running would write meanwhile
        assert path.read_bytes() == after
    finally:
        os.close(fd)
    # and what was written is checked content at its place (holes read as zeros)
    offset = 0
    for piece in pieces:
        got = after[offset : offset + len(piece)]
        assert got in (piece, b"\0" * len(got), b""), offset
        offset += len(piece)

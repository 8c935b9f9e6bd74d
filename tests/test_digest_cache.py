"""The digest cache (ckptcli/format/digests.py): a take of files that changed in a few
places hashes only the chunks that changed with SHA-256, and stores exactly what a take
without the cache stores; a damaged, planted or lying cache file never changes what is
stored."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from pathlib import Path

import pytest

import ckptcli
import ckptcli.format.digests as digests_mod
import ckptcli.writer as writer_mod
from ckptcli.api import open_checkpoint, take
from ckptcli.format.digests import MAX_ENTRIES, Digests, decode_file, encode_file, file_size
from ckptcli.store import layout
from ckptcli.store.repository import Store
from ckptcli.store.verify import verify_store

SUBJECT = "process:files"


def _files(root: Path, seed: int = 3) -> Path:
    """Two files of 3 MiB, random bytes and text: many chunks each."""
    rng = random.Random(seed)
    root.mkdir(parents=True)
    (root / "weights.bin").write_bytes(rng.randbytes(3 << 20))
    words = [b"alpha", b"order", b"refund", b"ticket", b"status", b"agent", b"tool"]
    (root / "events.jsonl").write_bytes(b"\n".join(b" ".join(rng.choices(words, k=12)) + b" %d" % i for i in range(180_000))[: 3 << 20])
    return root


def _edit(root: Path, seed: int = 5) -> None:
    """A few scattered overwrites in place in both files (their stat changes)."""
    rng = random.Random(seed)
    for name in ("weights.bin", "events.jsonl"):
        path = root / name
        size = path.stat().st_size
        with open(path, "r+b") as fh:
            for _ in range(3):
                fh.seek(rng.randrange(0, size - 5000))
                fh.write(rng.randbytes(5000))


def _cache_files(root: Path) -> list[Path]:
    d = root / layout.DIGESTS
    return sorted(d.iterdir()) if d.is_dir() else []


class _Recorder:
    """The Digests objects the takes made (to read how many chunks each found)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[Digests] = []
        real = writer_mod.Digests
        made = self.made

        class Recording(real):  # type: ignore[misc, valid-type]
            def __init__(self, *a: object, **kw: object) -> None:
                super().__init__(*a, **kw)  # type: ignore[arg-type]
                made.append(self)

        monkeypatch.setattr(writer_mod, "Digests", Recording)


def _blobs_ev(store: Store, ref: str) -> bytes:
    return open_checkpoint(ref, store).section_ev("blobs")


def _twin_takes(tmp_path: Path, *, poison: object = None) -> tuple[Store, Store, str, str]:
    """Take the files, edit them, copy the store, and take again into both copies: one
    with its digest cache (changed by `poison`, a function of the store root, if given),
    one with it removed. Returns (store, store without cache, id, id)."""
    data = _files(tmp_path / "data")
    root = tmp_path / "s"
    store = ckptcli.init_store(root)
    take(store, {"n": 1}, subject=SUBJECT, blobs={"state": data})
    assert len(_cache_files(root)) == 1
    _edit(data)
    shutil.copytree(root, tmp_path / "plain")
    shutil.rmtree(tmp_path / "plain" / layout.DIGESTS)
    if callable(poison):
        poison(root)
    a = take(Store.open(root), {"n": 2}, subject=SUBJECT, blobs={"state": data}).hex
    b = take(Store.open(tmp_path / "plain"), {"n": 2}, subject=SUBJECT, blobs={"state": data}).hex
    return Store.open(root), Store.open(tmp_path / "plain"), a, b


@pytest.mark.parametrize("threads", ["pool", "one thread"])
def test_an_edited_file_is_hashed_through_the_cache_and_stored_exactly_as_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: str
) -> None:
    if threads == "one thread":  # the serial path of a one-core machine
        monkeypatch.setattr("ckptcli.format.encode._workers", lambda: 1)
    rec = _Recorder(monkeypatch)
    store, plain, a, b = _twin_takes(tmp_path)
    # the second take of the cached store found most chunks by their BLAKE3, checked one
    # at least with SHA-256, and the take without a cache found none
    cached, uncached = rec.made[1], rec.made[2]
    assert cached.hits > 0.8 * len(cached.seen), (cached.hits, len(cached.seen))
    assert cached.checked >= 1
    assert uncached.hits == 0 and len(uncached.seen) > 100
    # the same checkpoint content, byte for byte: same blob tree, same objects
    assert a == b or _blobs_ev(store, a) == _blobs_ev(plain, b)
    assert _blobs_ev(store, a) == _blobs_ev(plain, b)
    out = tmp_path / "out"
    open_checkpoint(a, store).restore_blobs(out)
    for name in ("weights.bin", "events.jsonl"):
        assert (out / "state" / name).read_bytes() == (tmp_path / "data" / name).read_bytes()
    assert not verify_store(store, None, read_data=True).problems


def test_the_cache_file_round_trips_and_refuses_anything_not_whole_and_sound() -> None:
    pairs = [(os.urandom(32), os.urandom(32)) for _ in range(300)]
    data = encode_file(pairs)
    assert decode_file(data) == dict(pairs)
    assert list(decode_file(data) or {}) == [k for k, _ in pairs]  # most recent first, kept in order
    assert decode_file(encode_file([])) == {}
    for bad in (
        data[:-1],  # cut short
        data + b"\0",  # longer than it says
        data[:100] + bytes([data[100] ^ 1]) + data[101:],  # a flipped bit
        b"CKPTDGS2" + data[8:],  # another magic
        b"",
    ):
        assert decode_file(bad) is None
    # a head that declares more entries than a cache holds is refused before any read
    huge = b"CKPTDGS1" + (MAX_ENTRIES + 1).to_bytes(4, "little")
    assert file_size(huge) is None
    assert file_size(data[:12]) == len(data)


def test_a_cache_that_names_chunks_by_wrong_ids_is_dropped_and_the_files_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A planted cache, each BLAKE3 paired with another chunk's SHA-256 (a whole and
    sound file: its sum matches): the first chunk found in it is checked, so the take
    notices, says so, and stores what a take without the cache stores."""

    def poison(root: Path) -> None:
        (path,) = _cache_files(root)
        pairs = list((decode_file(path.read_bytes()) or {}).items())
        assert len(pairs) > 10
        shifted = [(k, pairs[(i + 1) % len(pairs)][1]) for i, (k, _v) in enumerate(pairs)]
        path.write_bytes(encode_file(shifted))

    monkeypatch.setattr(digests_mod, "_VERIFY_FRACTION", 0.0)  # the first chunk found is checked whatever the draw
    warnings: list[str] = []
    monkeypatch.setattr(Store, "warn", lambda self, message: warnings.append(message))
    store, plain, a, b = _twin_takes(tmp_path, poison=poison)
    assert _blobs_ev(store, a) == _blobs_ev(plain, b)
    assert any("digest cache" in w and "read again" in w for w in warnings), warnings
    assert not _cache_files(tmp_path / "s")  # removed; the next take of the files starts a new one
    assert not verify_store(store, None, read_data=True).problems


def test_one_lying_entry_is_caught_when_it_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One entry changed among many: found when that chunk is checked (here every hit is,
    as one in VERIFY_EVERY is at random), and what is stored stays right."""
    monkeypatch.setattr(digests_mod, "_VERIFY_FRACTION", 1.0)

    def poison(root: Path) -> None:
        (path,) = _cache_files(root)
        pairs = list((decode_file(path.read_bytes()) or {}).items())
        k, _v = pairs[len(pairs) // 2]
        pairs[len(pairs) // 2] = (k, hashlib.sha256(b"something else").digest())
        path.write_bytes(encode_file(pairs))

    store, plain, a, b = _twin_takes(tmp_path, poison=poison)
    assert _blobs_ev(store, a) == _blobs_ev(plain, b)
    assert not verify_store(store, None, read_data=True).problems


@pytest.mark.parametrize("plant", ["damaged", "link to a file outside", "directory", "huge head"])
def test_a_damaged_or_planted_cache_file_is_ignored_and_nothing_is_written_through_it(tmp_path: Path, plant: str) -> None:
    data = _files(tmp_path / "data")
    root = tmp_path / "s"
    store = ckptcli.init_store(root)
    take(store, {"n": 1}, subject=SUBJECT, blobs={"state": data})
    (path,) = _cache_files(root)
    outside = tmp_path / "outside"
    outside.write_bytes(b"not the store's")
    if plant == "damaged":
        path.write_bytes(path.read_bytes()[:-3])
    elif plant == "link to a file outside":
        path.unlink()
        path.symlink_to(outside)
    elif plant == "directory":
        path.unlink()
        path.mkdir()
    else:
        path.write_bytes(b"CKPTDGS1" + (MAX_ENTRIES).to_bytes(4, "little") + b"\0" * 64)
    _edit(data)
    cid = take(Store.open(root), {"n": 2}, subject=SUBJECT, blobs={"state": data}).hex
    assert outside.read_bytes() == b"not the store's"
    out = tmp_path / "out"
    open_checkpoint(cid, Store.open(root)).restore_blobs(out)
    assert (out / "state" / "weights.bin").read_bytes() == (data / "weights.bin").read_bytes()
    assert not verify_store(Store.open(root), None, read_data=True).problems


def test_force_read_neither_reads_nor_writes_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _Recorder(monkeypatch)
    data = _files(tmp_path / "data")
    root = tmp_path / "s"
    store = ckptcli.init_store(root)
    take(store, {"n": 1}, subject=SUBJECT, blobs={"state": data}, force_read=True)
    assert not _cache_files(root) and not rec.made
    _edit(data)
    take(store, {"n": 2}, subject=SUBJECT, blobs={"state": data})  # reads the edited files: the cache starts
    (path,) = _cache_files(root)
    before = path.read_bytes()
    _edit(data, seed=6)
    take(store, {"n": 3}, subject=SUBJECT, blobs={"state": data}, force_read=True)
    assert path.read_bytes() == before and len(rec.made) == 1


def test_the_cache_keeps_the_pairs_of_files_a_take_did_not_read() -> None:
    """Pairs of this take first, then the earlier ones it did not see, up to `keep`."""
    old = {bytes([i]) * 32: bytes([i + 1]) * 32 for i in range(10)}
    d = Digests(old)
    piece = b"x" * 5000
    oid = d.id_of(piece)
    assert oid == hashlib.sha256(piece).digest()
    pairs = d.pairs(keep=5)
    assert pairs[0][1] == oid and len(pairs) == 5 and all(k in old for k, _ in pairs[1:])
    assert len(d.pairs(keep=100)) == 11

"""The digest cache (ckptcli/format/digests.py, kept by ckptcli/store/digestcache.py): a
take of files that changed in a few places hashes only the chunks that changed with
SHA-256, and stores exactly what a take without the cache stores; a damaged, planted or
lying cache file never changes what is stored, and nothing in the store is ever read as
one."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import stat
from pathlib import Path

import pytest

import ckptcli
import ckptcli.format.digests as digests_mod
import ckptcli.writer as writer_mod
from ckptcli.api import open_checkpoint, take
from ckptcli.format.digests import MAX_ENTRIES, DigestMismatchError, Digests, decode_file, encode_file, file_size
from ckptcli.format.encode import _hash_and_compress
from ckptcli.store import digestcache
from ckptcli.store.repository import Store
from ckptcli.store.verify import verify_store

SUBJECT = "process:files"


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own user cache directory (the digest cache lives there)."""
    monkeypatch.setenv("CKPT_CACHE_DIR", str(tmp_path / "user-cache"))
    return tmp_path / "user-cache"


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
    """The digest cache files of the store at `root` (of any subject)."""
    d = digestcache.digest_dir()
    assert d is not None
    names = {digestcache.DigestFile(os.path.realpath(root), s).path for s in (SUBJECT, "process:other")}
    return sorted(p for p in d.iterdir() if p in names) if d.is_dir() else []


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
    shutil.copytree(root, tmp_path / "plain")  # another store: no digest cache of its own
    assert not _cache_files(tmp_path / "plain")
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


@pytest.mark.parametrize("plant", ["damaged", "link to a file outside", "directory", "huge head", "fifo", "linked directory"])
def test_a_damaged_or_planted_cache_file_is_ignored_and_nothing_is_written_through_it(tmp_path: Path, plant: str) -> None:
    data = _files(tmp_path / "data")
    root = tmp_path / "s"
    store = ckptcli.init_store(root)
    take(store, {"n": 1}, subject=SUBJECT, blobs={"state": data})
    (path,) = _cache_files(root)
    outside = tmp_path / "outside"
    outside.write_bytes(b"not the cache's")
    if plant == "damaged":
        path.write_bytes(path.read_bytes()[:-3])
    elif plant == "link to a file outside":
        path.unlink()
        path.symlink_to(outside)
    elif plant == "directory":
        path.unlink()
        path.mkdir()
    elif plant == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif plant == "huge head":
        path.write_bytes(b"CKPTDGS1" + (MAX_ENTRIES).to_bytes(4, "little") + b"\0" * 64)
    else:  # the cache's directory itself a link to a directory elsewhere
        elsewhere = tmp_path / "elsewhere"
        path.parent.rename(elsewhere)
        path.parent.symlink_to(elsewhere)
    before = sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) if plant == "linked directory" else None
    _edit(data)
    cid = take(Store.open(root), {"n": 2}, subject=SUBJECT, blobs={"state": data}).hex
    assert outside.read_bytes() == b"not the cache's"
    if before is not None:
        assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == before
    out = tmp_path / "out"
    open_checkpoint(cid, Store.open(root)).restore_blobs(out)
    assert (out / "state" / "weights.bin").read_bytes() == (data / "weights.bin").read_bytes()
    assert not verify_store(Store.open(root), None, read_data=True).problems


def test_the_cache_is_the_users_own_never_the_stores(tmp_path: Path, _own_cache_dir: Path) -> None:
    """A store's files are written by whoever can write the store: nothing there is ever
    read as a digest cache. The user's file is 0600 in a 0700 directory."""
    data = _files(tmp_path / "data")
    root = tmp_path / "s"
    store = ckptcli.init_store(root)
    take(store, {"n": 1}, subject=SUBJECT, blobs={"state": data})
    (path,) = _cache_files(root)
    assert path.parent == _own_cache_dir / "digests"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not [p for p in root.rglob("*") if "digest" in p.name]
    # the cache written by an earlier build, planted in the store with every pair lying: not read
    pairs = list((decode_file(path.read_bytes()) or {}).items())
    planted = root / "cache" / "digests"
    planted.mkdir(parents=True)
    for name in (path.name, "0" * 32):
        (planted / name).write_bytes(encode_file([(k, hashlib.sha256(b"lie").digest()) for k, _v in pairs]))
    path.unlink()
    _edit(data)
    cid = take(Store.open(root), {"n": 2}, subject=SUBJECT, blobs={"state": data}).hex
    out = tmp_path / "out"
    open_checkpoint(cid, Store.open(root)).restore_blobs(out)
    assert (out / "state" / "events.jsonl").read_bytes() == (data / "events.jsonl").read_bytes()


def test_no_cache_when_the_cache_directory_is_set_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKPT_CACHE_DIR", "")
    rec = _Recorder(monkeypatch)
    data = _files(tmp_path / "data")
    store = ckptcli.init_store(tmp_path / "s")
    take(store, {"n": 1}, subject=SUBJECT, blobs={"state": data})
    _edit(data)
    take(store, {"n": 2}, subject=SUBJECT, blobs={"state": data})
    assert [d.hits for d in rec.made] == [0, 0]


def test_a_chunk_found_by_its_blake3_that_the_store_lacks_is_hashed_before_it_is_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pair that names an object the store does not have would store the chunk under
    that id: its SHA-256 is taken first, whatever the sampling draws."""
    monkeypatch.setattr(digests_mod, "_VERIFY_FRACTION", 0.0)
    from blake3 import blake3

    honest, lying = os.urandom(20_000), os.urandom(20_000)
    d = Digests({blake3(honest).digest(): hashlib.sha256(honest).digest(), blake3(lying).digest(): os.urandom(32)})
    # the first hit (the honest pair) is checked; the lie comes second, not drawn, and the
    # store does not have the id it gives
    with pytest.raises(DigestMismatchError):
        _hash_and_compress([memoryview(honest), memoryview(lying)], lambda oid: False, d)
    # a store that had the honest chunk before the take: found, not stored again, and
    # hashed only as the first hit
    d2 = Digests({blake3(honest).digest(): hashlib.sha256(honest).digest()})
    d2.length_of = lambda oid: len(honest) if oid == hashlib.sha256(honest).digest() else None
    out = _hash_and_compress([memoryview(honest), memoryview(honest)], lambda oid: True, d2)
    assert [oid for oid, _n, _s in out] == [hashlib.sha256(honest).digest()] * 2 and d2.checked == 1


def test_a_pair_naming_an_object_stored_earlier_in_the_same_take_is_hashed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store has the object the lie names, but only since this take (an earlier file
    of it): not an object the index knew, so the chunk is hashed whatever the draw."""
    monkeypatch.setattr(digests_mod, "_VERIFY_FRACTION", 0.0)
    from blake3 import blake3

    honest, stored_now, lying = os.urandom(20_000), os.urandom(20_000), os.urandom(20_000)
    d = Digests({blake3(honest).digest(): hashlib.sha256(honest).digest(), blake3(lying).digest(): hashlib.sha256(stored_now).digest()})
    d.length_of = lambda oid: len(honest) if oid == hashlib.sha256(honest).digest() else None  # the index before the take
    with pytest.raises(DigestMismatchError):
        _hash_and_compress([memoryview(honest), memoryview(lying)], lambda oid: True, d)  # both "in the store" now


def test_the_cache_directory_keeps_the_most_recent_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(digestcache, "MAX_FILES", 5)
    for i in range(8):
        f = digestcache.DigestFile(f"/store/{i}", SUBJECT)
        f.save([(bytes([i]) * 32, bytes([i]) * 32)])
        assert f.path is not None
        os.utime(f.path, ns=(i * 10**9, i * 10**9))
    f.save([(b"x" * 32, b"y" * 32)])  # the 8th again, the newest: the oldest go
    d = digestcache.digest_dir()
    assert d is not None
    kept = {p.name for p in d.iterdir()}
    assert len(kept) == 5
    assert {digestcache.DigestFile(f"/store/{i}", SUBJECT).path.name for i in (4, 5, 6, 7)} <= kept  # type: ignore[union-attr]


def test_the_bound_never_removes_a_file_ckpt_did_not_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `digests` directory the user already had under CKPT_CACHE_DIR keeps the user's
    own files, however many: only cache files (and ckpt's temporary ones) count and go."""
    monkeypatch.setattr(digestcache, "MAX_FILES", 3)
    d = digestcache.digest_dir()
    assert d is not None
    d.mkdir(parents=True, mode=0o700)
    mine = [d / f"note{i}.txt" for i in range(10)] + [d / ("f" * 32 + ".txt"), d / ("F" * 32)]
    for i, p in enumerate(mine):
        p.write_text(f"mine {i}")
        os.utime(p, ns=(i, i))
    stale = d / f".{'e' * 32}.99.0123abcd.tmp"  # a writer killed before its rename
    stale.write_bytes(b"half")
    os.utime(stale, ns=(0, 0))
    for i in range(5):
        digestcache.DigestFile(f"/store/{i}", SUBJECT).save([(bytes([i]) * 32, bytes([i]) * 32)])
    assert all(p.read_text() == f"mine {i}" for i, p in enumerate(mine))
    assert not stale.exists()
    assert len([p for p in d.iterdir() if p not in mine]) == 3


def test_a_file_read_by_range_and_then_replaced_is_read_anew(tmp_path: Path) -> None:
    """LocalBackend keeps the descriptors read_range opened: a file it replaces or removes
    itself is read from the new file after, not the old one."""
    store = ckptcli.init_store(tmp_path / "s")
    backend = store.backend
    backend.write_hint("cache/probe", b"first")
    assert backend.read_range("cache/probe", 0, 100) == b"first"
    backend.write_hint("cache/probe", b"second")
    assert backend.read_range("cache/probe", 0, 100) == b"second"
    backend.write_atomic("cache/probe", b"third")
    assert backend.read_range("cache/probe", 0, 100) == b"third"
    backend.delete("cache/probe")
    with pytest.raises(ckptcli.errors.NotFoundError):
        backend.read_range("cache/probe", 0, 100)


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


@pytest.mark.parametrize("who", ["directory writable by others", "file writable by others", "file of another user"])
def test_a_cache_that_is_not_the_users_own_is_neither_read_nor_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, who: str, _own_cache_dir: Path
) -> None:
    """Someone else who can write the cache could plant a pair (as ssh refuses a key file
    others may write): such a directory or file is left alone, and the take hashes all."""
    if who == "file of another user" and os.getuid() != 0:
        pytest.skip("giving a file to another user needs root")
    rec = _Recorder(monkeypatch)
    data = _files(tmp_path / "data")
    root = tmp_path / "s"
    store = ckptcli.init_store(root)
    take(store, {"n": 1}, subject=SUBJECT, blobs={"state": data})
    (path,) = _cache_files(root)
    if who == "directory writable by others":
        path.parent.chmod(0o777)
    elif who == "file writable by others":
        path.chmod(0o666)
    else:
        os.chown(path, 65534, 65534)
    before = path.read_bytes()
    _edit(data)
    cid = take(Store.open(root), {"n": 2}, subject=SUBJECT, blobs={"state": data}).hex
    assert rec.made[1].hits == 0
    if who == "directory writable by others":
        assert path.read_bytes() == before  # nothing written there
    else:  # the user's own directory: the file is replaced by the user's own, 0600
        st = path.stat()
        assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o600
    out = tmp_path / "out"
    open_checkpoint(cid, Store.open(root)).restore_blobs(out)
    assert (out / "state" / "weights.bin").read_bytes() == (data / "weights.bin").read_bytes()


def test_a_pair_naming_an_object_of_another_length_is_caught_whatever_the_draw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lying pair whose object the store has but with another length than the chunk:
    the store's index says so at no cost, so it is caught even when not drawn."""
    monkeypatch.setattr(digests_mod, "_VERIFY_FRACTION", 0.0)

    def poison(root: Path) -> None:
        (path,) = _cache_files(root)
        pairs = list((decode_file(path.read_bytes()) or {}).items())
        index = Store.open(root).index()
        length = {oid: index.get(oid).raw_len for _k, oid in pairs}  # type: ignore[union-attr]
        # every pair but the first (whose hit is checked anyway) names an object the store
        # has, of another length than the chunk
        lying = [(k, v if i == 0 else next(o for _k, o in pairs if length[o] != length[v])) for i, (k, v) in enumerate(pairs)]
        path.write_bytes(encode_file(lying))

    warnings: list[str] = []
    monkeypatch.setattr(Store, "warn", lambda self, message: warnings.append(message))
    store, plain, a, b = _twin_takes(tmp_path, poison=poison)
    assert _blobs_ev(store, a) == _blobs_ev(plain, b)
    assert any("digest cache" in w for w in warnings), warnings


def test_two_stores_opened_by_the_same_relative_path_have_a_cache_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        _files(d / "data", seed=ord(name))
        ckptcli.init_store(d / ".ckpt")
        monkeypatch.chdir(d)
        take(Store.open(Path(".ckpt")), {"n": 1}, subject=SUBJECT, blobs={"state": Path("data")})
    assert len(_cache_files(tmp_path / "a" / ".ckpt") + _cache_files(tmp_path / "b" / ".ckpt")) == 2

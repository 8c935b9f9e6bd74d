"""`ckpt verify --read-data` on a local store reads each version-2 pack piecewise: the
tasks that check a slice of it read that slice themselves (`pack.check_pack_at`), so a
pack is never held whole, and what it finds is what checking the whole pack's bytes
finds (`pack.check_pack_data`), damaged or not."""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptcli
from ckptcli.api import take
from ckptcli.errors import CkptError
from ckptcli.format import framing
from ckptcli.format.ev import _pool
from ckptcli.progress import NULL
from ckptcli.store import layout
from ckptcli.store.index import IndexEntry
from ckptcli.store.pack import READ_BYTES, SLICE_BYTES, PackTable, check_pack_at, check_pack_data, read_pack, read_pack_at
from ckptcli.store.repository import Store
from ckptcli.store.verify import StoreChecker


def _state(root: Path, mib: int) -> Path:
    rng = random.Random(3)
    files = root / "files"
    files.mkdir(parents=True)
    (files / "random.bin").write_bytes(rng.randbytes(mib * 1024 * 1024 * 3 // 4))
    lines = "".join(f'{{"seq": {i}, "kind": "{rng.choice(["a", "bb", "ccc"])}", "n": {rng.random():.6f}}}\n' for i in range(400_000))
    (files / "events.jsonl").write_bytes(lines.encode()[: mib * 1024 * 1024 // 4])
    return files


@pytest.fixture(scope="module")
def one_pack(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[tuple[bytes, IndexEntry]]]:
    """A store whose data sits in one version-2 pack of more than one slice: (store,
    the pack's store path, its objects)."""
    root = tmp_path_factory.mktemp("one-pack")
    store = ckptcli.init_store(root / "store")
    take(store, {}, subject="process:p", blobs={"f": _state(root, 12)})
    st = Store.open(root / "store")
    packs = sorted((p for p in (root / "store" / layout.PACKS).rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    big = packs[-1]
    assert big.stat().st_size > 2 * SLICE_BYTES
    pid = bytes.fromhex(big.name)
    entries = [(oid, e) for oid, e in st.index().items() if e.pack == pid]
    st.close()
    return root / "store", str(big.relative_to(root / "store")), entries


def test_verify_read_data_never_holds_a_pack_whole(one_pack: tuple[Path, str, list[tuple[bytes, IndexEntry]]]) -> None:
    store_path, path, _entries = one_pack
    size = (store_path / path).stat().st_size
    st = Store.open(store_path)
    check = StoreChecker(st)
    try:
        check.index()
        check.packs()
        check.manifests(None)
        check.structure(NULL)
        tracemalloc.start()
        try:
            before, _peak = tracemalloc.get_traced_memory()
            check.read_data(NULL)
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        report = check.finish()
    finally:
        st.close()
    assert report.ok, report.to_dict()
    assert report.bytes_read >= size
    # the pack is ~10 MiB; slices read READ_BYTES at a time on at most 4 threads
    assert peak - before < size // 3, f"{peak - before} bytes more at the peak, for a pack of {size}"


def _damages(data: bytes, entries: list[tuple[bytes, IndexEntry]]) -> dict[str, Callable[[], bytes]]:
    """Ways to damage a pack: each a function giving the damaged bytes."""
    by_offset = sorted(e for _oid, e in entries)
    (tlen,) = (int.from_bytes(data[-4:], "big"),)

    def flip(*offsets: int) -> Callable[[], bytes]:
        def damaged() -> bytes:
            b = bytearray(data)
            for at in offsets:
                b[at] ^= 0x10
            return bytes(b)

        return damaged

    first, mid, last = by_offset[0], by_offset[len(by_offset) // 2], by_offset[-1]
    across = next(e for e in by_offset if e.offset < READ_BYTES * 3 < e.offset + e.stored_len)  # straddles a read
    sliced = next(e for e in by_offset if e.offset >= SLICE_BYTES)  # in the second slice
    return {
        "intact": lambda: data,
        "first object": flip(first.offset),
        "objects in three slices": flip(mid.offset + mid.stored_len // 2, last.offset + last.stored_len - 1, sliced.offset),
        "object across a read": flip(READ_BYTES * 3),
        "object ends a read run": flip(across.offset + across.stored_len - 1),
        "reserved header byte": flip(11),
        "version": flip(9),
        "trailer": flip(len(data) - 4 - tlen // 2),
        "trailer length": flip(len(data) - 1),
        "truncated": lambda: data[: len(data) - 4 - tlen - 100] + data[len(data) - 4 - tlen :],
        "cut short": lambda: data[: len(data) // 2],
        "header only": lambda: data[: framing.HEADER_SIZE + 2],
    }


def test_piecewise_check_finds_what_the_whole_check_finds(one_pack: tuple[Path, str, list[tuple[bytes, IndexEntry]]]) -> None:
    store_path, path, entries = one_pack
    data = (store_path / path).read_bytes()
    hexname = path.rsplit("/", 1)[-1]
    for name, make in _damages(data, entries).items():
        damaged = make()
        reads: list[tuple[int, int]] = []

        def read(offset: int, length: int, damaged: bytes = damaged, reads: list[tuple[int, int]] = reads) -> bytes:
            reads.append((offset, length))
            return damaged[offset : offset + length]

        for pool in (None, _pool()):
            whole = check_pack_data(damaged, hexname, path, entries, pool)
            reads.clear()
            assert check_pack_at(read, len(damaged), hexname, path, entries, pool) == whole, name
            if name == "intact":
                assert whole == (None, {})
                # piecewise: no read larger than READ_BYTES beyond one object, none twice
                biggest = max(e.stored_len for _oid, e in entries)
                assert max(length for _o, length in reads) <= max(READ_BYTES, biggest)
                assert sum(length for _o, length in reads) < len(damaged) + READ_BYTES
            else:
                assert whole != (None, {}), name


@pytest.fixture(scope="module")
def small_pack(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, str]:
    """(bytes, name) of a small version-2 pack of a few dozen objects, some compressed."""
    root = tmp_path_factory.mktemp("small-pack")
    store = ckptcli.init_store(root / "store")
    files = root / "files"
    files.mkdir()
    rng = random.Random(8)
    (files / "r.bin").write_bytes(rng.randbytes(400_000))
    (files / "t.txt").write_bytes(b"".join(b"line %d of some text\n" % i for i in range(20_000)))
    take(store, {"memory": {"k": list(range(50))}}, subject="process:p", blobs={"f": files})
    big = max((p for p in (root / "store" / layout.PACKS).rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    return big.read_bytes(), big.name


def _outcome(fn: Callable[[], PackTable]) -> object:
    try:
        t = fn()
    except CkptError as exc:
        return type(exc), exc.message
    return t.version, t.rows, t.errors, t.trailer, t.header, t.pack_id()


@given(edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)), max_size=4), cut=st.integers(0, 64))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_read_pack_at_is_read_pack(small_pack: tuple[bytes, str], edits: list[tuple[int, int]], cut: int) -> None:
    """Whatever the bytes (flipped anywhere, cut short at the end), reading a pack
    piecewise gives what reading it whole gives: the same table, or the same error."""
    data, name = small_pack
    b = bytearray(data[: len(data) - cut] if cut < len(data) else data)
    for at, x in edits:
        b[at % len(b)] ^= x
    damaged = bytes(b)

    def read(offset: int, length: int) -> bytes:
        return damaged[offset : offset + length]

    pid = bytes.fromhex(name)
    for pool in (None, _pool()):
        piecewise = _outcome(lambda pool=pool: read_pack_at(read, len(damaged), "pack", pid, pool))
        assert piecewise == _outcome(lambda pool=pool: read_pack(damaged, "pack", pid, pool))

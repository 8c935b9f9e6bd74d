"""The store's chunker: which one a store records, that writers cut with it, and that a
store made with the old one (`fastcdc`) keeps cutting, and deduplicating, as before."""

from __future__ import annotations

import hashlib
import io
import json
import random
import threading
from pathlib import Path

import pytest

from ckptcli.api import init_store, open_store, take
from ckptcli.errors import CorruptError, InvalidInputError, UsageError
from ckptcli.format import framing
from ckptcli.format.chunker import CHUNKERS, DEFAULT_CHUNKER, LEGACY_CHUNKER, chunk_bytes, cutter, iter_chunks
from ckptcli.format.chunker import PARAMS as STORE_PARAMS
from ckptcli.store import layout
from ckptcli.store.repository import Store, StoreConfig, read_config
from tests.conftest import run_ckpt

PARAMS = (16384, 65536, 262144)


def _random(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _chunk_ids(data: bytes, algorithm: str) -> set[bytes]:
    return {hashlib.sha256(c).digest() for c in chunk_bytes(data, STORE_PARAMS[algorithm], algorithm)}


def test_a_new_store_records_the_new_chunker_and_the_option_keeps_the_old(tmp_path: Path) -> None:
    new = init_store(tmp_path / "new")
    old = init_store(tmp_path / "old", chunker=LEGACY_CHUNKER)
    assert DEFAULT_CHUNKER == "fastcdc2020"
    assert open_store(tmp_path / "new").config.chunker == DEFAULT_CHUNKER == new.config.chunker
    assert open_store(tmp_path / "old").config.chunker == LEGACY_CHUNKER == old.config.chunker
    body = framing.decode_record((tmp_path / "old" / layout.CONFIG).read_bytes(), framing.KIND_CONFIG, "config")[1]
    assert body["chunker"] == {"algorithm": "fastcdc", "min": 16384, "avg": 65536, "max": 262144}
    body = framing.decode_record((tmp_path / "new" / layout.CONFIG).read_bytes(), framing.KIND_CONFIG, "config")[1]
    assert body["chunker"] == {"algorithm": "fastcdc2020", "min": 16384, "avg": 32768, "max": 262144}


@pytest.mark.parametrize("algorithm", CHUNKERS)
def test_a_take_cuts_blob_files_with_the_stores_chunker(tmp_path: Path, algorithm: str) -> None:
    data = _random(3 << 20, 1)
    (tmp_path / "f.bin").write_bytes(data)
    store = init_store(tmp_path / "s", chunker=algorithm)
    take(store, {}, subject="process:a", blobs={"f": tmp_path / "f.bin"})
    other = next(a for a in CHUNKERS if a != algorithm)
    mine, theirs = _chunk_ids(data, algorithm), _chunk_ids(data, other)
    assert mine != theirs  # the two chunkers cut random data at different places
    # every chunk of this store's chunker is in the store, none that only the other cuts
    index = open_store(tmp_path / "s").index()
    assert all(oid in index for oid in mine)
    assert not any(oid in index for oid in theirs - mine)


@pytest.mark.parametrize("algorithm", CHUNKERS)
def test_a_store_dedups_with_itself_after_an_edit(tmp_path: Path, algorithm: str) -> None:
    data = bytearray(_random(4 << 20, 2))
    src = tmp_path / "f.bin"
    src.write_bytes(data)
    store = init_store(tmp_path / "s", chunker=algorithm)
    first = take(store, {}, subject="process:a", blobs={"f": src})
    data[2_000_000:2_000_100] = b"x" * 100  # one small edit in the middle
    src.write_bytes(data)
    second = take(store, {}, subject="process:a", blobs={"f": src}, force_read=True)
    # the edit costs one or two chunks (<= 2 x 256 KiB) of 4 MiB, in either chunker
    assert first.new_bytes > 4_000_000
    assert second.new_bytes < 600_000


def test_a_legacy_store_made_before_the_choice_keeps_its_chunker(tmp_path: Path) -> None:
    """A config written before there was a choice names `fastcdc`: such a store goes on
    cutting with it, so what is taken now shares the chunks of what was taken then."""
    store = init_store(tmp_path / "s", chunker=LEGACY_CHUNKER)
    data = _random(2 << 20, 3)
    (tmp_path / "a.bin").write_bytes(data)
    (tmp_path / "b.bin").write_bytes(data)
    take(store, {}, subject="process:a", blobs={"a": tmp_path / "a.bin"})
    again = take(open_store(tmp_path / "s"), {}, subject="process:b", blobs={"b": tmp_path / "b.bin"})
    assert again.new_bytes < 10_000  # the same bytes under another name: no data object is new


def test_a_config_without_an_algorithm_reads_as_the_legacy_chunker(tmp_path: Path) -> None:
    store = init_store(tmp_path / "s")
    body = store.config.to_body()
    del body["chunker"]["algorithm"]
    store.backend.write_atomic(layout.CONFIG, framing.encode_record(framing.KIND_CONFIG, body, store.version))
    assert read_config(store.backend, "config").chunker == LEGACY_CHUNKER


def test_an_unknown_chunker_leaves_the_store_readable_and_a_take_refused(tmp_path: Path) -> None:
    store = init_store(tmp_path / "s")
    (tmp_path / "f.bin").write_bytes(_random(300_000, 4))
    take(store, {"x": 1}, subject="process:a")
    cfg = store.config
    future = StoreConfig(cfg.version, cfg.store_id, cfg.created_ns, cfg.cdc, "fastcdc2099")
    store.backend.write_atomic(layout.CONFIG, future.encode())
    r = run_ckpt("ls", "--store", tmp_path / "s", "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)) == 1
    r = run_ckpt("take", "--blob", f"f={tmp_path / 'f.bin'}", "-S", "process:a", "--store", tmp_path / "s")
    err = r.stderr.decode()
    assert r.returncode == InvalidInputError.exit_code, err
    assert "chunker 'fastcdc2099'" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2


def test_impossible_sizes_for_the_new_chunker_are_damage(tmp_path: Path) -> None:
    store = init_store(tmp_path / "s")
    cfg = store.config
    bad = StoreConfig(cfg.version, cfg.store_id, cfg.created_ns, (2 << 20, 2 << 20, 4 << 20), DEFAULT_CHUNKER)
    store.backend.write_atomic(layout.CONFIG, bad.encode())
    with pytest.raises(CorruptError, match="outside what fastcdc2020 cuts"):
        Store.open(tmp_path / "s")


def test_init_refuses_an_unknown_chunker_before_creating_anything(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="unknown chunker"):
        init_store(tmp_path / "s", chunker="rabin")
    assert not (tmp_path / "s").exists()
    r = run_ckpt("init", "--chunker", "rabin", tmp_path / "s2")
    assert r.returncode == UsageError.exit_code and b"'rabin' is not a chunker" in r.stderr  # the CLI: a bad option
    assert not (tmp_path / "s2").exists()
    r = run_ckpt("init", "--chunker", "fastcdc", tmp_path / "s3", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["chunker"] == "fastcdc"


@pytest.mark.parametrize("n", [0, 1, 300_000, (1 << 20) + 1, 3_000_000])
def test_the_new_chunker_cuts_windows_exactly_as_the_whole(n: int) -> None:
    data = _random(n, n)
    got = [bytes(c) for c in iter_chunks(io.BytesIO(data), PARAMS, 1 << 20, DEFAULT_CHUNKER)]
    assert got == (chunk_bytes(data, PARAMS, DEFAULT_CHUNKER) if data else [])
    sizes = [len(c) for c in got]
    assert all(s <= PARAMS[2] for s in sizes) and all(s >= PARAMS[0] for s in sizes[:-1])


def test_the_new_chunker_cuts_the_same_on_several_threads_at_once() -> None:
    """One cutter serves every thread (files are chunked side by side): each thread's
    chunks are those it would get alone."""
    datas = [_random(2 << 20, 10 + i) for i in range(4)]
    alone = [chunk_bytes(d, PARAMS, DEFAULT_CHUNKER) for d in datas]
    cut = cutter(PARAMS, DEFAULT_CHUNKER)
    got: list[list[tuple[int, int]]] = [[] for _ in datas]

    def run(i: int) -> None:
        for _ in range(3):
            got[i] = list(cut(datas[i]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(datas))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for d, pieces, expect in zip(datas, got, alone, strict=True):
        assert [d[o : o + n] for o, n in pieces] == expect

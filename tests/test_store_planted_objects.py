"""An object already at a content-named path of a store on object storage (a pack, an
index file, a manifest) is trusted only when it is the object its name says: a take or
a copy that finds a truncated one there (a generic fsspec store, which writes in place,
killed mid-write) or a planted one (any bytes put at that key) writes its own over it,
and the checkpoint it commits restores. Before, "already there" was taken for "the same
bytes": the take exited 0 and committed a checkpoint that could not be restored.

The cases run on memory:// (and on it, the multipart path of large packs), on S3 (the
moto server of tests/s3_server.py) and on a generic fsspec store (local://)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from ckptcli.store import remote
from ckptcli.store.backends import open_backend
from ckptcli.store.backends.memory import MemoryBackend
from tests.conftest import run_ckpt
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures

STATE = {"memory": {"turn": 1, "notes": [f"note {i} " * 40 for i in range(64)]}, "tools": [{"n": i, "out": "y" * 300} for i in range(40)]}
CONTENT_NAMED = ("packs/", "index/", "manifests/")
#: what a take writes under the names a clean take gives them (a manifest's name has its
#: time; an index file already there is read as the take starts)
WRITTEN = ("packs/",)


def _written_by_a_take() -> dict[str, bytes]:
    """The content-named objects a take of STATE writes into an empty store."""
    name = f"planted-ref-{uuid.uuid4().hex}"
    try:
        api.take(api.init_store(f"memory://{name}"), STATE, subject="agent:a")
        objects = MemoryBackend(name)
        return {p: objects.get(p) for top in CONTENT_NAMED for p in objects.list_paths(top)}
    finally:
        MemoryBackend.forget(name)


def _damaged(data: bytes, how: str) -> bytes:
    if how == "truncated":
        return data[: len(data) // 2]
    if how == "other-length":
        return b"GARBAGE" * 1000
    assert how == "same-length"  # another object of the same size: its last bytes differ
    return data[:-64] + bytes(64) if data[-64:] != bytes(64) else data[:-64] + b"\xff" * 64


@pytest.fixture
def memory_url() -> Iterator[str]:
    name = f"planted-{uuid.uuid4().hex}"
    MemoryBackend.forget(name)
    yield f"memory://{name}"
    MemoryBackend.forget(name)


def _take_over_planted(url: str, how: str, kinds: tuple[str, ...] = WRITTEN) -> tuple[Any, dict[str, bytes]]:
    """Plant a damaged copy at every `kinds` path a take of STATE writes, take STATE: the
    store, and what a clean take wrote."""
    clean = _written_by_a_take()
    store = api.init_store(url)
    objects = open_backend(url)
    planted = {p: d for p, d in clean.items() if p.startswith(kinds)}
    assert planted
    for path, data in planted.items():
        objects.put(path, _damaged(data, how))
    api.take(store, STATE, subject="agent:a")
    return store, planted


def _assert_restores(store: Any, url: str, planted: dict[str, bytes]) -> None:
    report = api.verify(store, read_data=True)
    assert not report.problems, report.problems
    assert api.open_checkpoint("agent:a", store).state() == STATE
    objects = open_backend(url)
    for path, data in planted.items():
        assert objects.get(path) == data, path  # the damaged object was replaced by the real one


@pytest.mark.parametrize("how", ["truncated", "other-length", "same-length"])
def test_a_take_writes_over_a_damaged_object_at_its_name_on_memory(memory_url: str, how: str) -> None:
    store, planted = _take_over_planted(memory_url, how)
    _assert_restores(store, memory_url, planted)


def test_a_large_pack_uploaded_in_parts_is_written_over_a_truncated_one(memory_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "_MULTIPART_FROM", 1)  # every pack goes through open_writer's parts
    monkeypatch.setattr(remote, "_PART", 4096)
    store, planted = _take_over_planted(memory_url, "truncated", ("packs/",))
    _assert_restores(store, memory_url, planted)


def test_a_take_on_s3_writes_over_a_planted_pack(s3_bucket: S3Bucket) -> None:
    url = f"{s3_bucket.url}/planted"
    store, planted = _take_over_planted(url, "other-length")
    _assert_restores(store, url, planted)


def test_a_retried_take_on_a_generic_fsspec_store_writes_over_a_pack_its_killed_run_truncated(tmp_path: Path) -> None:
    # the generic backend writes a file in place (fsspec's pipe_file): a take killed
    # mid-write leaves the first part of a pack at its final name, as planted here
    url = f"local://{tmp_path / 'store'}"
    store, planted = _take_over_planted(url, "truncated", ("packs/",))
    _assert_restores(store, url, planted)


def test_ckpt_copy_to_s3_writes_over_a_planted_pack_and_the_copy_restores(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    src = tmp_path / "src"
    assert run_ckpt("init", src).returncode == 0
    blob = tmp_path / "w"
    blob.mkdir()
    (blob / "data.bin").write_bytes(os.urandom(300_000))
    doc = tmp_path / "doc.json"
    doc.write_text('{"memory": {"turn": 1}}')
    assert run_ckpt("--store", src, "take", doc, "-S", "agent:cp", "--blob", f"w={blob}").returncode == 0
    probe, dst = f"{s3_bucket.url}/probe", f"{s3_bucket.url}/tgt"
    for url in (probe, dst):
        assert run_ckpt("init", url).returncode == 0
    assert run_ckpt("copy", src, probe).returncode == 0
    packs = [p for p in open_backend(probe).list_paths("packs/")]  # the pack names a copy of it writes
    assert packs
    objects = open_backend(dst)
    for path in packs:
        objects.put(path, b"GARBAGE" * 1000)
    copied = run_ckpt("copy", src, dst)
    assert copied.returncode == 0, copied.stderr
    said = copied.stderr.decode()
    assert said.count("is not the one its name says (7000 bytes, not ") == len(packs) and "replaced it" in said, said
    assert run_ckpt("--store", dst, "verify", "--read-data").returncode == 0
    out = tmp_path / "out"
    restored = run_ckpt("--store", dst, "restore", "agent:cp", "--blobs", out, "-o", os.devnull)
    assert restored.returncode == 0, restored.stderr
    assert (out / "w" / "data.bin").read_bytes() == (blob / "data.bin").read_bytes()

"""verify --read-data finds one damaged byte in every kind of file and names the damaged
object and the checkpoints that need it; exit 5, no traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import ckptcli
from ckptcli.api import take
from ckptcli.errors import ExitCode
from ckptcli.format.walk import walk_checkpoint
from ckptcli.store.repository import Store
from tests.conftest import run_ckpt
from tests.helpers_faults import copy_store, flip_byte


def _build(root: Path) -> tuple[Store, dict[str, str]]:
    store = ckptcli.init_store(root / "store")
    files = root / "files"
    files.mkdir()
    (files / "big.bin").write_bytes(os.urandom(300_000))
    (files / "small.txt").write_text("hello")
    state = {"memory": {"goal": "g", "messages": [f"message {i} " * 20 for i in range(60)]}, "plan": ["a", "b"]}
    ids = {"c1": take(store, state, subject="agent:a", blobs={"files": files}).hex}
    state["memory"]["messages"].append("one more " * 30)
    ids["c2"] = take(store, state, subject="agent:a").hex
    ids["c3"] = take(store, {"memory": {"other": list(range(100))}}, subject="workflow:w").hex
    return store, ids


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("pristine")
    _store, ids = _build(root)
    assert run_ckpt("verify", "--read-data", "--store", root / "store").returncode == 0
    return root / "store", ids


def _verify(store: Path) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    proc = run_ckpt("verify", "--read-data", "--json", "--store", store)
    assert b"Traceback" not in proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr.decode()


def _needing(store_path: Path, oid: bytes) -> set[str]:
    """Independently: which checkpoints reach this object (walked on the pristine store)."""
    store = ckptcli.open_store(store_path)
    return {cid.hex() for cid in store.manifest_ids() if oid in walk_checkpoint(store, store.manifest(cid)).objects}


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_damaged_pack_object_is_named_with_its_checkpoints(pristine: tuple[Path, dict[str, str]], tmp_path: Path, where: str) -> None:
    src, _ids = pristine
    store = copy_store(src, tmp_path)
    st = ckptcli.open_store(store)
    # pick the data object of big.bin's first chunk: needed by c1 only (c2 has no blobs)
    biggest = max(st.index().items(), key=lambda kv: kv[1].stored_len)
    oid, entry = biggest
    pack = store / "packs" / entry.pack.hex()[:2] / entry.pack.hex()
    off = {"start": entry.offset, "middle": entry.offset + entry.stored_len // 2, "end": entry.offset + entry.stored_len - 1}[where]
    flip_byte(pack, off)
    code, report, _err = _verify(store)
    assert code == ExitCode.CORRUPT
    objects = [p for p in report["problems"] if p["kind"] == "object"]
    assert [p["name"] for p in objects] == [oid.hex()]
    assert set(objects[0]["checkpoints"]) == _needing(src, oid)
    packs = [p for p in report["problems"] if p["kind"] == "pack"]
    assert packs and packs[0]["name"].endswith(entry.pack.hex())


def test_damaged_shared_node_names_every_checkpoint(pristine: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    src, ids = pristine
    store = copy_store(src, tmp_path)
    st = ckptcli.open_store(store)
    # an object that both c1 and c2 need: one of the shared message objects
    shared = [oid for oid in st.index() if _needing(src, oid) >= {ids["c1"], ids["c2"]}]
    assert shared
    oid = shared[0]
    entry = st.index()[oid]
    flip_byte(store / "packs" / entry.pack.hex()[:2] / entry.pack.hex(), entry.offset + entry.stored_len // 2)
    code, report, _ = _verify(store)
    assert code == ExitCode.CORRUPT
    named = {p["name"]: set(p["checkpoints"]) for p in report["problems"] if p["kind"] == "object"}
    assert oid.hex() in named
    assert named[oid.hex()] == _needing(src, oid)


def test_damaged_pack_header_names_the_pack_and_its_checkpoints(pristine: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    src, _ids = pristine
    store = copy_store(src, tmp_path)
    pack = sorted((store / "packs").rglob("*"))[-1]
    while not pack.is_file():  # pragma: no cover - rglob order
        pack = pack.parent
    flip_byte(pack, 5)
    code, report, _ = _verify(store)
    assert code == ExitCode.CORRUPT
    p = [x for x in report["problems"] if x["kind"] == "pack"]
    assert len(p) == 1 and p[0]["name"].endswith(pack.name)
    assert p[0]["checkpoints"], "the checkpoints that need objects in the pack are named"


@pytest.mark.parametrize("offset", [0, 9, 25, -40, -1])
def test_damaged_index_is_named(pristine: tuple[Path, dict[str, str]], tmp_path: Path, offset: int) -> None:
    src, _ = pristine
    store = copy_store(src, tmp_path)
    idx = sorted((store / "index").iterdir())[0]
    flip_byte(idx, offset)
    code, report, _ = _verify(store)
    assert code == ExitCode.CORRUPT
    assert [p["name"] for p in report["problems"] if p["kind"] == "index"] == [f"index/{idx.name}"]


@pytest.mark.parametrize("offset", [0, 8, 30, -33, -1])
def test_damaged_manifest_names_its_checkpoint(pristine: tuple[Path, dict[str, str]], tmp_path: Path, offset: int) -> None:
    src, ids = pristine
    store = copy_store(src, tmp_path)
    flip_byte(store / "manifests" / ids["c2"], offset)
    code, report, _ = _verify(store)
    assert code == ExitCode.CORRUPT
    m = [p for p in report["problems"] if p["kind"] == "manifest"]
    assert len(m) == 1 and m[0]["checkpoints"] == [ids["c2"]]


@pytest.mark.parametrize("offset", [1, 15, -2])
def test_damaged_ref_is_named(pristine: tuple[Path, dict[str, str]], tmp_path: Path, offset: int) -> None:
    src, _ = pristine
    store = copy_store(src, tmp_path)
    flip_byte(store / "refs" / "latest" / "agent" / "a", offset)
    code, report, _ = _verify(store)
    assert code == ExitCode.CORRUPT
    assert [p["name"] for p in report["problems"] if p["kind"] == "ref"] == ["refs/latest/agent/a"]


def test_damaged_config_is_named(pristine: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    src, _ = pristine
    store = copy_store(src, tmp_path)
    flip_byte(store / "config", 30)
    proc = run_ckpt("verify", "--read-data", "--store", store)
    assert proc.returncode != 0
    assert b"Traceback" not in proc.stderr
    assert len(proc.stderr.decode().strip().splitlines()) == 1


def test_human_report_names_object_and_checkpoints(pristine: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    src, ids = pristine
    store = copy_store(src, tmp_path)
    st = ckptcli.open_store(store)
    oid, entry = max(st.index().items(), key=lambda kv: kv[1].stored_len)
    flip_byte(store / "packs" / entry.pack.hex()[:2] / entry.pack.hex(), entry.offset + 3)
    proc = run_ckpt("verify", "--read-data", "--store", store)
    assert proc.returncode == ExitCode.CORRUPT
    text = proc.stdout.decode()
    assert f"damaged object {oid.hex()}" in text
    assert ids["c1"][:12] in text
    assert proc.stderr.decode().count("\n") == 1 and proc.stderr.startswith(b"ckpt: error:")


def test_clean_store_verifies(pristine: tuple[Path, dict[str, str]]) -> None:
    src, _ = pristine
    code, report, _ = _verify(src)
    assert code == 0 and report["ok"] and report["checkpoints"] == 3

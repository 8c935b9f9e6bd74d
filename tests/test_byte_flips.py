"""Every byte is covered (issue 12): a flip at EVERY offset of every file of a small
version-2 store, and of a checkpoint file exported from it, is found and named by
`verify --read-data`, and no read ever returns wrong data.

The store holds one file of each kind ckpt writes (`find .ckpt -type f` after init,
take, take --branch, tag, ls): config, packs, index files, manifests, refs (latest,
branch, tag), the catalog cache, and two lock files. Lock files are empty (flock targets
whose contents nobody reads), so there is nothing in them to flip. The catalog cache is
not covered by verify, by design (formats/v2.md, "Verification"): it is a rebuildable
cache, and the test shows that every flip in it is ignored or rebuilt, never believed.

For each flip (one bit, 0x01 at offset i, and 0x80 at offset i + 1, so both ends of each
byte are hit across the sweep) the file is damaged in place, checked in-process through
ckptcli.api.verify, and put back:

- named: verify raises a CkptError whose message names the file, or reports a problem
  whose name is the file (a store) or the file or an object of it (a checkpoint file);
- never wrong: the state of every checkpoint, read through its id and through every ref
  that named it, equals the original or raises a CkptError.

Any other exception fails the test. The v2 sweep flips every byte at full size
(CKPT_STRESS_SCALE=1, tests/stress.py) and the headers, ends and every 3rd byte in the
bounded run; a version-1 store is swept at its headers, ends and every 8th byte at full
size (every 24th bounded), whole with CKPT_STRESS_SCALE >= 2.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import Checkpoint, export_checkpoint, open_checkpoint, take, verify
from ckptcli.errors import CkptError
from ckptcli.listing import list_checkpoints
from ckptcli.store.repository import Store
from ckptcli.store.single import CheckpointFile
from tests import stress

#: ckpt's lock files: flock()ed; they hold only a record of their holder for people to
#: read, nothing decides by them (formats/v1.md, "Concurrency").
LOCKS = {"locks/store.lock", "locks/refs.lock"}
CATALOG = "cache/catalog"
#: the head hint a take leaves before its manifest (formats/v1.md, "Store layout"): a cache
HINT = "cache/heads/agent/a"


def _mask(offset: int) -> int:
    return 0x01 if offset % 2 == 0 else 0x80


def _build_store(root: Path, version: int) -> tuple[Path, dict[str, Any], dict[str, str]]:
    """A store of two checkpoints whose packs hold node and data objects, a few KB in all."""
    store = ckptcli.init_store(root, version=version)
    files = root.parent / "files"
    files.mkdir()
    (files / "note.txt").write_bytes(b"a small blob " * 12)
    s1 = {"memory": {"goal": "g" * 150, "items": [f"item {i}" for i in range(40)]}, "plan": ["read", "reply"]}
    c1 = take(store, s1, subject="agent:a", blobs={"files": files}).hex
    s2 = {"memory": {"goal": "g" * 150, "items": [f"item {i}" for i in range(41)]}, "plan": ["reply"]}
    c2 = take(store, s2, subject="agent:a", branch="trial").hex
    store.set_tag("t1", bytes.fromhex(c1))
    list_checkpoints(store)  # writes the catalog cache
    store.close()
    states = {c1: s1, c2: s2}
    refs = {"t1": c1, "trial": c2, "agent:a": c2}
    return root, states, refs


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, str]]:
    return _build_store(tmp_path_factory.mktemp("flips") / "store", 2)


def _store_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_the_store_has_every_file_kind(small_store: tuple[Path, dict[str, Any], dict[str, str]]) -> None:
    root, _s, _r = small_store
    names = _store_files(root)
    kinds = {n.split("/")[0] for n in names}
    assert kinds == {"config", "packs", "index", "manifests", "refs", "cache", "locks", "logs"}, names
    assert {n for n in names if n.startswith("refs/")} >= {"refs/tags/t1", "refs/branches/trial", "refs/latest/agent/a"}
    assert all(json.loads((root / n).read_bytes())["pid"] > 0 for n in LOCKS) and set(names) >= LOCKS
    assert {n for n in names if n.startswith("logs/")} >= {"logs/refs/tags/t1", "logs/refs/latest/agent/a"}  # swept too
    assert sum((root / n).stat().st_size for n in names) < 16_000, "keep the swept store small"
    assert verify(Store.open(root), read_data=True).ok


def _flips(path: Path) -> Iterator[int]:
    """Damage `path` at each offset in turn (yielding the offset), then put it back."""
    good = path.read_bytes()
    try:
        for offset in range(len(good)):
            bad = bytearray(good)
            bad[offset] ^= _mask(offset)
            path.write_bytes(bytes(bad))
            yield offset
    finally:
        path.write_bytes(good)


def _reads_are_right_or_refused(root: Path, states: dict[str, Any], refs: dict[str, str], what: str) -> None:
    """Every checkpoint's state read by id equals the original or is refused; every ref
    resolves to the checkpoint it named or is refused (what it names was just read)."""
    try:
        store = Store.open(root)
    except CkptError:
        return
    try:
        for cid, original in states.items():
            try:
                state = open_checkpoint(cid, store).state()
            except CkptError:
                continue
            assert state == original, f"{what}: checkpoint {cid[:12]} read back a wrong state"
        for ref, cid in refs.items():
            try:
                got = store.resolve(ref).hex()
            except CkptError:
                continue
            assert got == cid, f"{what}: {ref} resolved to {got[:12]}, not {cid[:12]}"
    finally:
        store.close()


def _sweep_store(root: Path, states: dict[str, Any], refs: dict[str, str], every: int = 1) -> int:
    """Flip every byte of every file but the locks and the caches (with `every` > 1: the
    first 24 and last 40 bytes of each file, where headers, lengths and checksums are,
    and every `every`-th byte between; in the reflog, every 7th at least)."""
    swept = 0
    for name in _store_files(root):
        if name in LOCKS or name in (CATALOG, HINT):
            continue
        size = (root / name).stat().st_size
        # the reflog's text lines, each under one checksum: every 7th byte and each end is proof enough
        step = max(every, 7) if name.startswith("logs/") else every
        for offset in _flips(root / name):
            if step > 1 and 24 <= offset < size - 40 and offset % step:
                continue
            what = f"{name} flipped at {offset}"
            try:
                store = Store.open(root)
                try:
                    rep = verify(store, read_data=True)
                finally:
                    store.close()
            except CkptError as exc:
                assert name in exc.message, f"{what}: refused without naming the file: {exc.message}"
            else:
                assert not rep.ok, f"{what}: verify --read-data found nothing"
                assert name in {p.name for p in rep.problems}, f"{what}: not named: {rep.problems}"
            _reads_are_right_or_refused(root, states, refs, what)
            swept += 1
    return swept


def test_every_flip_in_a_store_is_named(small_store: tuple[Path, dict[str, Any], dict[str, str]]) -> None:
    every = 1 if stress.FULL else 3
    assert _sweep_store(*small_store, every) > 1_000 // every


@pytest.mark.slow
def test_every_flip_in_a_version_1_store_is_named(tmp_path: Path) -> None:
    """The same over a store of version 1 (packs named by the hash of every byte): every
    offset with CKPT_STRESS_SCALE >= 2, else the headers, the ends and every 8th byte
    (every 24th in the bounded run)."""
    root, states, refs = _build_store(tmp_path / "store", 1)
    assert Path(root / "config").read_bytes()[8:10] == b"\x00\x01"
    every = 1 if stress.SCALE >= 2 else 8 if stress.FULL else 24
    assert _sweep_store(root, states, refs, every) > 1_000 // every


def test_a_flipped_catalog_is_never_believed(small_store: tuple[Path, dict[str, Any], dict[str, str]]) -> None:
    """The catalog is a rebuildable cache outside verify: a flip in it is found (its record
    checksum) and the listing rebuilt from the manifests, never a wrong listing."""
    root, _states, _refs = small_store
    store = Store.open(root)
    pristine = list_checkpoints(store)
    store.close()
    for offset in _flips(root / CATALOG):
        store = Store.open(root)
        try:
            assert list_checkpoints(store) == pristine, f"{CATALOG} flipped at {offset}: a wrong listing"
            assert verify(store).ok
        finally:
            store.close()


def test_a_flipped_head_hint_is_never_believed(small_store: tuple[Path, dict[str, Any], dict[str, str]]) -> None:
    """The head hint is a cache outside verify: a flipped one names no manifest of the
    subject newer than its latest, so the next take's parent is still the right one."""
    from ckptcli.format.manifest import Subject

    root, _states, refs = small_store
    assert (root / HINT).stat().st_size == 32
    for offset in _flips(root / HINT):
        store = Store.open(root)
        try:
            assert store.head(Subject.parse("agent:a")) == bytes.fromhex(refs["agent:a"]), f"{HINT} flipped at {offset}"
        finally:
            store.close()


@pytest.fixture(scope="module")
def small_file(small_store: tuple[Path, dict[str, Any], dict[str, str]], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    root, states, refs = small_store
    path = tmp_path_factory.mktemp("flips-file") / "c1.ckpt"
    store = Store.open(root)
    try:
        export_checkpoint(open_checkpoint(refs["t1"], store), path)
    finally:
        store.close()
    return path, states[refs["t1"]]


def test_every_flip_in_a_checkpoint_file_is_named(small_file: tuple[Path, Any]) -> None:
    path, state = small_file
    f = CheckpointFile(path)
    assert verify(f, read_data=True).ok and f.version == 2
    good_id = f.id
    f.close()
    assert os.path.getsize(path) < 8_000
    for offset in _flips(path):
        what = f"{path.name} flipped at {offset}"
        try:
            f = CheckpointFile(path)
        except CkptError as exc:
            assert str(path) in exc.message, f"{what}: refused without naming the file: {exc.message}"
            continue
        try:
            rep = verify(f, read_data=True)
            assert not rep.ok, f"{what}: verify --read-data found nothing"
            assert all(p.name == str(path) or (p.kind == "object" and p.name in {o.hex() for o in f.entries}) for p in rep.problems), (
                rep.problems
            )
            try:
                got = Checkpoint(f, f.id).state()
            except CkptError:
                continue
            assert f.id == good_id and got == state, f"{what}: read back a wrong state"
        finally:
            f.close()


def test_a_checkpoint_file_of_version_1_too(small_file: tuple[Path, Any], tmp_path: Path) -> None:
    """The same sweep over the same checkpoint exported by a version-1 store (smaller: a
    v1 file is covered by one whole-file checksum)."""
    _path, state = small_file
    v1 = ckptcli.init_store(tmp_path / "v1", version=1)
    cid = take(v1, state, subject="agent:a").hex
    out = tmp_path / "v1.ckpt"
    export_checkpoint(open_checkpoint(cid, v1), out)
    v1.close()
    for offset in _flips(out):
        try:
            f = CheckpointFile(out)
        except CkptError as exc:
            assert str(out) in exc.message
            continue
        try:
            assert not verify(f, read_data=True).ok, f"flip at {offset} not found"
            with contextlib.suppress(CkptError):
                assert Checkpoint(f, f.id).state() == state, f"flip at {offset}: a wrong state"
        finally:
            f.close()

"""A chunk tree that names a real object with the wrong length (a writer's bug) is found
by `ckpt verify`, with and without --read-data, as `ckpt restore` refuses it: even when
another tree names the same object with its right length."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import take
from ckptcli.copy import copy_checkpoints
from ckptcli.errors import CorruptError, ExitCode
from ckptcli.format.encode import Encoder
from ckptcli.format.values import EXT_BYTES, EXT_STR
from ckptcli.format.walk import walk_checkpoint
from ckptcli.store import verify
from ckptcli.store.repository import Store
from tests.conftest import run_ckpt

Lying = tuple[list[int], list[bytes]]
DATA = os.urandom(300_000)  # several chunks: a BYTES tree with one level-1 node


@pytest.fixture
def lying_tree(monkeypatch: pytest.MonkeyPatch) -> Iterator[Lying]:
    """(calls, objects): the level-1 nodes of the byte trees built by the calls whose
    numbers are in `calls` (0 = the first call) record their first chunk 7 bytes longer
    than it is; that chunk's object is appended to `objects`."""
    wrong: list[int] = []
    changed: list[bytes] = []
    calls = [0]
    real = Encoder._upper_levels

    def upper_levels(self: Encoder, kind: int, entries: list[tuple[int, bytes]], level: int) -> tuple[bytes, int]:
        if level == 1 and kind in (EXT_BYTES, EXT_STR):
            if calls[0] in wrong:
                (n, oid), *rest = entries
                entries = [(n + 7, oid), *rest]
                changed.append(oid)
            calls[0] += 1
        return real(self, kind, entries, level)

    monkeypatch.setattr(Encoder, "_upper_levels", upper_levels)
    yield wrong, changed
    monkeypatch.setattr(Encoder, "_upper_levels", real)


def _export_anyway(store: Store, ref: str, out: Path) -> None:
    """A checkpoint file of a checkpoint export refuses (as a writer with the same bug
    would make one): export with its structure check made to find nothing."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(verify, "structure_problems", lambda *_a: ({}, set()))
        ckptcli.export_checkpoint(ckptcli.open_checkpoint(ref, store), out)


def _names(store: Store, cid: bytes, oid: bytes) -> bool:
    return oid in walk_checkpoint(store, store.manifest(cid)).objects


def _verify(store: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = run_ckpt("verify", *extra, "--json", "--store", store)
    assert b"Traceback" not in proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _check_found(store_path: Path, oid: bytes, bad: list[str]) -> None:
    for extra in ([], ["--read-data"]):
        code, report = _verify(store_path, *extra)
        assert code == ExitCode.CORRUPT, (extra, report)
        objects = [p for p in report["problems"] if p["kind"] == "object"]
        assert [p["name"] for p in objects] == [oid.hex()], (extra, report)
        size = len(ckptcli.open_store(store_path).get(oid))
        assert f"holds {size} bytes" in objects[0]["message"] and f"{size + 7}" in objects[0]["message"]
        assert "take" in objects[0]["message"]  # what to do
        assert objects[0]["checkpoints"] == sorted(bad)
    proc = run_ckpt("verify", "--read-data", "--store", store_path)
    assert f"damaged object {oid.hex()}" in proc.stdout.decode()
    assert proc.stderr.decode().count("\n") == 1
    for cid in bad:  # restore refuses it (it did before verify found it)
        proc = run_ckpt("restore", cid, "--format", "msgpack", "--store", store_path)
        assert proc.returncode == ExitCode.CORRUPT
        assert f"object {oid.hex()[:12]}: {size} bytes, its parent says {size + 7}" in proc.stderr.decode()


@pytest.mark.parametrize("wrong", [0, 1], ids=["wrong-first", "wrong-second"])
def test_one_checkpoint_names_an_object_with_two_lengths(tmp_path: Path, lying_tree: Lying, wrong: int) -> None:
    """The same bytes in two sections, one tree right, one wrong: whichever the walk
    meets last, the wrong length is reported."""
    calls, changed = lying_tree
    store = ckptcli.init_store(tmp_path / "store")
    calls.append(wrong)
    cid = take(store, {"memory": {"blob": DATA}, "plan": [DATA]}, subject="agent:a").id
    calls.clear()
    _check_found(tmp_path / "store", changed[0], [cid.hex()])


def test_a_good_checkpoint_sharing_the_object_is_not_named(tmp_path: Path, lying_tree: Lying) -> None:
    calls, changed = lying_tree
    store = ckptcli.init_store(tmp_path / "store")
    good = take(store, {"memory": {"blob": DATA}}, subject="agent:a").id
    calls.append(1)  # the second take's tree
    bad = take(store, {"memory": {"blob": DATA + b"!"}}, subject="agent:b").id
    calls.clear()
    assert _names(store, good, changed[0]) and _names(store, bad, changed[0])
    _check_found(tmp_path / "store", changed[0], [bad.hex()])
    assert run_ckpt("restore", good.hex(), "--format", "msgpack", "--store", tmp_path / "store").returncode == 0
    assert run_ckpt("verify", "--read-data", good.hex(), "--store", tmp_path / "store").returncode == 0


def test_only_wrong_tree(tmp_path: Path, lying_tree: Lying) -> None:
    """No right tree beside it: found from the index's length, and read-data confirms it."""
    calls, changed = lying_tree
    store = ckptcli.init_store(tmp_path / "store")
    calls.append(0)
    cid = take(store, {"memory": {"blob": DATA}}, subject="agent:a").id
    calls.clear()
    _check_found(tmp_path / "store", changed[0], [cid.hex()])


@pytest.mark.parametrize("wrong", [0, 1], ids=["wrong-first", "wrong-second"])
def test_checkpoint_file_names_an_object_with_two_lengths(tmp_path: Path, lying_tree: Lying, wrong: int) -> None:
    """The same check on a checkpoint file (export copies the checkpoint as it is)."""
    calls, changed = lying_tree
    store = ckptcli.init_store(tmp_path / "store")
    calls.append(wrong)
    cid = take(store, {"memory": {"blob": DATA}, "plan": [DATA]}, subject="agent:a").hex
    calls.clear()
    _export_anyway(store, cid, tmp_path / "x.ckpt")
    for extra in ([], ["--read-data"]):
        proc = run_ckpt("verify", *extra, "--json", tmp_path / "x.ckpt")
        assert proc.returncode == ExitCode.CORRUPT, extra
        problems = json.loads(proc.stdout)["problems"]
        assert [(p["kind"], p["name"], p["checkpoints"]) for p in problems] == [("object", changed[0].hex(), [cid])]


@pytest.mark.parametrize("wrong", [0, 1], ids=["wrong-first", "wrong-second"])
def test_copy_refuses_an_object_named_with_two_lengths(tmp_path: Path, lying_tree: Lying, wrong: int) -> None:
    """`ckpt copy` checks the length of each object against every node of the checkpoint
    that names it, as verify does, and says so in verify's words."""
    calls, changed = lying_tree
    store = ckptcli.init_store(tmp_path / "store")
    calls.append(wrong)
    cid = take(store, {"memory": {"blob": DATA}, "plan": [DATA]}, subject="agent:a").hex
    calls.clear()
    ckptcli.init_store(tmp_path / "dst")
    proc = run_ckpt("copy", tmp_path / "store", tmp_path / "dst", cid)
    assert proc.returncode == ExitCode.CORRUPT
    size = len(store.get(changed[0]))
    assert f"object {changed[0].hex()[:12]} holds {size} bytes, its tree node says {size + 7}" in proc.stderr.decode()
    assert not ckptcli.open_store(tmp_path / "dst").manifest_ids()


def _two_takes(tmp_path: Path, lying_tree: Lying, bad_first: bool) -> tuple[Store, bytes, bytes, bytes]:
    """(SRC, good, bad, the chunk both name): two checkpoints of other subjects whose trees
    name one chunk, the bad one's node with a wrong length; taken in the order asked."""
    calls, changed = lying_tree
    src = ckptcli.init_store(tmp_path / "src")
    if bad_first:
        calls.append(0)
        bad = take(src, {"memory": {"blob": DATA + b"!"}}, subject="agent:b").id
        calls.clear()
        good = take(src, {"memory": {"blob": DATA}}, subject="agent:a").id
    else:
        good = take(src, {"memory": {"blob": DATA}}, subject="agent:a").id
        calls.append(1)
        bad = take(src, {"memory": {"blob": DATA + b"!"}}, subject="agent:b").id
        calls.clear()
    assert _names(src, good, changed[0]) and _names(src, bad, changed[0])
    return src, good, bad, changed[0]


def _refused(proc: Any, src: Store, bad: bytes, oid: bytes) -> None:
    err = proc.stderr.decode()
    assert proc.returncode == ExitCode.CORRUPT, err
    size = len(src.get(oid))
    assert f"object {oid.hex()[:12]} holds {size} bytes, its tree node says {size + 7}" in err, err
    assert bad.hex()[:12] in err and "Traceback" not in err and err.count("\n") == 1, err


@pytest.mark.parametrize("bad_first", [False, True], ids=["good-first", "bad-first"])
def test_copy_refuses_a_checkpoint_naming_a_chunk_another_one_sent_with_a_wrong_length(
    tmp_path: Path, lying_tree: Lying, bad_first: bool
) -> None:
    """A whole-store copy: the chunk is sent once, for whichever checkpoint comes first;
    the bad checkpoint is refused either way, the good one copied before it kept."""
    src, good, bad, oid = _two_takes(tmp_path, lying_tree, bad_first)
    ckptcli.init_store(tmp_path / "dst")
    dry = run_ckpt("copy", "--dry-run", tmp_path / "src", tmp_path / "dst")
    _refused(dry, src, bad, oid)
    # a dry run copies nothing: its line does not speak of checkpoints copied or kept
    assert "copied before it" not in dry.stderr.decode() and "nothing is copied in a dry run" in dry.stderr.decode()
    real = run_ckpt("copy", tmp_path / "src", tmp_path / "dst")
    _refused(real, src, bad, oid)
    assert "the checkpoints copied before it are kept in DST" in real.stderr.decode()
    # oldest first, and the copy stops at the refused one: the good one is kept when it came before
    assert ckptcli.open_store(tmp_path / "dst").manifest_ids() == ([] if bad_first else [good])
    assert run_ckpt("verify", "--read-data", "--store", tmp_path / "dst").returncode == 0


def test_copy_refuses_a_checkpoint_naming_a_chunk_dst_has_with_a_wrong_length(tmp_path: Path, lying_tree: Lying) -> None:
    """The chunk is in DST already (copied with the good checkpoint): not sent, still checked."""
    src, good, bad, oid = _two_takes(tmp_path, lying_tree, bad_first=False)
    ckptcli.init_store(tmp_path / "dst")
    assert run_ckpt("copy", tmp_path / "src", tmp_path / "dst", good.hex()).returncode == 0
    for args in (["--dry-run", bad.hex()], [bad.hex()], []):
        _refused(run_ckpt("copy", tmp_path / "src", tmp_path / "dst", *args), src, bad, oid)
        assert ckptcli.open_store(tmp_path / "dst").manifest_ids() == [good]
    # a checkpoint file of it as SRC is checked the same way (its table's lengths)
    _export_anyway(src, bad.hex(), tmp_path / "bad.ckpt")
    _refused(run_ckpt("copy", tmp_path / "bad.ckpt", tmp_path / "dst"), src, bad, oid)
    assert ckptcli.open_store(tmp_path / "dst").manifest_ids() == [good]
    assert run_ckpt("verify", "--read-data", "--store", tmp_path / "dst").returncode == 0
    # and the library says the same
    with pytest.raises(CorruptError, match=oid.hex()[:12]):
        copy_checkpoints(src, ckptcli.open_store(tmp_path / "dst"), [bad.hex()])


@pytest.mark.parametrize("source", ["store", "file"])
def test_export_refuses_a_checkpoint_that_names_a_chunk_with_a_wrong_length(tmp_path: Path, lying_tree: Lying, source: str) -> None:
    """As copy, verify and import refuse it: export writes no file of it (exit 5)."""
    src, good, bad, oid = _two_takes(tmp_path, lying_tree, bad_first=False)
    if source == "file":  # a checkpoint file as the source of the export is checked the same way
        _export_anyway(src, bad.hex(), tmp_path / "bad.ckpt")
        args: list[Any] = [tmp_path / "bad.ckpt"]
    else:
        args = [bad.hex(), "--store", tmp_path / "src"]
    proc = run_ckpt("export", *args, "-o", tmp_path / "out.ckpt")
    _refused(proc, src, bad, oid)
    assert "nothing was exported" in proc.stderr.decode() and "ckpt verify" in proc.stderr.decode()
    assert not (tmp_path / "out.ckpt").exists()
    assert run_ckpt("export", "-o", "-", *args).stdout == b""
    # the good checkpoint that names the same chunk rightly is exported
    assert run_ckpt("export", good.hex(), "-o", tmp_path / "good.ckpt", "--store", tmp_path / "src").returncode == 0
    assert run_ckpt("verify", "--read-data", tmp_path / "good.ckpt").returncode == 0

"""Reads that degrade instead of failing (issue 12): a damaged index file, a damaged ref
or a damaged manifest costs what it names, not the whole store; each is said once, on
stderr, as one warning line; and `ckpt repair` puts the store right again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint, take
from ckptcli.errors import CorruptError
from ckptcli.store.repository import Store
from tests.conftest import run_ckpt


def _state(i: int) -> dict[str, Any]:
    return {"memory": {"step": i, "notes": [f"note {j} of step {i} " * 4 for j in range(i % 7 + 1)]}, "plan": ["a", str(i)]}


def _build(root: Path, n: int = 12) -> tuple[Path, dict[str, dict[str, Any]]]:
    store = ckptcli.init_store(root / "store")
    states = {}
    for i in range(n):
        states[take(store, _state(i), subject="agent:a" if i % 3 else "workflow:w").hex] = _state(i)
    return root / "store", states


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    return _build(tmp_path_factory.mktemp("degrade"))


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(src, dst)
    return dst


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x5A
    path.write_bytes(bytes(data))


def _warnings(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines() if line.startswith("ckpt: warning:")]


# -- a damaged index file ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 5, -1])
def test_a_damaged_index_file_costs_nothing_every_checkpoint_restores(pristine: Any, tmp_path: Path, which: int) -> None:
    src, states = pristine
    store_dir = _copy(src, tmp_path)
    damaged = sorted((store_dir / "index").iterdir())[which]
    _flip(damaged, 40)
    st = Store.open(store_dir)
    seen: list[str] = []
    st.on_warning = seen.append
    for cid, state in states.items():
        assert open_checkpoint(cid, st).state() == state
    assert len(seen) == 1 and f"index/{damaged.name}" in seen[0] and "ckpt repair index" in seen[0], seen
    assert st.damaged_index.keys() == {f"index/{damaged.name}"}


def test_the_cli_restores_through_a_damaged_index_with_one_warning(pristine: Any, tmp_path: Path) -> None:
    src, states = pristine
    store_dir = _copy(src, tmp_path)
    for f in sorted((store_dir / "index").iterdir())[:3]:
        _flip(f, 7)
    last = list(states)[-1]
    proc = run_ckpt("restore", last, "-o", tmp_path / "out.json", "--store", store_dir)
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads((tmp_path / "out.json").read_text()) == states[last]
    warned = _warnings(proc.stderr)
    assert len(warned) == 1 and "(and 2 more)" in warned[0], proc.stderr.decode()
    assert b"Traceback" not in proc.stderr


def test_pack_tables_are_not_read_when_nothing_is_damaged(pristine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    src, states = pristine

    def refuse(self: Store, oid: bytes | None = None) -> None:
        raise AssertionError("a pack table was read in a store whose index is whole")

    monkeypatch.setattr(Store, "find_in_packs", refuse)
    st = Store.open(src)
    for cid, state in states.items():
        assert open_checkpoint(cid, st).state() == state
    assert st.warnings == []


def test_a_missing_object_is_still_refused(tmp_path: Path) -> None:
    st = ckptcli.init_store(tmp_path / "store")
    cid = take(st, {"memory": {"big": [f"item {i}" * 50 for i in range(2000)]}}, subject="agent:a").hex
    for f in [*(tmp_path / "store" / "index").iterdir(), *(tmp_path / "store" / "packs").rglob("*")]:
        if f.is_file():
            f.unlink()
    with pytest.raises(CorruptError, match="missing from the store"):
        open_checkpoint(cid, Store.open(tmp_path / "store")).state()


def test_prune_with_a_damaged_index_keeps_what_survivors_need(pristine: Any, tmp_path: Path) -> None:
    src, states = pristine
    store_dir = _copy(src, tmp_path)
    for f in sorted((store_dir / "index").iterdir()):
        _flip(f, 40)  # every index file: only the pack tables know where anything is
    st = Store.open(store_dir)
    st.on_warning = None
    from ckptcli.prune import Policy, prune

    report = prune(st, Policy(keep_last=2))
    kept = {d.id.hex() for d in report.kept}
    fresh = Store.open(store_dir)
    for cid in kept:
        assert open_checkpoint(cid, fresh).state() == states[cid]
    assert fresh.warnings == [] and ckptcli.verify(fresh, read_data=True).ok


# -- a damaged ref ----------------------------------------------------------------------------------


def test_a_damaged_tag_does_not_stop_latest_refs_or_tag(pristine: Any, tmp_path: Path) -> None:
    src, states = pristine
    store_dir = _copy(src, tmp_path)
    ids = list(states)
    assert run_ckpt("tag", "good", ids[0], "--store", store_dir).returncode == 0
    assert run_ckpt("tag", "bad", ids[1], "--store", store_dir).returncode == 0
    _flip(store_dir / "refs" / "tags" / "bad", 20)

    proc = run_ckpt("restore", "latest", "-o", tmp_path / "out.json", "--store", store_dir)
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads((tmp_path / "out.json").read_text()) == states[ids[-1]]
    assert proc.stderr.decode().strip() == ""  # `latest` never read the tag

    proc = run_ckpt("refs", "--json", "--store", store_dir)
    assert proc.returncode == 0, proc.stderr.decode()
    listed = json.loads(proc.stdout)
    assert listed["tags/good"] == ids[0] and "tags/bad" not in listed
    warned = _warnings(proc.stderr)
    assert len(warned) == 1 and "refs/tags/bad" in warned[0]

    proc = run_ckpt("tag", "--store", store_dir)
    assert proc.returncode == 0 and proc.stdout.decode().split() == ["good", ids[0][:12]], proc.stderr.decode()
    assert len(_warnings(proc.stderr)) == 1

    proc = run_ckpt("tag", "newer", "--store", store_dir)  # tags latest
    assert proc.returncode == 0, proc.stderr.decode()

    proc = run_ckpt("restore", "bad", "-o", tmp_path / "x.json", "--store", store_dir)  # the damaged one itself: refused
    assert proc.returncode == 5 and b"Traceback" not in proc.stderr

    proc = run_ckpt("prune", "--keep-last", "1", "--store", store_dir)  # the damaged tag may protect a checkpoint
    assert proc.returncode == 5, proc.stderr.decode()

"""Reads that degrade instead of failing (issue 12): a damaged index file, a damaged ref
or a damaged manifest costs what it names, not the whole store; each is said once, on
stderr, as one warning line; and `ckpt repair` puts the store right again."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint, take
from ckptcli.errors import CorruptError
from ckptcli.format.manifest import Subject
from ckptcli.store.repository import Store
from tests.conftest import run_ckpt
from tests.helpers_faults import copy_store, flip_byte


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


def _warnings(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines() if line.startswith("ckpt: warning:")]


# -- a damaged index file ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 5, -1])
def test_a_damaged_index_file_costs_nothing_every_checkpoint_restores(pristine: Any, tmp_path: Path, which: int) -> None:
    src, states = pristine
    store_dir = copy_store(src, tmp_path)
    damaged = sorted((store_dir / "index").iterdir())[which]
    flip_byte(damaged, 40)
    st = Store.open(store_dir)
    seen: list[str] = []
    st.on_warning = seen.append
    for cid, state in states.items():
        assert open_checkpoint(cid, st).state() == state
    assert len(seen) == 1 and f"index/{damaged.name}" in seen[0] and "ckpt repair index" in seen[0], seen
    assert st.damaged_index.keys() == {f"index/{damaged.name}"}


def test_the_cli_restores_through_a_damaged_index_with_one_warning(pristine: Any, tmp_path: Path) -> None:
    src, states = pristine
    store_dir = copy_store(src, tmp_path)
    for f in sorted((store_dir / "index").iterdir())[:3]:
        flip_byte(f, 7)
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
    store_dir = copy_store(src, tmp_path)
    for f in sorted((store_dir / "index").iterdir()):
        flip_byte(f, 40)  # every index file: only the pack tables know where anything is
    st = Store.open(store_dir)
    st.on_warning = None
    from ckptcli.store.prune import Policy, prune

    report = prune(st, Policy(keep_last=2))
    kept = {d.id.hex() for d in report.kept}
    fresh = Store.open(store_dir)
    for cid in kept:
        assert open_checkpoint(cid, fresh).state() == states[cid]
    assert fresh.warnings == [] and ckptcli.verify(fresh, read_data=True).ok


# -- a damaged ref ----------------------------------------------------------------------------------


def test_a_damaged_tag_does_not_stop_latest_refs_or_tag(pristine: Any, tmp_path: Path) -> None:
    src, states = pristine
    store_dir = copy_store(src, tmp_path)
    ids = list(states)
    assert run_ckpt("tag", "good", ids[0], "--store", store_dir).returncode == 0
    assert run_ckpt("tag", "bad", ids[1], "--store", store_dir).returncode == 0
    flip_byte(store_dir / "refs" / "tags" / "bad", 20)

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


# -- ckpt repair index --------------------------------------------------------------------------------


def _restores(store_dir: Path, states: dict[str, dict[str, Any]]) -> Store:
    st = Store.open(store_dir)
    for cid, state in states.items():
        assert open_checkpoint(cid, st).state() == state
    return st


def test_repair_index_rebuilds_one_index_from_the_packs(pristine: Any, tmp_path: Path) -> None:
    from ckptcli.store.repair import repair_index

    src, states = pristine
    store_dir = copy_store(src, tmp_path)
    damaged = sorted((store_dir / "index").iterdir())[2]
    flip_byte(damaged, 40)
    before = sorted(p.name for p in (store_dir / "index").iterdir())
    dry = repair_index(Store.open(store_dir), dry_run=True)
    assert dry.damaged_index == [f"index/{damaged.name}"] and not dry.damaged_packs
    assert sorted(p.name for p in (store_dir / "index").iterdir()) == before  # nothing changed
    rep = repair_index(Store.open(store_dir))
    assert rep.index_files_before == len(before) and rep.index_files_after == 1 and rep.objects == dry.objects
    st = _restores(store_dir, states)
    assert st.warnings == [] and ckptcli.verify(st, read_data=True).ok


def test_repair_index_cli_reports_and_lists_a_damaged_pack(pristine: Any, tmp_path: Path) -> None:
    src, states = pristine
    store_dir = copy_store(src, tmp_path)
    flip_byte(sorted((store_dir / "index").iterdir())[0], 40)
    proc = run_ckpt("repair", "index", "--json", "--store", store_dir)
    assert proc.returncode == 0, proc.stderr.decode()
    assert len(json.loads(proc.stdout)["damaged_index"]) == 1 and proc.stderr == b""
    pack = max((p for p in (store_dir / "packs").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    flip_byte(pack, -2)  # the trailer: this pack's own table is unreadable now
    proc = run_ckpt("repair", "index", "--store", store_dir)
    assert proc.returncode == 5, proc.stderr.decode()
    assert f"damaged pack packs/{pack.parent.name}/{pack.name}" in proc.stdout.decode()
    assert proc.stderr.decode().startswith("ckpt: error: 1 pack(s) are damaged") and b"Traceback" not in proc.stderr
    # the readable index named its objects: they stay named, so nothing was lost by repairing
    _restores(store_dir, states)


@pytest.mark.parametrize("point", ["commit_temp:1:before", "commit_temp:1:after", "delete:1:after", "delete:5:after"])
def test_repair_index_killed_anywhere_leaves_a_readable_store(pristine: Any, tmp_path: Path, point: str) -> None:
    import subprocess

    from tests.helpers_faults import child_env, fault_argv

    src, states = pristine
    store_dir = copy_store(src, tmp_path)
    flip_byte(sorted((store_dir / "index").iterdir())[1], 40)
    p = subprocess.run(
        fault_argv("repair", "index", "--store", store_dir), env=child_env({"CKPT_FAULT": point}), capture_output=True, timeout=120
    )
    assert p.returncode == -9, (p.returncode, p.stderr.decode())  # killed at that point
    st = _restores(store_dir, states)  # readable whatever the point
    st.on_warning = None
    done = run_ckpt("repair", "index", "--store", store_dir)
    assert done.returncode == 0, done.stderr.decode()
    assert len(list((store_dir / "index").iterdir())) == 1
    st = _restores(store_dir, states)
    assert st.warnings == [] and ckptcli.verify(st, read_data=True).ok


# -- ls and a damaged manifest ----------------------------------------------------------------------


def test_ls_names_a_damaged_manifest_and_lists_the_rest(pristine: Any, tmp_path: Path) -> None:
    src, states = pristine
    store_dir = copy_store(src, tmp_path)
    (store_dir / "cache" / "catalog").unlink(missing_ok=True)
    bad = list(states)[4]
    flip_byte(store_dir / "manifests" / bad, 30)
    proc = run_ckpt("ls", "--json", "--store", store_dir)
    assert proc.returncode == 0, proc.stderr.decode()
    assert {r["id"] for r in json.loads(proc.stdout)} == set(states) - {bad}
    warned = _warnings(proc.stderr)
    assert len(warned) == 1 and bad[:12] in warned[0] and "ckpt verify" in warned[0], proc.stderr.decode()


# -- dangling heads: a take killed between its manifest and its ref --------------------------------------


def _take_without_ref(st: Store, state: Any, subject: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Exactly the state a kill after the manifest and before the ref leaves."""
    with monkeypatch.context() as m:
        m.setattr(Store, "advance_latest", lambda *a, **k: None)
        return take(st, state, subject=subject).hex


def test_take_continues_from_a_dangling_head_and_verify_notes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = ckptcli.init_store(tmp_path / "store")
    c1 = take(st, _state(1), subject="agent:a").hex
    take(st, _state(50), subject="agent:other")
    c2 = _take_without_ref(st, _state(2), "agent:a", monkeypatch)
    fresh = Store.open(tmp_path / "store")
    assert fresh.resolve("agent:a").hex() == c1
    rep = ckptcli.verify(fresh)
    assert rep.ok and len(rep.notes) == 1 and c2[:12] in rep.notes[0] and c1[:12] in rep.notes[0], rep.notes
    c3 = take(fresh, _state(3), subject="agent:a")
    assert [p.hex() for p in c3.manifest.parents] == [c2]  # not a fork from c1
    assert fresh.resolve("agent:a").hex() == c3.hex
    assert ckptcli.verify(Store.open(tmp_path / "store")).notes == []


def test_a_take_sigkilled_between_manifest_and_ref(tmp_path: Path) -> None:
    import subprocess

    from tests.helpers_faults import child_env, fault_argv

    store_dir = tmp_path / "store"
    st = ckptcli.init_store(store_dir)
    c1 = take(st, _state(1), subject="agent:a").hex
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(_state(2)))
    trace = tmp_path / "trace"
    argv = fault_argv("take", doc, "-S", "agent:a", "--store", store_dir)
    traced = subprocess.run(argv, env=child_env({"CKPT_FAULT_TRACE": str(trace)}), capture_output=True, timeout=120)
    assert traced.returncode == 0, traced.stderr.decode()
    commits = [line.split()[1] for line in trace.read_text().splitlines() if line.startswith("commit_temp")]
    n = next(i for i, path in enumerate(commits, 1) if path.startswith("manifests/"))
    assert commits[n].startswith("refs/latest/")  # the ref is the next commit after the manifest
    take(Store.open(store_dir), _state(9), subject="agent:a")  # the traced take's checkpoint is latest now; go on from another
    head = Store.open(store_dir).resolve("agent:a").hex()
    doc.write_text(json.dumps(_state(3)))
    p = subprocess.run(argv, env=child_env({"CKPT_FAULT": f"commit_temp:{n}:after"}), capture_output=True, timeout=120)
    assert p.returncode == -9, p.stderr.decode()
    st = Store.open(store_dir)
    assert st.resolve("agent:a").hex() == head  # latest lags
    killed = [c.hex() for c in st.manifest_ids() if st.manifest(c).parents and st.manifest(c).parents[0].hex() == head]
    assert len(killed) == 1
    proc = run_ckpt("verify", "--json", "--store", store_dir)
    assert proc.returncode == 0 and killed[0][:12] in json.loads(proc.stdout)["notes"][0], proc.stdout.decode()
    doc.write_text(json.dumps(_state(4)))
    proc = run_ckpt("take", doc, "-S", "agent:a", "--json", "--store", store_dir)
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout)["parents"] == killed
    assert c1 != killed[0]


def test_repair_refs_moves_latest_to_the_newest_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = ckptcli.init_store(tmp_path / "store")
    c1 = take(st, _state(1), subject="agent:a").hex
    c2 = _take_without_ref(st, _state(2), "agent:a", monkeypatch)
    other = take(st, _state(5), subject="workflow:w").hex
    proc = run_ckpt("repair", "refs", "--dry-run", "--json", "--store", tmp_path / "store")
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout)["moved"] == {"latest/agent/a": {"from": c1, "to": c2}}
    assert Store.open(tmp_path / "store").resolve("agent:a").hex() == c1
    proc = run_ckpt("repair", "refs", "--store", tmp_path / "store")
    assert proc.returncode == 0 and "moved latest/agent/a" in proc.stdout.decode(), proc.stderr.decode()
    fresh = Store.open(tmp_path / "store")
    assert fresh.resolve("agent:a").hex() == c2 and fresh.resolve("workflow:w").hex() == other
    assert ckptcli.verify(fresh).notes == []


def test_finding_the_head_reads_no_manifest_list_however_many_subjects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the dangling-head check is O(1): the take's hint in cache/heads, never a scan of
    # every manifest (which grew with the store: 27 ms per take at 3,000 checkpoints)
    st = ckptcli.init_store(tmp_path / "store")
    for i in range(6):
        take(st, _state(i), subject=f"agent:s{i % 3}")
    c = _take_without_ref(st, _state(7), "agent:s0", monkeypatch)
    take(st, _state(8), subject="agent:s1")  # another subject commits after the kill
    listed: list[str] = []
    real_scandir, real_listdir = os.scandir, os.listdir

    def scandir(path: Any = ".") -> Any:
        listed.append(str(path))
        return real_scandir(path)

    def listdir(path: Any = ".") -> Any:
        listed.append(str(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "listdir", listdir)
    fresh = Store.open(tmp_path / "store")
    assert fresh.head(Subject.parse("agent:s0")).hex() == c  # the dangling one, found
    assert fresh.head(Subject.parse("agent:s1")) == fresh.resolve("agent:s1")
    assert not [p for p in listed if p.rstrip("/").endswith("manifests")], listed


def test_a_fifo_in_place_of_a_store_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    # a FIFO would block every reader forever (outside audit): it is damage, said once
    st = ckptcli.init_store(tmp_path / "store")
    cid = take(st, _state(1), subject="agent:a").hex
    index = next((tmp_path / "store" / "index").iterdir())
    index.unlink()
    os.mkfifo(index)
    proc = run_ckpt("restore", cid, "--store", tmp_path / "store")  # run_ckpt's timeout fails a hang
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout) == _state(1)
    warnings = proc.stderr.decode().splitlines()
    assert len(warnings) == 1 and "is not a regular file" in warnings[0] and index.name[:12] in warnings[0], warnings
    proc = run_ckpt("verify", "--store", tmp_path / "store")
    assert proc.returncode == 5 and index.name[:12] in proc.stdout.decode() + proc.stderr.decode()


@pytest.mark.parametrize("damage", ["flipped", "a directory"])
def test_a_damaged_latest_ref_still_resolves_latest_and_the_subject(tmp_path: Path, damage: str) -> None:
    # the only subject's latest ref damaged: `latest` said "no checkpoints yet" and
    # KIND:NAME refused (outside audit); both are found from the manifests, said once
    st = ckptcli.init_store(tmp_path / "store")
    take(st, _state(1), subject="agent:bot")
    c2 = take(st, _state(2), subject="agent:bot").hex
    ref = tmp_path / "store" / "refs" / "latest" / "agent" / "bot"
    if damage == "flipped":
        flip_byte(ref, 20)
    else:
        ref.unlink()
        ref.mkdir()
    for name in ("latest", "agent:bot"):
        proc = run_ckpt("show", name, "--json", "--store", tmp_path / "store")
        assert proc.returncode == 0, proc.stderr.decode()
        assert json.loads(proc.stdout)["id"] == c2
        assert len(_warnings(proc.stderr)) == 1 and "repair refs" in proc.stderr.decode(), proc.stderr.decode()
    assert run_ckpt("show", "agent:nobody", "--store", tmp_path / "store").returncode == 3


def test_a_take_with_a_damaged_latest_ref_succeeds_and_mends_it(tmp_path: Path) -> None:
    # the take chose its parent around the damaged ref, then failed to move it (exit 5
    # after its manifest was committed; outside audit)
    st = ckptcli.init_store(tmp_path / "store")
    c1 = take(st, _state(1), subject="agent:bot").hex
    flip_byte(tmp_path / "store" / "refs" / "latest" / "agent" / "bot", 10)
    doc = tmp_path / "s.json"
    doc.write_text(json.dumps(_state(2)))
    proc = run_ckpt("take", doc, "-S", "agent:bot", "--json", "--store", tmp_path / "store")
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    assert out["parents"] == [c1] and len(_warnings(proc.stderr)) == 1
    fresh = Store.open(tmp_path / "store")
    assert fresh.resolve("agent:bot").hex() == out["id"] and fresh.warnings == []

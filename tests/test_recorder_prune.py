"""A Recorder in one process and `ckpt prune` in another: a prune that removes the only
checkpoints holding a value's objects, while a recorder that took them lives on, loses
nothing the recorder's next checkpoints name.

Why the recorder needs no writer mark (`Backend.mark_writer`, which the LangGraph saver
holds): it never names an object it does not write in the same take. Each checkpoint is
api.take of its live state, encoded again from Python values (no `carry`, no encoded
value kept from an earlier take), inside the store lock held shared, whose Transaction
re-reads the index first; a prune holds that lock exclusively and deletes the index
files it replaces, so a take after it sees the objects gone and writes them again."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import ckptcli
from ckptcli.api import open_checkpoint, open_store, verify
from tests.conftest import REPO
from tests.helpers_faults import child_env, ckpt_argv

_RECORDER = r"""
import json, random, sys
from ckptcli.api import open_store
from ckptcli.history.recorder import Durability, Recorder

big = random.Random(7).randbytes(150_000).hex()  # 300 KB: chunked into objects of its own
store = open_store(sys.argv[1])
rec = Recorder.open(store, "agent:r", sys.argv[2], state={"memory": {"big": big}}, durability=Durability(batch_size=1))

def say(**kw):
    print(json.dumps(kw), flush=True)

say(first=rec.base)
for line in sys.stdin:
    if line.strip() == "drop":  # the state no longer holds big: a checkpoint with it, one without
        rec.append("memory.set", path=["big"], value="small")
        a = rec.checkpoint("big dropped").hex
        rec.append("memory.set", path=["note"], value="n")
        say(ids=[a, rec.checkpoint("without big").hex])
    elif line.strip() == "again":  # the same value again, while the prune has removed its objects
        rec.append("memory.set", path=["big"], value=big)
        a = rec.checkpoint("big in the tail").hex
        rec.append("memory.set", path=["note"], value="m")
        say(ids=[a, rec.checkpoint("big in the snapshot").hex])
    elif line.strip() == "quit":
        rec.close()
        break
"""


def test_a_prune_between_a_recorders_checkpoints_loses_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ckptcli.init_store(store)
    argv = [sys.executable, "-c", _RECORDER, str(store), str(tmp_path / "r.journal")]
    with subprocess.Popen(
        argv, cwd=REPO, env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as child:
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None

        def ask(cmd: str) -> Any:
            assert child.stdin is not None and child.stdout is not None and child.stderr is not None
            child.stdin.write(cmd + "\n")
            child.stdin.flush()
            line = child.stdout.readline()
            assert line, child.stderr.read()
            return json.loads(line)

        try:
            line = child.stdout.readline()
            assert line, child.stderr.read()
            first = json.loads(line)["first"]
            with_big, without = ask("drop")["ids"]
            # another process prunes all but the newest: the only checkpoints holding big
            # go, and with them its objects (the recorder, alive, is no writer prune waits for)
            argv = ckpt_argv("prune", "--keep-last", "1", "--max-unused", "0", "--store", store, "--json")
            p = subprocess.run(argv, env=child_env(), capture_output=True, text=True)
            assert p.returncode == 0, p.stderr
            rep = json.loads(p.stdout)
            assert {c["id"] for c in rep["checkpoints"] if not c["keep"]} == {first, with_big}
            assert rep["gc"]["writers_alive"] == 0 and rep["gc"]["objects_removed"] >= 5  # big's chunks were deleted
            in_tail, in_snapshot = ask("again")["ids"]
            child.stdin.write("quit\n")
            child.stdin.flush()
            assert child.wait(timeout=60) == 0, child.stderr.read()
        finally:
            if child.poll() is None:
                child.kill()
    st = open_store(store)
    rep_v = verify(st, read_data=True)
    assert rep_v.ok, rep_v.to_dict()  # every object the new checkpoints name is there
    big = random.Random(7).randbytes(150_000).hex()
    assert open_checkpoint(in_tail, open_store(store)).state()["events"][0]["value"] == big
    assert open_checkpoint(in_snapshot, open_store(store)).state()["memory"]["big"] == big
    assert open_checkpoint(in_tail, st).manifest.parents == [bytes.fromhex(without)]


def test_a_recorder_whose_checkpoint_was_pruned_goes_on_with_a_new_history(tmp_path: Path, cli: Any) -> None:
    """A policy that keeps no latest (here: only a tag) prunes the checkpoint a live
    recorder builds on: its next checkpoint has no parent (a warning says why), and its
    state is whole, as the snapshot and tail of a recorded checkpoint always are."""
    from ckptcli.history.recorder import Durability, Recorder
    from ckptcli.history.stateat import state_at

    store_dir = tmp_path / "store"
    ckptcli.init_store(store_dir)
    store = open_store(store_dir)
    rec = Recorder.open(store, "agent:r", tmp_path / "r.journal", state={"memory": {"n": 0}}, durability=Durability(batch_size=1))
    try:
        rec.append("memory.set", path=["n"], value=1)
        first = rec.checkpoint("one").hex
        other = ckptcli.take(store, {"memory": {"kept": True}}, subject="agent:other")
        assert cli("tag", "keep", other.hex, "--store", store_dir).code == 0
        res = cli("prune", "--keep-tag", "keep", "--allow-remove-all", "--store", store_dir)
        assert res.code == 0, res.err
        assert first not in {c.hex() for c in open_store(store_dir).manifest_ids()}
        rec.append("memory.set", path=["n"], value=2)
        second = rec.checkpoint("two")
    finally:
        rec.close()
    ck = open_checkpoint(second.hex, open_store(store_dir))
    assert ck.manifest.parents == []
    assert state_at(ck).section("memory") == {"n": 2}
    assert any("was pruned meanwhile" in w for w in store.warnings)

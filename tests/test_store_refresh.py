"""A long-lived Store finds objects other processes wrote after it read the index,
through their new index files, without reopening and without reading packs whole, and
objects a prune moved to another pack meanwhile; a pack gone from under it is damage."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from ckptcli.errors import CorruptError
from ckptcli.history.recorder import Recorder
from ckptcli.store.layout import pack_path

FORK = """
import sys
from ckptcli import api
st = api.open_store(sys.argv[1])
r = api.take(st, {"memory": {"n": 2, "big": "y" * 200000}, "plan": [], "tools": [], "events": []}, subject="agent:fork", parents=[])
print(r.hex)
"""


def test_recorder_opens_a_fork_another_process_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = api.init_store(tmp_path / "store")
    api.take(st, {"memory": {"n": 1, "big": "x" * 200000}}, subject="agent:main")
    assert st.index()  # read now: the fork below is written after
    out = subprocess.run([sys.executable, "-c", FORK, str(tmp_path / "store")], capture_output=True, text=True, timeout=120, check=True)
    fork = out.stdout.strip()

    reads: list[str] = []
    real_read = st.backend.read

    def read(path: str) -> Any:
        reads.append(path)
        return real_read(path)

    monkeypatch.setattr(st.backend, "read", read)
    rec = Recorder.open(st, "agent:fork", tmp_path / "j.journal", base=fork)
    try:
        assert rec.state["memory"]["n"] == 2 and len(rec.state["memory"]["big"]) == 200000
    finally:
        rec.close()
    assert not [p for p in reads if p.startswith("packs/")], f"packs read whole instead of the new index file: {reads}"
    assert [p for p in reads if p.startswith("index/")], reads


def test_an_object_a_prune_moved_to_another_pack_is_read_from_there(tmp_path: Path) -> None:
    # a reader that read the index before a prune rewrote a pack finds the object where
    # the prune's index puts it now, not an error saying that the store is damaged
    store, ws = tmp_path / "store", tmp_path / "ws"
    ws.mkdir()
    (ws / "a").write_bytes(os.urandom(20000))
    (ws / "b").write_bytes(os.urandom(20000))
    (tmp_path / "s.json").write_text('{"n": 1}')

    def ckpt(*args: str) -> None:
        r = subprocess.run([sys.executable, "-m", "ckptcli", "--store", str(store), *args], capture_output=True, timeout=120, cwd=tmp_path)
        assert r.returncode == 0, r.stderr

    assert api.init_store(store)
    ckpt("take", "s.json", "-S", "agent:a", "--blob", "w=ws")
    (ws / "b").unlink()
    ckpt("take", "s.json", "-S", "agent:a", "--blob", "w=ws")
    st = api.open_store(store)
    before = dict(st.index().items())
    ckpt("prune", "--keep-last", "1", "--max-unused", "0")  # the first pack: a kept, b dropped
    after = api.open_store(store).index()
    moved = [oid for oid, e in before.items() if not (store / pack_path(e.pack)).exists() and oid in after]
    assert moved, "the prune moved no object: nothing is tested"
    for oid in moved:
        assert hashlib.sha256(st.get(oid)).digest() == oid and st.index()[oid].pack != before[oid].pack


def test_a_pack_missing_from_the_store_is_damage_naming_it(tmp_path: Path) -> None:
    st = api.init_store(tmp_path / "store")
    api.take(st, {"memory": {"n": 1, "big": "x" * 200000}}, subject="agent:a")
    oid, entry = next(iter(st.index().items()))
    (tmp_path / "store" / pack_path(entry.pack)).unlink()
    with pytest.raises(CorruptError) as exc:
        st.get(oid)
    assert f"pack {pack_path(entry.pack)} is missing" in exc.value.message and "damaged" in exc.value.message
    assert "ckpt verify" in (exc.value.hint or "")

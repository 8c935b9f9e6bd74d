"""The per-take work of a local store and of the take cache, made cheaper for the library
take of a growing agent state (docs/performance.md, "The library take of a growing agent
state"): what each shortcut must still do. The take cache's own contract (byte-identical
stores, whatever the caller did to the state in place) is tests/test_take_cache.py's."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli import writer
from ckptcli.api import open_checkpoint, states_equal, take, verify
from ckptcli.errors import StoreIOError, UnsafePathError
from ckptcli.format.manifest import Subject
from ckptcli.store import layout
from ckptcli.store.backend import LocalBackend
from ckptcli.store.repository import Store


def _history(n: int, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    return {
        "memory": {"messages": [{"role": "user", "content": rng.randbytes(40).hex(), "n": i} for i in range(n)]},
        "tools": [{"id": f"call-{i}", "t": i * 0.5} for i in range(n)],
    }


def _temps(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root / layout.TMP) if not n.startswith("."))


# -- the local backend's small files ---------------------------------------------------------------


def test_write_atomic_and_read_round_trip_files_of_every_size(tmp_path: Path) -> None:
    """Written through a raw descriptor, read by size (no buffer of a record's cap): a
    file of any size comes back whole, an empty one too, and nothing stays in tmp/."""
    store = ckptcli.init_store(tmp_path / "s")
    backend = store.backend
    assert isinstance(backend, LocalBackend)
    for size in (0, 1, 4095, 65536, 65537, 3 * 65536 + 5, 1 << 20):
        data = random.Random(size).randbytes(size)
        backend.write_atomic(f"{layout.CACHE}/blob-{size}", data)
        assert backend.read(f"{layout.CACHE}/blob-{size}") == data
        assert backend.exists(f"{layout.CACHE}/blob-{size}")
    assert not backend.exists(f"{layout.CACHE}/none")
    assert not backend.exists(layout.CACHE)  # a directory is no file
    assert _temps(tmp_path / "s") == []


def test_a_write_that_fails_leaves_no_temporary_file(tmp_path: Path) -> None:
    """A write whose directory cannot be made (a file is in its way) says so in one
    line and takes its temporary file with it; one below a symbolic link is refused."""
    store = ckptcli.init_store(tmp_path / "s")
    backend = store.backend
    assert isinstance(backend, LocalBackend)
    (tmp_path / "s" / layout.CACHE).mkdir(exist_ok=True)
    (tmp_path / "s" / layout.CACHE / "plain").write_bytes(b"x")
    with pytest.raises(StoreIOError, match=r"cannot write .*plain/x"):
        backend.write_atomic(f"{layout.CACHE}/plain/x", b"data")
    with pytest.raises(StoreIOError, match=r"cannot write .*plain/y"):
        backend.write_hint(f"{layout.CACHE}/plain/y", b"data")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "s" / layout.CACHE / "linked")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        backend.write_atomic(f"{layout.CACHE}/linked/x", b"data")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        backend.write_hint(f"{layout.CACHE}/linked/x", b"data")
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert _temps(tmp_path / "s") == []


def test_a_store_at_a_relative_path_makes_its_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Directories made on strings: a store named by a relative path (its root's parent
    is the working directory, "") takes, and each new pack directory is made."""
    monkeypatch.chdir(tmp_path)
    store = ckptcli.init_store("rel")
    assert isinstance(store.backend, LocalBackend) and not store.backend.root.is_absolute()
    for i in range(5):
        state = _history(20 + i, seed=i)
        res = take(store, state, subject="agent:a")
        assert states_equal(open_checkpoint(res.id.hex(), store).state(), state)
    assert verify(store, read_data=True).ok
    assert _temps(tmp_path / "rel") == []


def test_the_reflog_names_the_command_line_of_each_take(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line a record names is kept between takes only while argv is the
    same: a caller that changes argv (or a test runner) is named as it is now."""
    store = ckptcli.init_store(tmp_path / "s")
    monkeypatch.setattr(sys, "argv", ["agent.py", "--first"])
    take(store, {"memory": {"n": 1}}, subject="agent:a")
    monkeypatch.setattr(sys, "argv", ["agent.py", "--second", "--password=hunter2"])
    take(store, {"memory": {"n": 2}}, subject="agent:a")
    newest, older = store.ref_log(store.latest_ref(Subject.parse("agent:a")))[:2]
    assert older.command == "agent.py --first"
    assert "--second" in newest.command and "hunter2" not in newest.command


# -- the take cache's packer -------------------------------------------------------------------------


def _subject_cache(store: Store, subject: str) -> Any:
    return writer._CACHES[store].subjects[subject]


def test_the_packer_buffer_is_counted_and_let_go_after_a_list_too_large_to_keep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The subject's packer keeps its buffer between takes (no fresh pages a take): the
    cache's bound counts it, and it goes once a list too large to keep was packed."""
    store = ckptcli.init_store(tmp_path / "s")
    take(store, _history(40), subject="agent:a")
    sc = _subject_cache(store, "agent:a")
    biggest = max(len(r.packed) for r in sc.lists.values())
    assert sc.peak > biggest
    assert sc.cost == sum(r.cost for r in sc.lists.values()) + sc.peak
    packer = sc.packer
    take(store, _history(41), subject="agent:a")
    assert sc.packer is packer  # kept
    monkeypatch.setattr(writer, "CACHE_RECORD_BYTES", biggest // 2)
    state = _history(42)
    res = take(store, state, subject="agent:a")
    assert sc.packer is not packer and sc.peak == 0  # let go with the lists it could not keep
    assert states_equal(open_checkpoint(res.id.hex(), store).state(), state)


def test_an_appended_snapshot_is_the_list_as_packed_now(tmp_path: Path) -> None:
    """An append extends the snapshot by the new items only: it is then exactly the list
    packed whole, so the next take's comparison sees an edit made in place before it."""
    from ckptcli.format.ev import array_header
    from ckptcli.format.takecache import _PACK

    store = ckptcli.init_store(tmp_path / "s")
    state = _history(30)
    take(store, state, subject="agent:a")
    sc = _subject_cache(store, "agent:a")
    for i in range(3):
        state["tools"].append({"id": f"more-{i}", "t": -0.0})
        take(store, state, subject="agent:a")
        rec = sc.lists[("tools",)]
        whole = _PACK(state["tools"])
        assert bytes(rec.packed) == whole[len(array_header(len(state["tools"]))) :]
    state["tools"][-1]["t"] = 0.0  # equal, not the same: stored as it is now
    res = take(store, state, subject="agent:a")
    assert repr(open_checkpoint(res.id.hex(), store).state()["tools"][-1]["t"]) == "0.0"
    assert verify(store, read_data=True).ok

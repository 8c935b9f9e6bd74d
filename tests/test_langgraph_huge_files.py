"""Huge and forged files beside a store: a journal or a memory-store log of 1 GiB (sparse, so the
test costs no disk) is read by mapping it, not into memory.

Each case runs in a subprocess whose data segment (RLIMIT_DATA: the heap and private
memory, not the pages of a file mapped to read) is capped at 400 MiB: reading the file
whole, as recovery, `CkptStore` opening its log and `ckpt verify` did, needs 1 GiB and
fails. The pages of a mapped file are the page cache's, which the kernel can drop.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from ckptcli.adapters.langgraph import journal as langgraph_journal
from ckptcli.adapters.langgraph.journal import MAGIC, SYNC, frame
from ckptcli.adapters.langgraph.saver import CkptSaver
from ckptcli.adapters.langgraph.store import CkptStore
from ckptcli.adapters.langgraph.store_log import log_dir, log_name
from ckptcli.errors import CorruptError
from tests.langgraph_graphs import chat_builder, chat_message

REPO = Path(__file__).resolve().parent.parent
GIB = 1 << 30
DATA_LIMIT = 400 << 20


def _capped(code: str, *args: str) -> dict[str, object]:
    """Run `code` in a fresh interpreter whose data segment is capped; its JSON result."""
    prog = (
        f"import json, resource, sys\nresource.setrlimit(resource.RLIMIT_DATA, ({DATA_LIMIT}, {DATA_LIMIT}))\n"
        + code
        + "\nprint(json.dumps(out))"
    )
    r = subprocess.run([sys.executable, "-c", prog, *args], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    result: dict[str, object] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def test_recovery_maps_a_huge_orphan_journal(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    saver = CkptSaver.open(store, commit_interval=3600, seal_idle=0)
    chat_builder(2, words=4).compile(checkpointer=saver).invoke({"messages": [chat_message(0, 4)]}, {"configurable": {"thread_id": "t"}})
    saver.abandon()  # its journal left behind, as by a killed process
    (journal,) = (store / "langgraph").glob("*.journal")
    with open(journal, "r+b") as fh:
        fh.truncate(GIB)  # zeros after the records: the end of the journal, read past by mapping
    got = _capped(
        "from ckptcli.adapters.langgraph.saver import CkptSaver\n"
        "s = CkptSaver.open(sys.argv[1]); t = s.get_tuple({'configurable': {'thread_id': 't'}}); s.close()\n"
        "out = {'messages': len(t.checkpoint['channel_values']['messages'])}",
        str(store),
    )
    assert got["messages"] == 2  # the puts of the journal (nothing was committed) were recovered


def _store_with_a_huge_log(tmp_path: Path) -> Path:
    store = tmp_path / ".ckpt"
    with CkptStore.open(store) as s:
        s.put(("users", "u1"), "prefs", {"tone": "brief"})
    path = log_dir(store) / log_name(0)
    with open(path, "r+b") as fh:
        fh.truncate(GIB)
    return store


def test_the_memory_store_maps_a_huge_log(tmp_path: Path) -> None:
    store = _store_with_a_huge_log(tmp_path)
    got = _capped(
        "from ckptcli.adapters.langgraph.store import CkptStore\n"
        "with CkptStore.open(sys.argv[1]) as s:\n"
        "    out = {'value': s.get(('users', 'u1'), 'prefs').value}",
        str(store),
    )
    assert got["value"] == {"tone": "brief"}


def test_verify_maps_a_huge_memory_store_log(tmp_path: Path) -> None:
    store = _store_with_a_huge_log(tmp_path)
    got = _capped(
        "from ckptcli.adapters.langgraph.store_log import check_store_logs\n"
        "from pathlib import Path\n"
        "out = {'problems': [m for _p, m in check_store_logs(Path(sys.argv[1]))]}",
        str(store),
    )
    assert got["problems"] == []  # zeros after the last record: where a killed writer stopped, not damage


def _forged(start: int, size: int, tail: int) -> bytes:
    """`size` bytes of record headers (the first at offset `start` of the file), each
    declaring a record that runs to the file's end, `tail` bytes after them (a CRC that
    never checks): a reader that checked each in full did O(size^2) work."""
    head = struct.Struct("<4sII")
    n = size // head.size
    end = start + n * head.size + tail
    return b"".join(head.pack(SYNC, end - (start + i * head.size) - head.size, 0) for i in range(n))


def _crc_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen = [0]
    real = zlib.crc32

    def counting(data: Any, start: int = 0) -> int:
        seen[0] += len(data)
        return real(data, start)

    monkeypatch.setattr(zlib, "crc32", counting)
    return seen


@pytest.mark.parametrize("version", [1, 2])
def test_forged_record_headers_cost_linear_work_and_are_reported(monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """A journal of forged headers with one real record after them: the scan for it gives
    up after checking ~4x the file and reports the rest as a hole (it was > 60 s for 8 MiB)."""
    salt = b"s" * 8
    size = 256 * 1024
    good = frame({"op": "x"}, salt)
    if version == 2:
        first = MAGIC + salt + frame({"op": "first"}, salt)
        data = first + _forged(len(first), size, len(good)) + good
    else:  # version 1: a length and a CRC, no marker
        body = struct.pack("<II", size, 0) * (size // 8)
        data = b"CKPTLGJ1" + body
    seen = _crc_counted(monkeypatch)
    got = langgraph_journal.read_journal(data)
    assert seen[0] <= 5 * len(data) + (1 << 20), seen[0]
    assert got.holes and got.gave_up  # reported, not taken for the end of what was written
    assert got.holes[-1][0] + got.holes[-1][1] == len(data)


def test_records_before_forged_headers_are_not_counted_as_after_them(tmp_path: Path) -> None:
    """The hole a scan gives up in runs to the end: no record is after it. The records
    before it were counted as after it ("with 2 record(s) after them"), and recovery took
    them for records after damage."""
    from ckptcli.adapters.langgraph.journal import check_journals

    salt = b"s" * 8
    good = frame({"op": "x"}, salt)
    first = MAGIC + salt + frame({"op": "d", "k": []}, salt) + frame({"op": "d", "k": []}, salt)
    path = _orphan(tmp_path / ".ckpt", first + _forged(len(first), 256 * 1024, len(good)) + good)
    got = langgraph_journal.read_journal(path.read_bytes())
    assert got.gave_up and len(got.records) == 2 and got.holes[0][0] == len(first)
    assert got.records_after_holes == 0
    (msg,) = [m for p, m in check_journals(tmp_path / ".ckpt") if p == path]
    assert f"at offset {len(first)} with 0 record(s) after them" in msg, msg


def test_a_memory_store_log_of_forged_headers_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / ".ckpt"
    with CkptStore.open(store) as s:
        s.put(("users", "u1"), "prefs", {"tone": "brief"})
    path = log_dir(store) / log_name(0)
    data = path.read_bytes()
    salt = data[len(MAGIC) : len(MAGIC) + 8]
    good = frame({"op": "put", "items": []}, salt)
    path.write_bytes(data + _forged(len(data), 256 * 1024, len(good)) + good)
    seen = _crc_counted(monkeypatch)
    with pytest.raises(CorruptError, match="forged or damaged record headers"):
        CkptStore.open(store)
    assert seen[0] <= 6 * path.stat().st_size + (1 << 20), seen[0]


def _orphan(store: Path, body: bytes) -> Path:
    """A journal no saver holds, as a killed one leaves it."""
    CkptSaver.open(store).close()
    path = store / "langgraph" / "dead.journal"
    path.write_bytes(body)
    return path


def test_a_journal_record_with_a_huge_id_is_refused_in_one_line_and_verify_names_it(tmp_path: Path) -> None:
    """`bytes(2**50)` of a delete record's id: a raw MemoryError at every open, while verify said nothing."""
    from ckptcli.adapters.langgraph.journal import check_journals
    from ckptcli.errors import CorruptError

    salt = b"s" * 8
    path = _orphan(tmp_path / ".ckpt", MAGIC + salt + frame({"op": "d", "k": [], "ids": [2**50]}, salt))
    with pytest.raises(CorruptError, match="record 1 is malformed"):
        CkptSaver.open(tmp_path / ".ckpt")
    assert path.exists()
    assert any("record 1 is malformed" in msg for p, msg in check_journals(tmp_path / ".ckpt") if p == path)


def test_a_journal_of_a_newer_ckpt_is_refused_and_kept(tmp_path: Path) -> None:
    """It was deleted without a word: the puts in it lost."""
    from ckptcli.adapters.langgraph.journal import check_journals
    from ckptcli.errors import UnsupportedVersionError

    path = _orphan(tmp_path / ".ckpt", b"CKPTLGJ3" + b"s" * 8 + b"records of a format to come")
    with pytest.raises(UnsupportedVersionError, match="newer ckpt"):
        CkptSaver.open(tmp_path / ".ckpt")
    assert path.exists()
    assert any("newer ckpt" in msg for p, msg in check_journals(tmp_path / ".ckpt") if p == path)


def test_a_file_that_is_no_journal_is_kept_aside_not_deleted(tmp_path: Path) -> None:
    path = _orphan(tmp_path / ".ckpt", b"not a journal at all")
    saver = CkptSaver.open(tmp_path / ".ckpt")
    warnings = saver.store.warnings
    saver.close()
    assert not path.exists() and path.with_name(path.name + ".damaged").read_bytes() == b"not a journal at all"
    assert any("is not a journal" in w for w in warnings), warnings


def _append_to_log(store: Path, rec: dict[str, Any]) -> None:
    path = log_dir(store) / log_name(0)
    data = path.read_bytes()
    path.write_bytes(data + frame(rec, data[len(MAGIC) : len(MAGIC) + 8]))


def _item(key: str, *, ttl: Any = None, expires: Any = None, seq: int = 1) -> list[Any]:
    import msgpack

    return [["users", "u1"], key, msgpack.packb({"v": 1}), 1, 1, ttl, expires, seq, None]


def test_a_memory_with_an_absurd_ttl_is_refused_where_it_is_read_and_where_it_is_put(tmp_path: Path) -> None:
    """ttl=1e300 minutes, then a read that refreshes it: int(inf), a raw OverflowError at open."""
    from ckptcli.adapters.langgraph.store_log import check_store_logs
    from ckptcli.errors import InvalidInputError

    store = tmp_path / ".ckpt"
    with CkptStore.open(store) as s:
        s.put(("users", "u1"), "prefs", {"tone": "brief"})
        with pytest.raises(InvalidInputError, match="ttl must be"):
            s.put(("users", "u1"), "forever", {"x": 1}, ttl=1e300)
    _append_to_log(store, {"op": "put", "items": [_item("bad", ttl=1e300, expires=1)]})
    _append_to_log(store, {"op": "touch", "t": 5, "k": [[["users", "u1"], "bad"]]})
    with pytest.raises(CorruptError, match="ttl is not a number of minutes"):
        CkptStore.open(store)
    assert any("ttl is not a number of minutes" in msg for _p, msg in check_store_logs(store))


def test_a_sequence_number_at_its_limit_stops_puts_before_they_write_what_no_reader_reads(tmp_path: Path) -> None:
    """A record with seq 2**63-1 (allowed): the next put wrote seq 2**63, which every
    reader refuses, and the store no longer opened after an acknowledged put."""
    store = tmp_path / ".ckpt"
    with CkptStore.open(store) as s:
        s.put(("users", "u1"), "prefs", {"tone": "brief"})
    _append_to_log(store, {"op": "put", "items": [_item("last", seq=2**63 - 1)]})
    with CkptStore.open(store) as s, pytest.raises(CorruptError, match="sequence number"):
        s.put(("users", "u1"), "new", {"x": 1})
    with CkptStore.open(store) as s:  # nothing was written: it still opens
        assert s.get(("users", "u1"), "new") is None
        assert s.get(("users", "u1"), "prefs") is not None


@pytest.mark.parametrize("where", ["langgraph", "langgraph/store", "langgraph/threads"])
def test_a_directory_of_the_store_linked_elsewhere_is_refused_and_nothing_written_there(tmp_path: Path, where: str) -> None:
    """Journals, leases and the memory-store log went through the link, outside the store."""
    import shutil

    from ckptcli.errors import StoreIOError

    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    outside = tmp_path / "outside"
    outside.mkdir()
    target = store / where
    if target.exists():
        shutil.rmtree(target)
    target.symlink_to(outside, target_is_directory=True)
    with pytest.raises(StoreIOError, match="symbolic link"):
        if where == "langgraph/store":
            CkptStore.open(store)
        else:
            CkptSaver.open(store)
    assert list(outside.iterdir()) == []
    from ckptcli.adapters.langgraph.journal import check_journals

    assert any(p == target and "symbolic link" in msg for p, msg in check_journals(store))  # verify names it


_HUGE_PUT = r"""
import os, signal, sys
from typing import TypedDict
from langgraph.graph import END, START, StateGraph
from ckptcli.adapters.langgraph.saver import CkptSaver

class S(TypedDict):
    doc: str
    n: int

saver = CkptSaver.open(sys.argv[1], commit_interval=3600, seal_idle=3600)  # nothing committed: the journal only
b = StateGraph(S)
b.add_node("load", lambda st: {"doc": "x" * (270 << 20), "n": 1})
b.add_edge(START, "load")
b.add_edge("load", END)
out = b.compile(checkpointer=saver).invoke({"doc": "", "n": 0}, {"configurable": {"thread_id": "big"}}, durability="sync")
print(out["n"], len(out["doc"]), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_put_over_256_mib_survives_a_kill(tmp_path: Path) -> None:
    """A checkpoint whose journal record is longer than the old reader's 256 MiB cap (a
    270 MiB state value): the put returned, the process is killed before any commit,
    and after reopening the checkpoint is there, whole (it was dropped as a torn tail,
    the journal deleted, and verify said nothing)."""
    store = tmp_path / ".ckpt"
    r = subprocess.run([sys.executable, "-c", _HUGE_PUT, str(store)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == -9 and r.stdout.split() == ["1", str(270 << 20)], r.stderr[-2000:]
    # read back in a process of its own: the test process stays small for the tests after it
    check = (
        "import sys\nfrom ckptcli.adapters.langgraph.saver import CkptSaver\nsaver = CkptSaver.open(sys.argv[1])\n"
        "got = saver.get_tuple({'configurable': {'thread_id': 'big'}})\nv = got.checkpoint['channel_values']\n"
        "print(v['n'], len(v['doc']), v['doc'].count('x'))\nsaver.close()\n"
    )
    r = subprocess.run([sys.executable, "-c", check, str(store)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0 and r.stdout.split() == ["1", str(270 << 20), str(270 << 20)], r.stderr[-2000:]
    res = subprocess.run(
        [sys.executable, "-m", "ckptcli", "verify", "--store", str(store)], capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_thread_id_that_is_not_unicode_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    """A lone surrogate cannot be stored as UTF-8: the put is refused with one clear error
    (it raised msgpack's UnicodeEncodeError), nothing is journaled, the saver goes on."""
    from ckptcli.errors import InvalidInputError

    saver = CkptSaver.open(tmp_path / ".ckpt")
    try:
        graph = chat_builder(3).compile(checkpointer=saver)
        with pytest.raises(InvalidInputError, match=r"not valid Unicode \('\\ud800', a lone surrogate\)"):
            graph.invoke({"messages": []}, {"configurable": {"thread_id": "\ud800"}})
        assert list(saver.list(None)) == []
        graph.invoke({"messages": []}, {"configurable": {"thread_id": "fine"}})
        assert len(list(saver.list({"configurable": {"thread_id": "fine"}}))) == 5  # the input, then one per step
    finally:
        saver.close()

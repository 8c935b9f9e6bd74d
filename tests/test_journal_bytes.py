"""Both write-ahead journals write the bytes they wrote before they shared
ckptcli.format.journal: golden bytes (tests/vectors/journal_bytes.json) computed with the
code of commit 2e25785, for the recorder's records and file (formats/events.md) and the
LangGraph saver's records and file (formats/langgraph-journal.md), written again by the
current code; and the shared reader and writer behave as each journal's own did."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import msgpack
import pytest

from ckptcli.adapters.langgraph import journal as lg_journal
from ckptcli.errors import StoreIOError
from ckptcli.format.journal import JournalWriter, frame_plain, frame_salted, intact_records, scan_records
from ckptcli.history.recorder import MAGIC, Durability, Recorder, encode_record, read_journal, write_journal
from ckptcli.store.repository import Store

VECTORS = json.loads((Path(__file__).parent / "vectors" / "journal_bytes.json").read_text())


def _value(v: Any) -> Any:
    """A value of the vectors file, its tags ($bytes, $int, $repeat) undone."""
    if isinstance(v, dict):
        if "$bytes" in v:
            return bytes.fromhex(v["$bytes"])
        if "$int" in v:
            return int(v["$int"])
        if "$repeat" in v:
            text = v["$repeat"] * v["n"]
            return text.encode() if v.get("bytes") else text
        return {k: _value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


def _same(got: bytes, want: dict[str, Any]) -> None:
    assert len(got) == want["length"]
    if "hex" in want:
        assert got.hex() == want["hex"]
    assert hashlib.sha256(got).hexdigest() == want["sha256"]


RECORDER = [_value(v) for v in VECTORS["recorder_values"]]
LANGGRAPH = [_value(v) for v in VECTORS["langgraph_values"]]
SALT = bytes.fromhex(VECTORS["langgraph_salt"])


@pytest.mark.parametrize("i", range(len(RECORDER) - 1))
def test_recorder_records_are_the_golden_bytes(i: int) -> None:
    _same(encode_record(RECORDER[i + 1]), VECTORS["recorder_records"][i])


def test_recorder_journal_file_is_the_golden_bytes(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write_journal(path, RECORDER[0], [encode_record(v) for v in RECORDER[1:]])
    _same(path.read_bytes(), VECTORS["recorder_file"])
    got = read_journal(path)
    assert got.header == RECORDER[0] and got.records == RECORDER[1:]  # big integers come back as integers (ext type 1)
    assert got.good_end == got.size == VECTORS["recorder_file"]["length"]


def test_a_recorder_writes_its_events_framed_as_encode_record_does(store: Store, tmp_path: Path) -> None:
    """What the recorder's appends write (batches, a tool call flushed at once, a close) is
    the magic, the header, then exactly `encode_record` of each event, back to back."""
    path = tmp_path / "j"
    with Recorder.open(store, "agent:bytes", path, durability=Durability(batch_size=3, fsync="batch")) as rec:
        for i in range(7):
            rec.append("plan.push", item={"i": i, "big": 2**80 + i, "text": "é" * i})
        rec.append("tool.call", call_id="c", tool="t", args=[1])
        events = rec.tail
        header = read_journal(path).header
    assert path.read_bytes() == MAGIC + encode_record(header) + b"".join(encode_record(ev.to_map()) for ev in events)


@pytest.mark.parametrize("i", range(len(LANGGRAPH)))
def test_langgraph_records_are_the_golden_bytes(i: int) -> None:
    _same(lg_journal.frame(LANGGRAPH[i], SALT), VECTORS["langgraph_records"][i])


def test_langgraph_journal_file_is_the_golden_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The appends, reserves and sync of the generator (journal_bytes.json "about"),
    replayed: the same file, records end and space written ahead."""
    monkeypatch.setattr(lg_journal, "PROCESS_SALT", SALT)
    frame = lg_journal.frame
    j = lg_journal.Journal(tmp_path, "always")
    try:
        j.append(frame(LANGGRAPH[0], SALT) + frame(LANGGRAPH[1], SALT))
        j.append(frame(LANGGRAPH[2], SALT))
        j.reserve()
        big = frame(LANGGRAPH[3], SALT) * 3
        j.append(big)
        j.reserve()
        j.append(frame(LANGGRAPH[2], SALT))
        j.append(big)
        j.sync()
        data = j.path.read_bytes()
        want = VECTORS["langgraph_file"]
        assert (len(data), j.size, j.allocated) == (want["size"], want["records_end"], want["allocated"])
        assert hashlib.sha256(data).hexdigest() == want["sha256"]
        got = lg_journal.read_journal(data)
        assert got.version == 2 and not got.holes and got.end == j.size
        assert got.records == [*LANGGRAPH[:3], *[LANGGRAPH[3]] * 3, LANGGRAPH[2], *[LANGGRAPH[3]] * 3]
    finally:
        j.close(delete=True)


def test_the_two_framings_are_the_documented_layouts() -> None:
    """formats/events.md (plain: length, CRC-32 of the payload) and
    formats/langgraph-journal.md (salted: marker, length, CRC-32 of salt || length || payload)."""
    import struct
    import zlib

    payload = b"\x81\xa1a\x01"
    assert frame_plain(payload) == struct.pack("<II", 4, zlib.crc32(payload)) + payload
    n = struct.pack("<I", 4)
    assert frame_salted(payload, SALT) == b"\xc1LGJ" + n + struct.pack("<I", zlib.crc32(SALT + n + payload)) + payload


def test_the_plain_reader_stops_at_damage_where_the_scanner_reads_past_it() -> None:
    """The recorder's journal ends at its first damaged record; the LangGraph reader of the
    same framing (version 1) reports a hole and reads the records after it."""
    recs = [frame_plain(msgpack.packb({"n": i})) for i in range(3)]
    data = bytearray(b"".join(recs))
    data[len(recs[0]) + 9] ^= 0xFF  # the second record's payload
    assert [r for _, r, _ in intact_records(bytes(data), 0, None)] == [{"n": 0}]
    holes: list[Any] = []
    assert [r for _, r, _ in scan_records(bytes(data), 0, None, holes.append)] == [{"n": 0}, {"n": 2}]
    assert [(h.at, h.length) for h in holes] == [(len(recs[0]), len(recs[1]))]


@pytest.mark.parametrize("ahead", [False, True])
def test_a_failed_append_leaves_no_partial_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: bool) -> None:
    """An append whose sync fails (the disk gave up after the write) leaves the file as it
    was: cut back when it grows by appends (the recorder's), zeros in space written ahead
    (the saver's); the records before it stay, and the next append goes where it went."""
    path = tmp_path / "f"
    first = frame_plain(msgpack.packb({"n": 0}))
    head = b"H" * 16 + first
    path.write_bytes(head + (bytes(64) if ahead else b""))

    class Ahead(JournalWriter):
        RESERVE = 64

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fdatasync", failing)
    fd = os.open(path, os.O_RDWR)
    kind = Ahead if ahead else JournalWriter
    w = kind(fd, len(head), "always", what=f"journal {path}", hint="try again", allocated=len(head) + (64 if ahead else 0))
    with pytest.raises(StoreIOError, match=rf"cannot write journal {path}: Input/output error"):
        w.append(frame_plain(msgpack.packb({"n": 1})))
    assert path.read_bytes() == head + (bytes(64) if ahead else b"") and w.size == len(head)
    w.fsync = "never"  # the disk is back
    w.append(frame_plain(msgpack.packb({"n": 2})))
    w.close()
    w.reserve()  # closed: touches nothing
    w.sync()
    assert [r for _, r, _ in intact_records(path.read_bytes(), 16, None)] == [{"n": 0}, {"n": 2}]

"""Write-ahead journals: the record framing, the appending writer and the scanning reader
shared by the recorder's journal (formats/events.md, "The journal file") and the LangGraph
saver's (formats/langgraph-journal.md). Each user keeps its own magic, header and payloads.
Framings: plain (``length:u32le crc:u32le payload``) and salted (``"\xc1LGJ"`` + the same,
the CRC over ``salt || length || payload``).

Invariants: records are only ever appended, at `JournalWriter.size`; a failed append leaves
no partial record; zeros are written ahead only beyond the end of the records, under the
lock appends take. A reader finds intact records, then zeros or one torn record to the end;
anything else with records after it is a hole, reported (`Hole`) and read past within a
`ScanBudget`."""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgpack

from ckptcli.errors import StoreIOError

__all__ = [
    "GAVE_UP",
    "MAX_LENGTH",
    "PLAIN_HEAD",
    "SALTED_HEAD",
    "SALT_BYTES",
    "SYNC",
    "Buffer",
    "Hole",
    "JournalWriter",
    "ScanBudget",
    "blank",
    "find_record",
    "frame_plain",
    "frame_salted",
    "intact_records",
    "next_record",
    "pwrite_all",
    "record_at",
    "records_from",
    "scan_records",
]

#: Before each record of the plain framing: the payload's length, its CRC-32.
PLAIN_HEAD = struct.Struct("<II")
#: Before each record of the salted framing: the sync marker, the length, the salted CRC-32.
SALTED_HEAD = struct.Struct("<4sII")
SYNC = b"\xc1LGJ"  # 0xc1 is the one byte msgpack never uses
SALT_BYTES = 8
#: The longest payload a 32-bit length can say; a user may read with a lower limit.
MAX_LENGTH = 0xFFFF_FFFF
_LENGTH = struct.Struct("<I")
_NONZERO = re.compile(rb"[^\x00]")

Buffer = bytes | mmap.mmap  # what the readers scan: a file read, or mapped


# -- framing -----------------------------------------------------------------------------
def frame_plain(payload: bytes) -> bytes:
    """One record of the plain framing."""
    return PLAIN_HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def frame_salted(payload: bytes, salt: bytes) -> bytes:
    """One record of the salted framing, for the journal whose salt is `salt`."""
    length = _LENGTH.pack(len(payload))
    return SALTED_HEAD.pack(SYNC, len(payload), zlib.crc32(payload, zlib.crc32(salt + length))) + payload


# -- reading -----------------------------------------------------------------------------
def record_at(
    data: Buffer, pos: int, salt: bytes | None, max_length: int = MAX_LENGTH, ext_hook: Callable[[int, bytes], Any] = msgpack.ExtType
) -> tuple[dict[str, Any], int] | None:
    """The record at `pos` and where it ends, or None when no intact record starts there
    (`salt` None: the plain framing). Intact: the length at most `max_length` and within
    `data`, the CRC right, the payload one msgpack map (decoded with `ext_hook`)."""
    if salt is None:
        if pos + PLAIN_HEAD.size > len(data):
            return None
        length, crc = PLAIN_HEAD.unpack_from(data, pos)
        start = pos + PLAIN_HEAD.size
        end = start + length
        if length > max_length or end > len(data) or zlib.crc32(data[start:end]) != crc:
            return None
    else:
        if pos + SALTED_HEAD.size > len(data):
            return None
        sync, length, crc = SALTED_HEAD.unpack_from(data, pos)
        start = pos + SALTED_HEAD.size
        end = start + length
        if sync != SYNC or length > max_length or end > len(data):
            return None
        if zlib.crc32(data[start:end], zlib.crc32(salt + data[pos + 4 : pos + 8])) != crc:
            return None
    try:
        rec = msgpack.unpackb(data[start:end], raw=False, strict_map_key=False, ext_hook=ext_hook)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None
    if type(rec) is not dict:
        return None
    return rec, end


def intact_records(
    data: Buffer, pos: int, salt: bytes | None, max_length: int = MAX_LENGTH, ext_hook: Callable[[int, bytes], Any] = msgpack.ExtType
) -> Iterator[tuple[int, dict[str, Any], int]]:
    """The intact records from `pos` on, each as (offset, record, where it ends), up to
    the first offset where none starts (the end of a journal read without looking past
    damage: the recorder's)."""
    while True:
        got = record_at(data, pos, salt, max_length, ext_hook)
        if got is None:
            return
        yield pos, got[0], got[1]
        pos = got[1]


def records_from(data: Buffer, pos: int, salt: bytes) -> tuple[list[dict[str, Any]], int]:
    """The intact salted records of `data` from `pos` on, up to the first offset where
    none starts, and that offset: what a reader that follows a file others append to
    takes as written so far (a record being written, or torn by a crash, ends it)."""
    out: list[dict[str, Any]] = []
    while True:
        got = record_at(data, pos, salt)
        if got is None:
            return out, pos
        out.append(got[0])
        pos = got[1]


class ScanBudget:
    """How many bytes a reader may still check the CRC of while it looks for the next
    record after damage: every candidate header costs the bytes it declares, so a file
    of forged headers each declaring a long record would cost O(n^2) without a bound
    (four times the file, plus 1 MiB, is far more than damage from a crash needs)."""

    __slots__ = ("left",)

    def __init__(self, size: int) -> None:
        self.left = 4 * size + (1 << 20)

    def charge(self, data: Buffer, q: int, head: struct.Struct) -> bool:
        """Charge the candidate record at `q`; False when the budget is spent."""
        if q + head.size <= len(data):
            length = head.unpack_from(data, q)[1 if head is SALTED_HEAD else 0]
            if q + head.size + length <= len(data):  # what record_at checks the CRC of; a longer one costs nothing
                self.left -= length
        return self.left >= 0


GAVE_UP = -1  # `find_record`: the scan budget is spent (hostile damage); the rest is unread


def find_record(data: Buffer, pos: int, salt: bytes | None, budget: ScanBudget | None = None) -> int | None:
    """Where the first intact record at or after `pos` starts, None when there is none,
    or GAVE_UP when looking further would cost more than `budget` allows."""
    budget = budget or ScanBudget(len(data))
    if salt is not None:
        q = data.find(SYNC, pos)
        while q != -1:
            if not budget.charge(data, q, SALTED_HEAD):
                return GAVE_UP
            if record_at(data, q, salt) is not None:
                return q
            q = data.find(SYNC, q + 1)
        return None
    # the plain framing has no marker: try every offset, skipping runs of zeros (a
    # record's length is never 0, so its first four bytes are not all zero)
    q = pos
    while q + PLAIN_HEAD.size <= len(data):
        m = _NONZERO.search(data, q)
        if m is None:
            return None
        q = max(q, m.start() - 3)
        stop = m.start() + 1
        for p in range(q, stop):
            if not budget.charge(data, p, PLAIN_HEAD):
                return GAVE_UP
            if record_at(data, p, None) is not None:
                return p
        q = stop
    return None


def next_record(data: Buffer, pos: int, salt: bytes, budget: ScanBudget | None = None) -> int | None:
    """Where the next intact salted record after `pos` starts, None, or GAVE_UP
    (`find_record`): a reader that stopped at `pos` tells a hole (damage, records after
    it) from the end of what was written (a torn last record, zeros)."""
    return find_record(data, pos + 1, salt, budget)


@dataclass(frozen=True)
class Hole:
    """Damage `scan_records` read past: `length` bytes at offset `at` that are no record,
    with an intact record after them; or, with `gave_up`, the rest of the file from `at`,
    where looking for a record cost more than a `ScanBudget` allows (nothing after it is
    read)."""

    at: int
    length: int
    gave_up: bool = False


def scan_records(
    data: Buffer, pos: int, salt: bytes | None, on_hole: Callable[[Hole], None] | None = None
) -> Iterator[tuple[int, dict[str, Any], int]]:
    """The intact records of `data` from offset `pos` on (framed with `salt`; None: the
    plain framing), in order, each as (offset, record, where it ends). A torn or damaged
    record with no intact record after it ends them (a crash in mid-write, or the zeros
    of the space written ahead): the end of the last record yielded (`pos` when none) is
    where what was written ends. A hole (damage with records after it) is passed to
    `on_hole` and read past; when looking past it costs more than a `ScanBudget`, it is
    passed with `gave_up` and the scan ends (an `on_hole` that raises stops the scan)."""
    budget = ScanBudget(len(data))
    while True:
        got = record_at(data, pos, salt)
        if got is not None:
            yield pos, got[0], got[1]
            pos = got[1]
            continue
        nxt = find_record(data, pos + 1, salt, budget)
        if nxt is None:
            return
        if nxt == GAVE_UP:  # forged headers past counting: all the rest is damage
            if on_hole is not None:
                on_hole(Hole(pos, len(data) - pos, gave_up=True))
            return
        if on_hole is not None:
            on_hole(Hole(pos, nxt - pos))
        pos = nxt


def blank(data: Buffer) -> bool:
    """Whether `data` is empty or zeros only (a journal made, nothing written in it yet)."""
    return _NONZERO.search(data) is None


# -- writing -----------------------------------------------------------------------------
def pwrite_all(fd: int, data: bytes, pos: int) -> None:
    """Write all of `data` at offset `pos` of `fd` (pwrite may write less than asked).
    Raises: OSError."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view, pos = view[n:], pos + n


class JournalWriter:
    """Appends framed records to one journal file open as `fd`, whose records end at
    `size` (its caller wrote the header).

    fsync "always" syncs each append before it returns; "batch" leaves it to `sync()`,
    which the caller runs on its own schedule; "never" leaves it to the OS. With
    `RESERVE` > 0 the file's space is written ahead with zeros (`reserve`) and appends
    overwrite them: the file does not grow with each record, so syncing an append flushes
    data alone, with no file-system metadata to commit (SQLite's WAL does the same).

    Args:
        fd: the file, open to write (its caller created and locked it).
        size: where the records end (the header's end in a new file).
        fsync: "always", "batch" or "never".
        what: the file in words, for errors ("journal <path>").
        hint: what to do when an append fails.
        allocated: where the zeros written ahead end (`size` when none were).
        full_sync: sync with fsync (data and metadata) instead of fdatasync.
    """

    RESERVE = 0  # bytes of zeros written ahead at a time; 0: none, the file grows by appends

    def __init__(
        self, fd: int, size: int, fsync: str, *, what: str, hint: str, allocated: int | None = None, full_sync: bool = False
    ) -> None:
        self.fd = fd
        self.fsync = fsync
        self.what = what
        self.hint = hint
        self.size = size  # where the records end
        self.allocated = size if allocated is None else allocated  # where the zeros written ahead end
        self.synced = size  # what is known to be on disk
        self._sync: Callable[[int], None] = os.fsync if full_sync else os.fdatasync
        # `size` and `allocated` change under this lock only: an append and a reserve
        # agree on where the records end
        self._end_lock = threading.Lock()
        # sync and reserve may run on another thread than appends, and meet a close:
        # once closed, the descriptor number may belong to another file, so they must
        # not touch it
        self._fd_lock = threading.Lock()
        self.closed = False

    def append(self, data: bytes, *, sync: bool = True) -> None:
        """Write framed records at the end (callers serialize appends); under fsync
        "always", `sync=False` leaves them to the next synced append or `sync()`.

        Raises:
            StoreIOError: nothing of `data` stays behind (zeroed, or truncated off).
        """
        with self._end_lock:
            start = self.size
            try:
                pwrite_all(self.fd, data, start)
                if self.fsync == "always" and sync:
                    self._sync(self.fd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    if self.RESERVE:
                        os.pwrite(self.fd, bytes(len(data)), start)  # zeros, as written ahead
                    else:
                        os.ftruncate(self.fd, start)
                raise StoreIOError(f"cannot write {self.what}: {exc.strerror}", hint=self.hint) from None
            self.size = start + len(data)
            if self.fsync == "always" and sync:
                self.synced = self.size

    def reserve(self) -> None:
        """Write zeros ahead when less than half of `RESERVE` is left, from the end of the
        records or of the space written ahead, whichever is further; errors are ignored
        (appends write past the space written ahead then)."""
        if not self.RESERVE:
            return
        with self._fd_lock, contextlib.suppress(OSError):
            if self.closed:
                return
            with self._end_lock:
                if self.allocated - self.size >= self.RESERVE // 2:
                    return
                start = max(self.allocated, self.size)
                os.pwrite(self.fd, bytes(self.RESERVE), start)
                self.allocated = start + self.RESERVE
            self._sync(self.fd)

    def sync(self) -> None:
        """Sync what was appended since the last sync (the "batch" policy's sync; errors
        are ignored). Appends made meanwhile are synced by the next call."""
        end = self.size
        if end > self.synced and self.fsync != "never":
            with self._fd_lock, contextlib.suppress(OSError):
                if self.closed:
                    return
                self._sync(self.fd)
                self.synced = end

    def close(self) -> None:
        """Close the file (once; sync and reserve do nothing afterwards)."""
        with self._fd_lock:
            if not self.closed:
                self.closed = True
                with contextlib.suppress(OSError):
                    os.close(self.fd)

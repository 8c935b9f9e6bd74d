"""The LangGraph saver's journal (formats/langgraph-journal.md; docs/langgraph.md, "The
journal file"): its magic and records, the writer `Journal`, the reader `read_journal`, and
`check_journals` for `ckpt verify`. The framing, appending and scanning are
ckptcli.format.journal's (salted framing; version 1, still read, is the plain framing).

Imports nothing of LangGraph, so that `ckpt verify` checks the journals beside a store
where LangGraph is not installed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from ckptcli.errors import CorruptError, InvalidInputError, LimitExceededError, StoreIOError, UnsupportedVersionError
from ckptcli.format.journal import (
    GAVE_UP,
    SALT_BYTES,
    SYNC,
    Buffer,
    Hole,
    JournalWriter,
    ScanBudget,
    blank,
    frame_salted,
    next_record,
    pwrite_all,
    record_at,
    records_from,
    scan_records,
)
from ckptcli.format.journal import MAX_LENGTH as MAX_RECORD
from ckptcli.store.backend import create_temp, fsync_dir
from ckptcli.store.layout import JOURNAL_DIR, journal_dir, lease_dir, memory_store_dir, want_dir
from ckptcli.store.locking import file_kind

__all__ = [
    "DAMAGED_SUFFIX",
    "GAVE_UP",
    "HEADER_V2",
    "JOURNAL_DIR",
    "MAGIC",
    "MAGIC_V1",
    "MAX_RECORD",
    "PROCESS_SALT",
    "READ_FLAGS",
    "SALT_BYTES",
    "SYNC",
    "Buffer",
    "Hole",
    "Journal",
    "JournalContents",
    "ScanBudget",
    "blank",
    "check_journals",
    "dir_problem",
    "file_kind",
    "frame",
    "hole_message",
    "malformed_record",
    "mapped",
    "newer_journal",
    "next_record",
    "open_regular",
    "own_dir",
    "pwrite_all",
    "read_journal",
    "read_regular",
    "record_at",
    "record_error",
    "record_problem",
    "record_where",
    "records_from",
    "scan_records",
]

MAGIC_V1 = b"CKPTLGJ1"
MAGIC = b"CKPTLGJ2"
HEADER_V2 = len(MAGIC) + SALT_BYTES
# this process's salt, in the header of every journal it makes (so `frame` needs no journal)
PROCESS_SALT = secrets.token_bytes(SALT_BYTES)
DAMAGED_SUFFIX = ".damaged"  # a journal recovery found holes in, kept for the user to look at


def frame(record: dict[str, Any], salt: bytes = PROCESS_SALT) -> bytes:
    """One record of a version 2 journal whose salt is `salt` (this process's journals').

    Raises:
        InvalidInputError for text that is not valid Unicode (a lone surrogate in a
        thread id, say: msgpack stores UTF-8); LimitExceededError for a record longer
        than the framing can say (4 GiB). Nothing is journaled then.
    """
    try:
        payload: bytes = msgpack.packb(record, use_bin_type=True)
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end] if isinstance(exc.object, str) else "?"
        raise InvalidInputError(
            f"text that is not valid Unicode ({bad!r}, a lone surrogate) cannot be stored",
            hint="thread ids, namespaces, checkpoint ids, task ids and channel names must be valid Unicode text",
        ) from None
    except (ValueError, OverflowError) as exc:  # a single value over msgpack's own 4 GiB limit
        raise LimitExceededError(
            f"a checkpoint record cannot be journaled: {exc}", hint="keep single values in the state under 4 GiB"
        ) from None
    if len(payload) > MAX_RECORD:
        raise LimitExceededError(
            f"a checkpoint record of {len(payload)} bytes is longer than the journal's limit of {MAX_RECORD} bytes",
            hint="keep the state of one checkpoint under 4 GiB (large files belong in blobs, not in graph state)",
        )
    return frame_salted(payload, salt)


@dataclass
class JournalContents:
    """What `read_journal` found: the records, where the last one ends, the holes
    (offset, length) between records, and the format version (0: not a journal)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    end: int = 0
    holes: list[tuple[int, int]] = field(default_factory=list)
    version: int = 0
    gave_up: bool = False  # the last hole runs to the end: looking for records in it cost too much

    @property
    def before_holes(self) -> int:
        """How many records come before the first hole (all of them without holes)."""
        return len(self.records) - self.records_after_holes if self.holes else len(self.records)

    @property
    def records_after_holes(self) -> int:
        """How many records were found after the first hole (0 without holes)."""
        return len(self.records) - self._before_first_hole

    _before_first_hole: int = 0


READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def open_regular(path: Path) -> int | str:
    """`path` opened to read (an fd), or what it is when it is no regular file (a
    symbolic link, a FIFO, a directory...): opening it neither blocks nor follows a
    link. Raises OSError when it cannot be opened at all."""
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link"
        raise
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        return file_kind(mode)
    return fd


def own_dir(path: Path) -> None:
    """Make directory `path` of the store (its parent exists), or check the one there is
    a directory and not a link to one elsewhere: ckpt writes only inside the store.
    Raises StoreIOError (`dir_problem`)."""
    try:
        path.mkdir(exist_ok=True)
    except FileExistsError:
        pass  # something that is no directory: `dir_problem` says what
    except OSError as exc:
        raise StoreIOError(f"cannot create {path}: {exc.strerror}") from None
    problem = dir_problem(path)
    if problem is not None:
        raise problem


def dir_problem(path: Path) -> StoreIOError | None:
    """The error `own_dir` refuses `path` with as it is now, making nothing: a symbolic
    link, or something that is no directory (None: a directory, or nothing yet, which
    `own_dir` makes). `ckpt doctor` names with it what a saver would refuse."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return StoreIOError(f"cannot create {path}: {exc.strerror}")
    if stat.S_ISDIR(st.st_mode):
        return None
    hint = "something other than ckpt put it there; move it away"
    if stat.S_ISLNK(st.st_mode):
        return StoreIOError(f"{path} is a symbolic link: ckpt writes nothing outside the store through it", hint=hint)
    what = "a regular file" if stat.S_ISREG(st.st_mode) else file_kind(st.st_mode)
    return StoreIOError(f"{path} is {what}, not a directory: ckpt keeps its files in it", hint=hint)


def mapped(fd: int) -> bytes | mmap.mmap:
    """The contents of the regular file open as `fd`, mapped rather than read: a huge or
    sparse file (a hostile one declaring 1 GiB) costs address space, not memory, and the
    readers below scan it as they would bytes. The caller closes `fd` (the map stays valid)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return b""
    return mmap.mmap(fd, size, prot=mmap.PROT_READ)


def read_regular(path: Path) -> bytes | mmap.mmap:
    """`mapped` contents of the file at `path`, opened without following a link or
    blocking on a FIFO; OSError (ELOOP, or EINVAL naming what it is) when it is not a
    regular file."""
    fd = open_regular(path)
    if isinstance(fd, str):
        raise OSError(errno.EINVAL, f"it is {fd}, not a regular file")
    try:
        return mapped(fd)
    finally:
        os.close(fd)


def _typed(v: Any) -> bool:
    return type(v) is list and len(v) == 2 and type(v[0]) is str and type(v[1]) is bytes


def record_problem(rec: dict[str, Any]) -> str | None:
    """Why an intact journal record is not one a saver writes (docs/langgraph.md, the
    journal), or None: its fields of the wrong type. A saver refuses such a record (it
    cannot replay it); `ckpt verify` reports it."""
    op = rec.get("op")
    if op not in ("p", "w", "d"):
        return f"unknown operation {op!r}"
    if op in ("p", "w") and not all(type(rec.get(k)) is str for k in ("t", "n", "i")):
        return "its thread, namespace or checkpoint id is not a string"
    if op == "p":
        if rec.get("p") is not None and type(rec.get("p")) is not str:
            return "its parent id is not a string"
        c = rec.get("c")
        if type(c) is not int or not 0 <= c < 2**63:
            return "its time is not an integer of 63 bits"
        if not (_typed(rec.get("k")) and _typed(rec.get("m"))):
            return "its checkpoint or metadata is not a (type, bytes) pair"
        if type(rec.get("v")) is not dict or type(rec.get("b")) is not dict:
            return "its versions or values are not maps"
        for spec in rec["b"].values():
            if type(spec) is not list or len(spec) != 2 or type(spec[1]) is not list or not spec[1] or spec[1][0] not in ("e", "l", "t"):
                return "a value of it is not one a saver writes"
    elif op == "w":
        ws = rec.get("w")
        if type(ws) is not list:
            return "its writes are not a list"
        for w in ws:
            if type(w) is not list or len(w) != 7 or not all(type(x) is str for x in (w[0], w[1], w[2], w[4])) or type(w[3]) is not bytes:
                return "a write of it is not (task, channel, type, bytes, path, index, time)"
            if (
                type(w[5]) is not int or type(w[6]) is not int or not (-(2**63) <= w[5] < 2**63 and 0 <= w[6] < 2**63)
            ):  # LangGraph's special writes have negative indexes
                return "a write's index or time is not a 64-bit integer"
    else:
        keys = rec.get("k")
        if type(keys) is not list or not all(type(k) is list and len(k) == 3 and all(type(x) is str for x in k) for k in keys):
            return "the checkpoints it deletes are not (thread, namespace, id) triples"
        ids = rec.get("ids", [])
        if type(ids) is not list or not all(type(i) is bytes and len(i) == 32 for i in ids):
            return "the store checkpoints it deletes are not 32-byte ids"
        threads = rec.get("threads", [])
        if type(threads) is not list or not all(type(t) is str for t in threads):
            return "the threads it deletes are not strings"
    return None


def read_journal(data: Buffer) -> JournalContents:
    """The intact records of a journal (either version), in order. A torn or damaged
    record with no intact record after it ends the journal (a crash in mid-write, or
    the zeros of the space written ahead); one with records after it is a hole, reported
    in `holes`, and the records after it are read on (`scan_records`)."""
    out = JournalContents()
    if data[: len(MAGIC)] == MAGIC and len(data) >= HEADER_V2:
        salt: bytes | None = data[len(MAGIC) : HEADER_V2]
        pos, out.version = HEADER_V2, 2
    elif data[: len(MAGIC_V1)] == MAGIC_V1:
        salt, pos, out.version = None, len(MAGIC_V1), 1
    else:
        return out

    def hole(h: Hole) -> None:
        if not out.holes:
            out._before_first_hole = len(out.records)
        out.holes.append((h.at, h.length))
        out.gave_up = h.gave_up

    end = pos
    for _at, rec, rec_end in scan_records(data, pos, salt, hole):
        out.records.append(rec)
        end = rec_end
    out.end = len(data) if out.gave_up else end
    return out


def newer_journal(path: Path, data: Buffer, contents: JournalContents) -> UnsupportedVersionError | None:
    """The error a saver refuses to open the store with for the journal at `path` (its
    `data`, read as `contents`) when a newer ckpt wrote it (a header of a later version):
    its puts cannot be replayed here. None for any other journal."""
    if contents.version != 0 or data[: len(MAGIC) - 1] != MAGIC[:-1]:
        return None
    return UnsupportedVersionError(
        f"the LangGraph journal {path} was written by a newer ckpt ({bytes(data[: len(MAGIC)])!r}): the puts in it cannot be replayed here",
        hint="open the store with that ckpt version (nothing was replayed or removed), or upgrade ckpt",
    )


def record_where(path: Path, index: int) -> str:
    """Record `index` (from 0) of the journal at `path`, in words."""
    return f"journal {path.name} record {index + 1}"


def record_error(where: str, why: str, jdir: Path) -> CorruptError:
    """The error a saver refuses to open the store with for a journal record
    (`record_where`) in `jdir` that is malformed (`why`): it cannot replay it."""
    return CorruptError(f"{where} is malformed ({why})", hint=f"move it out of {jdir} to open the store without it")


def malformed_record(path: Path, contents: JournalContents) -> CorruptError | None:
    """`record_error` for the first malformed record (`record_problem`) of the journal at
    `path` that a saver replays as it is: before any hole (one after a hole that does not
    replay is left out, said in the saver's warning). None when there is none."""
    for i, rec in enumerate(contents.records[: contents.before_holes]):
        why = record_problem(rec)
        if why:
            return record_error(record_where(path, i), why, path.parent)
    return None


def hole_message(path: Path, contents: JournalContents) -> str:
    """One line naming the journal and its first hole, for a warning or a verify problem."""
    off, n = contents.holes[0]
    more = f" (and {len(contents.holes) - 1} more hole(s))" if len(contents.holes) > 1 else ""
    return (
        f"{n} unreadable byte(s) at offset {off} with {contents.records_after_holes} record(s) after them{more}: "
        f"the puts recorded there are lost"
    )


def check_journals(store_dir: Path) -> list[tuple[Path, str]]:
    """The damaged journals in ``<store_dir>/langgraph/``: (path, message) for each
    journal with a hole, and for each journal recovery kept because it had one. A
    journal a live saver is appending to is read twice, and a hole counts only if both
    reads show it (a record being written while the file is read is not damage)."""
    jdir = journal_dir(store_dir)
    found: list[tuple[Path, str]] = []
    for d in (jdir, lease_dir(store_dir), want_dir(store_dir), memory_store_dir(store_dir)):
        if d.is_symlink():
            found.append((d, "is a symbolic link: savers refuse to write through it (outside the store); move it away"))
    if not jdir.is_dir() or jdir.is_symlink():
        return found
    for path in sorted(jdir.iterdir()):
        if path.is_symlink() or not path.is_file():
            if path.name.endswith((".journal", ".journal" + DAMAGED_SUFFIX)):
                what = "a symbolic link" if path.is_symlink() else "a directory" if path.is_dir() else "not a regular file"
                found.append((path, f"is {what}, not a journal (savers skip it); remove it"))
            continue
        if path.name.endswith(".journal" + DAMAGED_SUFFIX):
            try:
                contents = read_journal(read_regular(path))
            except OSError as exc:
                found.append((path, f"cannot be read: {exc.strerror}"))
                continue
            what = hole_message(path, contents) if contents.holes else "has no hole now"
            found.append(
                (
                    path,
                    f"kept by recovery, which found damage: {what}; the records after the damage were recovered; "
                    "delete the file once looked at",
                )
            )
            continue
        if not path.name.endswith(".journal"):
            continue
        try:
            data = read_regular(path)
            first = read_journal(data)
            if first.version == 0 and not blank(data):
                newer = newer_journal(path, data, first) is not None
                found.append(
                    (
                        path,
                        "was written by a newer ckpt: savers of this version refuse to open the store while it is there"
                        if newer
                        else "is not a LangGraph journal (unknown header): a saver keeps it aside and replays nothing of it",
                    )
                )
                continue
            for i, rec in enumerate(first.records):
                bad = record_problem(rec)
                if bad:
                    found.append(
                        (path, f"is damaged: its record {i + 1} is malformed ({bad}); a saver refuses to open the store while it is there")
                    )
                    break
            if not first.holes:
                continue
            second = read_journal(read_regular(path))
        except OSError as exc:
            found.append((path, f"cannot be read: {exc.strerror}"))
            continue
        holes = [h for h in first.holes if h in second.holes]
        if holes:
            second.holes = holes
            found.append((path, hole_message(path, second) + "; opening the store with the saver recovers the records after the damage"))
    return found


class Journal(JournalWriter):
    """One journal file of this process (a random name in `directory`, `PROCESS_SALT`),
    locked (flock) while its saver has it open. A `JournalWriter` with a MiB written ahead:
    the commit thread calls `reserve` and, under the "batch" policy, `sync` every tick,
    without the saver's lock (the saver's lock serializes appends)."""

    RESERVE = 1 << 20

    def __init__(self, directory: Path, fsync: str) -> None:
        self.path = directory  # until created
        self.salt = PROCESS_SALT
        try:
            # a random name, O_EXCL|O_NOFOLLOW: a file or link planted there is never used
            name, fd = create_temp(directory, prefix="", suffix=".journal", mode=0o644, flags=os.O_RDWR)
            self.path = directory / name
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.pwrite(fd, MAGIC + self.salt + bytes(self.RESERVE - HEADER_V2), 0)
            os.fsync(fd)
            fsync_dir(directory)
        except OSError as exc:
            raise StoreIOError(f"cannot create a LangGraph journal in {directory}: {exc.strerror}") from None
        super().__init__(
            fd, HEADER_V2, fsync, what=f"the LangGraph journal {self.path}", hint="nothing of this call was kept", allocated=self.RESERVE
        )

    @property
    def empty(self) -> bool:
        return self.size <= HEADER_V2

    def close(self, delete: bool = False) -> None:
        """Close the file; with `delete`, remove it first."""
        if delete:
            with contextlib.suppress(OSError):
                self.path.unlink()
        super().close()

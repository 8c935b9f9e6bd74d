"""The files of `CkptStore` (LangGraph's long-term memory store on ckpt) beside a store:
their names, framing and the check `ckpt verify` runs on them. formats/langgraph-store.md
is the spec.

Imports nothing of LangGraph, so that `ckpt verify` checks the log of a store where
LangGraph is not installed.

``<store>/langgraph/store/<generation:016x>.log`` is a log framed as the saver's journal
(version 2: ``"CKPTLGJ2" salt record*``, `langgraph_journal.frame`), shared by every
process: records are appended at the end of the file under the store's exclusive lock
``locks/langgraph-store.lock``, read under its shared lock. The first record of a log is
its base (``{"op": "base", "snapshot": manifest id or nil}``): the checkpoint of subject
`SNAPSHOT_SUBJECT` holding every item when the log began. The log with the highest
generation is the live one; older ones are left only by a crash during a compaction.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import struct
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import msgpack

from ckptcli.adapters.langgraph.journal import (
    DAMAGED_SUFFIX,
    HEADER_V2,
    MAGIC,
    MAX_RECORD,
    SYNC,
    Buffer,
    hole_message,
    read_journal,
    read_regular,
    scan_records,
)
from ckptcli.store.layout import lock_file, memory_store_dir

LOCK_NAME = "langgraph-store"  # locks/langgraph-store.lock
SNAPSHOT_SUBJECT = "workflow:langgraph-store"
SNAPSHOT_BRANCH = "langgraph-store"
SNAPSHOT_VERSION = 1
_LOG_RE = re.compile(r"^([0-9a-f]{16})\.log$")


_HEAD = struct.Struct("<4sII")  # a record's sync marker, payload length, CRC


def damaged_tail(data: Buffer, pos: int) -> bool:
    """Whether the bytes of a log from `pos` (where its intact records end, no intact
    record after) are a damaged record rather than one torn by a killed writer: its
    header is there and its whole declared length too, but the CRC (or payload) does
    not check. A torn record is one whose header or declared length runs past the end."""
    if pos + _HEAD.size > len(data):
        return False
    sync, length, _ = _HEAD.unpack_from(data, pos)
    return bool(sync == SYNC and length <= MAX_RECORD and pos + _HEAD.size + length <= len(data))


def log_dir(store_dir: Path) -> Path:
    return memory_store_dir(store_dir)


def log_name(gen: int) -> str:
    return f"{gen:016x}.log"


def generations(directory: Path) -> list[int]:
    """The generations of the logs in `directory`, oldest first."""
    try:
        names = [e.name for e in directory.iterdir()]
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1), 16) for m in map(_LOG_RE.match, names) if m)


def base_of(records: list[dict[str, Any]]) -> bytes | str | None:
    """The snapshot id a log's first record names (None: no snapshot), or a string
    saying why the log has no valid base record."""
    if not records or records[0].get("op") != "base":
        return "its first record is not a base record"
    snap = records[0].get("snapshot")
    if snap is not None and (type(snap) is not bytes or len(snap) != 32):
        return "its base record names no valid snapshot"
    return snap


_I64 = 2**63
MAX_TTL_MINUTES = 100 * 366 * 24 * 60  # a century: its nanoseconds added to a time stay within 63 bits


def _int(v: Any, lo: int = -_I64) -> bool:
    return type(v) is int and lo <= v < _I64


def _namespace_problem(ns: Any) -> str | None:
    if type(ns) is not list or not ns or not all(type(x) is str for x in ns):
        return "a namespace is not a non-empty list of strings"
    if not all(x and "." not in x and "\0" not in x for x in ns):
        return f"namespace {ns!r} has an empty label or one holding '.' or NUL"
    return None


def decode_value(raw: bytes) -> dict[str, Any] | None:
    """An item's value from its msgpack bytes, or None when they are not a map with
    string keys."""
    try:
        value = msgpack.unpackb(raw, raw=False)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None
    if type(value) is not dict or not all(type(k) is str for k in value):
        return None
    return value


def record_problem(rec: dict[str, Any], values: bool = True) -> str | None:
    """Why a record of a store log is not one formats/langgraph-store.md allows (its
    fields of the wrong type or out of range), or None. With `values`, each item's value
    is decoded too (the store decodes them as it applies the record)."""
    op = rec.get("op")
    if op == "put":
        items = rec.get("items")
        if type(items) is not list:
            return "a put record's items are not a list"
        for it in items:
            if type(it) is not list or len(it) != 9:
                return "an item of a put record is not a list of 9 fields"
            ns, key, value, created, updated, ttl, expires, seq, vectors = it
            why = _namespace_problem(ns)
            if why:
                return why
            if type(key) is not str:
                return "an item's key is not a string"
            if value is None:
                continue
            if type(value) is not bytes or (values and decode_value(value) is None):
                return f"item {key!r}: the value is not a msgpack map with string keys"
            if not (_int(created) and _int(updated)):
                return f"item {key!r}: created or updated is not a 64-bit integer"
            if ttl is None:
                if expires is not None:
                    return f"item {key!r}: expires is set without a ttl"
            elif type(ttl) not in (int, float) or not 0 < ttl <= MAX_TTL_MINUTES or not _int(expires):
                return f"item {key!r}: ttl is not a number of minutes from 0 to {MAX_TTL_MINUTES} (a century) with a 64-bit integer expires"
            if not _int(seq, 0):
                return f"item {key!r}: seq is not an integer from 0 to 2**63-1"
            if vectors is not None and (
                type(vectors) is not dict
                or not all(type(k) is str and type(v) is list and all(type(x) in (int, float) for x in v) for k, v in vectors.items())
            ):
                return f"item {key!r}: vectors is not a map of field paths to lists of numbers"
    elif op == "touch":
        if not _int(rec.get("t")):
            return "a touch record's time is not a 64-bit integer"
        k = rec.get("k")
        if type(k) is not list:
            return "a touch record's items are not a list"
        for it in k:
            if type(it) is not list or len(it) != 2 or type(it[1]) is not str:
                return "an item of a touch record is not [namespace, key]"
            why = _namespace_problem(it[0])
            if why:
                return why
    return None


def records_at(data: Buffer, salt: bytes, pos: int = HEADER_V2) -> list[tuple[int, dict[str, Any]]]:
    """The intact records of a version 2 log's bytes `data` from `pos` on, each with
    its offset; holes are read past silently (as far as a `ScanBudget` allows)."""
    return [(at, rec) for at, rec, _end in scan_records(data, pos, salt)]


def check_store_logs(store_dir: Path, manifests: Collection[bytes] | None = None) -> list[tuple[Path, str]]:
    """Problems of the memory store's logs under `store_dir` for `ckpt verify`: a log
    that is not one (bad header, no base record), a log with a hole (damage between
    records; a crash leaves none), a malformed record, a damaged last record (all its
    bytes there, its CRC bad; a torn one is not damage), a ``.damaged`` copy a writer
    kept, and the live log's base snapshot missing from
    `manifests` (the store's checkpoint ids, when given). A log being appended to is
    read twice and a hole counts only if both reads show it."""
    found: list[tuple[Path, str]] = []
    d = log_dir(store_dir)
    gens = generations(d)
    try:
        kept = sorted(p for p in d.iterdir() if p.name.endswith(".log" + DAMAGED_SUFFIX))
    except OSError:
        kept = []
    for path in kept:
        found.append(
            (path, "is a copy of a store log whose last record was damaged, kept when the store cut that record; delete it once looked at")
        )
    with _readers_lock(store_dir):
        for gen in gens:
            _check_log(d / log_name(gen), gen == gens[-1], manifests, found)
    return found


@contextlib.contextmanager
def _readers_lock(store_dir: Path) -> Iterator[None]:
    """The store's lock taken shared, as a CkptStore reading the logs takes it, when it
    can be had at once: while it is held no writer cuts a log (a mapped log cut under
    its reader would kill it). Nothing is created: no lock file, no store writer yet."""
    fd = -1
    try:
        fd = os.open(lock_file(store_dir, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        pass  # no writer ever, or one writing now: the logs are read as they are
    try:
        yield
    finally:
        if fd >= 0:
            os.close(fd)


def _check_log(path: Path, newest: bool, manifests: Collection[bytes] | None, found: list[tuple[Path, str]]) -> None:
    """`check_store_logs` of one log (mapped, not read: a huge sparse one costs no memory)."""
    try:
        data = read_regular(path)
        again = read_regular(path) if data[: len(MAGIC)] == MAGIC else data  # the second look, for a log being appended to
    except OSError as exc:
        reason = str(exc.args[1]) if exc.errno == errno.EINVAL else "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        found.append((path, f"is not a regular file or cannot be read ({reason}); remove it"))
        return
    if data[: len(MAGIC)] != MAGIC or len(data) < HEADER_V2:
        found.append((path, "is not a LangGraph store log (bad header): the memories recorded in it cannot be read"))
        return
    first = read_journal(data)
    if first.holes:
        second = read_journal(again)
        holes = [h for h in first.holes if h in second.holes]
        if holes:
            second.holes = holes
            found.append(
                (
                    path,
                    hole_message(path, second).replace("the puts", "the memories") + "; opening the store with CkptStore reads on past it",
                )
            )
    if damaged_tail(data, first.end) and damaged_tail(again, first.end):
        found.append(
            (
                path,
                f"is damaged: its last record, at offset {first.end}, fails its CRC check (not a torn write: all its bytes are there): "
                "the memories recorded in it are lost; the next write copies the log aside as "
                f"{path.name}{DAMAGED_SUFFIX} and cuts the record",
            )
        )
    for at, rec in records_at(data, data[len(MAGIC) : HEADER_V2])[1:]:
        bad = record_problem(rec)
        if bad:
            found.append((path, f"is damaged: the record at offset {at} is malformed ({bad}); opening the store with CkptStore refuses it"))
            break
    why = base_of(first.records)
    if isinstance(why, str):
        found.append((path, f"is damaged: {why}"))
    elif why is not None and manifests is not None and newest and why not in manifests:
        found.append(
            (
                path,
                f"starts from the snapshot {why.hex()[:12]}, which the store does not have: the memories in it are lost; "
                "restore the store from a backup",
            )
        )

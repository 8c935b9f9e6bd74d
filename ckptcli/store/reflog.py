"""The reflog: an append-only record of every move of a ref (formats/reflog.md).

Beside each ref `refs/P` lives its log `logs/refs/P`: one JSON object per line,
oldest first, appended (O_APPEND, fsynced) under the refs lock before the ref itself
is rewritten, so a ref never moves without its entry; where refs move by
compare-and-swap (object storage, `Backend.ref_cas`), added by compare-and-swap after
the move, in the order of the moves (`append`). A last line cut short by a crash
(no newline, or not JSON) is skipped with one warning; the next append starts on a
line of its own. The log is history for people and for `ckpt reset`: nothing else
depends on it, and a store without one (older ckpt, a copy) simply has none yet.
`ckpt prune` (and `ckpt reflog --expire`) trims it (`expire`: 90 days, 1,000 entries per
ref), rewriting a log whole by a rename under the same lock; until an entry expires,
prune keeps the checkpoint it moved a ref away from (`ckptcli.store.prune.reflog_keeps`).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ckptcli.errors import CkptError, ConflictError, NotFoundError
from ckptcli.store import layout
from ckptcli.store.backend import Backend
from ckptcli.store.command import MAX_COMMAND as MAX_COMMAND
from ckptcli.store.command import current_command as current_command
from ckptcli.store.command import set_command as set_command
from ckptcli.store.layout import log_path as log_path

LOG_ROOT = layout.LOGS
SUM_LEN = 16  # hex digits of SHA-256 after each entry: a flipped byte is found
EXPIRE_S = 90 * 86400  # entries older than this are trimmed (git's gc.reflogExpire)
MAX_ENTRIES = 1000  # at most this many entries per ref are kept, the newest
MAX_TIME_NS = 2**63  # an entry's time_ns is in [0, 2**63): the year 2262 at most
CAS_TRIES = 50  # compare-and-swap attempts of one change of a ref or a log (Backend.ref_cas)


@dataclass(frozen=True)
class Entry:
    """One move of `ref` (a ref path without "refs/"): `old` -> `new` (hex ids; None
    where the ref did not exist before, or was deleted)."""

    ref: str
    old: str | None
    new: str | None
    time_ns: int
    reason: str
    command: str
    host: str
    pid: int

    def to_dict(self) -> dict[str, Any]:
        secs, rem = divmod(self.time_ns, 1_000_000_000)
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{rem // 1000:06d}Z"
        return {
            "ref": self.ref,
            "old": self.old,
            "new": self.new,
            "time": when,
            "time_ns": self.time_ns,
            "reason": self.reason,
            "command": self.command,
            "host": self.host,
            "pid": self.pid,
        }


def _sum(body: bytes) -> bytes:
    return hashlib.sha256(body).hexdigest()[:SUM_LEN].encode()


def encode(old: bytes | None, new: bytes | None, reason: str, time_ns: int | None = None) -> bytes:
    body = {
        "old": old.hex() if old is not None else None,
        "new": new.hex() if new is not None else None,
        "time_ns": time.time_ns() if time_ns is None else time_ns,
        "reason": reason,
        "command": current_command(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    line = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()  # never a raw tab or newline
    return line + b"\t" + _sum(line) + b"\n"


def append(backend: Backend, ref_path: str, old: bytes | None, new: bytes | None, reason: str, *, time_ns: int | None = None) -> None:
    """Record a move of the ref at `ref_path`. Where refs move under the refs lock, the
    caller holds it and the entry goes at the end. Where they move by compare-and-swap
    (`Backend.ref_cas`) nobody holds a lock: the entry goes in by compare-and-swap too,
    after every entry no newer than `time_ns`, the ref's `updated` stamp, which grows
    along the ref's moves whatever the writers' clocks say (ckptcli.store.refs); so the
    log keeps the order of the moves even when the writers of two racing moves append
    in the other order. None (an entry that moved nothing): now, at the end."""
    line = encode(old, new, reason, time_ns)
    path = log_path(ref_path)
    if not backend.ref_cas:
        backend.append(path, line)
        return
    for attempt in range(CAS_TRIES):
        data, version = backend.read_versioned(path)
        text = (data or b"")[: (data or b"").rfind(b"\n") + 1]  # an entry cut short goes
        if backend.write_if_match(path, _insert(text, line, time_ns), version):
            return
        backoff(attempt)
    raise ConflictError(f"{path}: {CAS_TRIES} writers changed the log at once; the entry was not recorded", hint="try again")


def backoff(attempt: int) -> None:
    """Sleep before compare-and-swap attempt `attempt` + 1: a random part of 1 ms
    doubling up to 100 ms, so that racing writers spread out rather than collide again."""
    time.sleep(random.uniform(0, min(0.001 * 2**attempt, 0.1)))  # jitter, not a secret


def _insert(text: bytes, line: bytes, time_ns: int | None) -> bytes:
    """`text` (whole lines) with `line` inserted after the last entry whose time is not
    after `time_ns` (a damaged line counts as not after); at the end for None."""
    if time_ns is None:
        return text + line
    end = len(text)
    while end > 0:
        start = text.rfind(b"\n", 0, end - 1) + 1
        d = _decode(text[start : end - 1])
        if d is None or d["time_ns"] <= time_ns:
            break
        end = start
    return text[:end] + line + text[end:]


def _hex_or_none(v: Any) -> bool:
    return v is None or (type(v) is str and len(v) == 64 and all(c in "0123456789abcdef" for c in v))


def check(data: bytes, ref: str = "") -> tuple[list[Entry], list[int], bool]:
    """(entries oldest first, numbers (from 1) of the damaged lines, whether the log ends
    in an entry cut short: text after its last newline)."""
    out: list[Entry] = []
    damaged: list[int] = []
    lines = data.split(b"\n")
    tail = lines.pop()  # the text after the last newline: a write cut short
    torn = tail != b""
    if torn and _decode(tail[:-1]) is not None:
        damaged.append(len(lines) + 1)  # a whole entry whose newline was changed: damage, not a crash
        torn = False
    for number, line in enumerate(lines, 1):
        d = _decode(line)
        if d is None:
            damaged.append(number)
            continue
        out.append(
            Entry(
                ref, d["old"], d["new"], d["time_ns"], str(d.get("reason", "")), str(d.get("command", "")), str(d.get("host", "")), d["pid"]
            )
        )
    return out, sorted(damaged), torn


def _decode(line: bytes) -> dict[str, Any] | None:
    """The fields of one entry line (without its newline), or None when it is damaged."""
    body, tab, digest = line.rpartition(b"\t")
    if not tab or digest != _sum(body):
        return None
    try:
        d = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    ok = (
        type(d) is dict
        and _hex_or_none(d.get("old"))
        and _hex_or_none(d.get("new"))
        and type(d.get("time_ns")) is int
        and 0 <= d["time_ns"] < MAX_TIME_NS
        and type(d.get("pid")) is int
        and 0 <= d["pid"] < 2**63
        and all(type(d.get(k, "")) is str for k in ("reason", "command", "host"))
    )
    return d if ok else None


def parse(data: bytes, ref: str, warn: Callable[[str], None]) -> list[Entry]:
    """The entries of one log, oldest first; a damaged line is skipped with a warning."""
    out, damaged, torn = check(data, ref)
    where = log_path(layout.ref_path(ref))
    if damaged:
        warn(
            f"{where}: {len(damaged)} damaged reflog entr{'y' if len(damaged) == 1 else 'ies'} skipped (line "
            f"{damaged[0]}); run `ckpt verify`"
        )
    if torn:
        warn(f"{where}: its last entry was cut short by a crash and is skipped (the next entry recorded in this reflog removes it)")
    return out


def read(backend: Backend, ref_path: str, warn: Callable[[str], None]) -> list[Entry]:
    """The entries of the ref at `ref_path`, oldest first ([] when it has no log).
    Raises: UnsafePathError when the log is a symbolic link, CorruptError when it is no
    regular file (read, not taken for "no log": `exists` says no to both)."""
    try:
        data = backend.read(log_path(ref_path))
    except NotFoundError:
        return []
    return parse(data, ref_path[len("refs/") :], warn)


def read_all(backend: Backend, warn: Callable[[str], None], prefix: str = "refs") -> list[Entry]:
    """Every entry of every log under `prefix`, newest first: the logs merged by time,
    each log's entries in its own (append) order even where its clock stepped back, so
    numbering each ref's moves in this order gives the N of NAME@{N}. A log that cannot
    be read (larger than a reflog can be, say) is left out with a warning naming it."""

    def left_out(exc: CkptError) -> None:
        warn(f"{exc.message}; its entries are left out" + (f"; {exc.hint}" if exc.hint else ""))

    try:
        # a linked directory (logs/refs/branches...) is named and left out, as a linked
        # log is: the other logs are still shown, never "no ref moves recorded"
        paths = backend.list_around_links(f"{LOG_ROOT}/{prefix}", left_out)
    except CkptError as exc:  # logs/ itself a link, say
        left_out(exc)
        return []
    logs = []
    for p in paths:
        try:
            logs.append(list(reversed(read(backend, p[len(LOG_ROOT) + 1 :], warn))))
        except NotFoundError:
            continue  # removed since the listing
        except CkptError as exc:  # one unreadable log (too large, not a file): the others are shown
            left_out(exc)
    return list(heapq.merge(*logs, key=lambda e: e.time_ns, reverse=True))


@dataclass(frozen=True)
class Trimmed:
    """What expiring one log leaves (formats/reflog.md, "Expiry")."""

    ref: str  # the ref path without "refs/"
    kept: list[Entry]  # the entries that stay, oldest first
    dropped: int  # entries expired or beyond the cap
    data: bytes | None  # the log's new text (b"": remove the file); None: unchanged


def trim(data: bytes, ref: str, *, cutoff_ns: int, max_entries: int = MAX_ENTRIES, ref_exists: bool = True) -> Trimmed:
    """Expire one log's text: an entry older than `cutoff_ns`, or beyond the newest
    `max_entries`, goes; but the newest entry of a ref that exists stays (it says when
    the ref last moved: `ckpt verify` and `ckpt repair refs` read it). A damaged line
    stays as it is (it is `ckpt verify`'s to report); an entry cut short at the end
    goes (the next append would cut it off)."""
    lines = data.split(b"\n")
    tail = lines.pop()
    if tail and _decode(tail[:-1]) is not None:
        lines.append(tail)  # a whole entry whose newline was changed: damage, kept as a line
    decoded = [_decode(line) for line in lines]
    keep = [d is None for d in decoded]  # damaged lines stay
    kept_valid = 0
    for i in range(len(lines) - 1, -1, -1):  # newest first
        d = decoded[i]
        if d is None:
            continue
        newest_of_live_ref = kept_valid == 0 and ref_exists
        if kept_valid < max_entries and (d["time_ns"] >= cutoff_ns or newest_of_live_ref):
            keep[i] = True
            kept_valid += 1
    dropped = sum(1 for i, d in enumerate(decoded) if d is not None and not keep[i])
    kept = [
        Entry(ref, d["old"], d["new"], d["time_ns"], str(d.get("reason", "")), str(d.get("command", "")), str(d.get("host", "")), d["pid"])
        for i, d in enumerate(decoded)
        if d is not None and keep[i]
    ]
    new = b"".join(line + b"\n" for i, line in enumerate(lines) if keep[i]) if dropped else None
    return Trimmed(ref, kept, dropped, new)


def expire(
    backend: Backend,
    *,
    cutoff_ns: int,
    max_entries: int = MAX_ENTRIES,
    dry_run: bool = False,
    warn: Callable[[str], None] | None = None,
    exclusive: bool = False,
) -> list[Trimmed]:
    """Trim every log of the store (`trim`). Where refs move under the refs lock, the
    caller holds it exclusively, as the writers of entries do, so no append runs
    meanwhile; a log is rewritten whole (a temporary file, synced, renamed over it: a
    reader sees the old text or the new, never a part), or removed when nothing is left
    of it (its ref is gone too). Where they move by compare-and-swap (`Backend.ref_cas`),
    a log is rewritten by compare-and-swap, trimmed again if an entry came meanwhile;
    one left empty is removed only when the caller holds the store lock exclusively
    (`exclusive`: no ref moves meanwhile; object storage has no conditional delete),
    else left empty. Nothing is written with `dry_run`. Returns: each log's outcome.

    A log that cannot be read, and a directory of logs that is a symbolic link (never
    followed), are left as they are with a warning naming them; the other logs are
    trimmed all the same (one linked directory left every log untrimmed)."""

    def left_out(exc: CkptError) -> None:
        if warn is not None:
            warn(f"{exc.message}; its entries are left as they are" + (f"; {exc.hint}" if exc.hint else ""))

    try:
        paths = backend.list_around_links(f"{LOG_ROOT}/refs", left_out)
    except NotFoundError:
        return []
    except CkptError as exc:  # logs/ or logs/refs itself a link, say: nothing below it is read
        left_out(exc)
        return []
    out: list[Trimmed] = []
    for path in paths:
        ref_path = path[len(LOG_ROOT) + 1 :]
        if backend.ref_cas:
            t = _expire_cas(backend, path, cutoff_ns, max_entries, dry_run, exclusive, warn)
            if t is not None:
                out.append(t)
            continue
        try:
            data = backend.read(path)
        except CkptError as exc:
            if warn is not None:
                warn(f"{path}: cannot be read ({exc.message}); its entries are left as they are")
            continue
        t = trim(data, ref_path[len("refs/") :], cutoff_ns=cutoff_ns, max_entries=max_entries, ref_exists=backend.exists(ref_path))
        out.append(t)
        if dry_run or t.data is None:
            continue
        if t.data:
            backend.write_atomic(path, t.data)
        else:
            backend.delete(path)
    return out


def _expire_cas(
    backend: Backend, path: str, cutoff_ns: int, max_entries: int, dry_run: bool, exclusive: bool, warn: Callable[[str], None] | None
) -> Trimmed | None:
    """expire's trimming of the log at `path` by compare-and-swap; None when it is gone
    or cannot be read."""
    ref_path = path[len(LOG_ROOT) + 1 :]
    for attempt in range(CAS_TRIES):
        try:
            data, version = backend.read_versioned(path)
        except CkptError as exc:
            if warn is not None:
                warn(f"{path}: cannot be read ({exc.message}); its entries are left as they are")
            return None
        if data is None:
            return None
        t = trim(data, ref_path[len("refs/") :], cutoff_ns=cutoff_ns, max_entries=max_entries, ref_exists=backend.exists(ref_path))
        if dry_run or t.data is None:
            return t
        if not t.data and exclusive:
            backend.delete(path)
            return t
        if backend.write_if_match(path, t.data, version):
            return t
        backoff(attempt)
    raise ConflictError(f"{path}: {CAS_TRIES} writers changed the log at once; it was not trimmed", hint="try again")

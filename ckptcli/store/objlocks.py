"""Locks held in the store itself (docs/design.md, "Locks in the store"), so that they
work between hosts that share an object store: one small object per holder under
``locks/`` (`layout.lock_object_path`), written with a conditional create and read back
by listing the prefix.

Taking one (`acquire`): create this holder's object, then list ``locks/`` and look for a
conflicting lock (any other lock for an exclusive request, an exclusive one for a
shared request). On a conflict the taker removes its own object, waits with a growing
random backoff and tries again until its wait runs out (`LockError`, naming the holder).
Two takers that race both create before they list, so at least one of them sees the
other: they can both step back, never both hold.

A lock is stale when it was not refreshed for `STALE_AFTER` seconds of its reader's
wall clock, or when its refresh time lies more than `STALE_AFTER` ahead of that clock
(the same tolerance of skew either way: a planted or wildly skewed time in the future
would otherwise never go stale), or at once when it names this host and a process of
this host that is gone;
a stale lock blocks nobody and `remove_locks` deletes it. While held, a `HeldLock`
rewrites its object every `REFRESH_EVERY` seconds from a daemon thread (a compare-and-
swap on the version it wrote last, so a lock that `ckpt unlock` removed is noticed and
not written again); `HeldLock.check` fails when the lock could not be kept alive, so the
holder stops before it commits.

Invariants: a lock object is at most `MAX_LOCK_BYTES` of JSON with a version field; an
object under ``locks/`` that is not named by 32 hex digits is not a lock object (the
local store's flock files live there too); a damaged lock object is reported by
`list_locks`, counted as stale, and never stops a command with a traceback.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import math
import os
import random
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

from ckptcli import notices
from ckptcli.errors import CkptError, CorruptError, LockError, NotFoundError, UnsupportedVersionError
from ckptcli.store.backends.base import ObjectBackend
from ckptcli.store.command import current_command
from ckptcli.store.layout import LOCKS, lock_object_path
from ckptcli.store.locking import waitable

__all__ = [
    "CHECK_AFTER",
    "LOCK_NOTICE_AFTER",
    "LOCK_VERSION",
    "MAX_LOCK_BYTES",
    "REFRESH_EVERY",
    "STALE_AFTER",
    "HeldLock",
    "LockEnv",
    "LockInfo",
    "LockRecord",
    "acquire",
    "decode_lock",
    "encode_lock",
    "list_locks",
    "pending_locks",
    "release_pending",
    "remove_locks",
]

LOCK_VERSION = 1
MAX_LOCK_BYTES = 4096  # a lock object larger than this is not one ckpt wrote
STALE_AFTER = 30 * 60.0  # seconds without a refresh after which a lock blocks nobody
REFRESH_EVERY = 5 * 60.0  # seconds between two refreshes of a held lock
CHECK_AFTER = STALE_AFTER - 2 * REFRESH_EVERY  # `check` fails past this since the last good refresh
LOCK_NOTICE_AFTER = 0.5  # seconds a taker waits before it says who holds the lock
MAX_BACKOFF = 1.0  # seconds, the longest pause between two tries

_ID = re.compile(r"[0-9a-f]{32}")
_KINDS = ("shared", "exclusive")
_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")  # a lock's name: "store", "refs", "writers"
_MAX_TEXT = 512  # characters of host, user and command kept in a record


# Every lock object this process may have written and not yet removed, from just before its
# create request until its delete ended: an interrupt (Ctrl-C, SIGTERM) can land after a
# request wrote the object and before any caller holds it, where no `finally` can see it.
_PENDING: dict[tuple[int, str], tuple[ObjectBackend, HeldLock | None]] = {}
_PENDING_MUTEX = threading.Lock()
_AT_EXIT: list[bool] = []


def _pending_add(backend: ObjectBackend, path: str, held: HeldLock | None = None) -> None:
    with _PENDING_MUTEX:
        _PENDING[(id(backend), path)] = (backend, held)
        if not _AT_EXIT:
            import atexit

            _AT_EXIT.append(True)
            atexit.register(release_pending)


def _pending_drop(backend: ObjectBackend, path: str) -> None:
    with _PENDING_MUTEX:
        _PENDING.pop((id(backend), path), None)


def pending_locks() -> set[tuple[int, str]]:
    """The keys of the lock objects this process may still have in a store (for
    `release_pending(keep=...)`)."""
    with _PENDING_MUTEX:
        return set(_PENDING)


def release_pending(*, keep: set[tuple[int, str]] | None = None) -> None:
    """Remove the lock objects this process wrote and still has (but never those in
    `keep`): what the CLI does as a run ends, and an atexit hook
    at interpreter exit, so that an interrupt that landed between a lock's create request
    and its holder leaves no object that holds off every other host. Best effort: a
    failure leaves the object to go stale."""
    with _PENDING_MUTEX:
        items = [(k, v) for k, v in _PENDING.items() if keep is None or k not in keep]
    for (_, path), (backend, held) in items:
        with contextlib.suppress(Exception):  # best effort, at the end of a run or at exit
            if held is not None:
                held.release()
            else:
                backend.delete(path)
        _pending_drop(backend, path)


def _pid_alive(pid: int) -> bool:
    """Whether a process `pid` lives on this host (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    except (OverflowError, ValueError):
        return False  # no process can have that number
    return True


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _host() -> str:
    """This host's name as lock records give it: CKPT_HOST when set (containers that
    share a hostname, or a test's "hosts"), else the system's."""
    return os.environ.get("CKPT_HOST") or socket.gethostname()


@dataclass(frozen=True)
class LockEnv:
    """Who takes a lock and how it tells time: this process by default; a test gives each
    "host" its own name and clock."""

    host: str = field(default_factory=_host)
    pid: int = field(default_factory=os.getpid)
    user: str = field(default_factory=_user)
    clock: Callable[[], float] = time.time  #: wall-clock seconds, stamped into records
    pid_alive: Callable[[int], bool] = _pid_alive  #: whether a pid of this host lives


@dataclass(frozen=True)
class LockRecord:
    """What one lock object says (formats: a JSON object; `encode_lock`)."""

    id: str  #: 32 hex digits, also the object's name
    kind: str  #: "shared" or "exclusive"
    host: str
    pid: int
    user: str
    created: float  #: wall-clock seconds
    refreshed: float  #: wall-clock seconds of the last refresh
    command: str = ""  #: the command line that took it
    name: str = "store"  #: which lock: "store" (takes shared, prune exclusive), "refs", "writers"; names never conflict

    @property
    def exclusive(self) -> bool:
        return self.kind == "exclusive"

    def holder(self, now: float) -> str:
        """ "ckpt prune (pid 4242 on host h, user u, refreshed 12 s ago)"."""
        who = f"{self.command} " if self.command else ""
        ahead = self.refreshed - now
        when = f"{_age(-ahead)} ago" if ahead <= 1 else f"{_age(ahead)} ahead of this host's clock"
        return f"{who}(pid {self.pid} on host {self.host}, user {self.user}, refreshed {when})"


@dataclass(frozen=True)
class LockInfo:
    """One object under ``locks/`` as `list_locks` found it."""

    path: str
    record: LockRecord | None  #: None when the object cannot be read as a lock
    stale: bool  #: blocks nobody; `remove_locks` deletes it
    why: str = ""  #: why it is stale, or why it cannot be read

    def to_json(self, now: float) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "stale": self.stale, "why": self.why or None}
        if self.record is not None:
            r = self.record
            out |= {"id": r.id, "name": r.name, "kind": r.kind, "host": r.host, "pid": r.pid, "user": r.user, "command": r.command}
            out |= {"created": r.created, "refreshed": r.refreshed, "age_s": round(max(0.0, now - r.refreshed), 3)}
        return out


#: an age beyond this is no clock skew ckpt can have caused: shown as such, not as a
#: number of hours hundreds of digits long (a planted `refreshed: 1e308`)
_FAR = 100 * 365.25 * 86400


def _age(seconds: float) -> str:
    s = max(0.0, seconds)
    if s >= _FAR:
        return "more than 100 years (not a time ckpt wrote)"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def encode_lock(record: LockRecord) -> bytes:
    """Args: a record. Returns: its object, JSON with the version `v` first."""
    body = {"v": LOCK_VERSION, **{k: getattr(record, k) for k in LockRecord.__dataclass_fields__}}
    return json.dumps(body, separators=(",", ":"), sort_keys=False).encode()


def decode_lock(data: bytes, where: str) -> LockRecord:
    """Args: a lock object's bytes, where it came from (for messages). Returns: its
    record. Raises: CorruptError (not a lock: too large, not JSON, a field missing or of
    the wrong type), UnsupportedVersionError (written by a newer ckpt)."""
    if len(data) > MAX_LOCK_BYTES:
        raise CorruptError(f"{where}: a lock object of {len(data)} bytes (at most {MAX_LOCK_BYTES}); not a lock ckpt wrote")
    try:
        d = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptError(f"{where}: not a lock object (not JSON: {exc})") from None
    if not isinstance(d, dict) or type(d.get("v")) is not int:
        raise CorruptError(f"{where}: not a lock object (no version field)")
    if d["v"] > LOCK_VERSION:
        raise UnsupportedVersionError(f"{where}: a lock object of version {d['v']} (this ckpt reads {LOCK_VERSION})", hint="upgrade ckpt")
    if d["v"] != LOCK_VERSION:
        raise CorruptError(f"{where}: a lock object of unknown version {d['v']}")
    try:
        record = LockRecord(
            id=_text(d, "id"),
            kind=_text(d, "kind"),
            host=_text(d, "host"),
            pid=_int(d, "pid"),
            user=_text(d, "user"),
            created=_time(d, "created"),
            refreshed=_time(d, "refreshed"),
            command=_text(d, "command") if "command" in d else "",
            name=_text(d, "name") if "name" in d else "store",
        )
    except (KeyError, TypeError) as exc:
        raise CorruptError(f"{where}: a damaged lock object ({exc})") from None
    if not _ID.fullmatch(record.id) or record.kind not in _KINDS or record.pid <= 0 or not _NAME.fullmatch(record.name):
        raise CorruptError(f"{where}: a damaged lock object (id, kind or pid out of range)")
    return record


def _text(d: dict[str, Any], key: str) -> str:
    v = d[key]
    if not isinstance(v, str) or len(v) > _MAX_TEXT:
        raise TypeError(f"field {key!r} is not a short string")
    return v


def _int(d: dict[str, Any], key: str) -> int:
    v = d[key]
    if type(v) is not int:
        raise TypeError(f"field {key!r} is not an integer")
    return v


def _time(d: dict[str, Any], key: str) -> float:
    v = d[key]
    if type(v) not in (int, float) or not math.isfinite(v):
        raise TypeError(f"field {key!r} is not a time")
    return float(v)


def _stale_why(record: LockRecord, env: LockEnv, now: float, stale_after: float) -> str:
    """Why `record` is stale as seen by `env` at `now`; "" when it is live."""
    if now - record.refreshed > stale_after:
        return f"not refreshed for {_age(now - record.refreshed)}"
    if record.refreshed - now > stale_after:  # the same tolerance of skew ahead as behind: else it would never go stale
        return f"refreshed {_age(record.refreshed - now)} ahead of this host's clock (a clock that far off, or not a lock ckpt wrote)"
    if record.host == env.host and record.pid != env.pid and not env.pid_alive(record.pid):
        return f"its process {record.pid} on this host ({env.host}) is gone"
    return ""


def list_locks(backend: ObjectBackend, *, env: LockEnv | None = None, stale_after: float = STALE_AFTER) -> list[LockInfo]:
    """Args: a store's backend, who looks (`LockEnv`: this host and its clock). Returns:
    every lock object, sorted by path, each with whether it is stale and why; a damaged
    one is listed stale with what is wrong, one a newer ckpt wrote is listed live.
    Raises: StoreIOError."""
    env = env or LockEnv()
    out = []
    for info in backend.list(f"{LOCKS}/"):
        if not _ID.fullmatch(info.path[len(LOCKS) + 1 :]):
            continue  # not a lock object: a local store's flock file or writer mark
        where = f"{backend.url}/{info.path}"
        try:
            if info.size > MAX_LOCK_BYTES:
                raise CorruptError(f"{where}: a lock object of {info.size} bytes (at most {MAX_LOCK_BYTES}); not a lock ckpt wrote")
            record = decode_lock(backend.get_range(info.path, 0, MAX_LOCK_BYTES + 1), where)  # never more than a lock can be
            if record.id != info.path[len(LOCKS) + 1 :]:
                raise CorruptError(f"{where}: a lock object of id {record.id} under another name")
        except NotFoundError:
            continue  # released since the listing
        except UnsupportedVersionError as exc:
            out.append(LockInfo(info.path, None, False, str(exc)))
            continue
        except CorruptError as exc:
            out.append(LockInfo(info.path, None, True, f"damaged: {exc}"))
            continue
        why = _stale_why(record, env, env.clock(), stale_after)
        out.append(LockInfo(info.path, record, bool(why), why))
    return out


def remove_locks(
    backend: ObjectBackend, *, all: bool = False, env: LockEnv | None = None, stale_after: float = STALE_AFTER
) -> list[LockInfo]:
    """What `ckpt unlock` does. Args: a backend; all: remove every lock, live ones too
    (only when no ckpt command runs against the store). Returns: the locks removed.
    Raises: StoreIOError."""
    removed = []
    for info in list_locks(backend, env=env, stale_after=stale_after):
        if info.stale or all:
            backend.delete(info.path)
            removed.append(info)
    return removed


class HeldLock:
    """A lock this process holds (`acquire`); a context manager that releases it. A daemon
    thread refreshes its object every `refresh_every` seconds (real time)."""

    def __init__(
        self, backend: ObjectBackend, record: LockRecord, etag: str, env: LockEnv, *, refresh_every: float, check_after: float
    ) -> None:
        self.backend, self.record, self.env = backend, record, env
        self.path = lock_object_path(record.id)
        self._etag, self._check_after = etag, check_after
        self._last_ok = record.refreshed
        self._lost = ""  # why the lock is no longer ours
        self.refresh_error = ""  # the last refresh's failure, "" after a good one
        self._released = False
        self._deleted = False  # the object's delete ended (release is then a no-op)
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(refresh_every,), name=f"ckpt-lock-{record.id[:8]}", daemon=True)
        _pending_add(backend, self.path, self)
        self._thread.start()

    @property
    def last_refresh(self) -> float:
        """Wall-clock seconds (the env's clock) of the last good write of the object."""
        return self._last_ok

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any backend's failure
                self.refresh_error = f"{type(exc).__name__}: {exc}"

    def refresh(self) -> None:
        """Rewrite the object with a new refresh time, only over the version written last
        (compare-and-swap): a lock removed meanwhile is lost, not written again. A failure
        is kept in `refresh_error`; `check` decides when it is too late."""
        with self._mutex:
            if self._released or self._lost:
                return
            now = self.env.clock()
            record = replace(self.record, refreshed=now)
            try:
                info = self.backend.put_if_match(self.path, encode_lock(record), self._etag)
            except (CkptError, OSError) as exc:
                self.refresh_error = str(exc)
                return
            if info is None:
                self._lost = f"its object {self.path} was removed or replaced (by `ckpt unlock`?)"
                return
            self.record, self._etag, self._last_ok, self.refresh_error = record, info.etag, now, ""

    def check(self, *, confirm: bool = False) -> None:
        """Call before a commit. Args: confirm: also read the object's version back (one
        request), so that a removal since the last refresh is seen now, not at the next
        refresh. Raises: LockError when the lock was released, was removed by someone
        else, or could not be refreshed for `check_after` seconds: another host may count
        it stale by now, so the holder must stop. StoreIOError (confirm only)."""
        where = f"the {self.record.kind} lock on the store at {self.backend.url}"
        if confirm and not self._released:
            self._confirm()
        if self._released:
            raise LockError(f"{where} was released", hint="take the lock again")
        if self._lost:
            raise LockError(f"{where} is gone: {self._lost}", hint="run the command again")
        since = self.env.clock() - self._last_ok
        if since > self._check_after:
            last = f" (last error: {self.refresh_error})" if self.refresh_error else ""
            raise LockError(
                f"{where} could not be refreshed for {_age(since)}{last}; stopping before the commit",
                hint="check the connection to the store and run the command again",
            )

    def _confirm(self) -> None:
        with self._mutex:
            if self._lost:
                return
            try:
                etag = self.backend.stat(self.path).etag
            except NotFoundError:
                etag = ""
            if etag != self._etag:
                self._lost = f"its object {self.path} was removed or replaced (by `ckpt unlock`?)"

    def release(self, *, failing: bool = False) -> None:
        """Stop refreshing and delete the object; idempotent. A failed delete is a warning:
        the object goes stale after STALE_AFTER and `ckpt unlock` removes it. `failing`:
        the holder is already failing (an exception unwinds through its lock), most often
        for the cause that makes the delete fail too (a bucket gone, a network down): then
        the failed delete says nothing, and the command's error stays its one line."""
        with self._mutex:
            if self._deleted:
                return
            self._released = True
        self._stop.set()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join()  # (not started when an interrupt landed in __init__)
        if self._deleted:
            return  # an interrupted release finished by `release_pending`, or the other way round
        try:
            self.backend.delete(self.path)  # a second delete of a removed object does nothing
        except (CkptError, OSError) as exc:
            if not failing:
                _warn(f"could not remove the lock {self.backend.url}/{self.path} ({exc}); `ckpt unlock` removes it once stale")
        self._deleted = True
        _pending_drop(self.backend, self.path)

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release(failing=kind is not None)


def _warn(message: str) -> None:
    handler = notices.handler()
    if handler is not None:
        handler(message)


def acquire(
    backend: ObjectBackend,
    exclusive: bool,
    *,
    wait: float,
    env: LockEnv | None = None,
    command: str | None = None,
    stale_after: float = STALE_AFTER,
    refresh_every: float = REFRESH_EVERY,
    check_after: float = CHECK_AFTER,
    name: str = "store",
) -> HeldLock:
    """Take the store's lock `name`, shared (takes) or exclusive (prune, format migrations).
    Locks of different names never conflict ("store", "refs", "writers").

    Args: backend; exclusive; wait: seconds to retry while another holder conflicts
    (0: try once); env: who takes it (default: this process); command: what its record
    names (default: `current_command()`); stale_after, refresh_every, check_after: see
    the module's constants. Returns: the HeldLock (use it as a context manager). Raises:
    LockError naming the holder when the wait runs out, StoreIOError."""
    waitable(wait)
    env = env or LockEnv()
    kind = "exclusive" if exclusive else "shared"
    start = time.monotonic()
    delay, told, warned = 0.005, False, set[str]()
    mine: tuple[LockRecord, str] | None = None
    while True:
        if mine is None:
            mine = _create(backend, env, kind, current_command() if command is None else command, name)
        record, etag = mine
        try:
            blockers = _conflicts(backend, record, env, stale_after, warned)
        except BaseException:
            with contextlib.suppress(CkptError, OSError):
                backend.delete(lock_object_path(record.id))
                _pending_drop(backend, lock_object_path(record.id))
            raise
        if not blockers:
            return HeldLock(backend, record, etag, env, refresh_every=refresh_every, check_after=check_after)
        # An exclusive taker blocked by shared holders only keeps its object while it
        # waits: new shared takers see it and stand back, so a stream of takes cannot
        # starve a prune. Blocked by another exclusive one, both stand back (each deletes
        # its own) and try again after a random pause: two can never both hold.
        waiting_on_shared = exclusive and all(b.record is not None and not b.record.exclusive for b in blockers)
        waited = time.monotonic() - start
        if not waiting_on_shared or waited >= wait:
            backend.delete(lock_object_path(record.id))
            _pending_drop(backend, lock_object_path(record.id))
            mine = None
        blocker = blockers[0]
        held_by = blocker.record.holder(env.clock()) if blocker.record else f"a lock this ckpt cannot read ({blocker.why})"
        if waited >= wait:
            raise LockError(
                f"the store at {backend.url} is locked ({blocker.record.kind if blocker.record else 'unknown'}) by {held_by}",
                hint="wait for it to finish and try again; if its process is gone, `ckpt unlock` removes its lock "
                "once stale (30 min without refresh, at once on its own host), `ckpt unlock --remove-all` any lock",
            )
        if not told and waited >= LOCK_NOTICE_AFTER:
            told = True
            notices.info(f"waiting for the store lock {name!r} ({kind}) held by {held_by}; up to {wait:.0f} s")
        pause = min(delay * random.uniform(0.5, 1.5), max(0.0, wait - waited))
        if not told and waited < LOCK_NOTICE_AFTER:
            pause = min(pause, LOCK_NOTICE_AFTER - waited)  # wake to say who holds it, not only to give up
        time.sleep(pause)
        delay = min(delay * 2, MAX_BACKOFF)


def _create(backend: ObjectBackend, env: LockEnv, kind: str, command: str, name: str = "store") -> tuple[LockRecord, str]:
    """Write a new lock object under a fresh random name; returns it and its etag."""
    now = env.clock()
    for _ in range(8):
        record = LockRecord(
            id=secrets.token_hex(16),
            kind=kind,
            host=env.host[:_MAX_TEXT],
            pid=env.pid,
            user=env.user[:_MAX_TEXT],
            created=now,
            refreshed=now,
            command=command[:_MAX_TEXT],
            name=name,
        )
        path = lock_object_path(record.id)
        _pending_add(backend, path)  # before the request: an interrupt may land once it wrote
        info = backend.put_if_match(path, encode_lock(record), None)
        if info is not None:
            return record, info.etag
        _pending_drop(backend, path)  # the name was taken: that object is not ours
    raise LockError(f"the store at {backend.url}: could not create a lock object under a fresh name", hint="try again")


def _conflicts(backend: ObjectBackend, own: LockRecord, env: LockEnv, stale_after: float, warned: set[str]) -> list[LockInfo]:
    """The other live locks of `own`'s name that conflict with it (any for an exclusive
    lock, the exclusive ones for a shared lock); empty when `own` holds."""
    found = []
    for info in list_locks(backend, env=env, stale_after=stale_after):
        if info.path == lock_object_path(own.id):
            continue
        if info.stale:
            if info.record is None and info.path not in warned:
                warned.add(info.path)
                _warn(f"{info.why}; it does not block, `ckpt unlock` removes it")
            continue
        if info.record is not None and info.record.name != own.name:
            continue  # another lock: "refs" does not conflict with "store"
        if info.record is None or own.exclusive or info.record.exclusive:
            found.append(info)  # a lock of a newer ckpt blocks either kind: its kind cannot be read
    return found

"""`ckpt run`'s supervisor: starts a program, checkpoints its declared state consistently,
and restarts it from its last good checkpoint when it dies (docs/processes.md).

One supervisor runs per (store, subject) on a host; it says so in a runtime record (a small
JSON file in a private directory of this host, never in the store) with its pid and start
time, the socket `ckpt checkpoint` and `ckpt halt` talk to, and what it has frozen. A
record whose pid is gone (or is another process now) is stale: the next `ckpt run` of the
subject thaws what it says was frozen and removes it.

A checkpoint: ask the program (the cooperative protocol, ckptcli.adapters.process.control)
and wait up to the timeout for it to say ready; else freeze it (freeze.py); take the
declared state files as blobs, with the supervisor's events since the last checkpoint as
the tail (events.py); resume or thaw, whatever happened. After the take the supervisor
records a `process:checkpoint` event (how, how long) that lands in the next checkpoint's
tail, since a checkpoint cannot hold its own duration.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ckptcli._util.timeparse import parse_seconds
from ckptcli.adapters.process import events as pev
from ckptcli.adapters.process.control import Channel
from ckptcli.adapters.process.freeze import CgroupFreezer, FreezeError, Freezer, ckpt_cgroup, thaw_record
from ckptcli.adapters.process.state import StatePath, blob_name, check_state_paths, restore_state
from ckptcli.errors import CkptError, InvalidInputError, LockError, NotFoundError, StoreIOError
from ckptcli.format.manifest import Subject
from ckptcli.history.events import LABEL_SEQ, Event, make_event
from ckptcli.process import ENV_CONTROL_FD, ENV_RESTORED

if TYPE_CHECKING:
    from ckptcli.format.values import Encoded
    from ckptcli.store.repository import Store

__all__ = [
    "BAD_TAG_PREFIX",
    "FixedSchedule",
    "RunConfig",
    "Schedule",
    "Supervisor",
    "ask",
    "find_record",
    "parse_backoff",
    "process_subject",
    "runtime_dir",
    "thaw_stale_records",
]

#: tags that mark a checkpoint bad: `process-bad-<first 16 hex digits>`
BAD_TAG_PREFIX = "process-bad-"
#: the label of a checkpoint taken when supervision ended between two starts: the
#: checkpoint whose copy of the state it carries, or "none" (it holds none: not a start point)
LABEL_STATE_FROM = "process.state_from"
#: a program that ran this long before dying resets the backoff
HEALTHY_SECONDS = 600.0
#: how long a program has to exit after the forwarded SIGTERM before it is killed
GRACE_SECONDS = 30.0


def process_subject(text: str) -> Subject:
    """SUBJECT of `ckpt run`, `ckpt checkpoint`, `ckpt halt`: a `process:NAME`. Raises: InvalidInputError."""
    subj = Subject.parse(text)
    if subj.kind != "process":
        raise InvalidInputError(f"{text}: `ckpt run` supervises processes only", hint=f"write it as process:{subj.name}")
    return subj


def parse_backoff(text: str) -> tuple[float, float]:
    """--backoff MIN[:MAX] (MAX default: MIN × 30, at least MIN). Raises: InvalidInputError."""
    lo_text, sep, hi_text = text.partition(":")
    lo = parse_seconds(lo_text, "--backoff MIN")
    hi = parse_seconds(hi_text, "--backoff MAX") if sep else max(lo, lo * 30)
    if hi < lo:
        raise InvalidInputError(f"--backoff {text!r}: MAX is below MIN")
    return lo, hi


class Schedule(Protocol):
    """When the next scheduled checkpoint is due (the adaptive one: ckptcli.history.advise)."""

    def next_delay(self) -> float: ...
    def took(self, seconds: float) -> None: ...
    def failed(self, at: float) -> None: ...


@dataclass
class FixedSchedule:
    """A checkpoint every `every` seconds (None: only when asked and before exiting)."""

    every: float | None

    def next_delay(self) -> float:
        return self.every if self.every is not None else float("inf")

    def took(self, seconds: float) -> None:
        pass

    def failed(self, at: float) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"kind": "fixed", "every_seconds": self.every}


@dataclass
class RunConfig:
    """What `ckpt run` was asked to do (checked by the CLI before the supervisor starts)."""

    store: Store
    subject: Subject
    argv: list[str]
    cwd: Path
    root: Path
    state: list[StatePath]
    freezer: Freezer
    schedule: Schedule
    on_signal: int | None = None
    timeout: float = 10.0
    max_restarts: int | None = None
    backoff: tuple[float, float] = (10.0, 300.0)
    bad_after: int = 3
    #: the other helper's /proc description of a pid, stored under ext.process.proc (merge hook)
    describe: Callable[[int], dict[str, Any]] | None = None
    log: Callable[[str], None] = lambda line: None
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))


# -- runtime records ------------------------------------------------------------------------------
def runtime_dir() -> Path:
    """This host's private directory of supervisor records: CKPT_RUNTIME_DIR, else
    $XDG_RUNTIME_DIR/ckpt, else /tmp/ckpt-UID; made 0700, and refused when it is a symlink
    or another user's."""
    given = os.environ.get("CKPT_RUNTIME_DIR")
    if given:
        path = Path(given)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "ckpt"
    else:
        path = Path("/tmp") / f"ckpt-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise LockError(
            f"the runtime directory {path} is not a private directory of this user",
            hint="remove it, or set CKPT_RUNTIME_DIR to a directory only you can write (mode 0700)",
        )
    return path


def _key(store: Store, subject: Subject) -> str:
    """The name of `subject`'s runtime record and claim with `store`: the same whatever
    the store's path was spelled as (`-s store`, `-s /abs/store`, `-s ./store/`, a link
    to it), so that a second supervisor is refused and `ckpt checkpoint` and `ckpt halt`
    find the first."""
    where = os.path.realpath(store.directory) if store.directory is not None else store.location.rstrip("/")
    return hashlib.sha256(f"{where}\0{subject}".encode()).hexdigest()[:24]


def _start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (when the process started), None when there is no such
    process (or only its zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read(4096).decode("ascii", "replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    if fields and fields[0] in ("Z", "X"):
        return None
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def _alive(pid: object, started: object) -> bool:
    return isinstance(pid, int) and pid > 0 and started is not None and _start_time(pid) == started


def find_record(store: Store, subject: Subject) -> tuple[Path, dict[str, Any] | None]:
    """The runtime record of `subject`'s supervisor on this host: (its path, its content
    when a live supervisor wrote it). A stale record (its supervisor is gone) is returned
    as {"stale": True, ...}."""
    path = runtime_dir() / f"{_key(store, subject)}.json"
    return path, read_record(path)


def read_record(path: Path) -> dict[str, Any] | None:
    """A runtime record (None when there is none), with "stale" set: its supervisor is gone.

    Raises: LockError for a record that is there but cannot be read (damaged, or more than
    RECORD_MAX bytes): it is never taken for no record, which would let a second supervisor in."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _unreadable(path, exc.strerror or "cannot open it") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(RECORD_MAX + 1)
    try:
        rec = json.loads(data) if len(data) <= RECORD_MAX else None
    except ValueError:
        rec = None
    if not isinstance(rec, dict):
        raise _unreadable(path, "not a record ckpt wrote")
    rec["stale"] = not _alive(rec.get("pid"), rec.get("started"))
    return rec


#: the largest runtime record read (ckpt's own are a few hundred bytes: the argv in it is cut)
RECORD_MAX = 65536


def _unreadable(path: Path, why: str) -> LockError:
    return LockError(
        f"the runtime record {path} cannot be read ({why})",
        hint="if no `ckpt run` of this subject runs on this host, remove it",
    )


def _shown(argv: list[str]) -> list[str]:
    """The argv as a runtime record keeps it: at most 32 arguments of at most 256 characters."""
    return [a if len(a) <= 256 else a[:253] + "..." for a in argv[:32]] + (["..."] if len(argv) > 32 else [])


def _write_record(path: Path, rec: dict[str, Any]) -> None:
    """Write the record whole: a new temporary file (O_EXCL under a random name: nothing
    planted at a name is written through), renamed over the record.

    Raises: StoreIOError."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(rec, f)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StoreIOError(f"cannot write the runtime record {path}: {exc.strerror}") from None


def clear_stale(path: Path, rec: dict[str, Any]) -> list[str]:
    """Undo what a dead supervisor left: thaw what it froze; returns what was done. The
    record itself is removed unless its program still runs."""
    done = []
    frozen = rec.get("frozen")
    if isinstance(frozen, dict):
        what = thaw_record(frozen)
        if what:
            done.append(what)
    child = rec.get("child")
    if not (isinstance(child, dict) and _alive(child.get("pid"), child.get("started"))):
        made = ckpt_cgroup(rec.get("cgroup"))
        if made is not None:
            with contextlib.suppress(OSError):
                os.rmdir(made)  # the cgroup it made for the program: empty now, or left alone
                done.append(f"removed cgroup {made}")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.with_suffix(".sock"))  # its socket is named by the record, never by what the record says
    return done


def thaw_stale_records() -> list[str]:
    """For `ckpt doctor`: every record in this host's runtime directory whose supervisor is
    gone, its frozen program thawed and the record cleared (kept while its program still
    runs); returns one line for each, saying what was done."""
    out = []
    for path in sorted(runtime_dir().glob("*.json")):
        try:
            rec = read_record(path)
        except LockError as exc:
            out.append(exc.message)
            continue
        if rec is None or not rec["stale"]:
            continue
        done = clear_stale(path, rec)
        out.append(f"{rec.get('subject')}: its supervisor (pid {rec.get('pid')}) is gone" + (f"; {'; '.join(done)}" if done else ""))
    return out


def _no_answer(store: Store, subject: Subject, rec: dict[str, Any], command: str, timeout: float) -> LockError:
    """The error of a supervisor that did not answer within `timeout`: for a halt whose
    final checkpoint is taken (the supervisor's record says so) and whose program has not
    exited yet, that, rather than no answer at all."""
    if command == "halt":
        try:
            _path, now = find_record(store, subject)
        except CkptError:
            now = None
        halted = now.get("halted") if now is not None and not now["stale"] else None
        if isinstance(halted, dict):
            hexid = halted.get("checkpoint")
            grace = halted.get("grace_s")
            taken = f"took the final checkpoint {hexid[:12]}" if isinstance(hexid, str) and hexid else "took no final checkpoint"
            within = f" within {grace:g} s" if isinstance(grace, (int, float)) and not isinstance(grace, bool) else ""
            return LockError(
                f"the supervisor of {subject} (pid {rec.get('pid')}) {taken} and sent its program SIGTERM, but the"
                f" program had not exited when this halt stopped waiting ({timeout:g} s); it is killed (SIGKILL) if it"
                f" does not exit{within} of SIGTERM",
                hint=f"wait, or give --timeout more time (ckpt halt {subject} --timeout 60s)",
            )
    return LockError(f"the supervisor of {subject} (pid {rec.get('pid')}) did not answer within {timeout:g} s")


def ask(store: Store, subject: Subject, command: str, timeout: float) -> str:
    """Send `command` (checkpoint, halt) to the subject's running supervisor and return its
    answer's text (a checkpoint's hex, or "none").

    Raises:
        NotFoundError when no supervisor of the subject runs on this host (a stale record is
        said and cleared); LockError when it does not answer within `timeout`;
        CkptError with its reason when it answers with an error."""
    path, rec = find_record(store, subject)
    if rec is None:
        raise NotFoundError(
            f"no `ckpt run` supervises {subject} with this store on this host",
            hint=f"start one: ckpt run --subject {subject} ... -- CMD",
        )
    if rec["stale"]:
        done = clear_stale(path, rec)
        more = f" ({'; '.join(done)})" if done else ""
        if path.exists():  # kept: the program it started still runs, unsupervised
            kid = rec.get("child")
            child: dict[str, Any] = kid if isinstance(kid, dict) else {}
            raise NotFoundError(
                f"the supervisor of {subject} (pid {rec.get('pid')}) is gone; its program (pid {child.get('pid')}) still runs{more}",
                hint=f"stop it (kill -TERM -{child.get('pid')}), then: ckpt run --subject {subject} ... -- CMD",
            )
        raise NotFoundError(
            f"the supervisor of {subject} (pid {rec.get('pid')}) is gone; its stale record was cleared{more}",
            hint=f"start it again: ckpt run --subject {subject} ... -- CMD",
        )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while True:  # a backlog that is full (many asking at once) is waited on, up to the timeout
            try:
                sock.connect(str(path.with_suffix(".sock")))
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError from None
                time.sleep(0.01)
        sock.sendall(f"{command}\n".encode("ascii"))
        buf = b""
        while b"\n" not in buf and len(buf) < 4096:
            data = sock.recv(4096)
            if not data:
                break
            buf += data
    except TimeoutError:
        raise _no_answer(store, subject, rec, command, timeout) from None
    except OSError as exc:
        raise LockError(f"cannot reach the supervisor of {subject} (pid {rec.get('pid')}): {exc.strerror}") from None
    finally:
        sock.close()
    word, _, rest = buf.decode("utf-8", "replace").strip().partition(" ")
    if word == "ok":
        return rest
    raise CkptError(rest or f"the supervisor of {subject} closed the connection without an answer")


# -- the supervisor -------------------------------------------------------------------------------
class _HaltError(Exception):
    """Raised inside the loop when the supervision is to end (ckpt halt, SIGTERM, SIGINT)."""


class Supervisor:
    """Runs one program under `ckpt run` until it exits 0, is halted, or exhausts its restarts."""

    def __init__(self, cfg: RunConfig) -> None:
        from ckptcli._util.redact import redact_argv

        self.cfg = cfg
        #: the command line as it is stored and recorded: secrets in it redacted
        self.shown_argv = redact_argv(cfg.argv)
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel: Channel | None = None
        self.started_at = 0.0
        self.attempt = 0
        self.restored: str | None = None  # the checkpoint the running start was restored from
        self.last: str | None = None  # the newest good checkpoint (taken or restored)
        self.restart_from: str | None = None  # during a backoff: the checkpoint the next start restores
        self.took_since_start = False
        #: what a checkpoint skipped in the state paths (a link leaving them), said once each
        self.skipped_said: set[str] = set()
        self.failures: dict[str | None, int] = {}
        self.streak = 0
        self.restarts = 0
        self.rid = 0
        self.seq = 0
        self.ts = 0
        self.snapshot: dict[str, Any] = {}
        self.live: dict[str, Any] = {}
        self.tail: list[Event] = []
        self.signals: list[int] = []
        self.halt_conns: list[socket.socket] = []
        self.halting: int | None = None  # the signal to forward when halting (None: not halting)
        self.record_path: Path | None = None
        self.record: dict[str, Any] = {}
        self.server: socket.socket | None = None
        self.claim_fd: int | None = None
        self.next_due = float("inf")

    # -- life ---------------------------------------------------------------------------------------
    def run(self) -> int:
        """Supervise until the end; returns the exit status (0 when the program exited 0 or was halted)."""
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        old = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP)}
        old_fd = signal.set_wakeup_fd(wake_w)
        for s in old:
            signal.signal(s, self._on_signal)
        # a SIGUSR1 that came while ckpt loaded was held back (ckptcli.cli.boot): the
        # handler is in place, so it is let through now, and answered as any request
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
        try:
            self._claim()
            self._begin()
            return self._supervise(wake_r)
        finally:
            signal.set_wakeup_fd(old_fd)
            for s, h in old.items():
                signal.signal(s, h)
            os.close(wake_r)
            os.close(wake_w)
            self._stop_child()
            self.cfg.freezer.cleanup()
            self._release()

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum != signal.SIGCHLD:
            self.signals.append(signum)

    def _claim(self) -> None:
        path = runtime_dir() / f"{_key(self.cfg.store, self.cfg.subject)}.json"
        # held while this supervisor lives: two runs started at once cannot both pass the
        # check of the record below (the kernel drops it when the process dies)
        try:
            self.claim_fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            fcntl.flock(self.claim_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockError(
                f"{self.cfg.subject} is already supervised by `ckpt run` with this store",
                hint=f"ask it: ckpt checkpoint {self.cfg.subject}, or stop it: ckpt halt {self.cfg.subject}",
            ) from None
        except OSError as exc:
            raise StoreIOError(f"cannot lock {path.with_suffix('.lock')}: {exc.strerror}") from None
        rec = read_record(path)
        if rec is not None and not rec["stale"]:
            raise LockError(
                f"{self.cfg.subject} is already supervised by `ckpt run` (pid {rec.get('pid')}) with this store",
                hint=f"ask it: ckpt checkpoint {self.cfg.subject}, or stop it: ckpt halt {self.cfg.subject}",
            )
        if rec is not None:
            for done in clear_stale(path, rec):
                self.cfg.log(f"an earlier supervisor (pid {rec.get('pid')}) died; cleaned up after it: {done}")
            child = rec.get("child")
            if isinstance(child, dict) and _alive(child.get("pid"), child.get("started")):
                raise LockError(
                    f"the program of an earlier `ckpt run` of {self.cfg.subject} (pid {child.get('pid')}) still runs; its supervisor died",
                    hint=f"stop it first (kill -TERM -{child.get('pgid', child.get('pid'))}), then run again",
                )
        sock_path = path.with_suffix(".sock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock_path)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(str(sock_path))
        except OSError as exc:
            server.close()
            raise StoreIOError(
                f"cannot make the supervisor's socket {sock_path}: {exc.strerror}", hint="set CKPT_RUNTIME_DIR to a short path"
            ) from None
        server.listen(128)  # many `ckpt checkpoint` at once wait their turn
        server.setblocking(False)
        self.server = server
        self.record_path = path
        self.record = {
            "version": 1,
            "pid": os.getpid(),
            "started": _start_time(os.getpid()),
            "store": self.cfg.store.location,
            "subject": str(self.cfg.subject),
            "socket": str(sock_path),
            "argv": _shown(self.shown_argv),
            "child": None,
            "frozen": None,
            "cgroup": str(self.cfg.freezer.path) if isinstance(self.cfg.freezer, CgroupFreezer) else None,
        }
        _write_record(path, self.record)

    def _update_record(self, **changes: Any) -> None:
        self.record.update(changes)
        if self.record_path is not None:
            with contextlib.suppress(OSError):
                _write_record(self.record_path, self.record)

    def _release(self) -> None:
        for conn in self.halt_conns:
            conn.close()
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(OSError):
                os.unlink(self.record_path.with_suffix(".sock") if self.record_path is not None else self.record["socket"])
        if self.record_path is not None:
            with contextlib.suppress(OSError):
                self.record_path.unlink()
        if self.claim_fd is not None:
            os.close(self.claim_fd)  # last, the record gone: a run that then claims finds none
            self.claim_fd = None

    def _begin(self) -> None:
        """The events so far (from the subject's latest checkpoint), and the first start."""
        store, subject = self.cfg.store, self.cfg.subject
        head = store.head(subject)
        start_from = self._good(head.hex() if head is not None else None)
        base: dict[str, Any] = {
            "argv": self.shown_argv,
            "cwd": str(self.cfg.cwd),
            "state": [sp.rel for sp in self.cfg.state],
            "schedule": self._schedule_view(),
        }
        self.snapshot = {"ext": {"process": base}}
        if head is not None:
            self._continue_events(head)
        self.live = self.snapshot
        self._start(start_from)

    def _schedule_view(self) -> dict[str, Any]:
        describe = getattr(self.cfg.schedule, "describe", None)
        return describe() if callable(describe) else {"kind": type(self.cfg.schedule).__name__}

    def _continue_events(self, head: bytes) -> None:
        """Carry the supervisor's view and seq on from the subject's newest checkpoint."""
        from ckptcli.checkpoint import Checkpoint

        try:
            ck = Checkpoint(self.cfg.store, head)
            doc = ck.state()
            seq_label = self.cfg.store.manifest(head).labels.get(LABEL_SEQ, "")
        except CkptError as exc:
            self.cfg.log(f"the events of checkpoint {head.hex()[:12]} cannot be read ({exc.message}); the event history starts again")
            return
        if not isinstance(doc, dict):
            return
        state: dict[str, Any] = {k: v for k, v in doc.items() if k != "events"}
        for raw in doc.get("events") or []:
            if isinstance(raw, dict) and raw.get("kind") in pev.REDUCERS and isinstance(raw.get("seq"), int):
                ev = Event(
                    raw["seq"], int(raw.get("ts") or 0), raw["kind"], {k: v for k, v in raw.items() if k not in ("seq", "ts", "kind")}
                )
                state = pev.REDUCERS[ev.kind](state, ev)
                self.seq, self.ts = max(self.seq, ev.seq), max(self.ts, ev.ts)
        if seq_label.isdigit():
            self.seq = max(self.seq, int(seq_label))
        ext = state.get("ext")
        view = ext.get("process") if isinstance(ext, dict) else None
        if isinstance(view, dict):
            base = self.snapshot["ext"]["process"]
            self.snapshot = {**state, "ext": {**(ext if isinstance(ext, dict) else {}), "process": {**view, **base}}}

    # -- events -------------------------------------------------------------------------------------
    def _event(self, kind: str, fields: dict[str, Any]) -> None:
        self.seq += 1
        self.ts = max(self.ts, time.time_ns())
        ev = make_event(self.seq, self.ts, kind, fields)
        self.tail.append(ev)
        self.live = pev.REDUCERS[kind](self.live, ev)

    # -- the bad marks --------------------------------------------------------------------------------
    def _bad_ids(self) -> set[str]:
        try:
            tags = self.cfg.store.refs(prefix="refs/tags")
        except CkptError:
            return set()
        return {cid.hex() for name, cid in tags.items() if name.startswith(f"tags/{BAD_TAG_PREFIX}")}

    def _good(self, hexid: str | None) -> str | None:
        """`hexid`, or the nearest first-parent ancestor of it that is not marked bad."""
        bad = self._bad_ids()
        while hexid is not None and (hexid in bad or self._no_copy(hexid)):
            try:
                parents = self.cfg.store.manifest(bytes.fromhex(hexid)).parents
            except CkptError:
                return None
            hexid = parents[0].hex() if parents else None
        return hexid

    def _no_copy(self, hexid: str) -> bool:
        """Whether the checkpoint holds events only, no copy of the state to start from
        (taken when supervision ended between two starts before any checkpoint: _record_events)."""
        try:
            return self.cfg.store.manifest(bytes.fromhex(hexid)).labels.get(LABEL_STATE_FROM) == "none"
        except CkptError:
            return False

    def _mark_bad(self, hexid: str, failures: int) -> None:
        try:
            self.cfg.store.set_tag(f"{BAD_TAG_PREFIX}{hexid[:16]}", bytes.fromhex(hexid), force=True, reason="process: bad checkpoint")
        except CkptError as exc:
            self.cfg.log(f"cannot tag checkpoint {hexid[:12]} bad: {exc.message}")
        self._event(pev.BAD, {"checkpoint": hexid, "failures": failures})
        self.cfg.log(
            f"checkpoint {hexid[:12]}: the program failed {failures} time{'s' if failures != 1 else ''} after starting from it; marked bad"
        )

    # -- the program ----------------------------------------------------------------------------------
    def _start(self, restore: str | None) -> None:
        from ckptcli.checkpoint import Checkpoint

        self.attempt += 1
        if restore is not None:
            ck = Checkpoint(self.cfg.store, bytes.fromhex(restore))
            restore_state(ck, self.cfg.state, self.cfg.root)
        self.restored = restore
        self.last = restore if restore is not None else self.last
        self.took_since_start = False
        env = dict(self.cfg.env)
        env.pop(ENV_RESTORED, None)
        if restore is not None:
            env[ENV_RESTORED] = restore
        self.channel = Channel(self.cfg.log)
        env[ENV_CONTROL_FD] = str(self.channel.child_fd)
        freezer = self.cfg.freezer
        try:
            self.proc = subprocess.Popen(
                self.cfg.argv,
                cwd=self.cfg.cwd,
                env=env,
                pass_fds=(self.channel.child_fd,),
                process_group=0,
                preexec_fn=freezer.prepare_child if isinstance(freezer, CgroupFreezer) else None,
            )
        except OSError as exc:
            self.channel.close()
            self.channel = None
            raise NotFoundError(
                f"cannot start {self.cfg.argv[0]!r}: {exc.strerror}", hint="give a program that exists and is executable"
            ) from None
        finally:
            if self.channel is not None:
                self.channel.close_child_end()
        freezer.attach(self.proc.pid)
        self.started_at = time.monotonic()
        self.next_due = self.started_at + self.cfg.schedule.next_delay()
        self._update_record(child={"pid": self.proc.pid, "pgid": self.proc.pid, "started": _start_time(self.proc.pid)})
        self._event(pev.START, {"pid": self.proc.pid, "argv": self.shown_argv, "attempt": self.attempt, "restored": restore})
        how = f"restored from {restore[:12]}" if restore else "cold start"
        self.cfg.log(f"started {self.cfg.argv[0]} (pid {self.proc.pid}, attempt {self.attempt}, {how})")

    def _running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _stop_child(self) -> None:
        """Make sure no program of ours outlives the supervisor's end (SIGKILL to its group)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    # -- the loop -------------------------------------------------------------------------------------
    def _supervise(self, wake: int) -> int:
        while True:
            try:
                self._watch(wake)
                status = self._exited()
            except _HaltError:
                return self._halt()
            if status is not None:
                return status

    def _watch(self, wake: int) -> None:
        """Serve requests and the schedule until the program exits. Raises _HaltError.
        Requests are looked at before every scheduled checkpoint, so a schedule shorter
        than a take cannot starve `ckpt halt`."""
        while True:
            self._handle_signals()
            if self.proc is None or self.proc.poll() is not None:
                return
            fds: list[Any] = [wake]
            if self.server is not None:
                fds.append(self.server)
            if self.channel is not None and self.channel.readable:
                fds.append(self.channel)
            ready, _, _ = select.select(fds, [], [], max(0.0, min(self.next_due - time.monotonic(), 0.05)))
            for item in ready:
                if item is self.server:
                    self._serve()
                elif item is self.channel and self.channel is not None:
                    self.channel.pump()
                elif item == wake:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake, 512)
            self._handle_signals()
            if time.monotonic() >= self.next_due and self._running():
                if self._announcing():
                    self.next_due = time.monotonic() + 0.02
                else:
                    self._checkpoint("schedule")

    def _announcing(self) -> bool:
        """Whether a just-started program may still say hello: a program has --timeout
        after its start to announce that it cooperates before a scheduled checkpoint
        freezes it instead (a cooperative program's first checkpoint must not race its
        start-up)."""
        channel = self.channel
        return channel is not None and channel.readable and not channel.hello and time.monotonic() - self.started_at < self.cfg.timeout

    def _handle_signals(self) -> None:
        while self.signals:
            signum = self.signals.pop(0)
            if signum == signal.SIGUSR1:
                self._checkpoint("request")
            else:
                self.halting = signum
                raise _HaltError

    def _serve(self) -> None:
        """One `ckpt checkpoint` / `ckpt halt` connection."""
        assert self.server is not None
        try:
            conn, _ = self.server.accept()
        except (BlockingIOError, OSError):
            return
        conn.settimeout(2.0)
        try:
            line = conn.recv(256).decode("ascii", "replace").strip()
        except OSError:
            conn.close()
            return
        if line == "checkpoint":
            hexid = self._checkpoint("manual") if self._running() else None
            reply = f"ok {hexid}" if hexid else f"error {self._why_no_checkpoint()}"
            with contextlib.suppress(OSError):
                conn.sendall(f"{reply}\n".encode())
            conn.close()
        elif line == "halt":
            self.halt_conns.append(conn)
            self.halting = signal.SIGTERM
            raise _HaltError
        else:
            with contextlib.suppress(OSError):
                conn.sendall(b"error unknown request\n")
            conn.close()

    def _why_no_checkpoint(self) -> str:
        if not self._running():
            return f"the program of {self.cfg.subject} is not running (it is restarting); ask again later"
        return f"the checkpoint of {self.cfg.subject} failed; the supervisor's log says why"

    # -- checkpoints ----------------------------------------------------------------------------------
    def _checkpoint(self, reason: str) -> str | None:
        """Take a consistent copy of the declared state now; returns its hex (None: failed,
        said in the log). The program runs again afterwards, whatever happened. The next
        scheduled one is due a full interval after this one ends."""
        try:
            return self._checkpoint_now(reason)
        finally:
            self.next_due = time.monotonic() + self.cfg.schedule.next_delay()

    def _checkpoint_now(self, reason: str) -> str | None:
        proc, channel = self.proc, self.channel
        if proc is None or proc.poll() is not None:
            return None
        self.rid += 1
        rid = str(self.rid)
        t0 = time.monotonic()
        asked = channel is not None and channel.readable and (channel.hello or self.cfg.on_signal is not None)
        cooperative = bool(
            asked and channel is not None and channel.request(rid, self.cfg.timeout, self._running, self.cfg.on_signal, proc.pid)
        )
        if channel is not None and channel.closed:
            # its end closed: a program being killed closes its files before its exit shows
            # (one wait per start: a program that closed it on purpose is then frozen at once)
            channel.closed = False
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(1.0)
        if asked and not cooperative and self._running():
            self.cfg.log(f"the program did not say ready within {self.cfg.timeout:g} s; freezing it ({self.cfg.freezer.how})")
        if not self._running():
            return None
        how = "cooperative" if cooperative else self.cfg.freezer.how
        # a program not held still (--freeze none, no answer) may be copied torn: it is said
        consistency = "application" if cooperative else "none" if how == "none" else "crash"
        hexid: str | None = None
        frozen_for = 0.0
        try:
            with self._quiesced(cooperative) as since:
                hexid = self._take(reason, how, consistency, proc.pid)
                frozen_for = time.monotonic() - since
        except FreezeError as exc:
            self.cfg.log(f"checkpoint not taken: {exc.message}")
        except CkptError as exc:
            self.cfg.log(f"checkpoint not taken: {exc}")
        finally:
            if asked and channel is not None:
                channel.resume(rid, hexid or "failed")
        if hexid is None:
            return None
        took = time.monotonic() - t0
        self.cfg.schedule.took(took)
        self._event(
            pev.CHECKPOINT,
            {
                "reason": reason,
                "consistency": consistency,
                "how": how,
                "take_seconds": round(took, 6),
                "frozen_seconds": round(frozen_for, 6),
                "checkpoint": hexid,
            },
        )
        self.cfg.log(f"checkpoint {hexid[:12]} ({reason}, {how}, {took:.3f} s)")
        return hexid

    @contextlib.contextmanager
    def _quiesced(self, cooperative: bool) -> Iterator[float]:
        """Frozen (unless the program quiesced itself) inside the block; yields when it began."""
        if cooperative:
            yield time.monotonic()
            return
        freezer = self.cfg.freezer
        self._update_record(frozen=freezer.record())
        try:
            with freezer.frozen():
                yield time.monotonic()
        finally:
            self._update_record(frozen=None)

    def _take(self, reason: str, how: str, consistency: str, pid: int | None) -> str:
        # the declared paths keep the rules they were checked by at the start: a state file
        # the program turned into a symlink (or a FIFO) is refused, not stored as a link
        check_state_paths([sp.given for sp in self.cfg.state], self.cfg.root, self.cfg.cwd)

        view: dict[str, Any] = {}
        if self.cfg.describe is not None and pid is not None:
            try:
                view["proc"] = self.cfg.describe(pid)
            except CkptError as exc:
                view["proc"] = {"error": exc.message}
        blobs = {blob_name(i): sp.path for i, sp in enumerate(self.cfg.state) if os.path.lexists(sp.path)}
        hexid = self._store(reason, how, consistency, f"ckpt run: {reason} checkpoint ({how})", view=view, blobs=blobs)
        self.last = hexid
        self.took_since_start = True
        return hexid

    def _store(
        self,
        reason: str,
        how: str,
        consistency: str,
        message: str,
        *,
        view: dict[str, Any] | None = None,
        labels: dict[str, str] | None = None,
        blobs: dict[str, Path] | None = None,
        carry: dict[str, bytes | Encoded] | None = None,
    ) -> str:
        """Take a checkpoint of the state document as it stands (the snapshot, `ext.process`
        with the schedule now and `view`, the events not stored yet as its tail) with the
        state files `blobs` or the sections `carry`; the tail then starts again. Returns its
        hex. Raises: CkptError (nothing is stored then, and the tail is kept)."""
        from ckptcli.writer import take

        doc: dict[str, Any] = dict(self.snapshot)
        ext = dict(doc.get("ext") or {})
        # as it stands now (auto learns)
        ext["process"] = {**(ext.get("process") or {}), "schedule": self._schedule_view(), **(view or {})}
        doc["ext"] = ext
        doc["events"] = [ev.to_map() for ev in self.tail]
        fixed = {LABEL_SEQ: str(self.seq), "process.consistency": consistency, "process.how": how, "process.reason": reason}
        result = take(
            self.cfg.store,
            doc,
            subject=self.cfg.subject,
            labels={**fixed, **(labels or {})},
            parents=[self.last] if self.last else [],
            blobs=blobs,
            carry=carry,
            message=message,
        )
        self.snapshot = self.live
        self.tail = []
        for skipped in result.capture.skipped:  # as `ckpt take` warns of them; once, not every checkpoint
            if skipped not in self.skipped_said:
                self.skipped_said.add(skipped)
                self.cfg.log(f"warning: checkpoint {result.hex[:12]} holds no copy of {skipped}")
        return result.hex

    # -- exits and restarts ---------------------------------------------------------------------------
    def _exited(self) -> int | None:
        """The program exited: record it, and end (its status) or restart it (None)."""
        assert self.proc is not None
        rc = self.proc.wait()
        uptime = time.monotonic() - self.started_at
        # what is left of the program goes with it (its process group; under a cgroup freeze,
        # every process in the cgroup): a child still writing its state would be a second
        # writer beside the restarted program
        self.cfg.freezer.kill_rest()
        code, sig = (rc, None) if rc >= 0 else (None, signal.Signals(-rc).name)
        self._event(pev.EXIT, {"pid": self.proc.pid, "code": code, "signal": sig, "uptime_seconds": round(uptime, 6)})
        status = rc if rc >= 0 else 128 - rc
        self.cfg.log(f"the program (pid {self.proc.pid}) exited with {f'code {code}' if sig is None else sig} after {uptime:.2f} s")
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        self._update_record(child=None)
        if rc == 0:
            self._final("exit")
            return 0
        self.cfg.schedule.failed(time.monotonic())
        self.restarts += 1
        if self.cfg.max_restarts is not None and self.restarts > self.cfg.max_restarts:
            self.cfg.log(f"gave up after {self.cfg.max_restarts} restarts (--max-restarts)")
            self._record_events("exit", self.last if self.took_since_start else self.restored)
            return status
        origin = self.last if self.took_since_start else self.restored
        if not self.took_since_start and origin is not None:
            self.failures[origin] = self.failures.get(origin, 0) + 1
            if self.failures[origin] >= self.cfg.bad_after:
                self._mark_bad(origin, self.failures[origin])
                origin = self._good(origin)
                self.last = origin
                if origin is None:
                    # a "cold start" would run on the very files it keeps failing on
                    self.cfg.log(
                        "every checkpoint back to the first is marked bad and the program fails from its state files: giving up "
                        "(repair the state, or remove the process-bad-* tags with `ckpt tag --delete`, and run again)"
                    )
                    self._record_events("exit", None)
                    return status
        self.streak = 0 if uptime >= HEALTHY_SECONDS else self.streak + 1
        lo, hi = self.cfg.backoff
        delay = min(hi, lo * 2 ** max(0, self.streak - 1))
        self._event(pev.RESTART, {"attempt": self.attempt + 1, "delay_seconds": round(delay, 6), "from": origin})
        self.cfg.log(f"restarting in {delay:g} s from {origin[:12] if origin else 'a cold start'}")
        self.restart_from = origin
        self._backoff(delay)
        self.restart_from = None
        self._start(origin)
        return None

    def _backoff(self, delay: float) -> None:
        """Wait `delay` seconds, answering requests (a checkpoint cannot be taken now; a halt ends). Raises _HaltError."""
        end = time.monotonic() + delay
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            fds: list[Any] = [self.server] if self.server is not None else []
            ready, _, _ = select.select(fds, [], [], min(left, 0.05))
            if self.signals:
                signum = self.signals.pop(0)
                if signum != signal.SIGUSR1:
                    self.halting = signum
                    raise _HaltError
            if ready:
                self._serve()

    def _final(self, reason: str) -> str | None:
        """The last checkpoint: of the running program (quiesced or frozen), or of the state
        a program that exited 0 left (how: none, consistency: application)."""
        if self._running():
            return self._checkpoint(reason)
        if self.proc is None or self.proc.returncode != 0:
            return None
        t0 = time.monotonic()
        try:
            hexid = self._take(reason, "none", "application", None)
        except CkptError as exc:
            self.cfg.log(f"final checkpoint not taken: {exc}")
            return None
        self.cfg.log(f"checkpoint {hexid[:12]} ({reason}, the program's final state, {time.monotonic() - t0:.3f} s)")
        return hexid

    def _record_events(self, reason: str, origin: str | None) -> str | None:
        """Store the events not stored yet (the program's exit, the restart it was waiting
        for) when supervision ends while no program runs. The checkpoint holds the copy of
        the state the next start would restore, the blobs of `origin` carried over (the
        files a dead program left are never checkpointed); without one (no good checkpoint
        yet) it holds no copy and is labelled `process.state_from=none`, and no start is
        made from it (_good). Returns its hex (None: nothing to store, or it failed, said
        in the log)."""
        from ckptcli.checkpoint import Checkpoint

        if not self.tail:
            return None
        carry: dict[str, bytes | Encoded] = {}
        consistency = "none"
        try:
            if origin is not None:
                ck = Checkpoint(self.cfg.store, bytes.fromhex(origin))
                if "blobs" in ck.manifest.sections:
                    carry["blobs"] = ck.carried("blobs")
                consistency = ck.manifest.labels.get("process.consistency", "none")
            hexid = self._store(
                reason,
                "none",
                consistency,
                f"ckpt run: the events before the {reason} (the state of {origin[:12] if origin else 'no checkpoint'})",
                labels={LABEL_STATE_FROM: origin or "none"},
                carry=carry,
            )
        except CkptError as exc:
            self.cfg.log(f"the last events (exit, restart) not stored: {exc}")
            return None
        self.last = hexid if origin is not None else self.last
        of = origin[:12] if origin else "none"
        self.cfg.log(f"checkpoint {hexid[:12]} ({reason}: the events since the last checkpoint; the state of {of})")
        return hexid

    def _halt(self) -> int:
        """Halted (ckpt halt, SIGTERM, SIGINT): a final checkpoint, then the signal to the
        program's group; returns 0 for `ckpt halt`, else the program's status."""
        signum = self.halting or signal.SIGTERM
        if self._running():
            hexid = self._final("exit")
        else:  # between two starts: what happened since the last checkpoint (the exit, the restart) is kept
            hexid = self._record_events("halt", self.restart_from if self.restart_from is not None else self.last)
        status = 128 + signum  # a signal ended supervision (between two starts: no program status to give)
        if self.proc is not None and self.proc.poll() is None:
            # for a `ckpt halt` that stops waiting before the program exits (ask)
            self._update_record(halted={"checkpoint": hexid, "grace_s": GRACE_SECONDS})
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signum)
            try:
                rc = self.proc.wait(GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.cfg.log(f"the program did not exit within {GRACE_SECONDS:g} s of {signal.Signals(signum).name}; killing it")
                os.killpg(self.proc.pid, signal.SIGKILL)
                rc = self.proc.wait()
            status = rc if rc >= 0 else 128 - rc
        if self.halt_conns:
            status = 0
            for conn in self.halt_conns:
                with contextlib.suppress(OSError):
                    conn.sendall(f"ok {hexid or 'none'}\n".encode())
        how = "ckpt halt" if self.halt_conns else signal.Signals(signum).name
        self.cfg.log(f"halted ({how}); last checkpoint {hexid[:12] if hexid else 'none'}")
        return status

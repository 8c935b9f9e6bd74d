"""The recorder: a running agent or workflow appends events, durably and cheaply, and
takes checkpoints by policy (docs/replay.md, "Recording"; the journal file: formats/events.md,
"The journal file", framed by ckptcli.format.journal).

Invariants: an event is checked and applied to the live state before its record is
buffered, and one that does not fit is refused with nothing written; appending costs the
event's size, never the state's. The journal is only appended to or replaced atomically by
one that starts after a new checkpoint; a checkpoint is the previous one's live state (the
snapshot) plus the events since (the tail). Recovery keeps the intact events up to the
first torn or damaged record and skips those a checkpoint already holds (`recorder.run`)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import msgpack

from ckptcli.errors import ConflictError, CorruptError, InvalidInputError, LockError, NotFoundError, StoreIOError, UsageError
from ckptcli.format.journal import PLAIN_HEAD, JournalWriter, frame_plain, intact_records
from ckptcli.format.values import packable
from ckptcli.history.events import (
    ERROR,
    LABEL_RUN,
    LABEL_SEQ,
    TOOL_CALL,
    TOOL_RESULT,
    Event,
    Owned,
    Reducers,
    State,
    StepContext,
    ToolFailed,
    check_state,
    event_from_map,
    make_event,
    normalize,
)
from ckptcli.indoubt import InDoubt, in_doubt
from ckptcli.store.backend import write_file_atomic

RECORD_HEAD = PLAIN_HEAD  # its 0.2 name (the record head is the shared journal framing's); kept for one minor release

if TYPE_CHECKING:
    from ckptcli.history.advise import AdaptiveSchedule
    from ckptcli.store.repository import Store
    from ckptcli.writer import TakeResult

Tool = Callable[[Any], Any]
StepFunc = Callable[[StepContext, Event], Any]


class NonIdempotent:
    """A tool that must not run twice for one call (a payment, an e-mail): `tools={"pay":
    non_idempotent(pay)}`. It runs as the function it wraps; CheckpointPolicy(
    before_non_idempotent=True) takes a checkpoint before each of its calls."""

    idempotent = False

    def __init__(self, fn: Tool) -> None:
        self.fn = fn

    def __call__(self, args: Any) -> Any:
        return self.fn(args)

    def __repr__(self) -> str:
        return f"non_idempotent({self.fn!r})"


def non_idempotent(fn: Tool) -> Tool:
    """`fn` marked as a tool that must not run twice (see NonIdempotent)."""
    return NonIdempotent(fn)


def is_idempotent(fn: object) -> bool:
    """False for a tool marked non-idempotent: non_idempotent(fn), or any callable whose
    attribute `idempotent` is False."""
    return getattr(fn, "idempotent", True) is not False


#: The first 8 bytes of a journal file.
MAGIC = b"CKPTJNL1"
JOURNAL_VERSION = 1
#: A longer record is damage (a torn length field), not an event.
MAX_RECORD = 64 * 1024 * 1024
FSYNC_POLICIES = ("always", "batch", "never")
#: Where CheckpointPolicy(every_seconds="auto") starts, within its bounds (10 minutes).
AUTO_START_SECONDS = 600.0


@dataclass(frozen=True)
class CheckpointPolicy:
    """When the recorder takes checkpoints by itself (checkpoint() takes one any time).

    Args:
        every_events: after this many events since the last checkpoint.
        every_seconds: at the first event this long after the last checkpoint (checked
            when events are appended: an idle recorder takes none). "auto": as long as
            an AdaptiveSchedule (ckptcli.history.advise, docs/intervals.md) says, fed by
            this recorder's own take durations and failures (its `error` events, and a
            reopening that found a torn journal); it starts at AUTO_START_SECONDS and
            stays within [auto_min_seconds, auto_max_seconds].
        risky_tools: before a tool.call of one of these tools, so that the checkpoint's
            live state is the one just before the call.
        auto_min_seconds, auto_max_seconds: the bounds of the interval under "auto".
        before_non_idempotent: right after a tool.call marked non-idempotent is recorded,
            before the tool runs (a tool given as non_idempotent(fn), or a tool.call
            appended with the field idempotent=False), so that the checkpoint holds that
            call pending: a crash during it leaves that one call in doubt at the latest
            checkpoint (ckptcli.indoubt), never one the store does not know of. It costs
            one checkpoint per such call (docs/workflows.md, "Reconciling in-doubt calls").
    """

    every_events: int | None = None
    every_seconds: float | Literal["auto"] | None = None
    risky_tools: frozenset[str] = field(default_factory=frozenset)
    auto_min_seconds: float = 1.0
    auto_max_seconds: float = 3600.0
    before_non_idempotent: bool = False

    def __post_init__(self) -> None:
        if self.every_events is not None and (type(self.every_events) is not int or self.every_events < 1):
            raise InvalidInputError(f"every_events must be an integer >= 1, not {self.every_events!r}")
        if (
            self.every_seconds is not None
            and self.every_seconds != "auto"
            and not (isinstance(self.every_seconds, (int, float)) and self.every_seconds > 0)
        ):
            raise InvalidInputError(f'every_seconds must be a number > 0 or "auto", not {self.every_seconds!r}')
        if self.every_seconds == "auto":
            self.schedule()  # the bounds, checked now rather than at the first event
        object.__setattr__(self, "risky_tools", frozenset(self.risky_tools))

    def schedule(self) -> AdaptiveSchedule | None:
        """The adaptive schedule of every_seconds="auto" (a new one each call), or None.

        Raises: InvalidInputError for bounds AdaptiveSchedule refuses."""
        if self.every_seconds != "auto":
            return None
        from ckptcli.history.advise import AdaptiveSchedule

        # the clock is looked up at each call: the one the recorder measures time with
        return AdaptiveSchedule(
            AUTO_START_SECONDS, min_interval=self.auto_min_seconds, max_interval=self.auto_max_seconds, clock=lambda: time.monotonic()
        )


@dataclass(frozen=True)
class Durability:
    """How events reach the disk.

    Args:
        batch_size: events kept in memory before they are written together.
        fsync: "always" (write and fsync every event: an append that returned survives
            a power cut), "batch" (fsync each batch written), "never" (the OS decides; a
            process crash loses nothing written, a power cut may).
        flush_on: kinds written (and synced, unless fsync is "never") at once.
        write_on: kinds written at once without a sync of their own: a process that dies
            loses none of them; a power cut may lose those after the last synced write
            (the next one syncs them too).
    """

    batch_size: int = 32
    fsync: str = "batch"
    flush_on: frozenset[str] = frozenset({TOOL_CALL, TOOL_RESULT})
    write_on: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if type(self.batch_size) is not int or self.batch_size < 1:
            raise InvalidInputError(f"batch_size must be an integer >= 1, not {self.batch_size!r}")
        if self.fsync not in FSYNC_POLICIES:
            raise InvalidInputError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {self.fsync!r}")
        object.__setattr__(self, "flush_on", frozenset(self.flush_on))
        object.__setattr__(self, "write_on", frozenset(self.write_on))


@dataclass(frozen=True)
class Recovery:
    """What opening an existing journal found."""

    base: str  # the checkpoint the state was rebuilt from
    events: int  # journal events applied after it
    skipped: int  # journal events that checkpoint already held
    dropped_bytes: int  # a torn or damaged end of the journal, cut off
    #: the calls recorded without a result: the run may have died during them (ckptcli.indoubt)
    in_doubt: tuple[InDoubt, ...] = ()
    #: what a damaged journal lost (records written whole, cut off), one line; None for a
    #: journal intact or only torn at its last write
    damage: str | None = None


# -- the journal file ------------------------------------------------------------------------
def _ext_int(code: int, data: bytes) -> Any:
    if code == 1:
        return int.from_bytes(data, "big", signed=True)
    return msgpack.ExtType(code, data)


def encode_record(value: dict[str, Any], where: str = "event") -> bytes:
    """One journal record (the plain framing of ckptcli.format.journal) of `value`.

    Raises:
        InvalidInputError for a value msgpack cannot carry or a record over MAX_RECORD.
    """
    payload: bytes
    try:
        try:
            payload = msgpack.packb(value, use_bin_type=True)
        except OverflowError:  # an integer beyond 64 bits: ext type 1, as in the format
            payload = msgpack.packb(packable(value), use_bin_type=True)
    except UnicodeEncodeError:
        raise InvalidInputError(f"{where}: a string holds a lone surrogate, which UTF-8 cannot carry") from None
    if len(payload) > MAX_RECORD:
        raise InvalidInputError(f"{where}: {len(payload)} bytes encoded; one event may take at most {MAX_RECORD}")
    return frame_plain(payload)


@dataclass
class JournalContents:
    header: dict[str, Any]
    records: list[dict[str, Any]]  # the intact records after the header
    raw: list[bytes]  # each of them as stored (length, CRC, payload)
    starts: list[int]  # the offset of each in the file
    good_end: int  # where the intact records end
    size: int  # the file's size
    #: the records cut off after good_end, as far as their length fields say (a torn end: 1)
    dropped_records: int = 0
    #: whether what is cut off is only the last record, written in part (a write a crash cut):
    #: no record that was ever whole is lost
    torn: bool = False

    def damage(self, path: Path | str) -> str | None:
        """One line saying what a damaged journal lost (records cut off that were written
        whole), or None when nothing was, or only a torn last write."""
        if self.good_end >= self.size or self.torn:
            return None
        n = self.dropped_records
        return (
            f"journal {path}: the record at byte {self.good_end} is damaged; it and what follows, "
            f"{n} record{'s' if n != 1 else ''} ({self.size - self.good_end} bytes), are dropped: "
            "the run goes on from the record before it"
        )


def _cut_off(data: bytes, pos: int) -> tuple[int, bool]:
    """(how many records follow `pos` by their length fields, whether that is one record
    that runs past the end: a torn last write)."""
    n = 0
    while pos < len(data):
        if pos + PLAIN_HEAD.size > len(data):
            return n + 1, n == 0
        length, _crc = PLAIN_HEAD.unpack_from(data, pos)
        end = pos + PLAIN_HEAD.size + length
        n += 1
        if length > MAX_RECORD or end > len(data):
            return n, n == 1
        pos = end
    return n, False


def open_journal(path: str | os.PathLike[str], flags: int, *, follow: bool = False) -> int:
    """The journal (or its lock file) at `path`, opened with `flags`: never through a
    symbolic link (UnsafePathError, exit 8; `follow`: a link the user named to read is
    followed), never waiting on a FIFO, and only a regular file (CorruptError, exit 5),
    judged on the file opened (locking.open_regular). Raises: OSError besides."""
    from ckptcli.store.locking import open_regular

    return open_regular(path, flags, 0o644, follow=follow)


def journal_size(path: Path) -> int:
    """The size of the journal at `path`, 0 when there is none (judged on the file opened,
    as `open_journal`). Raises: UnsafePathError, CorruptError, StoreIOError."""
    try:
        fd = open_journal(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise StoreIOError(f"cannot read journal {path}: {exc.strerror}") from None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_journal(path: Path, *, follow: bool = False) -> JournalContents:
    """Read a journal: the header, then records up to the first that is torn or damaged.
    `follow`: a symbolic link at `path` (one the user named) is read through.

    Raises:
        CorruptError when the file is not a journal (a FIFO, a device...) or its header
        record is damaged; UnsafePathError when it is a link; StoreIOError when it cannot
        be read.
    """
    try:
        fd = open_journal(path, os.O_RDONLY, follow=follow)  # a FIFO given or planted must not hang
    except OSError as exc:
        raise StoreIOError(f"cannot read journal {path}: {exc.strerror}") from None
    try:
        with open(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError as exc:
        raise StoreIOError(f"cannot read journal {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if data[: len(MAGIC)] != MAGIC:
        raise CorruptError(f"{path} is not a ckpt journal (no {MAGIC.decode()} header)", hint="give the recorder another journal path")
    pos = len(MAGIC)
    records: list[dict[str, Any]] = []
    raw: list[bytes] = []
    starts: list[int] = []
    # the first torn or damaged record ends the journal: what follows cannot be trusted to follow it
    for start, value, end in intact_records(data, pos, None, MAX_RECORD, _ext_int):
        records.append(value)
        raw.append(data[start:end])
        starts.append(start)
        pos = end
    if not records:
        raise CorruptError(f"journal {path} has no intact header record", hint="move it aside to start a new run")
    header = records.pop(0)
    del raw[0], starts[0]
    if header.get("journal") != JOURNAL_VERSION:
        raise CorruptError(f"journal {path}: version {header.get('journal')!r} is not one this ckpt reads", hint="upgrade ckpt")
    for key, typ in (("subject", str), ("run", str), ("base", str), ("base_seq", int)):
        if type(header.get(key)) is not typ:
            raise CorruptError(f"journal {path}: the header has no valid {key!r}")
    dropped, torn = _cut_off(data, pos)
    return JournalContents(header, records, raw, starts, pos, len(data), dropped, torn)


def write_journal(path: Path, header: dict[str, Any], records: Iterable[bytes] = ()) -> None:
    """Replace the journal at `path` atomically (temp file, fsync, rename, fsync dir)."""

    def write(fh: IO[bytes]) -> None:
        fh.write(MAGIC)
        fh.write(encode_record(header, "journal header"))
        for rec in records:
            fh.write(rec)

    write_file_atomic(path, write, f"journal {path}", through=False)  # a link or FIFO planted there is replaced, never written through


# -- the recorder ------------------------------------------------------------------------------------
class Recorder:
    """Records one subject's events into a journal and checkpoints into a store. Open one
    with Recorder.open; one process (and one thread at a time) per journal."""

    def __init__(self) -> None:  # use Recorder.open
        self._lock = threading.RLock()
        # the containers of the live state that appends change in place: those copied
        # since the state was last handed out or kept as a snapshot (events.Reducers.apply)
        self._owned: Owned = {}
        self._writer: JournalWriter | None = None
        self._lock_fd: int | None = None
        self._buffer: list[bytes] = []
        self.recovery: Recovery | None = None
        self._schedule: AdaptiveSchedule | None = None

    # -- opening ------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        store: Store,
        subject: str,
        journal: str | os.PathLike[str],
        *,
        state: Mapping[str, Any] | None = None,
        base: str | None = None,
        branch: str | None = None,
        labels: Mapping[str, str] | None = None,
        reducers: Reducers | None = None,
        tools: Mapping[str, Tool] | None = None,
        policy: CheckpointPolicy | None = None,
        durability: Durability | None = None,
    ) -> Recorder:
        """Start recording `subject` into `journal`, or resume after a crash or a close.

        Args:
            journal: the journal file. If it exists, the run it holds is resumed (and
                `state` and `base` are not used); `rec.recovery` says what was found.
            state: the initial state of a new run (a map of memory, plan, tools, ext;
                default {"memory": {}, "plan": [], "tools": []}); a first checkpoint of it,
                with no parent, is taken at once.
            base: instead of `state`, continue from this checkpoint's live state (e.g. a
                fork): its events continue at its last seq + 1, its checkpoints are children.
            branch: also move this branch to each checkpoint taken.
            labels: labels of every checkpoint taken (recorder.run and events.seq are added).
            reducers: for custom event kinds (default: standard and installed ones).
            tools: name -> function(args) -> result, for step() functions' ctx.tool.
        Raises:
            LockError when another recorder has the journal open; ConflictError when it
            records another subject; CorruptError for a file that is not a journal;
            NotFoundError when its checkpoint is no longer in the store; what replaying it
            raises (e.g. NotFoundError for a custom kind without its reducer).
        """
        from ckptcli.format.manifest import Subject, check_ref_name

        rec = cls()
        rec.store = store
        rec.subject = str(Subject.parse(subject))
        rec.path = Path(journal)
        rec.branch = check_ref_name(branch, "branch name") if branch is not None else None
        rec.labels = dict(labels or {})
        rec.reducers = reducers or Reducers()
        rec.tools = dict(tools or {})
        rec.policy = policy or CheckpointPolicy()
        rec._schedule = rec.policy.schedule()
        rec.durability = durability or Durability()
        from ckptcli.listing import parse_labels

        parse_labels(rec.labels)
        rec._acquire()
        try:
            if journal_size(rec.path) > 0:
                rec._recover()
                if rec._schedule is not None and rec.recovery is not None and rec.recovery.dropped_bytes:
                    rec._schedule.failed(time.monotonic())  # a torn journal: the last run died mid-write
            else:
                if state is not None and base is not None:
                    raise UsageError("give a new run either an initial state or a base checkpoint, not both")
                rec._start(state, base)
            rec._writer = rec._open_writer()
        except BaseException:
            rec._release()
            raise
        rec._last_checkpoint = time.monotonic()
        return rec

    store: Store
    subject: str
    path: Path
    branch: str | None
    labels: dict[str, str]
    reducers: Reducers
    tools: dict[str, Tool]
    policy: CheckpointPolicy
    durability: Durability
    run: str
    _base: str
    _base_seq: int
    _snapshot: State
    _tail: list[Event]
    _state: State
    _next_seq: int
    _last_ts: int
    _last_checkpoint: float

    def _acquire(self) -> None:
        import fcntl

        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            fd = open_journal(lock_path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise StoreIOError(f"cannot open {lock_path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LockError(
                f"journal {self.path} is in use by another recorder", hint="one process records into a journal at a time"
            ) from None
        self._lock_fd = fd

    def _release(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    def _open_writer(self) -> JournalWriter:
        """The journal, open to append to (raises OSError)."""
        fd = open_journal(self.path, os.O_WRONLY | os.O_APPEND)  # never a link or FIFO planted since it was read
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        # each write is a batch the durability policy has decided to write: "batch" syncs it too
        fsync = "never" if self.durability.fsync == "never" else "always"
        return JournalWriter(
            fd, size, fsync, what=f"journal {self.path}", hint="the events are kept in memory; flush() again", full_sync=True
        )

    def _header(self) -> dict[str, Any]:
        return {
            "journal": JOURNAL_VERSION,
            "subject": self.subject,
            "run": self.run,
            "base": self._base,
            "base_seq": self._base_seq,
            "created_ns": time.time_ns(),
        }

    def _start(self, state: Mapping[str, Any] | None, base: str | None) -> None:
        from ckptcli.history.replay import load_tail

        self.run = uuid.uuid4().hex
        self._tail = []
        if base is not None:
            from ckptcli.checkpoint import open_checkpoint
            from ckptcli.store.single import CheckpointFile

            ck = open_checkpoint(base, self.store)
            if isinstance(ck.source, CheckpointFile):
                raise InvalidInputError(f"{base} is a checkpoint file", hint="import it into the store first (ckpt import)")
            tail = load_tail(ck)
            live = check_state(self.reducers.apply_all(tail.snapshot, tail.events), f"checkpoint {ck.hex[:12]}")
            self._snapshot = self._state = live
            self._base, self._base_seq = ck.hex, tail.last_seq
            self._last_ts = tail.events[-1].ts if tail.events else 0
        else:
            initial = {"memory": {}, "plan": [], "tools": []} if state is None else normalize(dict(state), "initial state")
            self._snapshot = self._state = check_state(initial, "initial state")
            self._base_seq = 0
            self._last_ts = 0
            result = self._take([], "recorder: initial state")
            self._base = result.hex
        self._next_seq = self._base_seq + 1
        write_journal(self.path, self._header())

    def _recover(self) -> None:
        from ckptcli.checkpoint import open_checkpoint
        from ckptcli.history.replay import load_tail
        from ckptcli.listing import ListFilter, list_checkpoints

        j = read_journal(self.path)
        h = j.header
        if h["subject"] != self.subject:
            raise ConflictError(f"journal {self.path} records {h['subject']}, not {self.subject}", hint="give each subject its own journal")
        self.run = h["run"]
        base, base_seq = h["base"], h["base_seq"]
        # a crash between a checkpoint's commit and the journal's replacement leaves a
        # newer checkpoint of this run than the journal names: that one is the base
        for cid, summary in list_checkpoints(self.store, ListFilter(labels={LABEL_RUN: self.run})):
            seq = summary.labels.get(LABEL_SEQ, "")
            if seq.isdecimal() and int(seq) > base_seq:
                base, base_seq = cid.hex(), int(seq)
        try:
            ck = open_checkpoint(base, self.store)
        except NotFoundError:
            raise NotFoundError(
                f"journal {self.path} continues checkpoint {base[:12]}, which is no longer in the store",
                hint="move the journal aside and start a new run (Recorder.open with base=...)",
            ) from None
        tail = load_tail(ck)
        live = check_state(self.reducers.apply_all(tail.snapshot, tail.events), f"checkpoint {ck.hex[:12]}")
        self._base, self._base_seq = ck.hex, tail.last_seq
        self._snapshot = self._state = live
        self._tail = []
        self._last_ts = tail.events[-1].ts if tail.events else 0
        skipped = 0
        kept: list[bytes] = []
        expect = self._base_seq + 1
        dropped = j.size - j.good_end
        damage = j.damage(self.path)
        for i, raw in enumerate(j.records):
            ev = event_from_map(raw, f"journal {self.path}: record {i + 1}")
            if ev.seq <= self._base_seq:
                skipped += 1
                continue
            if ev.seq != expect:
                if not self._tail:
                    raise CorruptError(
                        f"journal {self.path} continues at seq {ev.seq}, but checkpoint {ck.hex[:12]} ends at seq "
                        f"{self._base_seq}: events are missing",
                        hint="the journal does not belong to this checkpoint; move it aside to start a new run",
                    )
                dropped = j.size - j.starts[i]  # a gap: everything from here on is suspect
                n = len(j.records) - i + j.dropped_records
                damage = (
                    f"journal {self.path}: the record at byte {j.starts[i]} is seq {ev.seq}, not {expect}; it and what follows, "
                    f"{n} record{'s' if n != 1 else ''} ({dropped} bytes), are dropped: the run goes on from the record before it"
                )
                break
            self._state = self.reducers.apply(self._state, ev, self._owned)
            self._tail.append(ev)
            self._last_ts = max(self._last_ts, ev.ts)
            kept.append(j.raw[i])
            expect += 1
        self._next_seq = expect
        self.recovery = Recovery(self._base, len(self._tail), skipped, dropped, tuple(in_doubt(self._state)), damage)
        if damage is not None:
            self.store.warn(damage)  # records that were written whole are lost: the user must hear of it
        if dropped or skipped or self._base != h["base"]:
            write_journal(self.path, self._header(), kept)

    # -- the live state ----------------------------------------------------------------------------
    @property
    def state(self) -> State:
        """The live state. Read-only: change it by appending events (it is not changed
        by them: a state handed out is never changed afterwards)."""
        with self._lock:
            self._owned.clear()
            return self._state

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def in_doubt(self, limit: int | None = None) -> list[InDoubt]:
        """The calls of the live state recorded without a result (ckptcli.indoubt): after
        Recorder.open resumed a run or started from a checkpoint (base=...), the calls
        that may or may not have happened; reconcile them (record each one's tool.result)
        before going on."""
        with self._lock:
            return in_doubt(self._state, limit=limit)

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    @property
    def base(self) -> str:
        """The hex id of the last checkpoint (the journal continues it)."""
        return self._base

    @property
    def tail(self) -> tuple[Event, ...]:
        """The events since the last checkpoint."""
        return tuple(self._tail)

    # -- appending ----------------------------------------------------------------------------------
    def append(self, kind: str, /, **fields: Any) -> Event:
        """Record one event; returns it (with its seq and ts).

        Raises:
            InvalidInputError for an event that is not valid or does not fit the live
            state: nothing is recorded then. StoreIOError when the journal cannot be
            written (the event is recorded in memory and written by the next flush).
        """
        with self._lock:
            self._check_open()
            risky, tool = self.policy.risky_tools, fields.get("tool")
            if kind == TOOL_CALL and type(tool) is str and tool in risky and self._tail:
                self.checkpoint(message=f"before a call of risky tool {fields['tool']}")
            now = time.time_ns()
            ev = make_event(self._next_seq, now if now > self._last_ts else self._last_ts, kind, fields)
            record = encode_record(ev.to_map(), ev.where())
            self._state = self.reducers.apply(self._state, ev, self._owned)  # a misfit changes nothing
            self._tail.append(ev)
            self._next_seq += 1
            self._last_ts = ev.ts
            self._buffer.append(record)
            d = self.durability
            if len(self._buffer) >= d.batch_size or d.fsync == "always" or kind in d.flush_on:
                self.flush()
            elif kind in d.write_on:
                self._write(sync=False)
            if kind == TOOL_CALL and self.policy.before_non_idempotent and ev.fields.get("idempotent") is False:
                self._before_effect(ev)
            if kind == ERROR and self._schedule is not None:
                self._schedule.failed(time.monotonic())
            p = self.policy
            every = self._schedule.next_delay() if self._schedule is not None else p.every_seconds
            if (p.every_events is not None and len(self._tail) >= p.every_events) or (
                isinstance(every, (int, float)) and time.monotonic() - self._last_checkpoint >= every
            ):
                self.checkpoint()
            return ev

    def flush(self) -> None:
        """Write the events not written yet (and fsync them, unless fsync is "never")."""
        self._write(sync=True)

    def _write(self, *, sync: bool) -> None:
        with self._lock:
            if not self._buffer or self._writer is None:
                return
            # no partial record stays behind a failure: the next flush writes the batch again
            self._writer.append(b"".join(self._buffer), sync=sync)
            self._buffer.clear()

    # -- checkpoints ---------------------------------------------------------------------------------
    def _before_effect(self, call: Event) -> None:
        """CheckpointPolicy.before_non_idempotent: a checkpoint that holds `call` pending,
        unless the last one already does."""
        if self._base_seq < call.seq:
            self.checkpoint(message=f"before non-idempotent call {call.fields['call_id']} of {call.fields['tool']}")

    def _document(self) -> dict[str, Any]:
        # the snapshot's own key order, the tail last: replay gives the same order back
        doc = dict(self._snapshot)
        doc["events"] = [ev.to_map() for ev in self._tail]
        return doc

    def _take(self, parents: list[str], message: str, labels: Mapping[str, str] | None = None) -> TakeResult:
        from ckptcli.writer import take

        all_labels = {**self.labels, **(labels or {}), LABEL_RUN: self.run, LABEL_SEQ: str(self._base_seq + len(self._tail))}
        began = time.monotonic()
        result = take(
            self.store, self._document(), subject=self.subject, parents=parents, labels=all_labels, message=message, branch=self.branch
        )
        if self._schedule is not None:
            self._schedule.took(max(0.0, time.monotonic() - began))
        return result

    def checkpoint(self, message: str = "", labels: Mapping[str, str] | None = None) -> TakeResult:
        """Take a checkpoint now: the snapshot (the state at the previous checkpoint) and
        the tail (the events since); its parent is the previous checkpoint. Then the
        journal starts again after it.

        Raises:
            what api.take raises (nothing is committed then, and recording goes on);
            StoreIOError when the new journal cannot be written (the checkpoint is
            committed; recovery skips the events the old journal still holds).
        """
        with self._lock:
            self._check_open()
            parents = [self._base]
            try:
                self.store.resolve(self._base)
            except NotFoundError:
                # pruned while recording (a policy that keeps no latest): the snapshot and the
                # tail hold the whole state, so nothing is lost; the history starts again here
                parents = []
                self.store.warn(
                    f"checkpoint {self._base[:12]}, the one {self.subject} was recording on, was pruned meanwhile: this "
                    "checkpoint starts a new history (its state is whole); keep each subject's latest (--keep-last 1) while a recorder runs"
                )
            result = self._take(parents, message, labels)
            self._base, self._base_seq = result.hex, self.last_seq
            self._owned.clear()
            self._snapshot = self._state
            self._tail = []
            self._buffer.clear()  # those events are in the checkpoint
            self._last_checkpoint = time.monotonic()
            write_journal(self.path, self._header())
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            try:
                self._writer = self._open_writer()
            except OSError as exc:
                raise StoreIOError(f"cannot open journal {self.path}: {exc.strerror}") from None
            return result

    # -- steps ------------------------------------------------------------------------------------------
    def step(self, func: StepFunc, kind: str, /, *, tools: Mapping[str, Tool] | None = None, **fields: Any) -> Event:
        """Record an input event and run the step function on it (docs/replay.md "The
        step-function contract"): what it emits through its context is recorded with
        `cause` = the input's seq, its tool calls run for real and are recorded with their
        results. If it raises, an error event is recorded and the exception propagates.
        Returns the input event.
        """
        if "cause" in fields:
            raise InvalidInputError(f"{kind}: an input event has no cause")
        with self._lock:
            ev = self.append(kind, **fields)
            ctx = _LiveContext(self, ev, self.tools if tools is None else dict(tools))
            try:
                func(ctx, ev)
            except Exception as exc:
                from ckptcli.history.replay import error_fields

                self.append(ERROR, **error_fields(exc), cause=ev.seq)
                raise
            return ev

    # -- closing ----------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._lock_fd is None:
            raise UsageError(f"the recorder of {self.path} is closed")

    def close(self) -> None:
        """Write what is buffered and let the journal go (reopen it to continue)."""
        with self._lock:
            if self._lock_fd is None:
                return
            try:
                self.flush()
            finally:
                self._release()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _LiveContext(StepContext):
    """The step context of a live run: events go to the recorder, tools really run."""

    def __init__(self, rec: Recorder, input_event: Event, tools: Mapping[str, Tool]) -> None:
        self.input = input_event
        self._rec = rec
        self._tools = tools

    @property
    def state(self) -> State:
        return self._rec.state

    def emit(self, kind: str, **fields: Any) -> Event:
        if "cause" in fields:
            raise InvalidInputError(f"{kind}: 'cause' is set by the step context")
        return self._rec.append(kind, **fields, cause=self.input.seq)

    def tool(self, name: str, args: Any, *, key: str | None = None) -> Any:
        from ckptcli.history.replay import call_id_for

        rec, cause = self._rec, self.input.seq
        extra = {"key": key} if key is not None else {}
        call = rec.append(TOOL_CALL, call_id=call_id_for(rec.next_seq), tool=name, args=args, **extra, cause=cause)
        call_id = call.fields["call_id"]
        fn = self._tools.get(name)
        if fn is not None and rec.policy.before_non_idempotent and not is_idempotent(fn):
            try:
                rec._before_effect(call)
            except Exception as exc:  # not run: recorded as failed, so that it is not in doubt
                error = f"not run: the checkpoint before it failed: {exc}"
                rec.append(TOOL_RESULT, call_id=call_id, status="error", error=error, cause=cause)
                raise
        if fn is None:
            error = f"no tool {name!r} was given to the recorder"
        else:
            try:
                result = fn(call.fields["args"])
            except Exception as exc:  # the tool failed: recorded, and the step sees ToolFailed
                error = f"{type(exc).__name__}: {exc}"
                rec.append(TOOL_RESULT, call_id=call_id, status="error", error=error, cause=cause)
                raise ToolFailed(name, error) from exc
            try:
                done = rec.append(TOOL_RESULT, call_id=call_id, result=result, cause=cause)
            except InvalidInputError as exc:
                error = f"its result cannot be recorded: {exc.message}"
            else:
                return done.fields.get("result")
        rec.append(TOOL_RESULT, call_id=call_id, status="error", error=error, cause=cause)
        raise ToolFailed(name, error)

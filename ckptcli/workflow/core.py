"""Durable steps for plain Python workflows: running a workflow (`run`), its context
(`Context.step`, `Context.set`), the `@step` decorator, retries and the in-doubt policy.

How it works (docs/workflows.md is the guide): a workflow is a function
`fn(ctx, *args)`, subject `workflow:<id>`, recorded through a `Recorder` whose journal
lives beside the store. Each call of a step gets the next **position** (1, 2, ...) in the
run; each attempt of it is a `tools` record (`tool.call` with call_id "<pos>.<attempt>"
and the idempotency key "<id>:<step>:<occurrence>:<attempt>", then `tool.result`).
Running the workflow again runs the function again from the top: a step whose position
has a recorded result returns it without being called, the first one without continues
the run. The recorded run is read from the state alone (`recorded_steps`), so it survives
checkpoints and crashes alike.

Invariants:
- A step's `tool.call` is written to the journal before the step runs, and its
  `tool.result` written and synced as soon as it returns (`default_durability()`: the call is synced
  with its result, one sync per step): a step whose call is recorded and whose result is
  not was interrupted, and is in doubt. A power cut can lose the call of the step that was
  running (never a result); that step then runs again with the same key, as one in doubt.
- A key is never used for two different executions, except to run again an attempt that
  was in doubt (`on_in_doubt="retry"`, the default): attempts count on per (step name,
  occurrence) across the whole history, rollbacks included.
- Steps record standard events only; `workflow:*` events are recorded once per run, per
  compensation name, per retry, per in-doubt step and per rollback (ckptcli.workflow.events).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import random
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, cast, overload

from ckptcli.errors import (
    CkptError,
    ConflictError,
    ExitCode,
    InvalidInputError,
    LockError,
    NotFoundError,
    StoreIOError,
    UnsafePathError,
    UsageError,
)
from ckptcli.history.events import MEMORY_SET, TOOL_CALL, TOOL_RESULT, Reducers, State, make_event
from ckptcli.workflow import events as wev
from ckptcli.workflow import sigint

if TYPE_CHECKING:
    from ckptcli.history.recorder import CheckpointPolicy, Durability, Recorder
    from ckptcli.store.repository import Store

__all__ = [
    "Compensation",
    "Context",
    "InDoubtStep",
    "NonDeterminismError",
    "Resolved",
    "Retry",
    "StepFailed",
    "StepInDoubt",
    "StepInfo",
    "WorkflowError",
    "WorkflowFailed",
    "current_step",
    "run",
    "step",
]

P = ParamSpec("P")
R = TypeVar("R")

KIND = "workflow"
#: Labels of every checkpoint of a durable workflow (the shared `workflow.` labels).
LABEL_ENGINE = "workflow.engine"
LABEL_TYPE = "workflow.type"
ENGINE = "ckpt"
#: A step's name: what a label value and a key can carry (no ":", which separates a key's parts).
STEP_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
#: Where a local store keeps its workflows' journals: <store>/workflows/<id>.journal.
JOURNAL_DIRNAME = "workflows"
#: How the recorded error of a step whose result could not be recorded begins (the step failed).
UNRECORDABLE = "its result cannot be recorded"
UNRECORDABLE_HINT = "return maps with string keys, lists, str, bytes, int, float, bool or None (a list, not a tuple or a set)"
_CALL_ID_RE = re.compile(r"^([1-9][0-9]*)\.([1-9][0-9]*)$")


# -- errors ------------------------------------------------------------------------------------
class WorkflowError(CkptError):
    """A durable workflow could not go on (exit 1 from the CLI)."""

    exit_code = ExitCode.FAILURE


class NonDeterminismError(WorkflowError):
    """A re-run called another step at a position than the recorded run did (the workflow
    function is not deterministic, or its code changed under a run in progress)."""

    exit_code = ExitCode.DIVERGED

    def __init__(self, workflow_id: str, pos: int, recorded: str, called: str) -> None:
        super().__init__(
            f"workflow {workflow_id}: step {pos} was {recorded!r} in the recorded run, but this run called {called!r} there",
            hint="a workflow must call its steps in the same order on every run: keep the old code until the run ends, "
            "or roll it back (ckpt workflow rollback) to before the change",
        )
        self.workflow_id, self.pos, self.recorded, self.called = workflow_id, pos, recorded, called


class StepFailed(WorkflowError):  # noqa: N818 - a verdict on the workflow, as ToolFailed
    """A step raised on its last attempt, or returned a value that cannot be recorded
    (live), or had (re-run): `error` is the recorded "Type: message" of its last attempt
    (or "its result cannot be recorded: ..."); live, the exception is the `__cause__`."""

    def __init__(self, name: str, key: str, attempts: int, error: str, hint: str | None = None) -> None:
        super().__init__(f"step {name} failed after {attempts} attempt{'s' if attempts != 1 else ''} (key {key}): {error}", hint=hint)
        self.step, self.key, self.attempts, self.error = name, key, attempts, error


class StepInDoubt(WorkflowError):  # noqa: N818 - a verdict on the workflow, as ToolFailed
    """A step begun by an earlier run has no recorded result and the in-doubt policy said
    "fail": its effect may or may not have happened."""

    def __init__(self, step: InDoubtStep) -> None:
        super().__init__(
            f"step {step.name} (position {step.pos}, key {step.key}) was begun and never finished: it is in doubt",
            hint="check whether its effect happened, then run again with on_in_doubt='retry' (same key) "
            "or on_in_doubt=a function returning Resolved(result)",
        )
        self.step = step


class WorkflowFailed(WorkflowError):  # noqa: N818 - a verdict on the workflow, as ToolFailed
    """The workflow's function raised in an earlier run: its recorded outcome."""

    def __init__(self, workflow_id: str, error: str) -> None:
        super().__init__(
            f"workflow {workflow_id} failed: {error}",
            hint="to run it again, roll it back to its last checkpoint "
            f"(ckpt workflow rollback {workflow_id} --to workflow:{workflow_id} --run)",
        )
        self.workflow_id, self.error = workflow_id, error


# -- values the caller sees --------------------------------------------------------------------------
@dataclass(frozen=True)
class Retry:
    """How a step is retried when it raises: at most `max_attempts` attempts in all, the
    n-th retry after min(max_delay, initial * factor**(n-1)) seconds, spread by +-jitter
    (a fraction of the delay). Only exceptions of the `on` types are retried."""

    max_attempts: int = 3
    initial: float = 1.0
    factor: float = 2.0
    max_delay: float = 60.0
    jitter: float = 0.1
    on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        if type(self.max_attempts) is not int or self.max_attempts < 1:
            raise InvalidInputError(f"Retry: max_attempts must be an integer >= 1, not {self.max_attempts!r}")
        for name in ("initial", "factor", "max_delay", "jitter"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or v != v:
                raise InvalidInputError(f"Retry: {name} must be a number >= 0, not {v!r}")
        if self.factor < 1:
            raise InvalidInputError(f"Retry: factor must be >= 1, not {self.factor!r}")
        if self.jitter > 1:
            raise InvalidInputError(f"Retry: jitter is a fraction of the delay, between 0 and 1, not {self.jitter!r}")

    def delay(self, retry: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds before retry number `retry` (1 for the second attempt)."""
        base = min(float(self.max_delay), float(self.initial) * float(self.factor) ** (retry - 1))
        return max(0.0, base * (1 + self.jitter * (2 * rand() - 1)))


NO_RETRY = Retry(max_attempts=1)


@dataclass(frozen=True)
class StepInfo:
    """The step being run: what `current_step()` and `Context.step_info` give inside it."""

    workflow_id: str
    name: str
    pos: int  # its position in the run (1, 2, ...)
    occurrence: int  # the how-manieth call of a step of this name (1, 2, ...)
    attempt: int
    idempotency_key: str  # "<workflow id>:<name>:<occurrence>:<attempt>"


@dataclass(frozen=True)
class InDoubtStep:
    """A step that an earlier run began and did not finish (a `tools` record still pending)."""

    workflow_id: str
    name: str
    pos: int
    attempt: int
    key: str
    call_id: str
    args: Any  # as recorded


@dataclass(frozen=True)
class Resolved:
    """What an `on_in_doubt` function returns when it knows the step's effect happened:
    its result, recorded as the step's (the step is not called)."""

    result: Any


InDoubtDecision = Literal["retry", "fail"] | Resolved
InDoubtPolicy = Literal["retry", "fail"] | Callable[[InDoubtStep], InDoubtDecision]


@dataclass(frozen=True)
class Compensation:
    """What a compensation function gets: the step it undoes (as recorded) and its own key."""

    workflow_id: str
    step: str
    pos: int
    args: list[Any]
    kwargs: dict[str, Any]
    result: Any
    step_key: str  # the idempotency key of the step's attempt that succeeded
    key: str  # the compensation's idempotency key: step_key + ":undo"


# -- the recorded run ---------------------------------------------------------------------------------
@dataclass
class StepRecord:
    """The attempts recorded at one position (in the current history: a rollback voids the
    positions after its checkpoint)."""

    pos: int
    name: str
    occurrence: int
    attempts: list[dict[str, Any]] = field(default_factory=list)  # the `tools` records, oldest first

    @property
    def last(self) -> dict[str, Any]:
        return self.attempts[-1]

    @property
    def status(self) -> str:
        """Its last attempt's status: "ok", "error" or "pending" (in doubt)."""
        return str(self.last.get("status"))


def parse_key(key: object) -> tuple[str, str, int, int] | None:
    """(workflow id, step, occurrence, attempt) of a key, or None."""
    if type(key) is not str:
        return None
    parts = key.rsplit(":", 3)
    if len(parts) != 4 or not parts[2].isdecimal() or not parts[3].isdecimal():
        return None
    return parts[0], parts[1], int(parts[2]), int(parts[3])


def recorded_steps(state: State) -> tuple[dict[int, StepRecord], dict[tuple[str, int], int]]:
    """The recorded run in `state`: position -> its StepRecord (what a rollback voided left
    out), and (step, occurrence) -> the highest attempt number ever used."""
    rewinds = sorted((s, p) for s, p in (wev.view(state).get("rewinds") or []) if type(s) is int and type(p) is int)
    steps: dict[int, StepRecord] = {}
    highest: dict[tuple[str, int], int] = {}
    r = 0
    for rec in state.get("tools") or []:
        if type(rec) is not dict:
            continue
        m = _CALL_ID_RE.match(str(rec.get("call_id")))
        parsed = parse_key(rec.get("key"))
        if m is None or parsed is None:
            continue
        seq = rec["seq"] if type(rec.get("seq")) is int else 0
        while r < len(rewinds) and rewinds[r][0] < seq:
            cut = rewinds[r][1]
            steps = {p: s for p, s in steps.items() if p <= cut}
            r += 1
        pos, attempt = int(m.group(1)), int(m.group(2))
        name, occ = str(rec.get("tool")), parsed[2]
        highest[(name, occ)] = max(highest.get((name, occ), 0), attempt)
        got = steps.get(pos)
        if got is None or got.name != name or got.occurrence != occ:
            got = steps[pos] = StepRecord(pos, name, occ)
        got.attempts.append(rec)
    for _seq, cut in rewinds[r:]:
        steps = {p: s for p, s in steps.items() if p <= cut}
    return steps, highest


# -- naming --------------------------------------------------------------------------------------------
def subject_of(workflow_id: object) -> str:
    """`workflow:<id>`, checked. InvalidInputError (one line) for an id that cannot name a subject."""
    from ckptcli.format.manifest import NAME_RE

    if type(workflow_id) is not str or not NAME_RE.match(workflow_id):
        raise InvalidInputError(
            f"workflow id {workflow_id!r} is not valid",
            hint="use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit (e.g. order-1042)",
        )
    return f"{KIND}:{workflow_id}"


def check_step_name(name: object) -> str:
    if type(name) is not str or not STEP_NAME_RE.match(name):
        raise InvalidInputError(
            f"step name {name!r} is not valid", hint="use 1-128 letters, digits, '.', '_' or '-' (no ':'), e.g. charge-card"
        )
    return name


def _name_of(fn: Callable[..., Any]) -> str:
    raw = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    name = re.sub(r"[^A-Za-z0-9._-]", "_", str(raw))[:128]
    return name if STEP_NAME_RE.match(name) else "step"


def _ref_of(fn: Callable[..., Any]) -> str | None:
    """The name `fn` can be imported by in another process, "module:qualname", or None."""
    module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qual, str) or "<" in qual or module == "__main__":
        return None
    return f"{module}:{qual}"


def _local_journals(store: Store, *, reading: bool = False) -> Path | None:
    """<store>/workflows for a store on this host, else None.

    Raises: UnsafePathError when it is a symbolic link (docs/storage.md: a directory of a
    local store is never read or written through a link; `reading`: the error says read)."""
    from ckptcli.store.backend import LocalBackend
    from ckptcli.store.locking import check_no_links
    from ckptcli.store.repository import store_location

    where = store_location(store.location)  # a path (a local store however it was opened), or a URL
    if isinstance(store.backend, LocalBackend) or isinstance(where, Path):
        return Path(check_no_links(os.fspath(store.location), f"{JOURNAL_DIRNAME}/x", reading=reading)).parent
    return None


#: where a workflow run with a journal_dir of its own keeps its journal, written at its first
#: run: <store>/workflows/<id>.journal-dir holds that directory's absolute path (UTF-8)
WHERE_SUFFIX = ".journal-dir"
#: the most bytes a record of where the journal is may hold (a path, with room to spare)
_WHERE_MAX = 16384
#: the files of a workflow in <store>/workflows: its journal, the journal's lock, the workflow's
#: lock, the record of where its journal is
_STORE_FILES = (".journal", ".journal.lock", ".lock", WHERE_SUFFIX)


def _no_planted_files(root: Path, workflow_id: str) -> None:
    """Refuse, before anything is written, a file of workflow `workflow_id` in the store's
    `root` (<store>/workflows) that is a symbolic link, whatever it points to
    (UnsafePathError, exit 8), or no regular file (a FIFO, a device, a socket, a
    directory: CorruptError, exit 5). This look only makes the refusal early: each of
    these files is opened with O_NOFOLLOW|O_NONBLOCK and judged on the descriptor
    (locking.open_regular), so one planted after it is refused the same way."""
    for suffix in _STORE_FILES:
        journal_file(root / f"{workflow_id}{suffix}")


def journal_file(path: Path) -> bool:
    """Whether there is a journal (or lock file) at `path`: True for a regular file, False
    for nothing. Never follows a link or opens the file.

    Raises: UnsafePathError (a symbolic link), CorruptError (a FIFO, a device, a socket,
    a directory), StoreIOError (it cannot be looked at)."""
    from ckptcli.store.locking import linked_file, not_regular

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreIOError(f"cannot read {path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise linked_file(path)
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode)
    return True


def journal_path(store: Store, workflow_id: str, journal_dir: str | Path | None = None) -> Path:
    """The journal of workflow `workflow_id`: in `journal_dir`, else <store>/workflows/ for a
    local store. A store on object storage needs a journal_dir (InvalidInputError)."""
    subject_of(workflow_id)
    local = _local_journals(store)
    if local is not None:
        _no_planted_files(local, workflow_id)  # its lock is there whatever journal_dir says
    if journal_dir is not None:
        root = _given_dir(journal_dir)
    elif local is not None:
        root = local
    else:
        raise InvalidInputError(
            f"the store {store.location} is not a directory of this host: its workflows need a journal directory here",
            hint="pass journal_dir= (ckpt workflow: --journal-dir) a directory on this host",
        )
    return root / f"{workflow_id}.journal"


def _given_dir(journal_dir: str | Path) -> Path:
    """`journal_dir` as a Path, once it is not empty: Path("") is ".", a directory nobody
    named. Raises: InvalidInputError."""
    if os.fspath(journal_dir) == "":
        raise InvalidInputError("the journal directory is empty", hint="give the directory the workflow's journal is in, e.g. ./journals")
    return Path(journal_dir)


def check_journal_dir(journal_dir: str | Path) -> Path:
    """`journal_dir` as given to a reader or a rollback: an existing directory, not a link.

    Raises: NotFoundError (no such directory), UnsafePathError (a symbolic link),
    InvalidInputError (not a directory, or an empty path)."""
    path = _given_dir(journal_dir)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NotFoundError(
            f"journal directory {path} does not exist", hint="give the directory the workflow was run with (journal_dir=)"
        ) from None
    except OSError as exc:
        raise StoreIOError(f"cannot read journal directory {path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"journal directory {path} is a symbolic link", hint="give the directory itself")
    if not stat.S_ISDIR(st.st_mode):
        raise InvalidInputError(
            f"journal directory {path} is not a directory", hint="give the directory the workflow was run with (journal_dir=)"
        )
    return path


def recorded_journal_dir(store: Store, workflow_id: str) -> Path | None:
    """The journal directory workflow `workflow_id` was first run with, as recorded in
    <store>/workflows/<id>.journal-dir; None when there is no record (a store on object
    storage, a workflow whose journal is in <store>/workflows, one run by an older ckpt).

    Raises: UnsafePathError (the record a link), CorruptError (no regular file, or what it
    holds is no absolute path), StoreIOError."""
    from ckptcli.errors import CorruptError
    from ckptcli.store.locking import open_regular

    local = _local_journals(store, reading=True)
    if local is None:
        return None
    path = local / f"{workflow_id}{WHERE_SUFFIX}"
    try:
        fd = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreIOError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = os.read(fd, _WHERE_MAX + 1)
    except OSError as exc:
        raise StoreIOError(f"cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    text = os.fsdecode(data)  # as it was written (os.fsencode): a path of any bytes
    if len(data) > _WHERE_MAX or not text.startswith("/") or "\0" in text or "\n" in text:
        raise CorruptError(
            f"{path} is damaged: it does not hold the absolute path of a journal directory",
            hint="remove it: the next run of the workflow records the directory it is given again",
        )
    return Path(text)


def _record_journal_dir(store: Store, workflow_id: str, journal_dir: Path) -> None:
    """Record, at workflow `workflow_id`'s first run, that its journal is in `journal_dir`
    (a directory of its own, not <store>/workflows), so that a reader or a rollback given
    another directory is refused rather than taking it for a workflow with no journal.
    Written atomically (a temporary file renamed into place); nothing for a store on
    object storage, or for a workflow the store already holds checkpoints of."""
    from ckptcli.store.backend import write_file_atomic

    local = _local_journals(store)
    if local is None or recorded_journal_dir(store, workflow_id) is not None:
        return
    where = Path(os.path.abspath(journal_dir))
    if _same_dir(where, local):
        return
    try:
        store.resolve(f"{KIND}:{workflow_id}")
        return  # not its first run (an older ckpt ran it, keeping no record): nothing to go by
    except NotFoundError:
        pass
    local.mkdir(parents=True, exist_ok=True)
    path = local / f"{workflow_id}{WHERE_SUFFIX}"
    what = f"the record of where workflow {workflow_id} keeps its journal"

    def write(fh: IO[bytes]) -> None:
        fh.write(os.fsencode(where))

    write_file_atomic(path, write, what, through=False)


def _same_dir(a: Path, b: Path) -> bool:
    """Whether `a` and `b` name one directory (the same inode when both exist, else the
    same absolute path)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def check_recorded_dir(store: Store, workflow_id: str, journal_dir: str | Path | None) -> None:
    """Refuse (InvalidInputError, exit 4: one line naming both) a journal directory that is
    not the one workflow `workflow_id` was first run with, as recorded
    (`recorded_journal_dir`); leaving it out (<store>/workflows) when one was recorded too.
    Without it, a reader or a rollback given an empty directory could not tell the
    workflow from one that never ran, and would miss (or leave uncompensated) the steps
    recorded since its latest checkpoint, and a run would start a second history."""
    want = recorded_journal_dir(store, workflow_id)
    if want is None:
        return
    own = journal_path(store, workflow_id)
    if journal_file(own):  # a workflow run with a directory of its own has no journal in the store
        from ckptcli.errors import CorruptError

        record = own.parent / f"{workflow_id}{WHERE_SUFFIX}"
        raise CorruptError(
            f"{record} says workflow {workflow_id} keeps its journal in {want}, but its journal is {own}: the record is not one ckpt wrote",
            hint=f"remove it (rm {record}); the workflow's journal in the store is its own",
        )
    if journal_dir is None:
        raise InvalidInputError(
            f"workflow {workflow_id} keeps its journal in {want}, not in the store's workflows directory",
            hint=f"give the directory it was run with: --journal-dir {want} (journal_dir=)",
        )
    if not _same_dir(want, Path(journal_dir)):
        raise InvalidInputError(
            f"workflow {workflow_id} keeps its journal in {want}, not in {journal_dir}",
            hint=f"give the directory it was run with: --journal-dir {want} (journal_dir=)",
        )


def existing_journal(store: Store, workflow_id: str, journal_dir: str | Path | None = None) -> Path | None:
    """The journal a reader or a rollback of workflow `workflow_id` uses (it may not exist
    yet), or None for a store on object storage and no `journal_dir`.

    A journal_dir given must be a directory (check_journal_dir); for a store on this host it
    must not be another directory than <store>/workflows when that holds the workflow's
    journal: reading or rolling back without it would miss the steps it records after the
    latest checkpoint, and a rollback would start a second history beside it.

    Raises: what check_journal_dir raises; InvalidInputError for another directory than the
    one that holds the workflow's journal."""
    local = _local_journals(store)
    if journal_dir is None:
        if local is None:
            return None
        path = journal_path(store, workflow_id)
        check_recorded_dir(store, workflow_id, None)
        return path
    path = journal_path(store, workflow_id, check_journal_dir(journal_dir))
    check_recorded_dir(store, workflow_id, journal_dir)
    if local is not None:
        default = journal_path(store, workflow_id)
        if journal_file(default) and not _same_file(default, path):
            raise InvalidInputError(
                f"workflow {workflow_id} keeps its journal in {default.parent}, not in {Path(journal_dir)}",
                hint="leave out --journal-dir (journal_dir=): the store's own journal is the workflow's",
            )
    return path


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


@contextlib.contextmanager
def workflow_lock(store: Store, workflow_id: str, *, probe: bool = False) -> Iterator[None]:
    """Held while workflow `workflow_id` runs or is rolled back, whatever journal directory
    each is given: <store>/workflows/<id>.lock, locked (flock) for a store on this host
    (a store on object storage: its journal's lock alone). With `probe`, a lock file
    that does not exist is not made (nothing runs the workflow then).

    Raises: LockError when another run or rollback of the workflow holds it."""
    import fcntl

    from ckptcli.store.locking import open_regular

    root = _local_journals(store)
    subject_of(workflow_id)
    lock_path = root / f"{workflow_id}.lock" if root is not None else None
    if lock_path is not None:
        _no_planted_files(lock_path.parent, workflow_id)
    if lock_path is None or (probe and not journal_file(lock_path)):
        yield
        return
    try:
        lock_path.parent.mkdir(exist_ok=True)
        fd = open_regular(lock_path, os.O_RDWR | os.O_CREAT)  # a link or FIFO planted since: refused, never followed
    except OSError as exc:
        raise StoreIOError(f"cannot open {lock_path}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise LockError(
                f"workflow {workflow_id} is running or being rolled back in another process ({lock_path} is locked)",
                hint="wait for it to end (or stop it), then run this again",
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the flock


def reducers() -> Reducers:
    """The reducers a workflow's recorder and readers use (the workflow namespace's own)."""
    return Reducers(wev.REDUCERS)


# -- the step registry (compensations by step name) ----------------------------------------------------
_COMPENSATIONS: dict[str, Callable[[Compensation], object]] = {}

_CTX: contextvars.ContextVar[Context | None] = contextvars.ContextVar("ckpt_workflow_context", default=None)
_STEP: contextvars.ContextVar[StepInfo | None] = contextvars.ContextVar("ckpt_workflow_step", default=None)


def current_step() -> StepInfo | None:
    """The step running in this thread (its idempotency key, attempt, ...), or None
    outside a durable step."""
    return _STEP.get()


def registered_compensation(step_name: str) -> Callable[[Compensation], object] | None:
    return _COMPENSATIONS.get(step_name)


# -- the context ----------------------------------------------------------------------------------------
class Context:
    """What a workflow function gets as its first argument: `step` runs a durable step,
    `set` and `get` the workflow's variables, `checkpoint` takes a checkpoint now.
    One per run; use it from the workflow's thread only."""

    def __init__(self, rec: Recorder, workflow_id: str, on_in_doubt: InDoubtPolicy) -> None:
        self.workflow_id = workflow_id
        self._rec = rec
        self._on_in_doubt = on_in_doubt
        self._pos = 0
        self._occ: dict[str, int] = {}
        self._vars: dict[str, Any] = {}
        self._steps, self._highest = recorded_steps(rec.state)
        self._recorded_max = max(self._steps, default=0)
        self._sagas = dict(wev.view(rec.state).get("compensations") or {})
        self._memory = dict(rec.state.get("memory") or {})  # the recorded variables, kept here as they are recorded

    # -- variables ---------------------------------------------------------------------------
    @property
    def replaying(self) -> bool:
        """Whether the run is still going over what an earlier run recorded (steps there
        return their recorded results, `set` records nothing)."""
        return self._pos < self._recorded_max

    def set(self, name: str, value: Any) -> None:
        """Set workflow variable `name` (recorded as `memory.set`; while replaying, only
        here). Raises InvalidInputError for a value a checkpoint cannot hold."""
        if type(name) is not str or not name:
            raise InvalidInputError(f"workflow {self.workflow_id}: a variable's name must be a non-empty string, not {name!r}")
        try:
            probe = make_event(1, 0, MEMORY_SET, {"path": [name], "value": value})  # checked, copied
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"workflow {self.workflow_id}: variable {name!r} cannot be recorded ({_why(exc)})",
                hint="set maps with string keys, lists, str, bytes, int, float, bool or None",
            ) from None
        if self.replaying:
            self._vars[name] = probe.fields["value"]
            return
        live = self._memory
        if name not in live or live[name] != probe.fields["value"] or type(live[name]) is not type(probe.fields["value"]):
            ev = self._rec.append(MEMORY_SET, path=[name], value=value)
            self._vars[name] = self._memory[name] = ev.fields["value"]
        else:
            self._vars[name] = live[name]

    def get(self, name: str, default: Any = None) -> Any:
        """Workflow variable `name` as set so far in this run (`default` when not set)."""
        return self._vars.get(name, default)

    @property
    def vars(self) -> Mapping[str, Any]:
        """The workflow's variables as set so far in this run (read-only view)."""
        return dict(self._vars)

    # -- the step running ------------------------------------------------------------------------
    @property
    def step_info(self) -> StepInfo | None:
        """The step running now (None between steps)."""
        return _STEP.get()

    @property
    def idempotency_key(self) -> str:
        """The running step's idempotency key. UsageError between steps."""
        info = _STEP.get()
        if info is None:
            raise UsageError("ctx.idempotency_key is only defined while a step runs", hint="read it inside the step's function")
        return info.idempotency_key

    def checkpoint(self, message: str = "") -> str | None:
        """Take a checkpoint now (a point `rollback` can go back to); returns its hex id.
        While replaying, takes none (the earlier run did) and returns None."""
        if self.replaying:
            return None
        return self._rec.checkpoint(message=message or f"workflow {self.workflow_id}: after step {self._pos}").hex

    # -- steps ------------------------------------------------------------------------------------
    def step(
        self,
        name: str,
        fn: Callable[..., R],
        /,
        *args: Any,
        retry: Retry | None = None,
        compensate: Callable[[Compensation], object] | None = None,
        **kwargs: Any,
    ) -> R:
        """Run `fn(*args, **kwargs)` as the durable step `name`; returns its result as
        recorded (maps, lists, str, bytes, int, float, bool, None). A re-run returns the
        recorded result without calling `fn`.

        `retry`: how it is retried (default: one attempt). `compensate`: a function that
        undoes it, `compensate(Compensation)`, run by `rollback` (define it at module
        level so that another process, `ckpt workflow rollback`, can import it).
        Inside `fn`, `current_step()` (or `ctx.idempotency_key`) gives its key.

        Raises:
            StepFailed when the last attempt raised or returned a value that cannot be
            recorded (not retried; the InvalidInputError is its cause); StepInDoubt (see `on_in_doubt`);
            NonDeterminismError when the recorded run had another step here;
            InvalidInputError for a name or arguments a checkpoint cannot hold.
        """
        if _STEP.get() is not None:  # a step inside a step is part of it
            return fn(*args, **kwargs)
        check_step_name(name)
        policy = retry or NO_RETRY
        self._pos += 1
        pos = self._pos
        occ = self._occ[name] = self._occ.get(name, 0) + 1
        if compensate is not None:
            self._note_compensation(name, compensate)
        recorded = self._steps.get(pos)
        # (the positions before matched by name, so the occurrences match when the names do)
        if recorded is not None and recorded.name != name:
            raise NonDeterminismError(self.workflow_id, pos, recorded.name, name)
        argv = self._args(name, args, kwargs)
        tries = 0
        resume: dict[str, Any] | None = None
        if recorded is not None:
            if recorded.status == "ok":
                return cast(R, recorded.last.get("result"))
            tries = sum(1 for a in recorded.attempts if a.get("status") == "error")
            if recorded.status == "pending":
                decided = self._in_doubt(recorded)
                if isinstance(decided, Resolved):
                    return cast(R, decided.result)
                resume = decided
                tries += 1
            elif (
                tries >= policy.max_attempts
                or (unrecordable := str(recorded.last.get("error")).startswith(UNRECORDABLE))
                or pos < self._recorded_max  # the run went on past it: it was given up (an error not retried)
            ):
                last = recorded.last
                raise StepFailed(
                    name, str(last.get("key")), tries, str(last.get("error")), hint=UNRECORDABLE_HINT if unrecordable else None
                )
        attempt = self._highest.get((name, occ), 0) + 1 if resume is None else int(str(resume["call_id"]).split(".")[1])
        while True:
            key = f"{self.workflow_id}:{name}:{occ}:{attempt}"
            call_id = f"{pos}.{attempt}"
            if resume is None:
                self._rec.append(TOOL_CALL, call_id=call_id, tool=name, args=argv, key=key)
                self._highest[(name, occ)] = attempt
                tries += 1
            resume = None
            token = _STEP.set(StepInfo(self.workflow_id, name, pos, occ, attempt, key))
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                error = error_text(exc)
                self._rec.append(TOOL_RESULT, call_id=call_id, status="error", error=error)
                if not isinstance(exc, policy.on) or tries >= policy.max_attempts:
                    raise StepFailed(name, key, tries, error) from exc
                delay = policy.delay(tries)
                self._rec.append(wev.RETRY, pos=pos, step=name, attempt=attempt, delay_seconds=delay, error=error)
                time.sleep(delay)
                attempt += 1
                continue
            finally:
                _STEP.reset(token)
            try:
                done = self._rec.append(TOOL_RESULT, call_id=call_id, result=result)
            except InvalidInputError as exc:
                # its effect happened and its result is lost: the step failed, as if it had
                # raised (never retried: the same code returns the same kind of value)
                error = f"{UNRECORDABLE}: a value of type {type(result).__name__} ({_why(exc)})"
                self._rec.append(TOOL_RESULT, call_id=call_id, status="error", error=error)
                raise StepFailed(name, key, tries, error, hint=UNRECORDABLE_HINT) from exc
            return cast(R, done.fields.get("result"))

    def _args(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        fields: dict[str, Any] = {"args": list(args)}
        if kwargs:
            fields["kwargs"] = kwargs
        try:
            return make_event(1, 0, wev.RUN, fields).fields  # checked and copied, as the event will be
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"workflow {self.workflow_id}: the arguments of step {name} cannot be recorded ({_why(exc)})",
                hint="pass maps with string keys, lists, str, bytes, int, float, bool or None (or pass the rest through a closure)",
            ) from None

    def _note_compensation(self, name: str, compensate: Callable[[Compensation], object]) -> None:
        if not callable(compensate):
            raise InvalidInputError(f"step {name}: compensate must be a function, not {type(compensate).__name__}")
        _COMPENSATIONS[name] = compensate
        ref = _ref_of(compensate)
        if name not in self._sagas or self._sagas[name] != ref:
            self._rec.append(wev.SAGA, step=name, compensate=ref)
            self._sagas[name] = ref

    def _in_doubt(self, recorded: StepRecord) -> dict[str, Any] | Resolved:
        last = recorded.last
        info = InDoubtStep(
            self.workflow_id,
            recorded.name,
            recorded.pos,
            int(str(last.get("call_id")).split(".")[1]),
            str(last.get("key")),
            str(last.get("call_id")),
            last.get("args"),
        )
        policy = self._on_in_doubt
        decision: Any = policy(info) if callable(policy) else policy
        fields = {"pos": info.pos, "call_id": info.call_id, "key": info.key}
        if isinstance(decision, Resolved):
            self._rec.append(wev.IN_DOUBT, **fields, decision="resolved")
            try:
                done = self._rec.append(TOOL_RESULT, call_id=info.call_id, result=decision.result)
            except InvalidInputError as exc:
                raise InvalidInputError(
                    f"step {info.name} (key {info.key}): the Resolved result cannot be recorded ({_why(exc)})"
                ) from None
            return Resolved(done.fields.get("result"))
        if decision == "fail":
            self._rec.append(wev.IN_DOUBT, **fields, decision="fail")
            self._rec.flush()
            raise StepInDoubt(info)
        if decision != "retry":
            raise InvalidInputError(
                f"on_in_doubt gave {decision!r} for step {info.name} (key {info.key})",
                hint="return 'retry', 'fail' or Resolved(result)",
            )
        self._rec.append(wev.IN_DOUBT, **fields, decision="retry")
        return last


# -- the decorator ------------------------------------------------------------------------------------------
@overload
def step(fn: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def step(
    *, name: str | None = None, retry: Retry | None = None, compensate: Callable[[Compensation], object] | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def step(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    retry: Retry | None = None,
    compensate: Callable[[Compensation], object] | None = None,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Mark a function as a durable step: called inside a running workflow it runs as
    `ctx.step(name, fn, ...)` (name: the function's qualified name unless given);
    called anywhere else (or inside another step) it is a plain call.

        @workflow.step(retry=workflow.Retry(max_attempts=5), compensate=refund)
        def charge(order: str, cents: int) -> dict: ...
    """

    def wrap(f: Callable[P, R]) -> Callable[P, R]:
        sname = check_step_name(name) if name is not None else _name_of(f)
        if compensate is not None:
            if not callable(compensate):
                raise InvalidInputError(f"step {sname}: compensate must be a function, not {type(compensate).__name__}")
            _COMPENSATIONS[sname] = compensate

        @functools.wraps(f)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            ctx = _CTX.get()
            if ctx is None or _STEP.get() is not None:
                return f(*args, **kwargs)
            return ctx.step(sname, f, *args, retry=retry, compensate=compensate, **kwargs)

        call.step_name = sname  # type: ignore[attr-defined]
        return call

    if fn is not None:
        return wrap(fn)
    return wrap


# -- running ----------------------------------------------------------------------------------------------
def default_durability() -> Durability:
    """How a durable workflow's journal reaches the disk unless `run` is told otherwise:
    fsync "batch", each step's `tool.call` written (not synced) before the step runs, and
    its `tool.result` written and synced (the call with it) when it returns: one sync per
    step. A process that dies loses nothing written; a power cut may lose the call of the
    step that was running, which then runs again with the same idempotency key."""
    from ckptcli.history.recorder import Durability

    return Durability(flush_on=frozenset({TOOL_RESULT}), write_on=frozenset({TOOL_CALL}))


def run(
    store: Store,
    workflow_id: str,
    fn: Callable[..., R],
    /,
    *args: Any,
    on_in_doubt: InDoubtPolicy = "retry",
    journal_dir: str | Path | None = None,
    durability: Durability | None = None,
    policy: CheckpointPolicy | None = None,
    type_name: str | None = None,
) -> R:
    """Run workflow `fn(ctx, *args)` durably as `workflow:<workflow_id>`, or go on with it
    after a crash: completed steps return their recorded results, the first unfinished
    one runs. Given other arguments than its first run's, it raises ConflictError,
    whatever the workflow's state; with the same, a workflow that is done returns its
    recorded result at once (`fn` is not called), and one that failed raises WorkflowFailed.

    Args:
        on_in_doubt: what to do with a step an earlier run began and did not finish:
            "retry" (default: run it again with the same idempotency key), "fail"
            (raise StepInDoubt), or a function(InDoubtStep) -> "retry", "fail" or
            Resolved(result).
        journal_dir: where the journal is (default <store>/workflows/ for a local store).
        durability: how events reach the disk (the recorder's; default `default_durability()`,
            fsync "batch": a step's call is written before it runs, its result written
            and synced, with the call, when it returns).
        policy: when to take checkpoints besides the first, `Context.checkpoint` and the end.
        type_name: the `workflow.type` label (default: the function's qualified name).

    Raises:
        InvalidInputError (a workflow id that is not valid, arguments or the workflow's
        result that cannot be recorded); ConflictError (other arguments than the recorded
        run's, done or not, or a rollback that is not finished); LockError (the workflow runs in another process);
        NonDeterminismError, StepInDoubt, WorkflowFailed; what `fn` raises (after its
        failure is recorded).
    """
    from ckptcli.history.recorder import Recorder

    subject = subject_of(workflow_id)
    if not callable(fn):
        raise InvalidInputError(f"workflow {workflow_id}: the workflow must be a function, not {type(fn).__name__}")
    if not (on_in_doubt in ("retry", "fail") or callable(on_in_doubt)):
        raise InvalidInputError(f"on_in_doubt must be 'retry', 'fail' or a function, not {on_in_doubt!r}")
    wtype = type_name if type_name is not None else _name_of(fn)
    try:
        run_fields = make_event(1, 0, wev.RUN, {"type": wtype, "args": list(args)}).fields
    except InvalidInputError as exc:
        raise InvalidInputError(
            f"workflow {workflow_id}: its arguments cannot be recorded ({_why(exc)})",
            hint="pass maps with string keys, lists, str, bytes, int, float, bool or None",
        ) from None
    path = journal_path(store, workflow_id, journal_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a rollback given another journal directory must still find the workflow running
    with workflow_lock(store, workflow_id), sigint.handling():  # Ctrl-C lands in the workflow's code, not inside ckpt's recording
        with sigint.holding():
            check_recorded_dir(store, workflow_id, journal_dir)  # another directory than its first run's: a second history
            if journal_dir is not None:
                _record_journal_dir(store, workflow_id, Path(journal_dir))
            opened = Recorder.open(
                store,
                subject,
                path,
                state={"memory": {}, "tools": [], "ext": {wev.NAMESPACE: {"id": workflow_id, "engine": ENGINE}}},
                labels={LABEL_ENGINE: ENGINE, LABEL_TYPE: wtype},
                reducers=reducers(),
                durability=durability if durability is not None else default_durability(),
                policy=policy,
            )
        return _run(cast("Recorder", sigint.Held(opened)), workflow_id, wtype, run_fields, on_in_doubt, fn, args)


def _run(
    rec: Recorder,
    workflow_id: str,
    wtype: str,
    run_fields: dict[str, Any],
    on_in_doubt: InDoubtPolicy,
    fn: Callable[..., R],
    args: tuple[Any, ...],
) -> R:
    """run()'s body, with the recorder open (each of its calls a recording section)."""
    try:
        v = wev.view(rec.state)
        status = v.get("status")
        # other arguments than the recorded run's are refused whatever its status: a done
        # workflow's result (or a failed one's error) belongs to the arguments it was run with
        if "args" in v and v["args"] != run_fields["args"]:
            raise ConflictError(
                f"workflow {workflow_id} was started with other arguments ({_short(v['args'])}), not {_short(run_fields['args'])}",
                hint="give the same arguments to go on with it (or get its result), or use a new workflow id",
            )
        if status == "done":
            return cast(R, v.get("result"))
        if status == "failed":
            err = v.get("error") or {}
            raise WorkflowFailed(workflow_id, f"{err.get('type')}: {err.get('message')}")
        if status == "rolling back":
            raise ConflictError(
                f"workflow {workflow_id}: a rollback to {str((v.get('rollback') or {}).get('to'))[:12]} is not finished",
                hint="run the rollback again to finish it (ckpt workflow rollback ID --to REF --run)",
            )
        rec.append(wev.RUN, type=wtype, args=run_fields["args"], resumed=status is not None)
        ctx = Context(rec, workflow_id, on_in_doubt)
        token = _CTX.set(ctx)
        try:
            result = fn(ctx, *args)
        except CkptError as exc:  # ckpt's own stop (a bad value, a diverged re-run, ...) is no outcome
            if isinstance(exc, StepFailed):
                _record_failure(rec, exc)
            raise
        except Exception as exc:
            _record_failure(rec, exc)
            raise
        finally:
            _CTX.reset(token)
        try:
            done = rec.append(wev.DONE, result=result)
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"workflow {workflow_id} returned a value of type {type(result).__name__}, which cannot be recorded ({_why(exc)})",
                hint="return maps with string keys, lists, str, bytes, int, float, bool or None",
            ) from None
        rec.checkpoint(message=f"workflow {workflow_id}: done")
        return cast(R, done.fields.get("result"))
    finally:
        rec.close()


_EVENT_PREFIX = re.compile(r"^event \d+ \([^)]*\): ")


def _why(exc: InvalidInputError) -> str:
    """What make_event said, without its "event N (kind): " (the event is not the user's)."""
    return _EVENT_PREFIX.sub("", exc.message)


#: the most of an exception's text recorded
MAX_ERROR_CHARS = 4000


def error_text(exc: BaseException, with_type: bool = True) -> str:
    """ "Type: message" (or the message), cut at MAX_ERROR_CHARS, any lone surrogate escaped."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises: its type says enough
        text = f"<{type(exc).__name__} whose text cannot be read>"
    if with_type:
        text = f"{type(exc).__name__}: {text}"
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS] + f"... ({len(text)} characters)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _record_failure(rec: Recorder, exc: BaseException) -> None:
    rec.append(wev.FAILED, error=error_text(exc, with_type=False), type=type(exc).__name__)
    rec.checkpoint(message="workflow failed")


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."

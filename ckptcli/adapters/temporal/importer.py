"""`ckpt import temporal HISTORY.json`: a Temporal history as checkpoints of
`workflow:<workflow id>`, and the history read back from them.

The cut: one checkpoint per import of a run's new events, its tail those events (seq =
event id) and its snapshot the state derived from the events before them; a long import
is cut into several checkpoints, each at a completed workflow task once it holds 2,500
events or 2 MiB of the file (and wherever it reaches twice that), so memory stays
bounded whatever the history's size: the tail held is at most 5,000 events or 4 MiB of
the file, and the derived state is bounded (events.py: the newest KEEP closed records of
each kind), so neither grows with the history. Not one checkpoint per workflow task: each
checkpoint stores its snapshot, so that would cost O(state) per task, O(n^2) for a long
history, while `ckpt replay --to EVENT_ID` already gives the state at any event.

Importing a longer history of the same run again appends a checkpoint holding only the
events after the last one stored (its parent the run's last checkpoint); its earlier
events are checked against the store, every one (each must be the stored one: another
history of the same run is a conflict, refused) and not written again. Another run of
the same workflow id starts a new root checkpoint of the same subject. Every file is read and checked whole before anything is written.

Two imports into the same subject at once are one after the other: each holds the
subject's import lock (`_subject_lock`) from reading the run's checkpoints until its last
is written. A JSON string over longstr.LONG bytes (a large payload) is never read into
memory: the events hold a longstr.LongString, stored from the file in pieces at the take.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Generator, Iterator, Mapping
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptcli.adapters.temporal.events import apply, kind_of
from ckptcli.adapters.temporal.longstr import encode_longs
from ckptcli.adapters.temporal.reader import HistoryEvent, history_files, read_events
from ckptcli.errors import ConflictError, InvalidInputError, LimitExceededError, LockError, UsageError
from ckptcli.format.manifest import Subject
from ckptcli.history.events import LABEL_SEQ, labelled_seq
from ckptcli.progress import NULL, Progress

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.store.repository import Store

__all__ = ["ENGINE_LABEL", "RUN_LABEL", "history_events", "history_json", "import_histories", "is_temporal"]

RUN_LABEL = "workflow.run_id"
ENGINE_LABEL = "workflow.engine"
#: a checkpoint is cut at a completed workflow task past these, and anywhere at HARD times
#: them (a run of signals has no workflow task to cut at)
SOFT_EVENTS, SOFT_BYTES = 2_500, 2 << 20
HARD = 2
#: how long an import waits for another import of the same workflow to end (seconds)
LOCK_WAIT = 600.0


def _subject(workflow_id: str, path: Path) -> Subject:
    try:
        return Subject.parse(f"workflow:{workflow_id}")
    except InvalidInputError as exc:
        raise InvalidInputError(
            f"{path}: the workflow id {workflow_id!r} cannot name a subject: {exc.message}",
            hint="give one that can with --workflow-id",
        ) from None


def _header(store: Store, subject: Subject, path: Path) -> tuple[dict[str, Any], str | None, int]:
    """Read and check the whole file (the events the store has already are not checked
    again by temporalio's loader, but compared with the stored ones): its run id, type,
    task queue and last event id, and the run's last checkpoint in the store and its last
    event id. Raises: ConflictError when an event the store has of the run differs (another
    history of the same run), naming the first."""
    with closing(read_events(path, check=True, divert=True)) as events:
        first = next(events, None)
    assert first is not None  # read_events refuses a file without events
    t = apply({}, first.name, first.raw, first.seq, first.ts, in_place=True)["ext"]["temporal"]["workflow"]
    head: dict[str, Any] = {"run_id": t["run_id"], "type": t["type"], "task_queue": t["task_queue"]}
    if not head.get("run_id") or type(head["run_id"]) is not str:
        raise InvalidInputError(f"{path}: its WorkflowExecutionStarted event has no run id (originalExecutionRunId)")
    parent, stored = _run_head(store, subject, head["run_id"])
    last = 0
    # the events the store has of this run must be the file's (the pass that checks the file)
    with closing(_stored_events(store, parent) if parent else _no_events()) as kept:
        at = next(kept, None)
        for ev in read_events(path, check=True, check_after=stored, divert=True):
            last = ev.seq
            while at is not None and at[0] < ev.seq:
                at = next(kept, None)
            if at is not None and at[0] == ev.seq <= stored and ev.raw != at[1]:
                raise ConflictError(
                    f"{path}: event {ev.seq} differs from the one stored for run {head['run_id']} of {subject}: "
                    "another history of the same run was imported before",
                    hint="a history of the same run must extend the one imported before; check the file, "
                    "or import it as another workflow with --workflow-id",
                )
    head["last"] = last
    return head, parent, stored


def _no_events() -> Generator[tuple[int, Any], None, None]:
    yield from ()


def _run_head(store: Store, subject: Subject, run_id: str) -> tuple[str | None, int]:
    """The run's checkpoint with the highest events.seq in the store (hex), and that seq."""
    from ckptcli.listing import ListFilter, list_checkpoints

    best: tuple[str | None, int] = (None, 0)
    for cid, summary in list_checkpoints(store, ListFilter(subject=str(subject), labels={RUN_LABEL: run_id, ENGINE_LABEL: "temporal"})):
        seq = labelled_seq(summary.labels.get(LABEL_SEQ))
        if seq > best[1]:
            best = (cid.hex(), seq)
    return best


def _stored_events(store: Store, cid: str) -> Generator[tuple[int, Any], None, None]:
    """(event id, event) of the run's events the store keeps up to checkpoint `cid`, oldest
    first: the tails of it and of its first parents of the same run (where an earlier part
    is pruned, from the oldest one left). One tail is held at a time."""
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.errors import CkptError

    ck = Checkpoint(store, bytes.fromhex(cid))
    run = ck.manifest.labels.get(RUN_LABEL)
    chain = [ck]
    while chain[-1].manifest.parents:
        try:
            nxt = Checkpoint(store, chain[-1].manifest.parents[0])
        except CkptError:
            break  # pruned: the events before it are not kept
        if nxt.manifest.labels.get(RUN_LABEL) != run:
            break
        chain.append(nxt)
    for c in reversed(chain):
        for item in c.section("events") or []:
            if type(item) is dict and type(item.get("seq")) is int:
                yield item["seq"], item.get("event")


def _copy(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of the containers `apply(..., in_place=True)` changes (records are replaced,
    never changed): the next checkpoint's snapshot. The state is bounded (events.py: the
    newest KEEP closed records of each kind), so this copy is too, whatever the history's
    length."""
    out = dict(state)
    if type(out.get("tools")) is list:
        out["tools"] = list(out["tools"])
    ext = out.get("ext")
    if type(ext) is dict:
        ext = out["ext"] = dict(ext)
        t = ext.get("temporal")
        if type(t) is dict:
            t = ext["temporal"] = dict(t)
            for k, v in t.items():
                if type(v) is dict:
                    t[k] = {kk: list(vv) if type(vv) is list else vv for kk, vv in v.items()}  # `closed`: lists
                elif type(v) is list:
                    t[k] = list(v)
    return out


def import_histories(
    store: Store, source: str, *, workflow_id: str | None = None, progress: Progress = NULL, lock_wait: float = LOCK_WAIT
) -> dict[str, Any]:
    """Import the history file (or the directory of them) `source` into `store`.

    Args:
        store: the open store.
        source: a history file, or a directory of `*.json` history files; `-` (or
            /dev/stdin, when it is no regular file) for one on stdin, copied to a
            temporary file first (the file is read twice and long strings are read back
            from it), which needs `workflow_id`.
        workflow_id: the workflow's id (a history file does not hold it); default: the
            file's name without `.json`.
        progress: counts the events written.
        lock_wait: how long to wait (seconds) while another process imports into one of
            the same subjects (each subject's import lock is held for the whole import).

    Returns:
        {"workflows": [{"subject", "run_id", "file", "events", "new_events", "checkpoints"}],
         "checkpoints", "events", "already_present", "skipped"}: checkpoints written,
         events written, events the store had already, and the directory's entries
         skipped ("PATH: skipped: why", each also a warning of the store).

    Raises:
        NotFoundError, InvalidInputError, CorruptError (reader.py); UsageError for
        --workflow-id with a directory of several files, or none with stdin; StoreIOError
        (exit 12) when stdin is closed or cannot be copied; ConflictError (exit 11) when the
        file's events up to the last stored one (or its own last) are not the stored ones:
        another history of the same run, nothing written; LockError (exit 9) when
        another process still imports into one of the subjects after `lock_wait`.
    """
    if _is_stdin(source):
        return _import_stdin(store, workflow_id, progress, lock_wait)
    skipped: list[str] = []
    files = history_files(source, skipped)
    for line in skipped:
        store.warn(line)
    if workflow_id is not None and len(files) > 1:
        raise UsageError(
            f"--workflow-id names one workflow, and {source} holds {len(files)} history files", hint="name each file ID.json instead"
        )
    subjects = [_subject(workflow_id if workflow_id is not None else path.stem, path) for path in files]
    with contextlib.ExitStack() as held:
        for subject in sorted(set(subjects), key=str):  # one order: two imports never wait for each other's
            held.enter_context(_subject_lock(store, subject, lock_wait))
        return _import_locked(store, files, subjects, skipped, progress)


def _is_stdin(source: str) -> bool:
    """Whether `source` is stdin to be copied: `-`, or a name of descriptor 0 (/dev/stdin,
    /dev/fd/0) that is closed or no regular file (a file redirected in is read as it is)."""
    import os
    import stat

    from ckptcli.store.backend import descriptor_named

    if source == "-":
        return True
    if descriptor_named(Path(source)) != 0:
        return False
    try:
        return not stat.S_ISREG(os.fstat(0).st_mode)
    except OSError:
        return True


def _import_stdin(store: Store, workflow_id: str | None, progress: Progress, lock_wait: float) -> dict[str, Any]:
    """import_histories of a history on stdin, copied to a temporary file first; its
    errors name stdin, not that file."""
    import os
    import shutil
    import sys
    import tempfile

    from ckptcli.errors import CkptError, StoreIOError

    try:
        os.fstat(0)
    except OSError:
        raise StoreIOError(
            "stdin is closed: no history to read from it",
            hint="pipe one in: `temporal workflow show -w ID --output json | ckpt import temporal - --workflow-id ID`",
        ) from None
    if workflow_id is None:
        raise UsageError("a history on stdin has no file name to take the workflow id from", hint="give it with --workflow-id")
    with tempfile.TemporaryDirectory(prefix="ckpt-temporal-") as tmp:
        path = Path(tmp) / "stdin.json"
        try:
            with path.open("wb") as out:
                shutil.copyfileobj(sys.stdin.buffer if sys.stdin is not None else open(0, "rb", closefd=False), out, 1 << 20)  # noqa: SIM115
        except OSError as exc:
            raise StoreIOError(
                f"cannot copy stdin to a temporary file in {tempfile.gettempdir()}: {exc.strerror or exc}",
                hint="free space there, or set TMPDIR to a directory with room for the history",
            ) from None
        try:
            result = import_histories(store, str(path), workflow_id=workflow_id, progress=progress, lock_wait=lock_wait)
        except CkptError as exc:
            exc.message = exc.message.replace(str(path), "stdin")
            raise
    for row in result["workflows"]:
        row["file"] = "-"
    return result


def _subject_lock(store: Store, subject: Subject, wait: float) -> contextlib.AbstractContextManager[None]:
    """The import lock of `subject` (locks/import-<hash>.lock, or a lock object on object
    storage): held from the reading of the run's checkpoints until the last is written, so
    two imports of the same workflow at once are one after the other (the second finds the
    first's events stored and appends only what is new), never two copies of the run."""
    name = "import-" + hashlib.sha256(str(subject).encode()).hexdigest()[:32]

    @contextlib.contextmanager
    def hold() -> Iterator[None]:
        try:
            lock = store.backend.lock(name, shared=False, wait=wait)
            lock.__enter__()
        except LockError as exc:
            raise LockError(
                f"{subject} is being imported by another process ({exc.message.rpartition(' by ')[2] or 'another ckpt'})",
                hint="wait for it to finish and import again: only the events it has not stored are added",
            ) from None
        try:
            yield
        finally:
            lock.__exit__(None, None, None)

    return hold()


def _import_locked(store: Store, files: list[Path], subjects: list[Subject], skipped: list[str], progress: Progress) -> dict[str, Any]:
    plans = []
    for path, subject in zip(files, subjects, strict=True):  # everything read and checked before anything is written
        head, parent, stored = _header(store, subject, path)
        plans.append((path, subject, head, parent, stored))
    total = sum(max(0, h["last"] - s) for _p, _s, h, _par, s in plans)
    progress.start("importing Temporal history events", total)
    rows, checkpoints, written, already = [], 0, 0, 0
    try:
        for path, subject, head, parent, stored in plans:
            n, new = _write(store, path, subject, head, parent, stored, progress)
            checkpoints += n
            written += max(0, head["last"] - stored)
            already += min(stored, head["last"])
            rows.append(
                {
                    "subject": str(subject),
                    "run_id": head["run_id"],
                    "file": str(path),
                    "events": head["last"],
                    "new_events": max(0, head["last"] - stored),
                    "checkpoints": new,
                }
            )
    finally:
        progress.finish()
    return {"workflows": rows, "checkpoints": checkpoints, "events": written, "already_present": already, "skipped": skipped}


def _write(
    store: Store, path: Path, subject: Subject, head: Mapping[str, Any], parent: str | None, stored: int, progress: Progress
) -> tuple[int, list[str]]:
    """Fold the file's events into the state, writing the new ones in checkpoints."""
    from ckptcli.writer import take

    if head["last"] <= stored:
        return 0, []
    labels = {
        "adapter": "temporal",
        "workflow.type": str(head["type"] or ""),
        RUN_LABEL: head["run_id"],
        "workflow.task_queue": str(head["task_queue"] or ""),
        ENGINE_LABEL: "temporal",
    }
    state: dict[str, Any] = {}
    snap: dict[str, Any] = {}
    tail: list[dict[str, Any]] = []
    made: list[str] = []
    position = [0]
    start_pos = 0

    def flush() -> None:
        nonlocal parent, tail, snap, start_pos
        first, last = tail[0]["seq"], tail[-1]["seq"]
        try:
            with store.backend.lock("store", shared=True):  # no prune between the long strings' objects and the take
                for item in tail:
                    encode_longs(store, item)
                res = take(
                    store,
                    {**snap, "events": tail},
                    subject=subject,
                    labels={**labels, LABEL_SEQ: str(last)},
                    parents=[parent] if parent else [],
                    message=f"Temporal history {path.name}: events {first}..{last}",
                    cache=False,  # the tail is new each time, and the snapshot's lists are short (bounded)
                )
        except (InvalidInputError, LimitExceededError) as exc:  # what the reader's checks did not foresee: said with its place
            raise type(exc)(
                f"{path}: events {first}..{last} cannot be stored: {exc.message}",
                hint=exc.hint or "the file is not a history Temporal wrote; export it again: `temporal workflow show -w ID --output json`",
            ) from None
        parent = res.hex
        made.append(res.hex)
        progress.advance(len(tail))
        tail, start_pos = [], position[0]

    for ev in read_events(path, check=False, position=position, divert=True):
        if ev.seq > stored:
            if not tail:
                snap = _copy(state)
            tail.append(_stored(ev))
        state = _apply(state, ev, path)
        if tail:
            size, count = position[0] - start_pos, len(tail)
            at_task = ev.name == "WorkflowTaskCompleted"
            if (at_task and (count >= SOFT_EVENTS or size >= SOFT_BYTES)) or count >= HARD * SOFT_EVENTS or size >= HARD * SOFT_BYTES:
                flush()
        elif ev.seq == stored:
            start_pos = position[0]
    if tail:
        flush()
    return len(made), made


def _apply(state: dict[str, Any], ev: HistoryEvent, path: Path) -> dict[str, Any]:
    """apply() in place, a failure of it one line naming the file and the event."""
    try:
        return apply(state, ev.name, ev.raw, ev.seq, ev.ts, in_place=True)
    except RecursionError:
        raise LimitExceededError(
            f"{path}: event {ev.seq} ({ev.name}) nests too deeply to derive the workflow's state from it",
            hint="the file is not a history Temporal wrote; export it again: `temporal workflow show -w ID --output json`",
        ) from None


def _stored(ev: HistoryEvent) -> dict[str, Any]:
    return {"seq": ev.seq, "ts": ev.ts, "kind": kind_of(ev.name), "event": ev.raw}


# -- reading back ------------------------------------------------------------------------------
def is_temporal(ck: Checkpoint) -> bool:
    """Whether the checkpoint was imported from a Temporal history."""
    return ck.manifest.labels.get(ENGINE_LABEL) == "temporal" and bool(ck.manifest.labels.get(RUN_LABEL))


def history_events(ck: Checkpoint) -> Iterator[dict[str, Any]]:
    """The history events up to checkpoint `ck`, as Temporal wrote them: the tails of it
    and of its first parents of the same run, oldest first.

    Raises:
        InvalidInputError: it is no Temporal checkpoint, or its parents no longer hold the
        run's first events (pruned; a checkpoint file holds its own tail only).
    """
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.errors import CkptError

    if not is_temporal(ck):
        raise InvalidInputError(
            f"checkpoint {ck.hex[:12]} ({ck.manifest.subject}) holds no Temporal history",
            hint="import one with `ckpt import temporal HISTORY.json`",
        )
    run = ck.manifest.labels[RUN_LABEL]
    chain: list[Checkpoint] = []
    cur: Checkpoint | None = ck
    while cur is not None:
        chain.append(cur)
        parents = cur.manifest.parents
        if not parents:
            break
        try:
            nxt = Checkpoint(cur.source, parents[0])
        except CkptError:
            break
        cur = nxt if nxt.manifest.labels.get(RUN_LABEL) == run else None
    expect = 1
    for c in reversed(chain):
        for item in c.section("events") or []:
            if type(item) is not dict or item.get("seq") != expect or type(item.get("event")) is not dict:
                raise InvalidInputError(
                    f"checkpoint {c.hex[:12]}: the run's history does not continue at event {expect} here",
                    hint="its earlier checkpoints are pruned, or not in this file; import the whole history again",
                )
            expect += 1
            yield item["event"]


def history_json(ck: Checkpoint, *, indent: int | None = None) -> str:
    """The history up to checkpoint `ck` as a JSON document `{"events": [...]}`, each
    event as the imported file had it (JSON-equal to the file's `events`)."""
    import json

    return json.dumps({"events": list(history_events(ck))}, indent=indent, ensure_ascii=False)

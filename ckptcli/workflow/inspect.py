"""Reading durable workflows (`status`, `list_workflows`) and rolling one back with its
compensations (`rollback`): what `ckpt workflow ls|show|rollback` call.

Invariants:
- Reading takes no lock and writes nothing: the live state is the journal's base
  checkpoint plus the journal's intact events (formats/events.md "Recovering"), or the
  workflow's latest checkpoint when it has no journal here.
- A rollback is recorded before anything runs (`workflow:rollback`, with the positions to
  compensate, in order); each compensation's start and end are recorded and written
  before and after it runs, so a rollback killed and run again goes on where it stopped:
  a compensation that ended is not run again, one that began and did not end is run
  again with the same key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptcli.errors import CkptError, ConflictError, CorruptError, InvalidInputError, NotFoundError, how_it_failed, user_failure
from ckptcli.workflow import events as wev
from ckptcli.workflow.core import (
    ENGINE,
    KIND,
    LABEL_ENGINE,
    LABEL_TYPE,
    Compensation,
    WorkflowError,
    _local_journals,
    _same_dir,
    check_journal_dir,
    error_text,
    existing_journal,
    journal_file,
    journal_path,
    recorded_journal_dir,
    recorded_steps,
    reducers,
    registered_compensation,
    subject_of,
    workflow_lock,
)

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.store.repository import Store

__all__ = [
    "CompensationFailed",
    "PlannedCompensation",
    "RollbackPlan",
    "StepView",
    "WorkflowStatus",
    "list_workflows",
    "rollback",
    "status",
]


class CompensationFailed(WorkflowError):  # noqa: N818 - a verdict, as StepFailed
    """A compensation raised: the rollback stops there (recorded); run it again to go on."""


@dataclass(frozen=True)
class StepView:
    """One position of the run, as recorded."""

    pos: int
    name: str
    occurrence: int
    status: str  # "ok", "error" or "pending" (in doubt)
    attempts: int
    key: str  # the last attempt's idempotency key
    call_id: str
    args: Any
    result: Any = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        from ckptcli.format.jsonview import to_json as to_json_view

        out: dict[str, Any] = {
            "pos": self.pos,
            "step": self.name,
            "occurrence": self.occurrence,
            "status": self.status,
            "attempts": self.attempts,
            "key": self.key,
            "call_id": self.call_id,
            "args": to_json_view(self.args),
        }
        if self.status == "ok":
            out["result"] = to_json_view(self.result)
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class WorkflowStatus:
    """A workflow as recorded: what `ckpt workflow show` prints."""

    workflow_id: str
    type: str | None
    status: str  # "running" (or stopped mid-run), "done", "failed", "rolling back", "rolled back"
    runs: int
    steps: list[StepView]
    variables: dict[str, Any]
    result: Any
    error: dict[str, Any] | None
    checkpoint: str | None  # the checkpoint the live state continues
    seq: int  # the live position
    journal: str | None  # the journal read, if any
    compensations: dict[str, Any] = field(default_factory=dict)
    rollback: dict[str, Any] | None = None

    @property
    def pointer(self) -> int:
        """The execution pointer: the steps done, in order, before the first that is not
        (a re-run calls that one first)."""
        done = {s.pos for s in self.steps if s.status == "ok"}
        n = 0
        while n + 1 in done:
            n += 1
        return n

    @property
    def in_doubt(self) -> list[StepView]:
        """The steps begun and not finished (their `tools` record is still pending)."""
        return [s for s in self.steps if s.status == "pending"]

    def to_json(self) -> dict[str, Any]:
        from ckptcli.format.jsonview import to_json as to_json_view

        return {
            "id": self.workflow_id,
            "subject": f"{KIND}:{self.workflow_id}",
            "type": self.type,
            "status": self.status,
            "runs": self.runs,
            "steps_done": sum(1 for s in self.steps if s.status == "ok"),
            "pointer": self.pointer,
            "steps": [s.to_json() for s in self.steps],
            "in_doubt": [{"pos": s.pos, "step": s.name, "key": s.key, "call_id": s.call_id} for s in self.in_doubt],
            "variables": to_json_view(self.variables),
            "result": to_json_view(self.result),
            "error": self.error,
            "compensations": self.compensations,
            "rollback": to_json_view(self.rollback) if self.rollback else None,
            "checkpoint": self.checkpoint,
            "seq": self.seq,
            "journal": self.journal,
        }


def live_state(
    store: Store, workflow_id: str, journal_dir: str | Path | None = None, *, checkpoints_only: bool = False
) -> tuple[dict[str, Any], str | None, int, str | None]:
    """(live state, the checkpoint it continues, the live seq, the journal read or None);
    `checkpoints_only`: the latest checkpoint's, no journal read.

    Raises: NotFoundError when the store holds no such workflow."""
    from ckptcli.checkpoint import open_checkpoint
    from ckptcli.history.events import event_from_map
    from ckptcli.history.recorder import read_journal
    from ckptcli.history.replay import load_tail

    subject = subject_of(workflow_id)
    red = reducers()
    _local_journals(store, reading=True)  # a linked <store>/workflows: refused as a read
    # None: a remote store and no journal_dir, the checkpoints alone
    path = None if checkpoints_only else existing_journal(store, workflow_id, journal_dir)
    if path is not None and journal_file(path):  # a link or FIFO there: refused, never read as "no journal"
        j = read_journal(path)
        damage = j.damage(path)
        if damage is not None:
            store.warn(damage)
        if j.header.get("subject") != subject:
            raise CorruptError(f"journal {path} records {j.header.get('subject')}, not {subject}", hint="move it aside")
        ck = open_checkpoint(str(j.header["base"]), store)
        tail = load_tail(ck)
        state = red.apply_all(tail.snapshot, tail.events)
        seq = tail.last_seq
        for i, raw in enumerate(j.records):
            ev = event_from_map(raw, f"journal {path}: record {i + 1}")
            if ev.seq <= seq:
                continue
            if ev.seq != seq + 1:
                break
            state = red.apply(state, ev)
            seq = ev.seq
        return state, ck.hex, seq, str(path)
    try:
        ck = open_checkpoint(subject, store)
    except NotFoundError:
        raise NotFoundError(f"no workflow {workflow_id} in this store", hint="ckpt workflow ls lists the workflows") from None
    tail = load_tail(ck)
    return red.apply_all(tail.snapshot, tail.events), ck.hex, tail.last_seq, None


def _view_of(workflow_id: str, state: dict[str, Any], ck: str | None, seq: int, journal: str | None) -> WorkflowStatus:
    v = wev.view(state)
    steps, _ = recorded_steps(state)
    views = []
    for pos in sorted(steps):
        s = steps[pos]
        last = s.last
        views.append(
            StepView(
                pos,
                s.name,
                s.occurrence,
                s.status,
                len(s.attempts),
                str(last.get("key")),
                str(last.get("call_id")),
                last.get("args"),
                last.get("result"),
                last.get("error") if type(last.get("error")) is str else None,
            )
        )
    memory = state.get("memory")
    return WorkflowStatus(
        workflow_id,
        v.get("type") if isinstance(v.get("type"), str) else None,
        str(v.get("status") or "running"),
        int(v.get("runs") or 0),
        views,
        dict(memory) if isinstance(memory, dict) else {},
        v.get("result"),
        v.get("error") if isinstance(v.get("error"), dict) else None,
        ck,
        seq,
        journal,
        dict(v.get("compensations") or {}),
        v.get("rollback") if isinstance(v.get("rollback"), dict) else None,
    )


def status(store: Store, workflow_id: str, *, journal_dir: str | Path | None = None) -> WorkflowStatus:
    """Workflow `workflow_id` as recorded (its journal included, if it is on this host).

    Raises: InvalidInputError for an id that is not valid; NotFoundError for no such workflow."""
    state, ck, seq, journal = live_state(store, workflow_id, journal_dir)
    return _view_of(workflow_id, state, ck, seq, journal)


def list_workflows(store: Store, *, journal_dir: str | Path | None = None) -> list[WorkflowStatus]:
    """Every durable workflow of the store (subjects `workflow:*` labelled
    workflow.engine=ckpt), by id, each read with its journal: the one in the store's
    workflows directory when it is there, else the one in `journal_dir` (when given).
    So a `journal_dir` given lists the workflows whose journals are in it as well as the
    others, never refused because some keep theirs in the store. A workflow whose
    recorded journal directory (`recorded_journal_dir`) is not `journal_dir` is listed
    from its latest checkpoint, with a warning naming both (its `journal` is None)."""
    from ckptcli.listing import ListFilter, list_checkpoints

    if journal_dir is not None:
        check_journal_dir(journal_dir)  # a wrong one is said even when the store holds no workflow
    ids = sorted(
        {s.subject.name for _cid, s in list_checkpoints(store, ListFilter(labels={LABEL_ENGINE: ENGINE})) if s.subject.kind == KIND}
    )
    found = []
    if ids:
        _local_journals(store, reading=True)  # a linked workflows directory stops the list (exit 8)
    for wid in ids:
        try:
            want = recorded_journal_dir(store, wid)
        except CkptError as exc:  # one damaged or planted record: said, and the others are listed
            store.warn(f"workflow {wid}: {exc.message}; listed from its latest checkpoint alone ({exc.hint or 'remove it'})")
            state, ck, seq, _journal = live_state(store, wid, checkpoints_only=True)
            found.append(_view_of(wid, state, ck, seq, None))
            continue
        if want is None:  # its journal in the store's workflows directory, or run by an older ckpt
            found.append(status(store, wid, journal_dir=None if journal_dir is None or _in_store(store, wid) else journal_dir))
        elif journal_dir is not None and _same_dir(want, Path(journal_dir)):
            found.append(status(store, wid, journal_dir=journal_dir))
        else:
            store.warn(
                f"workflow {wid} keeps its journal in {want}, not in "
                f"{journal_dir if journal_dir is not None else 'the store' + chr(39) + 's workflows directory'}: listed from its "
                f"latest checkpoint alone (what it did since is not counted); give --journal-dir {want} to read its journal"
            )
            state, ck, seq, _journal = live_state(store, wid, checkpoints_only=True)
            found.append(_view_of(wid, state, ck, seq, None))
    return found


def _in_store(store: Store, workflow_id: str) -> bool:
    """Whether the store's workflows directory (a store on this host) holds the workflow's
    journal: then it is the workflow's, whatever journal directory was given."""
    path = existing_journal(store, workflow_id)
    return path is not None and journal_file(path)


# -- rollback -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlannedCompensation:
    pos: int
    step: str
    step_key: str
    key: str  # the compensation's idempotency key
    compensate: str | None  # "module:qualname" as recorded, or None
    #: "to run"; "done" (an earlier, interrupted rollback ran it); "begun" (an earlier one began it: it runs
    #: again with the same key); "failed" (it raised: it runs again with the same key); "none" (the step
    #: registered no compensation: nothing to run)
    status: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pos": self.pos,
            "step": self.step,
            "step_key": self.step_key,
            "key": self.key,
            "compensate": self.compensate,
            "status": self.status,
        }


@dataclass(frozen=True)
class RollbackPlan:
    """The compensations of the steps completed after checkpoint `to`, newest first; the
    steps after it still in doubt (not compensated: nobody knows whether they happened);
    and whether they were run."""

    workflow_id: str
    to: str
    to_seq: int
    pointer: int  # the steps that stay done
    compensations: list[PlannedCompensation]
    in_doubt: list[StepView]
    executed: bool
    resumed: bool  # an interrupted rollback was taken up again

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.workflow_id,
            "to": self.to,
            "to_seq": self.to_seq,
            "pointer": self.pointer,
            "compensations": [c.to_json() for c in self.compensations],
            "in_doubt": [{"pos": s.pos, "step": s.name, "key": s.key} for s in self.in_doubt],
            "executed": self.executed,
            "resumed": self.resumed,
        }


def rollback(
    store: Store,
    workflow_id: str,
    to: str,
    *,
    execute: bool = False,
    journal_dir: str | Path | None = None,
    compensations: Mapping[str, Callable[[Compensation], object]] | None = None,
) -> RollbackPlan:
    """Roll workflow `workflow_id` back to checkpoint `to` (any ref of one of its
    checkpoints): list the compensations of the steps completed after it, newest first;
    with `execute`, run them, each recorded, exactly once even when the rollback is
    killed and run again (a compensation that began and did not end is run again with
    the same key, `Compensation.key`). Afterwards the workflow's variables are the
    checkpoint's and a re-run (`run`) runs the steps after it again, with new keys.

    A step's compensation is, in this order: `compensations[step name]`, the one
    registered in this process (`@step(compensate=...)`, `ctx.step(..., compensate=...)`),
    or the recorded "module:qualname", imported.

    Raises:
        NotFoundError (no such workflow or checkpoint, or a compensation that cannot be
        found: nothing is run then); InvalidInputError (a checkpoint of another subject,
        or past the workflow's end); ConflictError (another rollback is unfinished);
        LockError (the workflow is running); CompensationFailed.
    """
    from ckptcli.checkpoint import open_checkpoint
    from ckptcli.history.replay import load_tail, replay

    subject = subject_of(workflow_id)
    _local_journals(store, reading=not execute)  # a linked <store>/workflows: refused before anything
    if execute:
        with workflow_lock(store, workflow_id, probe=True):  # running: LockError first, whatever journal_dir says
            pass
    path = existing_journal(store, workflow_id, journal_dir) or journal_path(store, workflow_id)  # the latter raises: no journal_dir
    if not journal_file(path):
        status(store, workflow_id, journal_dir=journal_dir)  # NotFoundError when there is no such workflow
    ck = open_checkpoint(to, store)
    if str(ck.manifest.subject) != subject:
        raise InvalidInputError(
            f"checkpoint {ck.hex[:12]} is of {ck.manifest.subject}, not {subject}",
            hint=f"give a checkpoint of {subject} (ckpt log {subject})",
        )
    tail = load_tail(ck)
    to_seq = tail.last_seq
    at = replay(tail, reducers=reducers())  # the workflow at the checkpoint
    if not execute:
        state, _ck, seq, _j = live_state(store, workflow_id, journal_dir)
        return _plan(workflow_id, ck.hex, to_seq, at, seq, state, compensations, execute=False)
    with workflow_lock(store, workflow_id):  # never beside a run of the workflow, whatever journal directory each was given
        return _execute(store, workflow_id, subject, path, ck, to_seq, at, compensations)


def _execute(
    store: Store,
    workflow_id: str,
    subject: str,
    path: Path,
    ck: Checkpoint,
    to_seq: int,
    at: dict[str, Any],
    compensations: Mapping[str, Callable[[Compensation], object]] | None,
) -> RollbackPlan:
    """rollback()'s --run, with the workflow locked."""
    from ckptcli.checkpoint import open_checkpoint
    from ckptcli.history.recorder import Recorder

    path.parent.mkdir(parents=True, exist_ok=True)
    # no journal here (a store on object storage, another host): go on from the latest checkpoint
    base = None if journal_file(path) else open_checkpoint(subject, store).hex
    rec = Recorder.open(store, subject, path, reducers=reducers(), base=base)
    try:
        wtype = wev.view(rec.state).get("type")
        rec.labels.update({LABEL_ENGINE: ENGINE, **({LABEL_TYPE: wtype} if isinstance(wtype, str) and wtype else {})})
        plan = _plan(workflow_id, ck.hex, to_seq, at, rec.last_seq, rec.state, compensations, execute=True)
        todo = [c for c in plan.compensations if c.status not in ("done", "none")]
        funcs = {c.pos: _find(c, compensations) for c in todo}  # all found before any runs
        steps, _ = recorded_steps(rec.state)
        if not plan.resumed:
            rec.append(wev.ROLLBACK, to=ck.hex, to_seq=to_seq, pointer=plan.pointer, steps=[c.pos for c in plan.compensations])
            rec.flush()
        for c in todo:
            rec.append(wev.COMPENSATE, pos=c.pos, step=c.step, key=c.key, status="start")
            rec.flush()
            s = steps[c.pos]
            got = s.last.get("args")
            call_args: dict[str, Any] = got if isinstance(got, dict) else {}
            comp = Compensation(
                workflow_id,
                c.step,
                c.pos,
                list(call_args.get("args") or []),
                dict(call_args.get("kwargs") or {}),
                s.last.get("result"),
                c.step_key,
                c.key,
            )
            try:
                funcs[c.pos](comp)
            except BaseException as exc:  # the user's code failed, sys.exit() and GeneratorExit too; Ctrl-C stays the interruption
                if not user_failure(exc):
                    raise
                error = error_text(exc)
                rec.append(wev.COMPENSATE, pos=c.pos, step=c.step, key=c.key, status="error", error=error)
                rec.flush()
                what = f"failed: {error}" if isinstance(exc, Exception) else how_it_failed(exc)
                raise CompensationFailed(
                    f"workflow {workflow_id}: the compensation {_fn_name(funcs[c.pos], c)} of step {c.step} (key {c.key}) {what}",
                    hint="fix what it needs and run the rollback again: it goes on with this compensation",
                ) from exc
            rec.append(wev.COMPENSATE, pos=c.pos, step=c.step, key=c.key, status="ok")
            rec.flush()
        memory = at.get("memory")
        rec.append(wev.ROLLBACK_DONE, to=ck.hex, pointer=plan.pointer, memory=memory if isinstance(memory, dict) else {})
        rec.checkpoint(message=f"workflow {workflow_id}: rolled back to {ck.hex[:12]}")
    finally:
        rec.close()
    ran = [
        c if c.status == "none" else PlannedCompensation(c.pos, c.step, c.step_key, c.key, c.compensate, "done") for c in plan.compensations
    ]
    return RollbackPlan(plan.workflow_id, plan.to, plan.to_seq, plan.pointer, ran, plan.in_doubt, True, plan.resumed)


def _plan(
    workflow_id: str,
    to_hex: str,
    to_seq: int,
    at: dict[str, Any],
    live_seq: int,
    state: dict[str, Any],
    compensations: Mapping[str, Callable[[Compensation], object]] | None,
    *,
    execute: bool,
) -> RollbackPlan:
    if to_seq > live_seq:
        raise InvalidInputError(f"checkpoint {to_hex[:12]} is at seq {to_seq}, after workflow {workflow_id}'s end (seq {live_seq})")
    v = wev.view(state)
    refs = dict(v.get("compensations") or {})
    ongoing = v.get("rollback") if v.get("status") == "rolling back" and isinstance(v.get("rollback"), dict) else None
    if ongoing is not None and ongoing.get("to") != to_hex:
        raise ConflictError(
            f"workflow {workflow_id}: a rollback to {str(ongoing.get('to'))[:12]} is not finished",
            hint=f"finish it first: ckpt workflow rollback {workflow_id} --to {str(ongoing.get('to'))[:12]} --run",
        )
    steps, _ = recorded_steps(state)
    view = _view_of(workflow_id, state, None, live_seq, None)
    by_pos = {s.pos: s for s in view.steps}
    if ongoing is not None:
        pointer = int(ongoing.get("pointer") or 0)
        order = [int(p) for p in ongoing.get("steps") or []]
        done = ongoing.get("compensated") or {}
    else:
        # the steps done at the checkpoint stay done: they must be this history's (a checkpoint
        # from before an earlier rollback, and after its target, is on a branch it undid)
        then, _ = recorded_steps(at)
        pointer = 0
        while pointer + 1 in then and then[pointer + 1].status == "ok":
            pointer += 1
        for p in range(1, pointer + 1):
            now = steps.get(p)
            if now is None or now.status != "ok" or now.last.get("key") != then[p].last.get("key"):
                raise InvalidInputError(
                    f"checkpoint {to_hex[:12]} is on a branch of workflow {workflow_id} that a rollback undid (its step {p}, "
                    f"key {then[p].last.get('key')}, was compensated)",
                    hint=f"roll back to a checkpoint taken since that rollback, or to one at or before step {p - 1} "
                    f"(ckpt log workflow:{workflow_id})",
                )
        after = [s for p, s in steps.items() if p > pointer and s.status == "ok"]
        order = [s.pos for s in sorted(after, key=lambda s: int(s.last.get("result_seq") or 0), reverse=True)]
        done = {}
    planned = []
    for pos in order:
        s = steps.get(pos)
        if s is None:
            continue
        step_key = str(s.last.get("key"))
        entry = done.get(str(pos)) if isinstance(done, dict) else None
        st = "to run"
        if isinstance(entry, dict):
            st = {"ok": "done", "start": "begun", "error": "failed"}.get(str(entry.get("status")), "to run")
        ref = refs.get(s.name)
        planned.append(PlannedCompensation(pos, s.name, step_key, step_key + ":undo", ref if isinstance(ref, str) else None, st))
    in_doubt = [by_pos[p] for p in sorted(steps) if p > pointer and steps[p].status == "pending"]
    given = compensations or {}
    planned = [
        c
        if c.status == "done" or c.compensate is not None or c.step in refs or c.step in given or registered_compensation(c.step)
        else PlannedCompensation(c.pos, c.step, c.step_key, c.key, None, "none")
        for c in planned
    ]
    return RollbackPlan(workflow_id, to_hex, to_seq, pointer, planned, in_doubt, execute, ongoing is not None)


def _fn_name(fn: Callable[..., object], c: PlannedCompensation) -> str:
    """How a message names a compensation: "module:function" as recorded, else its own name."""
    if c.compensate is not None:
        return c.compensate
    module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    return f"{module}:{qual}" if isinstance(module, str) and isinstance(qual, str) else repr(fn)


def _find(c: PlannedCompensation, given: Mapping[str, Callable[[Compensation], object]] | None) -> Callable[[Compensation], object]:
    from ckptcli.schema.migrations import import_object

    if given and c.step in given:
        return given[c.step]
    found = registered_compensation(c.step)
    if found is not None:
        return found
    if c.compensate is None:
        raise NotFoundError(
            f"step {c.step} has a compensation that cannot be imported by name (a function in __main__ or a local one)",
            hint=f"pass it: rollback(..., compensations={{{c.step!r}: fn}}), or define it at module level in an importable module",
        )
    _module, fn = import_object(c.compensate, "compensation")
    if not callable(fn):
        raise InvalidInputError(f"compensation {c.compensate!r} of step {c.step} is a {type(fn).__name__}, not a function")
    return fn  # type: ignore[no-any-return]

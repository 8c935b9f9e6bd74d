"""The `workflow` namespace's event kinds, which durable workflows (ckptcli.workflow)
record, and their reducers (registered in the `ckptcli.reducers` entry-point group as
namespace `workflow`).

A durable workflow's state is a recorder state (formats/events.md):
- `memory`: the workflow's variables (`Context.set`, recorded as `memory.set`);
- `tools`: one record per step attempt, in the shared shape of tool calls (`tool.call`
  with `call_id` "<position>.<attempt>", `tool` the step name, `args`, `key` the
  idempotency key; then `tool.result` with status "ok" or "error");
- `ext.workflow`: the workflow's own view, which the reducers below keep.

The steps, the hot path, record standard events only (a custom reducer ends the in-place
updates of a run of standard ones); these kinds are recorded once per run, per rollback
and per compensation.

Kinds and fields (docs/workflows.md, "What is recorded"):
- `workflow:run` {type, args, resumed (bool)}: a run (or a re-run) began.
- `workflow:saga` {step, compensate}: steps named `step` have the compensation `compensate`
  ("module:qualname", or null when it cannot be imported by name).
- `workflow:in-doubt` {pos, call_id, key, decision}: a step begun by an earlier run and not
  finished was found; `decision` is "retry" (run again with the same key), "fail" or
  "resolved" (the caller gave its result, recorded by the tool.result that follows).
- `workflow:retry` {pos, step, attempt, delay_seconds, error}: attempt `attempt` failed; the
  next one starts after the delay.
- `workflow:done` {result} / `workflow:failed` {error, type}: the workflow function returned
  or raised.
- `workflow:rollback` {to, to_seq, pointer, steps}: a rollback to checkpoint `to` (at seq
  `to_seq`, after `pointer` steps) began; `steps` are the positions to compensate, in the
  order they are run.
- `workflow:compensate` {pos, step, key, status ("start", "ok" or "error"), [error]}: the
  compensation of the step at `pos` began, or ended.
- `workflow:rollback.done` {to, pointer, memory}: every compensation ran: the steps after
  `pointer` no longer count (a re-run runs them again, with new keys) and the variables
  are those of the checkpoint.
"""

from __future__ import annotations

from typing import Any

from ckptcli.history.events import Event, State

NAMESPACE = "workflow"
RUN = "workflow:run"
SAGA = "workflow:saga"
IN_DOUBT = "workflow:in-doubt"
RETRY = "workflow:retry"
DONE = "workflow:done"
FAILED = "workflow:failed"
ROLLBACK = "workflow:rollback"
COMPENSATE = "workflow:compensate"
ROLLBACK_DONE = "workflow:rollback.done"
KINDS = (RUN, SAGA, IN_DOUBT, RETRY, DONE, FAILED, ROLLBACK, COMPENSATE, ROLLBACK_DONE)


def view(state: State) -> dict[str, Any]:
    """`ext.workflow` of a state (an empty map when it has none)."""
    ext = state.get("ext")
    got = ext.get(NAMESPACE) if isinstance(ext, dict) else None
    return got if isinstance(got, dict) else {}


def _edit(state: State) -> tuple[dict[str, Any], dict[str, Any]]:
    ext = dict(state.get("ext") or {})
    return ext, dict(view(state))


def _with(state: State, ext: dict[str, Any], v: dict[str, Any]) -> State:
    ext[NAMESPACE] = v
    out = {**state}
    out["ext"] = ext
    return out


def _run(state: State, ev: Event) -> State:
    ext, v = _edit(state)
    v["type"] = ev.fields.get("type")
    if "args" not in v:
        v["args"] = ev.fields.get("args")
    v["status"] = "running"
    v["runs"] = int(v.get("runs") or 0) + 1
    return _with(state, ext, v)


def _saga(state: State, ev: Event) -> State:
    ext, v = _edit(state)
    comp = dict(v.get("compensations") or {})
    comp[str(ev.fields.get("step"))] = ev.fields.get("compensate")
    v["compensations"] = comp
    return _with(state, ext, v)


def _in_doubt(state: State, ev: Event) -> State:
    ext, v = _edit(state)
    v["in_doubt_found"] = int(v.get("in_doubt_found") or 0) + 1
    return _with(state, ext, v)


def _retry(state: State, ev: Event) -> State:
    ext, v = _edit(state)
    v["retries"] = int(v.get("retries") or 0) + 1
    return _with(state, ext, v)


def _done(state: State, ev: Event) -> State:
    ext, v = _edit(state)
    v["status"] = "done"
    v["result"] = ev.fields.get("result")
    v.pop("error", None)
    return _with(state, ext, v)


def _failed(state: State, ev: Event) -> State:
    ext, v = _edit(state)
    v["status"] = "failed"
    v["error"] = {"message": ev.fields.get("error"), "type": ev.fields.get("type")}
    return _with(state, ext, v)


def _rollback(state: State, ev: Event) -> State:
    ext, v = _edit(state)
    v["status"] = "rolling back"
    v["rollback"] = {
        "to": ev.fields.get("to"),
        "to_seq": ev.fields.get("to_seq"),
        "pointer": ev.fields.get("pointer"),
        "steps": list(ev.fields.get("steps") or []),
        "seq": ev.seq,
        "compensated": {},
    }
    return _with(state, ext, v)


def _compensate(state: State, ev: Event) -> State:
    ext, v = _edit(state)
    rb = dict(v.get("rollback") or {})
    done = dict(rb.get("compensated") or {})
    entry = {"status": ev.fields.get("status"), "key": ev.fields.get("key"), "step": ev.fields.get("step"), "seq": ev.seq}
    if "error" in ev.fields:
        entry["error"] = ev.fields["error"]
    done[str(ev.fields.get("pos"))] = entry
    rb["compensated"] = done
    v["rollback"] = rb
    return _with(state, ext, v)


def _rollback_done(state: State, ev: Event) -> State:
    ext, v = _edit(state)
    rb = v.pop("rollback", None)
    rewinds = list(v.get("rewinds") or [])
    rewinds.append([ev.seq, ev.fields.get("pointer")])
    v["rewinds"] = rewinds
    history = list(v.get("rollbacks") or [])
    if isinstance(rb, dict):
        history.append({"to": rb.get("to"), "pointer": rb.get("pointer"), "compensated": rb.get("compensated"), "seq": ev.seq})
    v["rollbacks"] = history
    v["status"] = "rolled back"
    v.pop("result", None)
    v.pop("error", None)
    out = _with(state, ext, v)
    memory = ev.fields.get("memory")
    out["memory"] = memory if isinstance(memory, dict) else {}
    return out


REDUCERS = {
    RUN: _run,
    SAGA: _saga,
    IN_DOUBT: _in_doubt,
    RETRY: _retry,
    DONE: _done,
    FAILED: _failed,
    ROLLBACK: _rollback,
    COMPENSATE: _compensate,
    ROLLBACK_DONE: _rollback_done,
}

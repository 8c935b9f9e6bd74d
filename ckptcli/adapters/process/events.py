"""The `process` namespace's event kinds, which `ckpt run`'s supervisor records, and their
reducers (registered in the `ckptcli.reducers` entry-point group as namespace `process`).

Each reducer folds one event of a supervised program's life into `ext.process`, the
supervisor's view: the program's pid, argv, working directory, attempt, the checkpoint it
was restored from, its last exit, how its last checkpoint was taken and the checkpoints
marked bad. A checkpoint's `ext:process` section is that view at the previous checkpoint
(its snapshot) and its `events` section the events since (its tail), as the recorder's
(formats/events.md "Checkpoints: snapshot and tail"); `ckpt replay` gives the live view.

Kinds and fields (docs/processes.md "Events"):
- `process:start` {pid, argv, attempt, restored (hex or null)} [cwd, state, schedule]
- `process:checkpoint` {reason, consistency, how, take_seconds, frozen_seconds} [checkpoint]
- `process:exit` {pid, code (int or null), signal (name or null), uptime_seconds}
- `process:restart` {attempt, delay_seconds, from (hex or null)}
- `process:bad` {checkpoint (hex), failures}
"""

from __future__ import annotations

from typing import Any

from ckptcli.history.events import Event, State

START = "process:start"
CHECKPOINT = "process:checkpoint"
EXIT = "process:exit"
RESTART = "process:restart"
BAD = "process:bad"
KINDS = (START, CHECKPOINT, EXIT, RESTART, BAD)

#: the fields each kind carries, in order (the supervisor writes them so)
FIELDS: dict[str, tuple[str, ...]] = {
    START: ("pid", "argv", "attempt", "restored"),
    CHECKPOINT: ("reason", "consistency", "how", "take_seconds", "frozen_seconds"),
    EXIT: ("pid", "code", "signal", "uptime_seconds"),
    RESTART: ("attempt", "delay_seconds", "from"),
    BAD: ("checkpoint", "failures"),
}


def _view(state: State) -> tuple[dict[str, Any], dict[str, Any]]:
    ext = dict(state.get("ext") or {})
    view = ext.get("process")
    return ext, dict(view) if isinstance(view, dict) else {}


def _with(state: State, ext: dict[str, Any], view: dict[str, Any]) -> State:
    ext["process"] = view
    out = {**state}
    out["ext"] = ext
    return out


def _fields(ev: Event, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: ev.fields.get(n) for n in names}


def _start(state: State, ev: Event) -> State:
    ext, view = _view(state)
    view.update(_fields(ev, FIELDS[START]))
    for extra in ("cwd", "state", "schedule"):
        if extra in ev.fields:
            view[extra] = ev.fields[extra]
    view["status"] = "running"
    view["starts"] = int(view.get("starts") or 0) + 1
    return _with(state, ext, view)


def _checkpoint(state: State, ev: Event) -> State:
    ext, view = _view(state)
    last = _fields(ev, FIELDS[CHECKPOINT])
    if "checkpoint" in ev.fields:
        last["checkpoint"] = ev.fields["checkpoint"]
    view["last_checkpoint"] = last
    view["checkpoints"] = int(view.get("checkpoints") or 0) + 1
    return _with(state, ext, view)


def _exit(state: State, ev: Event) -> State:
    ext, view = _view(state)
    view["last_exit"] = _fields(ev, FIELDS[EXIT])
    view["status"] = "exited"
    return _with(state, ext, view)


def _restart(state: State, ev: Event) -> State:
    ext, view = _view(state)
    view["last_restart"] = _fields(ev, FIELDS[RESTART])
    view["restarts"] = int(view.get("restarts") or 0) + 1
    view["status"] = "restarting"
    return _with(state, ext, view)


def _bad(state: State, ev: Event) -> State:
    ext, view = _view(state)
    bad = [*(view.get("bad") or []), ev.fields.get("checkpoint")]
    view["bad"] = bad
    return _with(state, ext, view)


REDUCERS = {START: _start, CHECKPOINT: _checkpoint, EXIT: _exit, RESTART: _restart, BAD: _bad}

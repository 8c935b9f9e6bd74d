"""Events: the records a running agent or workflow appends, and the reducers that apply
them to its state. The specification is formats/events.md (the event record, the standard
kinds, "Reducers"); docs/replay.md is the guide. Custom kinds (`NAMESPACE:NAME`) come from
the entry-point group `ckptcli.reducers` or from `Reducers({...})`; standard ones cannot be
replaced.

Invariants:
- Reducers are deterministic: they read nothing but the state and the event.
- `Reducers.apply(state, ev)` changes neither the state passed in nor any value taken from
  the event (it copies the containers along the path it changes), except within a run:
  with `owned` (what `apply_all` and a timeline pass) it changes in place the containers
  that same run copied earlier; `owned` is cleared before a custom reducer runs.
- A standard reducer checks everything before it changes anything: an event that does not
  fit raises InvalidInputError and leaves the state as it was."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ckptcli import plugins
from ckptcli.errors import CkptError, InvalidInputError, NotFoundError, failed_with, how_it_failed, user_failure
from ckptcli.format import limits
from ckptcli.history.paths import Owned as Owned  # re-exported: the reducers' names, where they were
from ckptcli.history.paths import PathKey as PathKey
from ckptcli.history.paths import ReduceError as ReduceError
from ckptcli.history.paths import State as State
from ckptcli.history.paths import _delete, _index, _own, _part, _set, _type_name, _with
from ckptcli.history.paths import delete_in as delete_in
from ckptcli.history.paths import format_pointer as format_pointer
from ckptcli.history.paths import set_in as set_in

Reducer = Callable[[State, "Event"], State]

# -- kinds ------------------------------------------------------------------------------
MEMORY_SET = "memory.set"
MEMORY_DELETE = "memory.delete"
PLAN_PUSH = "plan.push"
PLAN_POP = "plan.pop"
PLAN_UPDATE = "plan.update"
TOOL_CALL = "tool.call"
TOOL_RESULT = "tool.result"
MESSAGE_APPEND = "message.append"
CHECKPOINT = "checkpoint"
ERROR = "error"

STANDARD_KINDS = (MEMORY_SET, MEMORY_DELETE, PLAN_PUSH, PLAN_POP, PLAN_UPDATE, TOOL_CALL, TOOL_RESULT, MESSAGE_APPEND, CHECKPOINT, ERROR)
#: The parts a state may have; a checkpoint's document adds "events", the tail.
STATE_KEYS = ("memory", "plan", "tools", "ext")
ENTRY_POINT_GROUP = plugins.REDUCERS
#: Labels of checkpoints that hold a tail (formats/events.md "Checkpoints"):
#: the seq of the last event a checkpoint covers (its live position),
LABEL_SEQ = "events.seq"
#: the recorder run (journal) that took it,
LABEL_RUN = "recorder.run"
#: and, on a fork, the checkpoint and the seq it was forked from.
LABEL_FORK_OF = "fork.of"
LABEL_FORK_AT = "fork.at"
#: Custom kinds: the owning adapter's namespace (as for `ext:<namespace>` sections), a colon, a name.
CUSTOM_KIND_RE = re.compile(r"^([a-z0-9][a-z0-9_.-]{0,63}):([A-Za-z0-9][A-Za-z0-9_.-]{0,63})$")
NAMESPACE_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
#: Fields every event has; a kind's own fields may not use these names.
HEADER_FIELDS = ("seq", "ts", "kind")
TOOL_STATUSES = ("ok", "error")
#: Deepest value (and longest path) an event may carry: the format's nesting limit.
MAX_DEPTH = 256

_ANY = "any value"
_STR = "a string"
_INT = "an integer"
_PATH = "a path (a list of map keys and list indices)"
_STATUS = "'ok' or 'error'"
# kind -> (required fields, optional fields), each field -> what it must be
_SPECS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    MEMORY_SET: ({"path": _PATH, "value": _ANY}, {}),
    MEMORY_DELETE: ({"path": _PATH}, {}),
    PLAN_PUSH: ({"item": _ANY}, {}),
    PLAN_POP: ({}, {}),
    PLAN_UPDATE: ({"value": _ANY}, {"index": _INT, "path": _PATH}),
    TOOL_CALL: ({"call_id": _STR, "tool": _STR, "args": _ANY}, {"key": _STR}),
    TOOL_RESULT: ({"call_id": _STR}, {"result": _ANY, "status": _STATUS, "error": _STR}),
    MESSAGE_APPEND: ({"message": _ANY}, {"reply_to": _STR}),
    CHECKPOINT: ({}, {"id": _STR, "note": _STR}),
    ERROR: ({"message": _STR}, {"type": _STR}),
}
#: Optional on every kind: causality.
_COMMON: dict[str, str] = {"cause": _INT, "sender": _STR, "receiver": _STR, "msg_id": _STR, "call_id": _STR}


# -- events -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Event:
    """One recorded event. Treat it, and every value in it, as immutable: the states that
    reducers build share those values."""

    seq: int
    ts: int  # nanoseconds since the epoch
    kind: str
    fields: dict[str, Any]

    def get(self, name: str, default: Any = None) -> Any:
        """A field of the event (seq, ts and kind too)."""
        if name in HEADER_FIELDS:
            return getattr(self, name)
        return self.fields.get(name, default)

    @property
    def cause(self) -> int | None:
        """The seq of the input event whose step emitted this one (None: an input)."""
        c = self.fields.get("cause")
        return c if type(c) is int else None

    def to_map(self) -> dict[str, Any]:
        """The event as stored: {"seq", "ts", "kind", **fields}."""
        return {"seq": self.seq, "ts": self.ts, "kind": self.kind, **self.fields}

    def where(self) -> str:
        return f"event {self.seq} ({self.kind})"


def check_kind(kind: object, where: str = "event") -> str:
    """A standard kind or NAMESPACE:NAME; anything else is InvalidInputError."""
    if type(kind) is not str:
        raise InvalidInputError(f"{where}: kind must be a string, not {_type_name(kind)}")
    if kind in _SPECS or CUSTOM_KIND_RE.match(kind):
        return kind
    raise InvalidInputError(
        f"{where}: unknown event kind {kind!r}",
        hint=f"standard kinds are {', '.join(STANDARD_KINDS)}; an adapter's own kinds are NAMESPACE:NAME (e.g. myadapter:step)",
    )


def make_event(seq: int, ts: int, kind: str, fields: Mapping[str, Any], *, copy: bool = True) -> Event:
    """A checked event. With `copy`, the field values are copied (and checked to be values
    a checkpoint can hold: maps with string keys, lists, str, bytes, int, float, bool,
    None), so the caller's objects stay theirs.

    Raises:
        InvalidInputError naming the event, the field and what it must be.
    """
    if type(seq) is not int or seq < 1:
        raise InvalidInputError(f"event: seq must be an integer >= 1, not {seq!r}")
    where = f"event {seq}"
    if type(ts) is not int or ts < 0:
        raise InvalidInputError(f"{where}: ts must be an integer >= 0 (nanoseconds since the epoch), not {ts!r}")
    check_kind(kind, where)
    where = f"event {seq} ({kind})"
    if not isinstance(fields, Mapping):
        raise InvalidInputError(f"{where}: fields must be a map, not {_type_name(fields)}")
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if type(name) is not str:
            raise InvalidInputError(f"{where}: field names must be strings, not {name!r}")
        if name in HEADER_FIELDS:
            raise InvalidInputError(f"{where}: {name!r} is set by the recorder, not a field")
        out[name] = normalize(value, f"{where}: field {name!r}") if copy else value
    required, optional = _SPECS.get(kind, ({}, {}))
    for name, what in required.items():
        if name not in out:
            raise InvalidInputError(f"{where}: missing field {name!r} ({what})")
        _check_field(out[name], what, f"{where}: field {name!r}")
    for name, what in (*optional.items(), *_COMMON.items()):
        if name in out and name not in required:
            _check_field(out[name], what, f"{where}: field {name!r}")
    cause = out.get("cause")
    if cause is not None and not 1 <= cause < seq:
        raise InvalidInputError(f"{where}: cause {cause} must be the seq of an earlier event")
    return Event(seq, ts, kind, out)


#: The sections of formats/events.md that the rules of a stored event come from.
SPEC_RECORD = "formats/events.md#the-event-record"
SPEC_KINDS = "formats/events.md#standard-kinds"
SPEC_REDUCERS = "formats/events.md#reducers"
#: The section of formats/events.md that says what a checkpoint's tail is and how it is replayed.
SPEC_TAIL = "formats/events.md#checkpoints-snapshot-and-tail"
_HEADER_RULE = "every event has seq (an integer >= 1), ts (an integer >= 0: nanoseconds since the epoch) and kind"


def kind_rule(kind: str) -> str:
    """The rule of formats/events.md a standard kind's fields follow, in words."""
    required, optional = _SPECS[kind]
    have = ", ".join(f"{n} ({w})" for n, w in required.items()) or "no fields"
    more = f"; optional: {', '.join(optional)}" if optional else ""
    return f"a {kind} event has {have}{more}"


def event_from_map(value: object, where: str) -> Event:
    """Read an event as stored ({"seq", "ts", "kind", ...}); values are used as they are.

    Raises:
        InvalidInputError naming the event, the field, the rule it breaks and the section
        of formats/events.md that states it.
    """
    if type(value) is not dict:
        raise InvalidInputError(
            f"{where}: an event must be a map, not {_type_name(value)}",
            hint=f"an event is a map of seq, ts, kind and its fields ({SPEC_RECORD})",
        )
    fields = {k: v for k, v in value.items() if k not in HEADER_FIELDS}
    for name in HEADER_FIELDS:
        if name not in value:
            raise InvalidInputError(f"{where}: the event has no {name!r}", hint=f"{_HEADER_RULE} ({SPEC_RECORD})")
    try:
        return make_event(value["seq"], value["ts"], value["kind"], fields, copy=False)
    except InvalidInputError as exc:
        kind = value["kind"]
        if type(kind) is str and kind in _SPECS and "field" in exc.message:
            rule = f"{kind_rule(kind)} ({SPEC_KINDS})"
        elif "kind" in exc.message:
            rule = f"{exc.hint or 'a kind is standard or NAMESPACE:NAME'} ({SPEC_RECORD})"
        else:
            rule = f"{_HEADER_RULE}; cause, if any, is an earlier seq ({SPEC_RECORD})"
        raise InvalidInputError(f"{where}: {exc.message}", hint=rule) from None


def labelled_seq(label: str | None) -> int:
    """The seq a checkpoint's `LABEL_SEQ` label names (its position when its tail is
    empty); 0 without one, or for one that is no decimal number."""
    return int(label) if label and label.isdecimal() and label.isascii() else 0


def _where(where: str) -> str:
    return f"{where}: " if where else ""


def out_of_order(where: str, i: int, seq: int, prev: int) -> InvalidInputError:
    """The error for event `i` of a tail (`where`: "checkpoint <id>", or "") whose seq is
    not after the previous event's."""
    return InvalidInputError(
        f"{_where(where)}events[{i}] has seq {seq}, not after the previous event's {prev}",
        hint=f"a tail is in strictly increasing seq order ({SPEC_TAIL})",
    )


def read_tail(raw: object, where: str = "") -> list[Event]:
    """The events of a tail as stored (a checkpoint's `events` section; `where`, e.g.
    "checkpoint <id>", begins the errors), checked: a list of valid events in strictly
    increasing seq order (formats/events.md, "Checkpoints: snapshot and tail").

    Raises:
        InvalidInputError naming the event, the rule and the spec section.
    """
    if type(raw) is not list:
        raise InvalidInputError(
            f"{_where(where)}the events section is not a list of events", hint=f"a tail is a list of events ({SPEC_TAIL})"
        )
    events: list[Event] = []
    prev = 0  # a seq is >= 1 (make_event)
    for i, item in enumerate(raw):
        ev = event_from_map(item, f"{_where(where)}events[{i}]")
        if ev.seq <= prev:
            raise out_of_order(where, i, ev.seq, prev)
        prev = ev.seq
        events.append(ev)
    return events


def _check_field(value: Any, what: str, where: str) -> None:
    if what is _ANY:
        return
    if what is _STR:
        if type(value) is not str:
            raise InvalidInputError(f"{where} must be a string, not {_type_name(value)}")
    elif what is _INT:
        if type(value) is not int:
            raise InvalidInputError(f"{where} must be an integer, not {_type_name(value)}")
    elif what is _STATUS:
        if value not in TOOL_STATUSES or type(value) is not str:
            raise InvalidInputError(f"{where} must be 'ok' or 'error', not {value!r}")
    elif what is _PATH:
        check_path(value, where)


def check_path(value: object, where: str) -> list[PathKey]:
    if type(value) is not list:
        raise InvalidInputError(f"{where} must be a list of keys and indices, not {_type_name(value)}")
    if len(value) > MAX_DEPTH:
        raise InvalidInputError(f"{where} is {len(value)} levels deep; at most {MAX_DEPTH}")
    for part in value:
        if type(part) is not str and type(part) is not int:
            raise InvalidInputError(f"{where}: {part!r} is not a map key (string) or list index (integer)")
    return value


def normalize(value: Any, where: str, depth: int = 0) -> Any:
    """A copy of `value` that a checkpoint can hold exactly; InvalidInputError otherwise
    (a tuple, a set, a non-string key, ...: each would come back as something else)."""
    t = type(value)
    if t is int and not -(2**63) <= value < 2**64 and (value.bit_length() + 8) // 8 > limits.MAX_BIGINT_BYTES:
        raise InvalidInputError(f"{where}: an integer of {value.bit_length()} bits is larger than a checkpoint holds")
    if t is str or t is int or t is float or t is bool or t is bytes or value is None:
        return value
    if depth >= MAX_DEPTH:
        raise InvalidInputError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise InvalidInputError(f"{where}: map key {k!r} is not a string", hint="state maps have string keys")
            if len(k) > limits.MAX_KEY_BYTES // 4 and len(k.encode("utf-8", "surrogatepass")) > limits.MAX_KEY_BYTES:
                raise InvalidInputError(f"{where}: a map key is longer than {limits.MAX_KEY_BYTES} bytes")
            out[k] = normalize(v, where, depth + 1)
        return out
    if t is list:
        return [normalize(v, where, depth + 1) for v in value]
    hint = "use a list" if t is tuple else "use maps, lists, str, bytes, int, float, bool or None"
    raise InvalidInputError(f"{where}: a {t.__name__} cannot be stored", hint=hint)


# -- the standard reducers --------------------------------------------------------------------
def _memory_set(state: State, ev: Event, owned: Owned | None = None) -> State:
    memory = _part(state, "memory", dict, {})
    return _with(state, "memory", _set(memory, ["memory", *ev.fields["path"]], 1, ev.fields["value"], owned), owned)


def _memory_delete(state: State, ev: Event, owned: Owned | None = None) -> State:
    path = ev.fields["path"]
    if not path:
        raise ReduceError("the path is empty (memory.set with path [] replaces the whole memory)")
    memory = _part(state, "memory", dict, {})
    new = _delete(memory, ["memory", *path], 1, owned)
    return state if new is memory else _with(state, "memory", new, owned)


def _appended(items: list[Any], item: Any, owned: Owned | None) -> list[Any]:
    if owned is None:
        return [*items, item]
    new = _own(items, owned)
    new.append(item)
    return new


def _plan_push(state: State, ev: Event, owned: Owned | None = None) -> State:
    plan = _part(state, "plan", list, [])
    return _with(state, "plan", _appended(plan, ev.fields["item"], owned), owned)


def _plan_pop(state: State, ev: Event, owned: Owned | None = None) -> State:
    plan = _part(state, "plan", list, [])
    if not plan:
        raise ReduceError("the plan is empty: nothing to pop")
    if owned is None:
        return _with(state, "plan", plan[:-1])
    new = _own(plan, owned)
    new.pop()
    return _with(state, "plan", new, owned)


def _plan_update(state: State, ev: Event, owned: Owned | None = None) -> State:
    plan = _part(state, "plan", list, [])
    index = ev.fields.get("index", -1)
    path = ["plan", index, *ev.fields.get("path", [])]
    _index(plan, index, path, 1, allow_end=False)
    return _with(state, "plan", _set(plan, path, 1, ev.fields["value"], owned), owned)


def _tool_call(state: State, ev: Event, owned: Owned | None = None) -> State:
    tools = _part(state, "tools", list, [])
    f = ev.fields
    record: dict[str, Any] = {"call_id": f["call_id"], "tool": f["tool"], "args": f["args"]}
    if "key" in f:
        record["key"] = f["key"]
    record.update({"status": "pending", "seq": ev.seq, "ts": ev.ts})
    return _with(state, "tools", _appended(tools, record, owned), owned)


def _tool_result(state: State, ev: Event, owned: Owned | None = None) -> State:
    tools = _part(state, "tools", list, [])
    call_id = ev.fields["call_id"]
    for i in range(len(tools) - 1, -1, -1):
        rec = tools[i]
        if type(rec) is dict and rec.get("call_id") == call_id and rec.get("status") == "pending":
            break
    else:
        raise ReduceError(f"no pending tool call {call_id!r} in /tools")
    f = ev.fields
    done = dict(rec)
    done["status"] = f.get("status", "ok")
    if "result" in f or done["status"] == "ok":
        done["result"] = f.get("result")
    if "error" in f:
        done["error"] = f["error"]
    done["result_seq"] = ev.seq
    if type(rec.get("ts")) is int:
        done["duration_ns"] = max(0, ev.ts - rec["ts"])
    new = _own(tools, owned)
    new[i] = done
    return _with(state, "tools", new, owned)


def _message_append(state: State, ev: Event, owned: Owned | None = None) -> State:
    memory = _part(state, "memory", dict, {})
    messages = memory.get("messages", [])
    if type(messages) is not list:
        raise ReduceError(f"/memory/messages is {_type_name(messages)}, not a list")
    return _with(state, "memory", _with(memory, "messages", _appended(messages, ev.fields["message"], owned), owned), owned)


def _no_change(state: State, ev: Event, owned: Owned | None = None) -> State:
    return state


STANDARD_REDUCERS: dict[str, Reducer] = {
    MEMORY_SET: _memory_set,
    MEMORY_DELETE: _memory_delete,
    PLAN_PUSH: _plan_push,
    PLAN_POP: _plan_pop,
    PLAN_UPDATE: _plan_update,
    TOOL_CALL: _tool_call,
    TOOL_RESULT: _tool_result,
    MESSAGE_APPEND: _message_append,
    CHECKPOINT: _no_change,
    ERROR: _no_change,
}


# -- the registry -----------------------------------------------------------------------------
def installed_namespaces() -> list[str]:
    """Namespaces in the `ckptcli.reducers` entry-point group, without importing them."""
    return plugins.names(plugins.REDUCERS)


class Reducers:
    """Which reducer applies each kind: the standard ones, those given here, and those of
    installed adapters (entry-point group `ckptcli.reducers`, loaded by namespace the first
    time one of its kinds is met).

    Args:
        extra: kind -> reducer, for custom kinds (NAMESPACE:NAME).
        entry_points: look installed adapters up for kinds not given here.
    Raises:
        InvalidInputError for a kind that is not NAMESPACE:NAME, or a standard kind.
    """

    def __init__(self, extra: Mapping[str, Reducer] | None = None, *, entry_points: bool = True) -> None:
        self._custom: dict[str, Reducer] = {}
        self._loaded: set[str] = set()
        self._entry_points = entry_points
        if extra:
            self.add(extra)

    def add(self, reducers: Mapping[str, Reducer], source: str = "reducers", *, namespace: str | None = None) -> None:
        """Add kind -> reducer entries (only kinds of `namespace`, when one is given)."""
        if not isinstance(reducers, Mapping):
            raise InvalidInputError(f"{source}: expected a mapping of event kind -> reducer, not {_type_name(reducers)}")
        for kind, func in reducers.items():
            if kind in STANDARD_REDUCERS:
                raise InvalidInputError(f"{source}: {kind!r} is a standard kind; its reducer cannot be replaced")
            if type(kind) is not str or not CUSTOM_KIND_RE.match(kind):
                raise InvalidInputError(
                    f"{source}: {kind!r} is not a custom event kind", hint="custom kinds are NAMESPACE:NAME, e.g. myadapter:step"
                )
            if namespace is not None and not kind.startswith(namespace + ":"):
                raise InvalidInputError(f"{source}: {kind!r} is not in its namespace {namespace!r}")
            if not callable(func):
                raise InvalidInputError(f"{source}: the reducer of {kind!r} is not callable")
            self._custom[kind] = func

    def reducer(self, kind: str) -> Reducer:
        """The reducer for `kind`. Raises NotFoundError when no one provides it."""
        found = STANDARD_REDUCERS.get(kind) or self._custom.get(kind)
        if found is not None:
            return found
        m = CUSTOM_KIND_RE.match(kind)
        if m is None:
            check_kind(kind)
        ns = m.group(1) if m else kind
        if self._entry_points and ns not in self._loaded:
            self._loaded.add(ns)
            self._load_entry_point(ns)
            found = self._custom.get(kind)
            if found is not None:
                return found
        have = ", ".join(installed_namespaces()) or "none"
        raise NotFoundError(
            f"no reducer for event kind {kind!r}",
            hint=f"install the adapter that owns {ns!r} or pass --reducers MODULE:NAME (installed reducer namespaces: {have})",
        )

    def _load_entry_point(self, ns: str) -> None:
        ep = plugins.find(plugins.REDUCERS, ns)
        if ep is None:
            return
        try:
            obj = ep.load()
        except BaseException as exc:  # the adapter's own import failed (sys.exit too): one line, cause kept
            if not user_failure(exc):
                raise
            raise InvalidInputError(f"loading reducers {ns!r} ({ep.value}) failed: {failed_with(exc)}") from exc
        self.add(obj, f"reducers {ns!r} ({ep.value})", namespace=ns)

    def apply(self, state: State, event: Event, owned: Owned | None = None) -> State:
        """The state after `event`. `state` is not changed, except for the containers in
        `owned`: a run that shows no state in between passes the same dict to each call
        (and clears it before showing one), so that what it copied once is changed in
        place afterwards (see `_own`).

        Raises:
            InvalidInputError when the event does not fit the state (or a custom reducer
            raised: the cause is kept for CKPT_DEBUG); NotFoundError for an unknown kind.
        """
        func = self.reducer(event.kind)
        try:
            if owned is not None and event.kind in STANDARD_REDUCERS:
                new = func(state, event, owned)  # type: ignore[call-arg]  # the standard ones take it
            else:
                if owned:
                    # a custom reducer may keep a container in two places: nothing before
                    # it is changed in place any more
                    owned.clear()
                new = func(state, event)
        except ReduceError as exc:
            raise InvalidInputError(f"{event.where()}: {exc}") from None
        except CkptError as exc:
            raise InvalidInputError(f"{event.where()}: {exc.message}", hint=exc.hint) from exc
        except BaseException as exc:  # a custom reducer failed (sys.exit too)
            if not user_failure(exc):
                raise
            name = getattr(func, "__qualname__", repr(func))
            raise InvalidInputError(f"{event.where()}: reducer {name} {how_it_failed(exc)}") from exc
        if new is not state and event.kind not in STANDARD_REDUCERS:
            check_state(new, f"{event.where()}: the reducer's result")
        return new

    def apply_all(self, state: State, events: Iterable[Event]) -> State:
        """The state after `events` (`state` is not changed); O(1) per appended item."""
        owned: Owned = {}
        for ev in events:
            state = self.apply(state, ev, owned)
        return state


def check_state(state: object, where: str = "state") -> State:
    """A state is a map whose keys are among memory, plan, tools and ext."""
    if type(state) is not dict:
        raise InvalidInputError(f"{where} must be a map of memory, plan, tools and ext, not {_type_name(state)}")
    for key in state:
        if key not in STATE_KEYS:
            raise InvalidInputError(
                f"{where} has a key {key!r}", hint="a state's keys are memory, plan, tools and ext (events is the tail, kept apart)"
            )
    ext = state.get("ext")
    if ext is not None:
        if type(ext) is not dict:
            raise InvalidInputError(f"{where}: ext must be a map of namespace -> value, not {_type_name(ext)}")
        for ns in ext:
            if not NAMESPACE_RE.match(ns):
                raise InvalidInputError(f"{where}: ext namespace {ns!r} is not valid", hint="use lower-case letters, digits, '.', '_', '-'")
    return state


# -- what a step function sees (the recorder runs it live, `ckpt replay --check` again) ----------
class ToolFailed(Exception):  # noqa: N818 - what the step function sees: the tool failed
    """A tool called through a step context failed. Live, the tool raised (its error is
    recorded in the tool.result event); in a replay, the recorded result says so."""

    def __init__(self, tool: str, error: str) -> None:
        super().__init__(f"tool {tool!r} failed: {error}")
        self.tool = tool
        self.error = error


class StepContext:
    """What a step function gets besides its input event: the state, and the two ways to
    act. The recorder's live context and the replay checker's both implement it, so the
    same function runs in both (docs/replay.md "The step-function contract").

    A step function is `step(ctx, event) -> None`, called once per input event (an event
    without `cause`), after that event was applied. It must be deterministic given
    `ctx.state`, the event and the tool results: no clock (use `event.ts`), no random
    numbers without a seed from the state, no I/O except through `ctx.tool`.
    """

    input: Event

    @property
    def state(self) -> State:
        """The current state: after the input and everything emitted so far. Read-only."""
        raise NotImplementedError

    def emit(self, kind: str, **fields: Any) -> Event:
        """Record an event (it gets `cause` = the input's seq); returns it as recorded.

        Raises:
            InvalidInputError for an event that is not valid or does not fit the state.
        """
        raise NotImplementedError

    def tool(self, name: str, args: Any, *, key: str | None = None) -> Any:
        """Call tool `name` with `args`: records tool.call, runs the tool (live) or takes
        the recorded result (replay), records tool.result, returns the result.

        Raises:
            ToolFailed when the tool failed (live: it raised; replay: it had failed).
        """
        raise NotImplementedError

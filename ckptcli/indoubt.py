"""Calls in doubt: tool calls (an agent's tool call, a workflow's step, an activity) that were
sent but whose result was not recorded, so that they may or may not have happened. After a
restore they must be reconciled (retried with the same idempotency key, queried, or
compensated) before the subject resumes (docs/workflows.md, "Reconciling in-doubt calls
after a restore"; the records: formats/events.md, `tool.call` and `tool.result`).

A call is in doubt at a state when its record in the standard `tools` section has status
"pending" (a `tool.call` without its `tool.result`, applied by the reducers or found in a
tail not yet applied), unless a later record of the same effect completed "ok": one with
the same idempotency key (a retry that succeeded), or, for a call without a key, the same
call id. A failed call ("error", or any status but "pending") is not in doubt: its outcome
was recorded.

Invariants: reading never fails on the shape of a `tools` section or of its records (what
is not a list of maps holds no call in doubt; a field of the wrong type reads as absent);
every text an InDoubt carries for people is bounded (`args` is at most MAX_SUMMARY
characters, read from at most a bounded part of the arguments), and the arguments are
redacted by the generic adapter's rules (ckptcli/_util/redact.py) before they are cut;
`call_id` and `key` are kept exactly (reconciling needs them), and `to_dict` bounds them."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptcli._util.redact import PLACEHOLDER, Redactor
from ckptcli.errors import CkptError

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.history.stateat import StateAt

__all__ = ["MAX_LISTED", "MAX_SUMMARY", "InDoubt", "InDoubtList", "checkpoint_in_doubt", "in_doubt", "summarize"]

#: The longest arguments summary, in characters.
MAX_SUMMARY = 160
#: The longest call id, tool name or key `to_dict` and `line` give (longer ones are cut, with "…").
MAX_ID = 1024
#: How many calls `ckpt show` and `ckpt restore` list (--json; the human output lists MAX_SHOWN).
MAX_LISTED = 1000
MAX_SHOWN = 20
#: How much of one string is searched for secrets beyond what the summary can show: a secret
#: that starts within the shown part is found whole if it is shorter than this.
_REDACT_WINDOW = 64 * 1024
_MAX_DEPTH = 32
_TOOL_CALL = "tool.call"
_TOOL_RESULT = "tool.result"
PENDING = "pending"
OK = "ok"


@dataclass(frozen=True)
class InDoubt:
    """One call in doubt.

    Attributes:
        call_id: the call's id (what a `tool.result` that settles it must carry), None when
            its record has none.
        tool: the tool, step or activity called (None when the record has none).
        args: a one-line summary of the arguments: JSON-like, secrets redacted, at most
            MAX_SUMMARY characters ("…" where cut).
        key: the idempotency key the call was sent with, None without one.
        started: when the call was recorded (its `ts`, nanoseconds since the epoch), if known.
        seq: the seq of its `tool.call` event, if known.
        index: its position in the `tools` list of the state (the live state at a checkpoint).
    """

    call_id: str | None
    tool: str | None
    args: str
    key: str | None
    started: int | None
    seq: int | None
    index: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`ckpt show --json`, `ckpt restore --json`): every text bounded."""
        return {
            "call_id": _cut(self.call_id),
            "tool": _cut(self.tool),
            "args": self.args,
            "key": _cut(self.key),
            "started": self.started,
            "seq": self.seq,
            "index": self.index,
        }

    def line(self) -> str:
        """One line for people (not escaped for a terminal: the CLI does that)."""
        key = f"key {_cut(self.key)}" if self.key is not None else "no idempotency key"
        where = f"seq {self.seq}" if self.seq is not None else f"tools[{self.index}]"
        return f"{_cut(self.call_id) or '(no call id)'}  {_cut(self.tool) or '(no tool)'}  {self.args}  {key}  ({where})"


class InDoubtList(list[InDoubt]):
    """The calls in doubt, in the order of the `tools` list; `total` counts them all when
    a `limit` kept fewer."""

    total: int = 0


def _cut(text: str | None, limit: int = MAX_ID) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


# -- the summary of arguments ---------------------------------------------------------------------
class _Out:
    """A bounded text being written: `full` once the limit is reached."""

    def __init__(self, limit: int) -> None:
        self.parts: list[str] = []
        self.left = limit
        self.full = False

    def add(self, text: str) -> None:
        if self.full:
            return
        if len(text) > self.left:
            self.parts.append(text[: max(0, self.left - 1)] + "…")
            self.left = 0
            self.full = True
            return
        self.parts.append(text)
        self.left -= len(text)


def summarize(value: Any, redactor: Redactor | None = None, limit: int = MAX_SUMMARY) -> str:
    """`value` (a tool call's arguments) as one line of at most `limit` characters:
    JSON-like (maps, lists, strings quoted as JSON, numbers), bytes as <N bytes>,
    secrets replaced by [REDACTED:<rule>] by `redactor`'s rules (default: the generic
    adapter's). Reads no more of `value` than the line can show."""
    out = _Out(limit)
    _walk(value, redactor or _default_redactor(), out, 0)
    return "".join(out.parts)


_REDACTOR: Redactor | None = None


def _default_redactor() -> Redactor:
    global _REDACTOR
    if _REDACTOR is None:
        _REDACTOR = Redactor()
    return _REDACTOR


def _walk(value: Any, red: Redactor, out: _Out, depth: int) -> None:
    if out.full:
        return
    if depth > _MAX_DEPTH:
        out.add("…")
        return
    if isinstance(value, Mapping):
        out.add("{")
        for i, (k, v) in enumerate(value.items()):
            if out.full:
                return
            if i:
                out.add(", ")
            out.add(_string(k, red, out.left) if isinstance(k, str) else _scalar(k, red, out.left))
            out.add(": ")
            rule = next((n for n, p in red.keys.items() if isinstance(k, str) and p.search(k)), None)
            if rule is not None and v not in (None, "", [], {}):
                out.add(json.dumps(PLACEHOLDER.format(rule=rule)))
            else:
                _walk(v, red, out, depth + 1)
        out.add("}")
    elif isinstance(value, (list, tuple)):
        out.add("[")
        for i, v in enumerate(value):
            if out.full:
                return
            if i:
                out.add(", ")
            _walk(v, red, out, depth + 1)
        out.add("]")
    else:
        out.add(_scalar(value, red, out.left))


def _string(s: str, red: Redactor, left: int) -> str:
    """A string quoted as JSON, redacted, read no further than `left` characters can show
    plus the window that finds whole a secret starting within them."""
    window = s[: left + _REDACT_WINDOW]
    for name, pat in red.values.items():
        window = pat.sub(PLACEHOLDER.format(rule=name), window)
    cut = len(window) > left or len(s) > left + _REDACT_WINDOW
    return json.dumps(window[:left], ensure_ascii=False) + ("…" if cut else "")


def _scalar(value: Any, red: Redactor, left: int) -> str:
    if isinstance(value, str):
        return _string(value, red, left)
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        if value.bit_length() > 256:  # a huge integer: its digits are not worth a full conversion
            return f"<{value.bit_length()}-bit integer>"
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else json.dumps(str(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    return f"<{type(value).__name__}>"


# -- records ---------------------------------------------------------------------------------------
class _Entry:
    """One record of a `tools` list as far as being in doubt goes."""

    __slots__ = ("call_id", "index", "key", "load", "record", "seq", "status")

    def __init__(
        self,
        index: int,
        status: object,
        call_id: object,
        key: object,
        seq: object,
        record: Mapping[str, Any] | None,
        load: Callable[[], Any] | None = None,
    ) -> None:
        self.index = index
        self.status = status
        self.call_id = call_id if type(call_id) is str else None
        self.key = key if type(key) is str else None
        self.seq = seq if type(seq) is int else None
        self.record = record
        self.load = load


def _entries_of(tools: Iterable[Any]) -> list[_Entry]:
    out = []
    for i, rec in enumerate(tools):
        if isinstance(rec, Mapping):
            out.append(_Entry(i, rec.get("status"), rec.get("call_id"), rec.get("key"), rec.get("seq"), rec))
    return out


def _event_map(ev: Any) -> Mapping[str, Any] | None:
    to_map = getattr(ev, "to_map", None)
    if callable(to_map):  # an Event
        ev = to_map()
    return ev if isinstance(ev, Mapping) else None


def _apply_tail(entries: list[_Entry], size: int, events: Iterable[Any], result_seqs: set[int]) -> None:
    """Apply a tail's tool events to `entries` as the reducers would, leniently (an event
    that does not fit is passed over), and not twice: a call whose record (same seq and call
    id) is already there, or a result already applied (its seq is a record's result_seq),
    is skipped, so a state with its tail applied and the tail beside it read the same."""
    calls = {(e.seq, e.call_id) for e in entries if e.seq is not None}
    for raw in events:
        ev = _event_map(raw)
        if ev is None:
            continue
        kind, seq, call_id = ev.get("kind"), ev.get("seq"), ev.get("call_id")
        if type(call_id) is not str or type(seq) is not int:
            continue
        if kind == _TOOL_CALL:
            if (seq, call_id) in calls:
                continue
            record = {"call_id": call_id, "tool": ev.get("tool"), "args": ev.get("args")}
            if "key" in ev:
                record["key"] = ev["key"]
            record.update({"status": PENDING, "seq": seq, "ts": ev.get("ts")})
            entries.append(_Entry(size, PENDING, call_id, ev.get("key"), seq, record))
            calls.add((seq, call_id))
            size += 1
        elif kind == _TOOL_RESULT and seq not in result_seqs:
            for e in reversed(entries):
                if e.call_id == call_id and e.status == PENDING:
                    status = ev.get("status", OK)
                    e.status = status if type(status) is str else OK
                    break


def _unsettled(entries: list[_Entry]) -> list[_Entry]:
    """The pending entries no later "ok" record of the same effect settles, in order."""
    done_keys: set[str] = set()
    done_calls: set[str] = set()
    out = []
    for e in reversed(entries):
        if e.status == OK:
            if e.key is not None:
                done_keys.add(e.key)
            if e.call_id is not None:
                done_calls.add(e.call_id)
        elif e.status == PENDING:
            settled = e.key in done_keys if e.key is not None else e.call_id is not None and e.call_id in done_calls
            if not settled:
                out.append(e)
    out.reverse()
    return out


def _in_doubt(entry: _Entry, redactor: Redactor | None) -> InDoubt:
    record = entry.record
    if record is None and entry.load is not None:
        try:
            loaded = entry.load()
        except CkptError as exc:  # a record too large or damaged: named, not read
            return InDoubt(
                entry.call_id, None, f"(its record cannot be read: {exc.message})"[:MAX_SUMMARY], entry.key, None, entry.seq, entry.index
            )
        record = loaded if isinstance(loaded, Mapping) else {}
    assert record is not None
    tool, ts = record.get("tool"), record.get("ts")
    args = summarize(record["args"], redactor) if "args" in record else "(no arguments recorded)"
    return InDoubt(
        entry.call_id,
        tool if type(tool) is str else None,
        args,
        entry.key,
        ts if type(ts) is int and ts >= 0 else None,
        entry.seq,
        entry.index,
    )


def _listed(entries: list[_Entry], redactor: Redactor | None, limit: int | None) -> InDoubtList:
    unsettled = _unsettled(entries)
    out = InDoubtList(_in_doubt(e, redactor) for e in (unsettled if limit is None else unsettled[: max(0, limit)]))
    out.total = len(unsettled)
    return out


# -- the public functions -------------------------------------------------------------------------
def in_doubt(state: Any, *, redactor: Redactor | None = None, limit: int | None = None) -> InDoubtList:
    """The calls in doubt in `state`: a state (a map with a `tools` list, e.g. a
    recorder's live state, `Recorder.state`) or a state document with its event tail
    (`events`: the tail's `tool.call` events without a `tool.result` count too, whether
    or not the tail was applied to `tools` already). At most `limit` are returned (`.total`
    counts them all). Never raises for the shape of the input: what is not a list of
    records holds no call in doubt."""
    if not isinstance(state, Mapping):
        return _listed([], redactor, limit)
    tools = state.get("tools")
    entries = _entries_of(tools) if isinstance(tools, list) else []
    events = state.get("events")
    if isinstance(events, list) and events:
        size = len(tools) if isinstance(tools, list) else 0
        done = {e.record.get("result_seq") for e in entries if e.record is not None}
        _apply_tail(entries, size, events, {s for s in done if type(s) is int})
    return _listed(entries, redactor, limit)


def checkpoint_in_doubt(
    ck: Checkpoint, *, at: StateAt | None = None, redactor: Redactor | None = None, limit: int | None = None
) -> InDoubtList:
    """The calls in doubt at checkpoint `ck` (its live state: the snapshot with the tail
    applied, formats/events.md). `at`, the state_at(ck) a command already has, saves
    reading the tail again. The stored `tools` section is read record by record (only the
    records of calls in doubt are decoded whole), so memory stays small whatever its size.

    Raises:
        CorruptError, StoreIOError for a store that cannot be read (not for the shape of
        the records: see `in_doubt`)."""
    from ckptcli.format.manifest import LAYOUT_SECTIONS
    from ckptcli.history.stateat import Stored

    m = ck.manifest
    if m.layout.get("kind") != LAYOUT_SECTIONS or m.layout.get("format") == "langgraph":
        return _listed([], redactor, limit)
    if at is not None and at.applied:
        live = at.parts.get("tools")
        if live is not None and not isinstance(live, Stored):  # decoded: the tail's tool events are in it
            return in_doubt({"tools": live}, redactor=redactor, limit=limit)
        events: list[Any] = []  # the tail has no tool event (it did not touch tools)
    elif at is not None and at.problem is None:
        events = list(at.events)
    else:
        events = _tail_leniently(ck)
    entries: list[_Entry] = []
    result_seqs: set[int] = set()
    size = 0
    root = m.sections.get("tools")
    if root is not None:
        size = _stored_entries(ck, root, entries, result_seqs)
    if events:
        _apply_tail(entries, size, events, result_seqs)
    return _listed(entries, redactor, limit)


def _tail_leniently(ck: Checkpoint) -> list[Any]:
    """The tail's events, checked when they can be; a tail that breaks the rules is read
    as stored (its tool events are still what was recorded), one that cannot be read at all
    as none."""
    from ckptcli.history.stateat import tail_events

    try:
        return list(tail_events(ck)[0])
    except CkptError:
        pass
    if "events" not in ck.manifest.sections:
        return []
    try:
        raw = ck.section("events")
    except CkptError:
        return []
    return raw if isinstance(raw, list) else []


def _stored_entries(ck: Checkpoint, root: bytes, entries: list[_Entry], result_seqs: set[int]) -> int:
    """The entries of a stored `tools` section, reading each record's raw map (its small
    fields are inline; only a pending record is decoded whole, and only if listed).
    Returns the number of items; not a list: 0."""
    import msgpack

    from ckptcli.errors import InvalidInputError
    from ckptcli.format.values import EXT_REF, Budget, Decoder, Ext, packable, unpack_ev
    from ckptcli.history.lazylist import LazyList

    where = f"checkpoint {ck.hex[:12]}: section tools"
    try:
        items = LazyList(ck.source, root, where)
    except InvalidInputError:
        return 0  # not a list: no record in it

    def field(raw: Any, i: int) -> Any:
        if type(raw) is not Ext:
            return raw
        try:
            return Decoder(ck.source, budget=Budget()).decode(msgpack.packb(packable(raw), use_bin_type=True), f"{where}[{i}]")
        except CkptError:
            return None

    for i in range(len(items)):
        raw = items.raw(i)
        hops = 0
        while type(raw) is Ext and raw.code == EXT_REF and hops < 64:
            raw = unpack_ev(ck.source.get(raw.oid), f"{where}[{i}]: object {raw.oid.hex()[:12]}")
            hops += 1
        if type(raw) is Ext:  # a record too large for one object (a chunked map): decoded whole
            try:
                raw = items.value(i)
            except CkptError:
                continue
        if type(raw) is not dict:
            continue
        status, result_seq = raw.get("status"), raw.get("result_seq")
        if type(result_seq) is int:
            result_seqs.add(result_seq)
        load = (lambda i=i: items.value(i)) if status == PENDING else None
        entries.append(_Entry(i, status, field(raw.get("call_id"), i), field(raw.get("key"), i), raw.get("seq"), None, load))
    return len(items)

"""How LangGraph checkpoints read in `ckpt diff` and `ckpt show --section`: messages as
`role: text` (tool calls by name and arguments), times as UTC ISO 8601 (a `datetime` or
`date` the serializer stored as an extension type, an integer in nanoseconds such as
an event's `ts`), and LangGraph's bookkeeping (channel versions, versions seen,
`branch:to:*` and `__start__` channels, checkpoint ids and step counters) left out.

A hook over `ckptcli.history.diff.DiffResult`, called by the CLI for checkpoints whose labels say
they are LangGraph ones (`langgraph.checkpoint`); it imports nothing of LangGraph. The
--json output and `--all` keep the exact form.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, date, datetime
from typing import Any

from ckptcli.history.change import Change, DiffResult
from ckptcli.history.render import ns_time

__all__ = ["for_people", "is_bookkeeping", "is_langgraph", "iso_utc", "message_text", "readable", "time_text"]

#: the msgpack extension code JsonPlusSerializer gives pydantic models (messages)
EXT_PYDANTIC = 5
#: ... a constructor called with positional arguments (a `date`: [year, month, day])
EXT_CONSTRUCTOR_POS_ARGS = 1
#: ... a method called with one argument (a `datetime`: its isoformat(), "fromisoformat")
EXT_METHOD_SINGLE_ARG = 3
ROLES = {"HumanMessage": "human", "AIMessage": "ai", "ToolMessage": "tool", "SystemMessage": "system", "RemoveMessage": "remove"}
_BOOK_KEYS = ("channel_versions", "versions_seen", "updated_channels", "id", "ts", "pending_sends")


def is_langgraph(labels: dict[str, str]) -> bool:
    return "langgraph.checkpoint" in labels


def _bookkeeping_channel(name: Any) -> bool:
    # __resume__, __interrupt__ and __error__ carry what people answered, asked and hit
    return isinstance(name, str) and (
        name.startswith("branch:") or (name.startswith("__") and name not in ("__resume__", "__interrupt__", "__error__"))
    )


def is_bookkeeping(c: Change) -> bool:
    """A change in LangGraph's own bookkeeping rather than in the graph's state."""
    p = c.path
    if c.section == "ext:langgraph":
        if p and p[0] == "checkpoint" and len(p) > 1 and p[1] in _BOOK_KEYS:
            return True
        if p and p[0] == "checkpoint" and len(p) > 2 and p[1] == "channel_values" and _bookkeeping_channel(p[2]):
            return True
        return bool(p) and (p[0] == "types" or (p[0] == "metadata" and len(p) > 1 and p[1] in ("step", "parents")))
    if c.section == "memory":
        return bool(p) and _bookkeeping_channel(p[0])
    if c.section == "events" and c.label is not None:
        w = c.new if c.new is not None else c.old
        return isinstance(w, dict) and _bookkeeping_channel(w.get("channel"))
    return False


def message_text(value: Any) -> str | None:
    """`role: text` for a LangChain message as the saver stores it, None for anything else."""
    if type(value) is not dict or value.get("$ext") != EXT_PYDANTIC:
        return None
    data = value.get("data")
    if type(data) is not list or len(data) < 3 or type(data[2]) is not dict:
        return None
    role = ROLES.get(str(data[1]), str(data[1]))
    fields = data[2]
    content = fields.get("content")
    text = content if isinstance(content, str) else json.dumps(readable(content, times=True), ensure_ascii=False, default=str)
    calls = []
    for call in fields.get("tool_calls") or []:
        if type(call) is dict:
            raw = call.get("args")
            args: dict[str, Any] = raw if type(raw) is dict else {}
            calls.append(f"→ {call.get('name')}(" + ", ".join(f"{k}={_arg(readable(v, times=True))}" for k, v in args.items()) + ")")
    return f"{role}: " + " ".join(x for x in [text, *calls] if x)


def _arg(v: Any) -> str:
    # a plain word as it is (the line is quoted as a whole), anything else as JSON
    if isinstance(v, str) and v and all(ch.isalnum() or ch in "-_.:/@" for ch in v):
        return v
    return json.dumps(v, ensure_ascii=False, default=str)


def iso_utc(when: datetime) -> str:
    """A datetime in UTC, ISO 8601 with a Z (microseconds when it has them); one without
    a time zone as it is, said so."""
    if when.tzinfo is None:
        return when.isoformat() + " (no time zone)"
    u = when.astimezone(UTC)
    return u.strftime("%Y-%m-%dT%H:%M:%S") + (f".{u.microsecond:06d}" if u.microsecond else "") + "Z"


def time_text(value: Any) -> str | None:
    """The ISO 8601 text (UTC) of a `datetime` or `date` as JsonPlusSerializer stores it
    (an extension type naming the class), None for anything else."""
    if type(value) is not dict or set(value) != {"$ext", "data"}:
        return None
    code, data = value["$ext"], value["data"]
    if type(data) is not list or len(data) < 3 or data[0] != "datetime":
        return None
    try:
        if code == EXT_METHOD_SINGLE_ARG and data[1] == "datetime" and type(data[2]) is str and data[3:] == ["fromisoformat"]:
            return iso_utc(datetime.fromisoformat(data[2]))
        if (
            code == EXT_CONSTRUCTOR_POS_ARGS
            and data[1] == "date"
            and len(data) == 3
            and type(data[2]) is list
            and all(type(x) is int for x in data[2])
        ):
            return date(*data[2]).isoformat()
    except (ValueError, TypeError):
        return None
    return None


def readable(value: Any, *, times: bool = False) -> Any:
    """`value` with every message replaced by its `role: text` line and every datetime
    or date by its ISO text (UTC); with `times`, every integer that reads as a time in
    nanoseconds by "N (ISO time)" too (`ckpt diff` prints such numbers so itself)."""
    m = message_text(value)
    if m is not None:
        return m
    if times and type(value) is int and (when := ns_time(value)) is not None:
        return f"{value} ({when})"
    if type(value) is list:
        return [readable(v, times=times) for v in value]
    if type(value) is dict:
        t = time_text(value)
        if t is not None:
            return t
        data = value.get("data")
        if "$ext" in value and type(data) is list and len(data) >= 3 and type(data[2]) is dict:
            # another serialized object (an Interrupt, a Send): its class and fields
            return f"{data[1]} " + json.dumps(readable(data[2], times=True), ensure_ascii=False, default=str)
        return {k: readable(v, times=times) for k, v in value.items()}
    return value


def _inside_datetime(c: Change) -> Change | None:
    """A change of the ISO text inside a stored datetime (path ending in .data[2]) as a
    change of the datetime itself, both sides in UTC; None for any other change."""
    if c.op != "replace" or len(c.path) < 2 or c.path[-2:] != ("data", 2) or type(c.old) is not str or type(c.new) is not str:
        return None
    try:
        old, new = datetime.fromisoformat(c.old), datetime.fromisoformat(c.new)
    except ValueError:
        return None
    if "T" not in c.old or "T" not in c.new:
        return None  # a date alone is no datetime the serializer wrote
    return replace(c, path=c.path[:-2], old=iso_utc(old), new=iso_utc(new))


def for_people(result: DiffResult, *, show_all: bool = False) -> DiffResult:
    """The diff as `ckpt diff` prints it for a LangGraph thread: bookkeeping left out
    (unless `show_all`), messages readable."""
    out = []
    for c in result.changes:
        if c.structural or (not show_all and is_bookkeeping(c)):
            continue
        out.append(_inside_datetime(c) or replace(c, old=readable(c.old), new=readable(c.new)))
    return DiffResult(result.a, result.b, out, result.blobs, result.section)

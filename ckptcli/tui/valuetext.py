"""The text of a value as the value viewer shows it, without Textual: pretty JSON for
containers, the text itself for strings, a hex dump for byte strings; a line diff of a
value's before and after; and the short forms the lists use (a message as
`role: first words…`, a machine label shortened).

Pure functions, tested without a terminal (tests/test_tui_value.py)."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from ckptcli.format.jsonview import to_json
from ckptcli.format.values import LazyBytes

__all__ = [
    "MISSING",
    "diff_lines",
    "hex_dump",
    "is_bookkeeping_channel",
    "message_row",
    "short_label",
    "value_lines",
    "wrap",
]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: "no value" (a value can be None): what a path held before it was added
MISSING: Any = _Missing()

_HEX = re.compile(r"^[0-9a-fA-F]{16,}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
#: the roles of LangChain messages as LangGraph's serializer names their classes
LC_ROLES = {"HumanMessage": "human", "AIMessage": "ai", "ToolMessage": "tool", "SystemMessage": "system", "RemoveMessage": "remove"}


def hex_dump(data: bytes) -> list[str]:
    """16 bytes a line: offset, the bytes in hex, the printable ones as text."""
    out = []
    for at in range(0, len(data), 16):
        chunk = data[at : at + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        out.append(f"{at:08x}  {hexes:<47}  |{text}|")
    return out or ["(0 bytes)"]


def value_lines(value: Any) -> tuple[str, list[str]]:
    """What the value is ("text, 4,450 chars"), and its lines: a string's own lines, a byte
    string as a hex dump, anything else as JSON indented by 2 (formats/v1.md "JSON view")."""
    if type(value) is str:
        return f"text, {len(value):,} chars", value.split("\n")
    if type(value) is bytes:
        return f"bytes, {len(value):,}", hex_dump(value)
    if type(value) is LazyBytes:
        return f"file data left in the store, {value.size:,} bytes", [f"blob {value.oid.hex()} ({value.size:,} bytes)"]
    text = json.dumps(to_json(value), indent=2, ensure_ascii=False, default=str)
    if type(value) is dict:
        what = f"map, {len(value):,} key{'s' if len(value) != 1 else ''}"
    elif type(value) is list:
        what = f"list, {len(value):,} item{'s' if len(value) != 1 else ''}"
    else:
        what = type(value).__name__
    return what, text.split("\n")


def diff_lines(old: Any, new: Any) -> list[tuple[str, str]]:
    """A line diff of the value before and after, as (kind, text): kind is "header" for a
    hunk's `@@` line, "remove", "add" or "same". A value added or removed is all "add" or
    all "remove"."""
    if old is MISSING:
        return [("add", "+" + line) for line in value_lines(new)[1]]
    if new is MISSING:
        return [("remove", "-" + line) for line in value_lines(old)[1]]
    a, b = value_lines(old)[1], value_lines(new)[1]
    out: list[tuple[str, str]] = []
    for line in difflib.unified_diff(a, b, lineterm="", n=3):
        if line.startswith(("---", "+++")):
            continue
        kind = "header" if line.startswith("@@") else {"+": "add", "-": "remove"}.get(line[:1], "same")
        out.append((kind, line))
    return out or [("same", " (no difference)")]


def wrap(lines: list[str], width: int) -> list[tuple[int, str]]:
    """Each line cut into pieces of at most `width` characters, after a space when there
    is one in the piece's second half (else inside a word): (the line's index, the piece).
    The pieces of a line joined give the line."""
    width = max(8, width)
    out: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        n = len(line)
        if n <= width:
            out.append((i, line))
            continue
        at = 0
        while at < n:
            end = at + width
            if end < n:
                space = line.rfind(" ", at + width // 2, end)
                if space >= 0:
                    end = space + 1
            out.append((i, line[at:end]))
            at = end
    return out


def short_label(value: str, keep: int = 8) -> str:
    """A machine label (a hex id of 16 digits or more, a UUID) shortened to its first
    `keep` characters and an ellipsis; anything else as it is."""
    if _HEX.match(value) or _UUID.match(value):
        return value[:keep] + "…"
    return value


def _words(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _arg(v: Any) -> str:
    if isinstance(v, str) and v and all(ch.isalnum() or ch in "-_.:/@" for ch in v):
        return v
    return json.dumps(to_json(v), ensure_ascii=False, default=str)


def message_row(value: Any, width: int = 60) -> tuple[str, str] | None:
    """(role, `first words…`) for a chat message: a map with `role` and `content` (the
    formats' `message.append`), or a LangChain message as LangGraph's serializer stores it
    (its tool calls by name and arguments); None for anything else."""
    if type(value) is not dict:
        return None
    if value.get("$ext") == 5 and type(value.get("data")) is list:  # a pydantic model (JsonPlusSerializer)
        data = value["data"]
        if len(data) < 3 or type(data[2]) is not dict or str(data[1]) not in LC_ROLES:
            return None
        role, fields = LC_ROLES[str(data[1])], data[2]
    elif isinstance(value.get("role"), str) and "content" in value:
        role, fields = value["role"], value
    else:
        return None
    content = fields.get("content")
    if isinstance(content, list):  # content blocks: their text
        content = " ".join(str(b.get("text", "")) if type(b) is dict else str(b) for b in content)
    text = content if isinstance(content, str) else json.dumps(to_json(content), ensure_ascii=False, default=str)
    calls = []
    for call in fields.get("tool_calls") or []:
        if type(call) is dict:
            args = call.get("args") if type(call.get("args")) is dict else {}
            assert isinstance(args, dict)
            calls.append(f"→ {call.get('name')}(" + ", ".join(f"{k}={_arg(v)}" for k, v in args.items()) + ")")
    if role == "tool" and fields.get("name"):
        text = f"[{fields['name']}{' failed' if fields.get('status') == 'error' else ''}] {text}"
    return role, _words(" ".join(x for x in [text, *calls] if x), width)


def is_bookkeeping_channel(name: Any) -> bool:
    """A LangGraph channel of its own bookkeeping (`branch:to:*`, `__start__`, `__pregel_*`),
    folded in the trees; `__resume__`, `__interrupt__` and `__error__` carry what people
    answered, asked and hit, and are not folded (the rule of `ckpt diff`'s LangGraph view)."""
    return isinstance(name, str) and (
        name.startswith("branch:") or (name.startswith("__") and name not in ("__resume__", "__interrupt__", "__error__"))
    )

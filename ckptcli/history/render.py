"""Changes for people: one line of text per change, as `ckpt diff`, `ckpt replay --step`
and the TUI show them (docs/cli.md, docs/tui.md). No UI library: each line is a
(kind, text) pair the CLI and the TUI colour by kind.

Invariants: every change line, of a diff or of a replay step, comes from `change_line`;
values are shown by `describe` (one line, cut at a width) and never decoded here.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

from ckptcli._util.units import human_size
from ckptcli.history.change import BlobChange, Change, DiffResult, PathPart

__all__ = [
    "SHORT",
    "Line",
    "change_line",
    "describe",
    "describe_change",
    "format_path",
    "ns_time",
    "render",
    "render_changes",
    "state_line",
]

#: Line kinds: "header", "section", "add", "remove", "change", "summary".
Line = tuple[str, str]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
SHORT = 80  # values longer than this (as one line of text) are summarised


def format_path(parts: tuple[PathPart, ...]) -> str:
    """("user", "names", 3) -> 'user.names[3]'; keys that are not identifiers are quoted."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _IDENT.match(p):
            out += ("." if out else "") + p
        else:
            out += "[" + json.dumps(p, ensure_ascii=False) + "]"
    return out


def _is_number(x: Any) -> bool:
    return type(x) is int or type(x) is float


def _num(x: int | float) -> str:
    if isinstance(x, float):
        return repr(x) if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))
    if abs(x) >= 2**64:
        return f"<{x.bit_length()}-bit integer>"
    when = ns_time(x)
    return f"{x} ({when})" if when is not None else str(x)


def ns_time(x: int) -> str | None:
    """The UTC time of an integer that reads as one in nanoseconds since the epoch (from
    2001 to 2100: LangGraph's event `ts`, ckpt's created_ns), to the second; None for
    any other integer."""
    if type(x) is int and _NS_2001 <= x < _NS_2100:
        from datetime import UTC, datetime

        return datetime.fromtimestamp(x // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return None


_NS_2001, _NS_2100 = 978_307_200 * 10**9, 4_102_444_800 * 10**9  # nanoseconds since 1970 of 2001-01-01 and 2100-01-01


def describe(value: Any, width: int = SHORT) -> str:
    """One line for a value: short values as JSON, long strings, byte strings and
    numeric arrays as summaries, containers cut at `width` characters."""
    t = type(value)
    if t is str:
        if len(value) <= width and "\n" not in value:
            return json.dumps(value, ensure_ascii=False)
        head = json.dumps(value[: width // 2], ensure_ascii=False)[:-1]
        return f'{head}…" ({len(value):,} chars)'
    if t is bytes:
        if len(value) <= 16:
            return f"<{len(value)} bytes {value.hex()}>" if value else "<0 bytes>"
        return f"<{human_size(len(value))} of bytes, sha256 {hashlib.sha256(value).hexdigest()[:12]}>"
    if t is list and len(value) > 8 and all(_is_number(x) for x in value):
        finite = [x for x in value if not (isinstance(x, float) and not math.isfinite(x))]
        if not finite:
            return f"<{len(value):,} numbers>"
        return f"<{len(value):,} numbers, min {_num(min(finite))}, max {_num(max(finite))}>"
    if t is list or t is dict:
        text = "".join(_compact(value, width + 1))
        if len(text) > width:
            noun = ("item" if t is list else "key") + ("s" if len(value) != 1 else "")
            return text[: width - 1] + f"… ({len(value):,} {noun})"
        return text
    if t is float or t is int:
        return _num(value)
    return json.dumps(value)


def _compact(value: Any, budget: int) -> Iterator[str]:
    """Compact one-line text of a value, stopping soon after `budget` characters."""
    used = 0
    stack: list[Any] = [value]
    while stack and used <= budget:
        x = stack.pop()
        if type(x) is _Text:
            piece = x.text
        elif type(x) is list and not (len(x) > 8 and all(_is_number(i) for i in x)):
            parts: list[Any] = [_Text("[")]
            for i, item in enumerate(x):
                if i:
                    parts.append(_Text(", "))
                parts.append(item)
            parts.append(_Text("]"))
            stack.extend(reversed(parts))
            continue
        elif type(x) is dict:
            parts = [_Text("{")]
            for i, (k, v) in enumerate(x.items()):
                parts.append(_Text((", " if i else "") + json.dumps(k, ensure_ascii=False) + ": "))
                parts.append(v)
            parts.append(_Text("}"))
            stack.extend(reversed(parts))
            continue
        else:
            piece = describe(x, 40)
        used += len(piece)
        yield piece


class _Text(NamedTuple):
    text: str


def describe_change(old: Any, new: Any) -> str:
    """'old -> new', with long strings and byte strings shown as where they differ."""
    if type(old) is str and type(new) is str and (len(old) > SHORT or len(new) > SHORT or "\n" in old + new):
        at = _first_difference(old, new)
        lo = max(0, at - 20)
        a = json.dumps(old[lo : at + 20], ensure_ascii=False)
        b = json.dumps(new[lo : at + 20], ensure_ascii=False)
        return f"string of {len(old):,} -> {len(new):,} chars, first difference at char {at:,}: …{a}… -> …{b}…"
    return f"{describe(old)} -> {describe(new)}"


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


_PLAN_VERBS = {"add": "push", "remove": "pop"}


def render(result: DiffResult, *, stat: bool = False) -> list[Line]:
    """The diff for people, as (kind, text) lines, grouped by section."""
    lines: list[Line] = [("header", f"diff {result.a.hex()[:12]} -> {result.b.hex()[:12]}")]
    for side, name in (("a", result.a), ("b", result.b)):
        st = result.states.get(side)
        if st is not None:
            lines.append(("header", f"{side.upper()} {name.hex()[:12]}: {state_line(st)}"))
    if result.same:
        where = f" in section {result.section}" if result.section else ""
        where += f" at {result.path}" if result.path is not None else ""
        lines.append(("summary", "no differences" + where))
        return lines
    summary = result.summary()
    if stat:
        for name, counts in summary["sections"].items():
            lines.append(("section", f"{name:<12} {_counts_text(name, counts)}"))
    else:
        current = None
        for group in _groups([c for c in result.changes if not c.structural]):
            first = group[0]
            if first.section != current:
                current = first.section
                lines.append(("section", str(current)))
            lines.append(_run_line(group) if len(group) > 1 else change_line(group[0]))
        if result.blobs:
            lines.append(("section", "blobs"))
            lines.extend(_blob_line(bc) for bc in result.blobs)
    n = summary["changes"]
    total = f"{n:,} change{'s' if n != 1 else ''}"
    if stat:
        lines.append(("summary", f"{total} in {len(summary['sections'])} section{'s' if len(summary['sections']) != 1 else ''}"))
    else:
        lines.append(("summary", f"{total}: " + "; ".join(f"{name} {_counts_text(name, c)}" for name, c in summary["sections"].items())))
    return lines


def state_line(st: dict[str, Any]) -> str:
    """Which state a side is (stateat.StateAt.to_dict), for people."""
    if "problem" in st:
        return "stored sections (its events section does not replay)"
    if st["tail"] is None:
        return f"state at seq {st['seq']} (no event tail)"
    tail = f"tail {st['tail'][0]}..{st['tail'][1]}"
    if st["applied"]:
        return f"state at seq {st['seq']} (snapshot at seq {st['snapshot_seq']} + {tail})"
    return f"stored snapshot at seq {st['snapshot_seq']} (without {tail})"


def _counts_text(section: str, counts: dict[str, int]) -> str:
    words = {"added": "added", "removed": "removed", "changed": "changed"}
    if section == "plan":
        words = {"added": "pushed", "removed": "popped", "changed": "changed"}
    text = ", ".join(f"{counts[k]:,} {w}" for k, w in words.items() if counts.get(k))
    if section == "blobs" and (counts.get("size_before") or counts.get("size_after")):
        text += f" ({human_size(counts['size_before'])} -> {human_size(counts['size_after'])})"
    return text


def _groups(changes: list[Change]) -> Iterator[list[Change]]:
    """Changes one by one, except a run of more than 5 number-for-number replacements
    in one list, which reads better as one line."""
    i = 0
    while i < len(changes):
        c = changes[i]
        j = i + 1
        if c.op == "replace" and c.path and isinstance(c.path[-1], int) and _is_number(c.old) and _is_number(c.new):
            parent = c.path[:-1]
            while (
                j < len(changes)
                and changes[j].op == "replace"
                and changes[j].section == c.section
                and changes[j].path[:-1] == parent
                and changes[j].path
                and isinstance(changes[j].path[-1], int)
                and _is_number(changes[j].old)
                and _is_number(changes[j].new)
            ):
                j += 1
        if j - i > 5:
            yield changes[i:j]
        else:
            j = i + 1
            yield [c]
        i = j


def _run_line(group: list[Change]) -> Line:
    """One line for a run of number-for-number replacements in one list (see _groups)."""
    c = group[0]
    parent = format_path(c.path[:-1]) or "(whole section)"
    idx = [g.path[-1] for g in group]
    deltas = [abs(g.new - g.old) for g in group if _finite(g.old) and _finite(g.new)]
    span = f"{len(group):,} numbers changed in [{idx[0]}..{idx[-1]}]"
    if deltas:
        span += f", largest change {_num(max(deltas))}"
    return ("change", f"~ {parent}: {span}")


def change_line(c: Change) -> Line:
    """One change: `+ where: value`, `- where: value`, `~ where: old -> new`; a plan item
    of a diff as `push`/`pop`, a LangGraph pending write by its label. An empty path is
    "(whole section)" in a diff, "(the state)" in a replay step (no section)."""
    where = format_path(c.path) or ("(the state)" if c.section is None else "(whole section)")
    if c.label is not None:  # a LangGraph pending write: its value is what reads
        where = c.label
        if c.op == "replace" and {k: v for k, v in c.old.items() if k != "value"} == {k: v for k, v in c.new.items() if k != "value"}:
            return ("change", f"~ {where}: {describe_change(c.old.get('value'), c.new.get('value'))}")
        if c.op != "replace":
            return (
                "add" if c.op == "add" else "remove",
                f"{'+' if c.op == 'add' else '-'} {where}: {describe((c.new if c.op == 'add' else c.old).get('value'))}",
            )
    if c.op == "replace":
        return ("change", f"~ {where}: {describe_change(c.old, c.new)}")
    value = c.new if c.op == "add" else c.old
    kind = "add" if c.op == "add" else "remove"
    if c.section == "plan" and c.path and isinstance(c.path[-1], int):
        return (kind, f"{_PLAN_VERBS[c.op]} {where}: {describe(value)}")
    return (kind, f"{'+' if c.op == 'add' else '-'} {where}: {describe(value)}")


def render_changes(changes: list[Change], header: str) -> list[Line]:
    """A replay step's changes (or two states'), grouped by the part of the state they
    touch, then a summary line."""
    lines: list[Line] = [("header", header)]
    if not changes:
        lines.append(("summary", "no differences"))
        return lines
    counts: dict[str, dict[str, int]] = {}
    current: Any = None
    for c in changes:
        part = str(c.path[0]) if c.path else "state"
        if part != current:
            current = part
            lines.append(("section", part))
        lines.append(change_line(Change(c.op, c.path[1:], c.old, c.new)) if c.path else change_line(c))
        word = {"add": "added", "remove": "removed"}.get(c.op, "changed")
        per = counts.setdefault(part, {})
        per[word] = per.get(word, 0) + 1
    n = len(changes)
    parts = "; ".join(f"{name} " + ", ".join(f"{v:,} {k}" for k, v in c.items()) for name, c in counts.items())
    lines.append(("summary", f"{n:,} change{'s' if n != 1 else ''}: {parts}"))
    return lines


def _finite(x: Any) -> bool:
    return _is_number(x) and not (isinstance(x, float) and not math.isfinite(x))


def _blob_text(meta: dict[str, Any]) -> str:
    kind = meta.get("type")
    if kind == "file":
        size = meta.get("size")
        return human_size(size) if type(size) is int else "file"
    if kind == "symlink":
        return f"symlink -> {meta.get('target')}"
    if kind == "skipped":
        return f"skipped ({meta.get('reason')})"
    if kind == "dir":
        return "directory"
    return str(kind)


def _blob_line(bc: BlobChange) -> Line:
    old, new = bc.old or {}, bc.new or {}
    path = bc.path + ("/" if (new or old).get("type") == "dir" else "")
    if bc.op == "add":
        return ("add", f"+ {path}  {_blob_text(new)}")
    if bc.op == "remove":
        return ("remove", f"- {path}  {_blob_text(old)}")
    parts = []
    if old.get("size") != new.get("size"):
        parts.append(f"{_blob_text(old)} -> {_blob_text(new)}")
    elif (old.get("sha256"), old.get("root")) != (new.get("sha256"), new.get("root")):
        parts.append(f"{_blob_text(new)}, content changed")
    if old.get("mode") != new.get("mode"):
        parts.append(f"mode {_mode(old.get('mode'))} -> {_mode(new.get('mode'))}")
    if old.get("target") != new.get("target"):
        parts.append(f"-> {old.get('target')} now -> {new.get('target')}")
    if old.get("reason") != new.get("reason"):
        parts.append(f"skipped ({new.get('reason')})")
    return ("change", f"~ {path}  {', '.join(parts) or 'changed'}")


def _mode(mode: Any) -> str:
    return f"{mode:04o}" if type(mode) is int else "none"

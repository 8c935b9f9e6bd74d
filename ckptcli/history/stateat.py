"""The state AT a checkpoint: its snapshot with its event tail applied (formats/events.md
"Checkpoints: snapshot and tail"; docs/replay.md "The state at a checkpoint"). `cat`,
`show`, `diff` and `log` speak of that state by default; `state_at(ck, snapshot=True)`
(`--snapshot`) gives the stored sections.

Invariants:
- A checkpoint without events, or with an empty tail, costs nothing more: nothing is
  decoded and every section stays as stored.
- With a tail, only the sections its events touch are decoded, each bounded by
  CKPT_MAX_HELD_BYTES / CKPT_MAX_HELD_ITEMS (an error says so).
- The events are kept as stored: the document at a checkpoint is its live state plus its
  `events` section."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ckptcli.checkpoint import describe_value
from ckptcli.document import Section, join_document, write_document
from ckptcli.errors import CkptError, InvalidInputError, LimitExceededError, NotFoundError
from ckptcli.format.manifest import DOC_SECTION_KEYS, EXT_PREFIX, LAYOUT_SECTIONS
from ckptcli.format.values import Budget, Decoder, unpack_ev
from ckptcli.history.events import (
    CHECKPOINT,
    ERROR,
    LABEL_SEQ,
    MEMORY_DELETE,
    MEMORY_SET,
    MESSAGE_APPEND,
    PLAN_POP,
    PLAN_PUSH,
    PLAN_UPDATE,
    SPEC_REDUCERS,
    SPEC_TAIL,
    STATE_KEYS,
    TOOL_CALL,
    TOOL_RESULT,
    Event,
    PathKey,
    Reducers,
    check_state,
    event_from_map,
    labelled_seq,
    read_tail,
)
from ckptcli.history.lazylist import LazyList
from ckptcli.listing import info_dict

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint

__all__ = ["EMPTY_LIST_EV", "StateAt", "Stored", "overlaps", "replay_problem", "state_at", "tail_events", "touched"]

#: The encoded value of an empty list: an empty tail, known without decoding anything.
EMPTY_LIST_EV = b"\x90"

_KIND_PART = {
    MEMORY_SET: "memory",
    MEMORY_DELETE: "memory",
    MESSAGE_APPEND: "memory",
    PLAN_PUSH: "plan",
    PLAN_POP: "plan",
    PLAN_UPDATE: "plan",
    TOOL_CALL: "tools",
    TOOL_RESULT: "tools",
}


class Stored(NamedTuple):
    """A part of the state left as stored: section name -> encoded root (one section, or
    for "ext" one per namespace)."""

    sections: dict[str, bytes]


def touched(ev: Event) -> tuple[PathKey, ...] | None:
    """The part of the state `ev` may change, as a path from the state's root: None for
    nothing, () for anything (a custom kind), ("memory", *path) for memory.set, ..."""
    kind = ev.kind
    if kind in (CHECKPOINT, ERROR):
        return None
    if kind in (MEMORY_SET, MEMORY_DELETE):
        path = ev.fields.get("path")
        return ("memory", *path) if type(path) is list else ("memory",)
    if kind == MESSAGE_APPEND:
        return ("memory", "messages")
    part = _KIND_PART.get(kind)
    return (part,) if part is not None else ()


def overlaps(a: tuple[PathKey, ...], b: tuple[PathKey, ...]) -> bool:
    """Whether one path is a prefix of the other (a change at one may change the other).
    A negative list index may be any item: it overlaps every index."""
    for x, y in zip(a, b, strict=False):
        if x == y and type(x) is type(y):
            continue
        if type(x) is int and type(y) is int and (x < 0 or y < 0):
            continue
        return False
    return True


def tail_events(ck: Checkpoint) -> tuple[list[Event], int]:
    """A checkpoint's tail (checked: valid events in increasing seq order) and its base
    seq, without decoding anything but the `events` section (nothing at all for an empty
    one). Raises InvalidInputError naming the event, the rule and the spec section."""
    m = ck.manifest
    ev_root = m.sections.get("events") if m.layout.get("kind") == LAYOUT_SECTIONS else None
    events: list[Event] = []
    if ev_root is not None and ev_root != EMPTY_LIST_EV:
        where = f"checkpoint {ck.hex[:12]}"
        # the first item is read first (a long list is a chunk tree: one node per level),
        # so an events section that is no tail costs no full decode
        first = LazyList(ck.source, ev_root, f"{where}: events")
        if len(first):
            event_from_map(first.value(0), f"{where}: events[0]")
        events = read_tail(ck.section("events"), where)
    if events:
        return events, events[0].seq - 1
    return events, labelled_seq(m.labels.get(LABEL_SEQ))


@dataclass
class StateAt:
    """The state at a checkpoint (see the module docstring)."""

    ck: Checkpoint
    base_seq: int
    events: list[Event]
    #: True when the tail was applied (a non-empty tail, and not `snapshot=True`)
    applied: bool
    #: document key -> Stored (left as stored) or the decoded live value, in document order
    parts: dict[str, Any] = field(default_factory=dict)
    #: the decoded parts (what applying the tail needed)
    decoded: tuple[str, ...] = ()
    #: why the tail was not applied although the checkpoint has one (state_at `lenient`)
    problem: str | None = None

    @property
    def last_seq(self) -> int:
        return self.events[-1].seq if self.events else self.base_seq

    @property
    def seq(self) -> int:
        """The position this state is at."""
        return self.last_seq if self.applied else self.base_seq

    def describe(self) -> str:
        """One line for people: which state this is."""
        if self.problem is not None:
            return "stored sections (its events section does not replay)"
        if not self.events:
            return f"state at seq {self.base_seq} (no event tail)"
        tail = f"tail {self.base_seq + 1}..{self.last_seq}"
        if self.applied:
            return f"state at seq {self.last_seq} (snapshot at seq {self.base_seq} + {tail})"
        return f"stored snapshot at seq {self.base_seq} (without {tail}; drop --snapshot for the state at seq {self.last_seq})"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seq": self.seq,
            "snapshot_seq": self.base_seq,
            "tail": [self.base_seq + 1, self.last_seq] if self.events else None,
            "events": len(self.events),
            "applied": self.applied,
        }
        if self.problem is not None:
            out["problem"] = self.problem
        return out

    # -- by section name (cat, show) --------------------------------------------------------------
    def section_parts(self) -> dict[str, Any]:
        """Section name -> Stored root (bytes) or the decoded live value, the checkpoint's
        sections first (in order), then sections the tail created."""
        out: dict[str, Any] = {}
        live = self._by_section()
        for name, ev in self.ck.manifest.sections.items():
            got = live.get(name, ev)
            out[name] = got
        for name, value in live.items():
            if name not in out:
                out[name] = value
        for name in [n for n in out if n.startswith(EXT_PREFIX) and n not in live and self._ext_decoded()]:
            del out[name]  # a custom reducer removed that namespace
        return out

    def _ext_decoded(self) -> bool:
        return "ext" in self.decoded

    def _by_section(self) -> dict[str, Any]:
        """The decoded parts by section name."""
        out: dict[str, Any] = {}
        for key in self.decoded:
            if key not in self.parts:
                continue
            value = self.parts[key]
            if key == "ext" and type(value) is dict:
                for ns, v in value.items():
                    out[EXT_PREFIX + ns] = v
            elif key != "ext":
                out[key] = value
        return out

    def summary(self) -> dict[str, Any]:
        """`ckpt show`: Checkpoint.summary() with the sections at this state, and "state"
        (`to_dict`) when the checkpoint has a tail."""
        info = self.ck.summary()
        if not self.events and self.problem is None:
            return info
        info["state"] = self.to_dict()
        if self.applied:
            sections = info["sections"]
            for name, value in self.section_parts().items():
                if not isinstance(value, bytes):
                    sections[name] = describe_value(value, name)
            info["sections"] = {n: sections[n] for n in self.section_parts() if n in sections}
        return info

    def section(self, name: str, *, lazy_bytes: bool = False) -> Any:
        """One section's value at this state (decoded)."""
        live = self._by_section()
        if name in live:
            return live[name]
        return self.ck.section(name, lazy_bytes=lazy_bytes)

    # -- as a document (restore, diff) ------------------------------------------------------------
    def skeleton(self, *, events: bool = True) -> Any:
        """The state document as a ckptcli.document skeleton: stored parts as `Section`s
        (streamed), decoded ones as values. Without `events`, only the state (what
        restoring the live state should write)."""
        if not self.applied:
            sections = {
                n: Section(ev, f"section {n}") for n, ev in self.ck.manifest.sections.items() if n != "blobs" and (events or n != "events")
            }
            return join_document(self.ck.manifest.layout, sections)
        doc: dict[str, Any] = {}
        for key, value in self.parts.items():
            if key == "events" and not events:
                continue
            doc[key] = _skeleton_part(key, value)
        return doc

    def raw_parts(self) -> dict[str, Any]:
        """Document key -> a raw EV (an unpacked stored root) or the live value, for the
        hash-first diff walk; "ext" -> {namespace: raw or value}."""
        out: dict[str, Any] = {}
        for key, value in self.parts.items():
            if isinstance(value, Stored):
                if key == "ext":
                    out[key] = {n[len(EXT_PREFIX) :]: unpack_ev(ev, f"section {n}") for n, ev in value.sections.items()}
                else:
                    out[key] = unpack_ev(value.sections[key], f"section {key}")
            else:
                out[key] = value
        return out

    def write_document(self, out: Any, fmt: str, *, events: bool = True) -> None:
        """Write the document at this state as "json", "msgpack" or "view" (see
        docstream.write_document: stored parts are streamed)."""
        write_document(self.skeleton(events=events), self.ck.source, out, fmt)

    def write_view(self, out: Any, *, indent: int | None = None) -> None:
        """`ckpt cat`: the checkpoint (metadata, layout, sections) in the JSON view, its
        state sections at this state, with "state" (`to_dict`) saying which; streamed
        where stored. Without a tail: exactly Checkpoint.write_view."""
        if not self.events and self.problem is None:
            self.ck.write_view(out, indent=indent)
            return
        m = self.ck.manifest
        doc: dict[str, Any] = info_dict(self.ck.id, m)
        doc["state"] = self.to_dict()
        layout = dict(m.layout)
        if self.applied:
            layout["keys"] = list(self.parts)
            if type(self.parts.get("ext")) is dict:
                layout["ext"] = list(self.parts["ext"])
        doc["layout"] = layout
        parts = self.section_parts() if self.applied else dict(m.sections)
        doc["sections"] = {n: Section(v, f"section {n}", lazy_bytes=n == "blobs") if isinstance(v, bytes) else v for n, v in parts.items()}
        write_document(doc, self.ck.source, out, "view", indent=indent)

    def document(self, *, events: bool = True) -> Any:
        """The whole document at this state, decoded (held in memory)."""
        if not self.applied:
            doc = self.ck.state()
            if not events and type(doc) is dict:
                doc.pop("events", None)
            return doc
        dec = Decoder(self.ck.source, budget=Budget())
        doc = {}
        for key, value in self.parts.items():
            if key == "events" and not events:
                continue
            if isinstance(value, Stored):
                if key == "ext":
                    doc[key] = {n[len(EXT_PREFIX) :]: dec.decode(ev, f"section {n}") for n, ev in value.sections.items()}
                else:
                    doc[key] = dec.decode(value.sections[key], f"section {key}")
            else:
                doc[key] = value
        return doc


def _skeleton_part(key: str, value: Any) -> Any:
    if not isinstance(value, Stored):
        return value
    if key == "ext":
        return {n[len(EXT_PREFIX) :]: Section(ev, f"section {n}") for n, ev in value.sections.items()}
    return Section(value.sections[key], f"section {key}")


def state_at(ck: Checkpoint, *, snapshot: bool = False, reducers: Reducers | None = None, lenient: bool = False) -> StateAt:
    """The state at checkpoint `ck`: its snapshot with its tail applied (or, with
    `snapshot`, its stored sections as they are).

    With `lenient` (what cat, show and diff use: they read any checkpoint, as they
    always did), an `events` section that does not replay is not an error: the stored
    sections are used and `problem` says why (the commands warn with it once their
    output is written, so that a later error stays the one line on stderr). A size
    limit is an error either way.

    Raises:
        InvalidInputError for a tail that does not follow formats/events.md (the error
        names the event, the rule and the spec section) or an event that does not fit the
        state; NotFoundError for a custom kind no reducer is installed for;
        LimitExceededError when a part the tail changes is larger than
        CKPT_MAX_HELD_BYTES / CKPT_MAX_HELD_ITEMS.
    """
    m = ck.manifest
    if m.layout.get("kind") != LAYOUT_SECTIONS or "events" not in m.sections or m.layout.get("format") == "langgraph":
        # (a LangGraph checkpoint's tail is its pending writes: LangGraph applies them at
        # the next step, so its state is its channel values, as stored; docs/langgraph.md)
        return StateAt(ck, labelled_seq(m.labels.get(LABEL_SEQ)), [], False)
    if snapshot:
        # the events are still read for the positions, unless the tail is empty
        events, base = _quiet_tail(ck)
        return StateAt(ck, base, events, False)
    if not lenient:
        return _applied(ck, reducers)
    try:
        return _applied(ck, reducers)
    except (InvalidInputError, NotFoundError) as exc:
        problem = str(exc)
        events, base = _quiet_tail(ck)
        return StateAt(ck, base, events, False, problem=problem)


def _applied(ck: Checkpoint, reducers: Reducers | None) -> StateAt:
    try:
        events, base = tail_events(ck)
    except LimitExceededError as exc:
        raise LimitExceededError(
            f"checkpoint {ck.hex[:12]}: its events section, the tail to apply, is held in memory, and {exc.message}",
            hint=(
                "raise CKPT_MAX_HELD_BYTES / CKPT_MAX_HELD_ITEMS if the checkpoint is genuine, "
                "or pass --snapshot for the stored sections (streamed)"
            ),
        ) from None
    if not events:
        return StateAt(ck, base, events, False)
    parts = _stored_parts(ck)
    want: set[str] = set()
    for ev in events:
        t = touched(ev)
        if t is None:
            continue
        if t == ():
            want.update(k for k in parts if k != "events")
            break
        want.add(str(t[0]))
    decoded = _decode(ck, parts, want, len(events))
    state = {k: v for k, v in parts.items() if k != "events"}
    where = f"checkpoint {ck.hex[:12]}"
    bad = [k for k in state if k not in STATE_KEYS]
    if bad:
        raise InvalidInputError(
            f"{where}: the snapshot has a key {bad[0]!r}", hint=f"a snapshot is a state: memory, plan, tools, ext ({SPEC_TAIL})"
        )
    if "ext" in decoded:
        check_state(state, f"{where}: the snapshot")
    try:
        live = (reducers or Reducers()).apply_all(state, events)
    except InvalidInputError as exc:
        hint = exc.hint or f"the tail is applied to the snapshot by the reducers of {SPEC_REDUCERS}; --snapshot shows the stored sections"
        raise InvalidInputError(f"{where}: {exc.message}", hint=hint) from exc.__cause__
    out: dict[str, Any] = {}
    for key in parts:
        out[key] = parts[key] if key == "events" else live.get(key, parts[key])
    for key, value in live.items():
        if key not in out:
            out[key] = value
    del decoded  # the live parts are those no longer stored (a part the tail created included)
    return StateAt(ck, base, events, True, out, tuple(k for k, v in out.items() if k != "events" and not isinstance(v, Stored)))


def problem_warning(problem: str) -> str:
    """The warning cat, show and diff print for a tail that does not replay."""
    return f"{problem}; showed its stored sections (the state before its tail)"


def replay_problem(doc: Any) -> str | None:
    """Why a state document about to be taken holds an `events` section that will not
    replay (formats/events.md), in one line naming the rule and the spec section; None
    when it replays, or holds no tail. (`ckpt take` warns with it: taking it succeeds.)"""
    if type(doc) is not dict or "events" not in doc or not all(type(k) is str and k in DOC_SECTION_KEYS for k in doc):
        return None
    try:
        events = read_tail(doc["events"])
        if not events:
            return None
        state = {k: v for k, v in doc.items() if k != "events"}
        check_state(state, "the snapshot")
        try:
            (Reducers()).apply_all(state, events)
        except InvalidInputError as exc:
            raise InvalidInputError(
                exc.message, hint=f"the tail is applied to the snapshot, the state before it ({SPEC_TAIL}; {SPEC_REDUCERS})"
            ) from None
    except CkptError as exc:
        return str(exc)
    return None


def _quiet_tail(ck: Checkpoint) -> tuple[list[Event], int]:
    """The tail for the positions of a --snapshot view; one that cannot be read is no
    reason to refuse showing the stored sections."""
    try:
        return tail_events(ck)
    except CkptError:
        return [], labelled_seq(ck.manifest.labels.get(LABEL_SEQ))


def _stored_parts(ck: Checkpoint) -> dict[str, Any]:
    m = ck.manifest
    parts: dict[str, Any] = {}
    for key in m.layout.get("keys", []):
        if key == "ext":
            parts["ext"] = Stored(
                {EXT_PREFIX + ns: m.sections[EXT_PREFIX + ns] for ns in m.layout.get("ext", []) if EXT_PREFIX + ns in m.sections}
            )
        elif key in m.sections:
            parts[key] = Stored({key: m.sections[key]})
    return parts


def _decode(ck: Checkpoint, parts: dict[str, Any], want: Iterable[str], n_events: int) -> set[str]:
    """Replace the parts in `want` by their decoded values, under the held budget."""
    dec = Decoder(ck.source, budget=Budget())
    done: set[str] = set()
    for key in want:
        value = parts.get(key)
        if not isinstance(value, Stored):
            continue
        try:
            if key == "ext":
                parts[key] = {n[len(EXT_PREFIX) :]: dec.decode(ev, f"section {n}") for n, ev in value.sections.items()}
            else:
                parts[key] = dec.decode(value.sections[key], f"section {key}")
        except LimitExceededError as exc:
            raise LimitExceededError(
                f"checkpoint {ck.hex[:12]}: applying its tail of {n_events} events needs its {key} section in memory, and {exc.message}",
                hint=(
                    f"raise {dec.budget.env[0]} / {dec.budget.env[1]} if the checkpoint is genuine, "
                    "or pass --snapshot for the stored sections (streamed)"
                ),
            ) from None
        done.add(key)
    return done

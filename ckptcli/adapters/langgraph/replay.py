"""Replaying a LangGraph checkpoint's pending writes onto its channels, for `ckpt replay`.

The store does not hold the graph, so each channel's reducer is learned from the thread's
own recorded steps: a known reducer (``add_messages``, ``operator.add``, ``last_value``) is a
candidate for a channel when it reproduces every recorded step of that thread and
namespace that wrote to the channel. docs/replay.md ("A LangGraph checkpoint's pending
writes") has the rules and LangGraph's own channels.

Invariants: a write is applied only when every remaining candidate gives the same value;
otherwise it is not applied and the replayed state says so under
``ext.langgraph.not_applied``. Every write is also kept as recorded under
``ext.langgraph.writes``. Only `ckpt replay` applies writes (`prepare`); `ckpt fork` keeps
them pending for LangGraph to apply when it resumes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ckptcli.adapters.langgraph.layout import message_fields
from ckptcli.errors import CkptError

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.history.replay import Tail

WRITE_KIND = "langgraph:write"
LABEL_CHECKPOINT = "langgraph.checkpoint"
LABEL_PARENT = "langgraph.parent"
LABEL_NS = "langgraph.ns"
LABEL_STEP = "langgraph.step"

ADD_MESSAGES = "add_messages"
OPERATOR_ADD = "operator.add"
LAST_VALUE = "last_value"
CANDIDATES = (ADD_MESSAGES, OPERATOR_ADD, LAST_VALUE)
#: How many recorded steps of the thread a replay reads at most to learn the reducers.
MAX_STEPS = 32
REMOVE_ALL = "__remove_all__"

EMPTY: Any = object()  # a channel with no value


class _UnknownError(Exception):
    """A candidate reducer cannot apply these values."""


# -- the reducers -----------------------------------------------------------------------
def _message(view: Any) -> tuple[str, str | None]:
    """(class name, id) of a LangChain message's view; _UnknownError for anything else."""
    found = message_fields(view)
    if found is None:
        raise _UnknownError
    mid = found[1].get("id")
    return found[0], mid if type(mid) is str else None


def _add_messages(left: Any, right: Any) -> Any:
    out = [] if left is EMPTY else left
    if type(out) is not list:
        raise _UnknownError
    new = right if type(right) is list else [right]
    merged = list(out)
    for msg in new:
        cls, mid = _message(msg)
        if mid is None:
            raise _UnknownError  # LangGraph gives it a random id
        if cls == "RemoveMessage":
            if mid == REMOVE_ALL:
                merged = []
                continue
            at = [i for i, m in enumerate(merged) if _message(m)[1] == mid]
            if not at:
                raise _UnknownError  # LangGraph refuses to remove what is not there
            del merged[at[0]]
            continue
        at = [i for i, m in enumerate(merged) if _message(m)[1] == mid]
        if at:
            merged[at[0]] = msg
        else:
            merged.append(msg)
    return merged


def _operator_add(left: Any, right: Any) -> Any:
    if left is EMPTY:
        return right
    if type(left) is not type(right) or type(left) not in (list, str, int, float):
        raise _UnknownError
    return left + right


def fold(reducer: str, value: Any, writes: Iterable[Any]) -> Any:
    """The channel's value after `writes`, in order (EMPTY: no value). Raises _UnknownError."""
    for w in writes:
        if reducer == ADD_MESSAGES:
            value = _add_messages(value, w)
        elif reducer == OPERATOR_ADD:
            value = _operator_add(value, w)
        else:
            value = w
    return value


def _same(a: Any, b: Any) -> bool:
    from ckptcli.history.replay import same_value

    return same_value(a, b, ordered=True)


def builtin(channel: str) -> str | None:
    """The reducer of one of LangGraph's own channels (LAST_VALUE), "" for a write that is
    no channel value, None for a channel of the graph's state."""
    if channel == "__start__" or channel.startswith("branch:to:"):
        return LAST_VALUE
    if channel.startswith("__") and (channel.endswith("__") or channel.startswith("__pregel")):
        return ""  # an interrupt, a resume value, an error...; Send packets (the plan shows them)
    return None


def apply(channel: str, candidates: list[str] | None, value: Any, write: Any) -> tuple[Any, str | None]:
    """(the channel's new value, None), or (None, why not) when it is not known
    (`candidates`: those learnt for the channel, None when no step showed it)."""
    own = builtin(channel)
    if own is not None:
        candidates = [own]
    if candidates is None:
        return None, "its reducer is unknown: no recorded step of this thread shows it"
    if not candidates:
        return None, "its reducer is unknown: none ckpt knows (add_messages, operator.add, last value) fits the recorded steps"
    results = []
    for c in candidates:
        try:
            results.append(fold(c, value, [write]))
        except _UnknownError:
            return None, f"its reducer ({c}) cannot be applied here by ckpt"
    if any(not _same(results[0], r) for r in results[1:]):
        return None, f"its reducer is unknown: {' and '.join(candidates)} both fit the recorded steps and give different values here"
    return results[0], None


# -- learning the reducers from the thread's steps -----------------------------------------
def _writes_by_channel(events: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for ev in events if type(events) is list else []:
        if type(ev) is dict and ev.get("kind") == WRITE_KIND and type(ev.get("channel")) is str:
            out.setdefault(ev["channel"], []).append(ev.get("value"))
    return out


def learn(ck: Checkpoint, channels: Iterable[str]) -> dict[str, list[str]]:
    """The candidate reducers of `channels` (those of the graph's state), from at most
    MAX_STEPS recorded steps of `ck`'s thread and namespace, the nearest first; a channel
    no step shows is left out."""
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.listing import ListFilter, list_checkpoints
    from ckptcli.store.repository import Store

    wanted = {c for c in channels if builtin(c) is None}
    store = ck.source
    if not wanted or not isinstance(store, Store):
        return {}
    ns = ck.manifest.labels.get(LABEL_NS, "")
    by_id: dict[str, tuple[int, bytes]] = {}  # LangGraph checkpoint id -> (rev, ckpt id): the newest revision
    children: list[tuple[str, str, int, bytes]] = []  # (LangGraph parent, checkpoint, step, ckpt id)
    for cid, m in list_checkpoints(store, ListFilter(subject=str(ck.manifest.subject))):
        lab = m.labels
        if lab.get(LABEL_NS, "") != ns or LABEL_CHECKPOINT not in lab or "fork.of" in lab:
            continue
        rev_text = lab.get("langgraph.rev", "1")
        rev = int(rev_text) if rev_text.isdecimal() else 1
        if by_id.get(lab[LABEL_CHECKPOINT], (0, b""))[0] < rev:
            by_id[lab[LABEL_CHECKPOINT]] = (rev, cid)
        if lab.get(LABEL_PARENT) and rev == 1:
            step = lab.get(LABEL_STEP, "")
            children.append((lab[LABEL_PARENT], lab[LABEL_CHECKPOINT], int(step) if step.lstrip("-").isdecimal() else 0, cid))
    here_text = ck.manifest.labels.get(LABEL_STEP, "0")
    here = int(here_text) if here_text.lstrip("-").isdecimal() else 0
    children.sort(key=lambda c: (abs(c[2] - here), c[1]))
    alive: dict[str, set[str]] = {}
    for parent_id, _child_id, _step, child_cid in children[:MAX_STEPS]:
        if parent_id not in by_id:
            continue
        try:
            parent = Checkpoint(store, by_id[parent_id][1])
            writes = _writes_by_channel(parent.section("events") if "events" in parent.manifest.sections else [])
            seen = wanted & set(writes)
            if not seen:
                continue
            before, after = parent.section("memory"), Checkpoint(store, child_cid).section("memory")
        except CkptError:
            continue  # a damaged or pruned step shows nothing
        if type(before) is not dict or type(after) is not dict:
            continue
        for ch in seen:
            fits = set()
            for c in alive.get(ch, set(CANDIDATES)):
                try:
                    if _same(fold(c, before.get(ch, EMPTY), writes[ch]), after.get(ch, EMPTY)):
                        fits.add(c)
                except _UnknownError:
                    continue
            alive[ch] = fits
        if set(alive) >= wanted and all(len(v) <= 1 for v in alive.values()):
            break
    return {ch: [c for c in CANDIDATES if c in v] for ch, v in alive.items()}


def prepare(ck: Checkpoint, tail: Tail) -> Tail:
    """`tail` set up to apply its writes to the channels: the reducers learnt for the
    channels it writes go into its snapshot (``ext.langgraph.reducers``), where the
    ``langgraph:write`` reducer finds them. A tail of other events is returned as it is."""
    from ckptcli.history.replay import Tail

    if not tail.events or any(ev.kind != WRITE_KIND for ev in tail.events) or type(tail.snapshot) is not dict:
        return tail
    reducers = learn(ck, {str(ev.fields.get("channel")) for ev in tail.events})
    ext = dict(tail.snapshot.get("ext") or {})
    lg = dict(ext.get("langgraph") or {})
    lg["reducers"] = reducers
    ext["langgraph"] = lg
    return Tail(tail.id, {**tail.snapshot, "ext": ext}, tail.events, tail.base_seq)

"""How a LangGraph checkpoint is laid out as a ckpt checkpoint, both ways.

Used by the saver and, through it, by the SqliteSaver importer; imports nothing of
LangGraph. One LangGraph checkpoint (thread, namespace, checkpoint id) is one ckpt
checkpoint of subject ``agent:<thread>`` whose first parent is its LangGraph parent's, with
sections ``memory`` (channel values), ``plan``, ``tools``, ``events`` (pending writes) and
``ext:langgraph`` (the rest), and ``langgraph.*`` labels. docs/langgraph.md ("What is stored
where") has the table of sections and labels.

Invariant (exactness): what LangGraph reads back is what its serializer wrote, whatever the
value: ``msgpack`` values are stored as their `msgpack_view` (which gives the same bytes
back), ``null``/``bytes``/``bytearray`` as they are, any other type as its bytes with the
type recorded in ``ext:langgraph``."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import msgpack

from ckptcli._version import __version__
from ckptcli.errors import CkptError, CorruptError
from ckptcli.format import limits
from ckptcli.format.manifest import NAME_RE, Manifest, Subject
from ckptcli.format.msgpack_view import TAG_EXT, TAG_RAW, from_view, to_view
from ckptcli.format.values import OBJ_NODE, Encoder, ListTree, ObjectSink, array_header, map_header

if TYPE_CHECKING:
    from ckptcli.store.catalog import Summary

EXT_NAMESPACE = "langgraph"
EXT_SECTION = "ext:langgraph"
WRITE_KIND = "langgraph:write"
LAYOUT_FORMAT = 1  # the "v" of the ext:langgraph section

LABEL_CHECKPOINT = "langgraph.checkpoint"
LABEL_PARENT = "langgraph.parent"
LABEL_THREAD = "langgraph.thread"
LABEL_NS = "langgraph.ns"
LABEL_STEP = "langgraph.step"
LABEL_SOURCE = "langgraph.source"
LABEL_REV = "langgraph.rev"
LABEL_TTL = "langgraph.ttl"  # "<minutes>" or "<minutes> <strategy>"
TTL_KEY, TTL_STRATEGY_KEY = "thread_ttl", "thread_ttl_strategy"  # the run's config keys (LangGraph copies them into the metadata)
LABEL_FORK_OF = "fork.of"  # ckpt fork's label (formats/events.md): such a checkpoint is not one LangGraph wrote

PRODUCER = {"name": "ckptcli.langgraph", "version": __version__}
LAYOUT: dict[str, Any] = {
    "kind": "sections",
    "keys": ["memory", "plan", "tools", "events", "ext"],
    "ext": [EXT_NAMESPACE],
    "format": "langgraph",
}

#: (serializer type, bytes), as LangGraph's `dumps_typed` gives them
Typed = tuple[str, bytes]
MSGPACK = "msgpack"

_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def subject_for(thread_id: str) -> Subject:
    """The subject of a thread: ``agent:<thread id>`` when the id is a valid name, else a
    readable slug of it plus 8 hex digits of its hash (the id itself goes in a label)."""
    if NAME_RE.match(thread_id):
        return Subject("agent", thread_id)
    slug = _SLUG_BAD.sub("-", thread_id).strip("-._")[:100] or "thread"
    if not slug[0].isalnum():
        slug = "t" + slug
    return Subject("agent", f"{slug}-{hashlib.sha256(thread_id.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}")


# -- values ---------------------------------------------------------------------------
def typed_view(typed: Typed) -> Any:
    """What ckpt stores for a serialized value (see the module docstring)."""
    tag, data = typed
    if tag == MSGPACK:
        return to_view(data)
    if tag == "null":
        return None
    return bytes(data)


class Serialized(bytes):
    """A stored value already turned back into LangGraph's msgpack bytes by its reader
    (a long list read through the thread's item logs), taken by `view_typed` as it is."""


def view_typed(tag: str, view: Any, where: str) -> Typed:
    """The (type, bytes) a stored value stands for."""
    if type(view) is Serialized and tag == MSGPACK:
        return tag, bytes(view)
    try:
        if tag == MSGPACK:
            return tag, from_view(view)
        if tag == "null":
            return tag, b""
        if type(view) is bytes:
            return tag, view
    except (ValueError, TypeError, OverflowError) as exc:
        raise CorruptError(f"{where}: the stored value cannot be turned back into LangGraph's bytes ({exc})") from None
    raise CorruptError(f"{where}: a value of type {tag!r} is stored as {type(view).__name__}, not bytes")


def split_array(raw: bytes) -> list[bytes] | None:
    """Each item of a msgpack array as its own bytes (an array is its header and its
    items back to back), or None when `raw` is not an array written the shortest way."""
    if not raw or not (0x90 <= raw[0] <= 0x9F or raw[0] in (0xDC, 0xDD)):
        return None
    try:
        u = msgpack.Unpacker(None, raw=False, strict_map_key=False, max_buffer_size=len(raw))
        u.feed(raw)
        out = []
        for _ in range(u.read_array_header()):
            s = u.tell()
            u.skip()
            out.append(raw[s : u.tell()])
    except (ValueError, TypeError, msgpack.OutOfData, msgpack.FormatError, msgpack.StackError):
        return None
    if array_header(len(out)) + b"".join(out) != raw:
        return None
    return out


def split_map(raw: bytes) -> list[tuple[bytes, bytes]] | None:
    """Each (key, value) of a msgpack map as their own bytes, or None when `raw` is not a
    map written the shortest way."""
    if not raw or not (0x80 <= raw[0] <= 0x8F or raw[0] in (0xDE, 0xDF)):
        return None
    try:
        u = msgpack.Unpacker(None, raw=False, strict_map_key=False, max_buffer_size=len(raw))
        u.feed(raw)
        out = []
        for _ in range(u.read_map_header()):
            s = u.tell()
            u.skip()
            m = u.tell()
            u.skip()
            out.append((raw[s:m], raw[m : u.tell()]))
    except (ValueError, TypeError, msgpack.OutOfData, msgpack.FormatError, msgpack.StackError):
        return None
    if map_header(len(out)) + b"".join(k + v for k, v in out) != raw:
        return None
    return out


@dataclass
class Write:
    """One pending write: what a task wrote to a channel, not yet applied."""

    task_id: str
    channel: str
    typed: Typed
    task_path: str = ""
    idx: int = 0
    ts: int = 0

    def sort_key(self) -> tuple[str, str, int]:
        # langgraph.checkpoint.base.writes_sort_key: the order get_tuple returns them in
        return (self.task_path, self.task_id, self.idx)


# -- derived views: plan and tools -------------------------------------------------------
def message_fields(view: Any) -> tuple[str, dict[str, Any]] | None:
    """(class name, fields) of a LangChain message's view, or None for anything else."""
    if type(view) is not dict or view.get(TAG_EXT) != 5:
        return None
    data = view.get("data")
    if not (type(data) is list and len(data) >= 3 and type(data[0]) is str and data[0].startswith("langchain_core.messages")):
        return None
    if type(data[1]) is not str or type(data[2]) is not dict:
        return None
    return data[1], data[2]


def tool_record_evs(view: Any, item_ev: bytes, writer: SectionWriter) -> list[bytes]:
    """The tool-log records of one message, as item EVs: a call per tool call of an AI
    message; a result for a tool message, holding the whole message (the very object the
    memory section has, so it is stored once)."""
    found = message_fields(view)
    if found is None:
        return []
    name, fields = found
    out: list[bytes] = []
    calls = fields.get("tool_calls")
    if name.startswith("AIMessage") and type(calls) is list:
        for call in calls:
            if type(call) is dict:
                out.append(
                    writer.item_ev({"call_id": call.get("id"), "tool": call.get("name"), "args": call.get("args"), "status": "called"})
                )
    if name.startswith("ToolMessage") and type(fields.get("tool_call_id")) is str:
        status = fields.get("status") if type(fields.get("status")) is str else "success"
        record = [
            ("call_id", _PACK(fields["tool_call_id"])),
            ("tool", _PACK(fields.get("name"))),
            ("status", _PACK(status)),
            ("result", item_ev),
        ]
        out.append(writer.root(_map(record)))
    return out


def next_nodes(skeleton: Any, available: Iterable[str]) -> list[str]:
    """The nodes a checkpoint runs next: LangGraph triggers node N through channel
    ``branch:to:N`` (the input through ``__start__``) when that channel holds a value
    (`available`) of a newer version than the one N has seen."""
    if type(skeleton) is not dict:
        return []
    versions, seen = skeleton.get("channel_versions"), skeleton.get("versions_seen")
    if type(versions) is not dict or type(seen) is not dict:
        return []
    have = set(available)
    out = []
    for ch, ver in versions.items():
        if ch not in have:
            continue
        if ch == "__start__":
            node = ch
        elif type(ch) is str and ch.startswith("branch:to:"):
            node = ch[len("branch:to:") :]
        else:
            continue
        node_seen = seen.get(node)
        before = node_seen.get(ch) if type(node_seen) is dict else None
        if before is None or _newer(ver, before):
            out.append(node)
    return out


def _newer(a: Any, b: Any) -> bool:
    try:
        return bool(a > b)
    except TypeError:
        return str(a) > str(b)


def send_tasks(view: Any) -> list[dict[str, Any]]:
    """Plan entries for pending Send packets (the ``__pregel_tasks`` channel)."""
    out: list[dict[str, Any]] = []
    if type(view) is not list:
        return out
    for item in view:
        if type(item) is dict and item.get(TAG_EXT) is not None and type(item.get("data")) is list:
            data = item["data"]
            if len(data) >= 3 and data[1] == "Send" and type(data[2]) is list and data[2]:
                out.append({"node": data[2][0], "send": data[2][1] if len(data[2]) > 1 else None})
    return out


# -- writing ----------------------------------------------------------------------------
_PACK = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_UNSET: Any = object()


class SectionWriter:
    """Encodes the parts of LangGraph checkpoints into objects of `sink`.

    A value that is one thing (a message, a checkpoint's record, its pending writes) is
    written as one object, its parts inline, when it is small (`INLINE_LIMIT`): splitting
    it the way `Encoder` does (every part over 128 bytes its own object) buys no
    deduplication here, since these parts change together, and costs an object, an index
    row and a reference each. Where and how much a writer inlines is a writer parameter
    (formats/v1.md): readers read both alike. Larger values go through `Encoder`.
    """

    INLINE_LIMIT = 16 * 1024

    def __init__(self, sink: ObjectSink) -> None:
        self.enc = Encoder(sink)
        self.sink = sink
        self._known: dict[bytes, bytes] = {}

    def root(self, ev: bytes) -> bytes:
        """An EV as a list item, map value or section root: a REF when it is long."""
        if len(ev) > limits.INLINE_MAX:
            oid = hashlib.sha256(ev).digest()
            self.sink.put(oid, ev, OBJ_NODE)
            return _REF_HEAD + oid
        return ev

    def inline(self, view: Any) -> bytes | None:
        """The EV of a view with nothing split off, or None when it is too large (or
        not storable as it is). Views nest no deeper than readers allow (MAX_VIEW_DEPTH),
        and plain values made here (records, plans) are shallow."""
        try:
            ev = _PACK(view)
        except (TypeError, ValueError, OverflowError):
            return None
        if len(ev) > self.INLINE_LIMIT:
            return None
        return cast(bytes, ev)

    def item_ev(self, view: Any, where: str = "value") -> bytes:
        """The EV of a view as a list item or map value: one object (or inline) when it
        is small; else as `Encoder` splits it. A view ckpt cannot store as it is (a key
        over 4 KiB, nesting over 256 levels) is stored as its msgpack bytes."""
        ev = self.inline(view)
        if ev is not None:
            return self.root(ev)
        try:
            return self.enc.encode_root(view, where)
        except CkptError:
            return self.enc.encode_root({TAG_RAW: from_view(view)}, where)

    def value_ev(self, typed: Typed, where: str = "value") -> bytes:
        """The EV of a serialized value; the items of a list are items of their own, so
        that a message a task writes is the very object of that message in the channel
        (whose EV is remembered: `remember`)."""
        if typed[0] == MSGPACK:
            items = split_array(typed[1])
            if items is not None and len(items) <= limits.TREE_MIN_ITEMS:
                evs = [self._known.get(raw) or self.item_ev(to_view(raw), where) for raw in items]
                if sum(len(i) for i in evs) <= limits.TREE_MIN_BYTES:
                    return self.root(array_header(len(evs)) + b"".join(evs))
            elif items is not None:
                # a long list (a subgraph's whole message list): a chunk tree of its
                # items, as a list channel's value is, the items known from the channel
                # reused (encoding the whole list again took ~0.1 s at 600 messages)
                tree = ListTree()
                tree.extend([self._known.get(raw) or self.item_ev(to_view(raw), where) for raw in items])
                return self.root(tree.ev(self.sink))
        return self.item_ev(typed_view(typed), where)

    def typed_ev(self, typed: Typed, where: str = "value") -> bytes:
        """The EV of a value stored whole, as `item_ev` of its view; but a large map (a
        subgraph's input channel holds the parent's whole state) is made of its values'
        `value_ev`, so that a long message list in it is a chunk tree of the messages
        the channels have already (encoding it item by item again took ~0.1 s at 600
        messages)."""
        if typed[0] == MSGPACK and len(typed[1]) > self.INLINE_LIMIT:
            entries = split_map(typed[1])
            if entries is not None and len(entries) <= limits.TREE_MIN_ITEMS:
                out: list[bytes] = []
                for kraw, vraw in entries:
                    try:
                        key = msgpack.unpackb(kraw, raw=False)
                    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
                        key = None
                    if type(key) is not str or len(kraw) > limits.MAX_KEY_BYTES:
                        out = []
                        break
                    out.append(_PACK(key) + self.value_ev((MSGPACK, vraw), where))
                if out and sum(len(e) for e in out) <= limits.TREE_MIN_BYTES:
                    return self.root(map_header(len(out)) + b"".join(out))
        return self.item_ev(typed_view(typed), where)

    def forget(self) -> None:
        """Forget every remembered EV (objects are being removed from the store)."""
        self._known.clear()

    def remember(self, raw: bytes, ev: bytes) -> None:
        """The item EV of a value's bytes, for value_ev (the newest few thousand)."""
        known = self._known
        known[raw] = ev
        if len(known) > 4096:
            for old in list(known)[:1024]:
                del known[old]

    def events(self, writes: Iterable[Write]) -> bytes:
        """The EV of the events section: the pending writes, in LangGraph's order."""
        out = []
        ts = 0
        for seq, w in enumerate(sorted(writes, key=Write.sort_key), start=1):
            ts = max(ts, w.ts)
            fields: list[tuple[str, bytes]] = [
                ("seq", _PACK(seq)), ("ts", _PACK(ts)), ("kind", _PACK(WRITE_KIND)),
                ("task_id", _PACK(w.task_id)), ("channel", _PACK(w.channel)),
                ("value", self.value_ev(w.typed, f"write {w.channel}")),
            ]  # fmt: skip
            if w.typed[0] != MSGPACK:
                fields.append(("type", _PACK(w.typed[0])))
            if w.task_path:
                fields.append(("task_path", _PACK(w.task_path)))
            fields.append(("idx", _PACK(w.idx)))
            out.append(_map(fields))
        return self.root(array_header(len(out)) + b"".join(out))

    def sections(
        self,
        *,
        skeleton: Typed,
        metadata: Typed,
        channel_evs: Mapping[str, bytes],
        channel_types: Mapping[str, str],
        tools_ev: bytes | None = None,
        versions: Mapping[str, Any] | None = None,
        plan_extra: list[dict[str, Any]] | None = None,
        metadata_view: Any = _UNSET,
    ) -> dict[str, bytes]:
        """The sections of one checkpoint but its events (its pending writes, which may
        still come after it is put: see `events`). `channel_evs` are the values' item
        EVs (see item_ev), in channel order; `channel_types` the serializer types other
        than msgpack; `versions` the channel versions when the skeleton is not msgpack."""
        skel_view = typed_view(skeleton)
        md_view = typed_view(metadata) if metadata_view is _UNSET else metadata_view
        ext: dict[str, Any] = {"v": LAYOUT_FORMAT, "checkpoint": skel_view, "metadata": md_view}
        if skeleton[0] != MSGPACK:
            ext["checkpoint_type"] = skeleton[0]
            if versions is not None:
                ext["versions"] = dict(versions)
        if metadata[0] != MSGPACK:
            ext["metadata_type"] = metadata[0]
        if channel_types:
            ext["types"] = dict(channel_types)
        plan: list[Any] = [{"node": n} for n in next_nodes(skel_view, channel_evs)] + (plan_extra or [])
        return {
            "memory": self.root(_map([(ch, ev) for ch, ev in channel_evs.items()])),
            "plan": self.item_ev(plan, "plan"),
            "tools": tools_ev if tools_ev is not None else b"\x90",
            EXT_SECTION: self.item_ev(ext, EXT_SECTION),
        }


_REF_HEAD = b"\xc7\x20\x02"  # ext 8, 32 bytes, type 2 (REF): formats/v1.md "Ext types"


def _map(fields: list[tuple[str, bytes]]) -> bytes:
    return map_header(len(fields)) + b"".join(_PACK(k) + v for k, v in fields)


def labels_for(thread_id: str, ns: str, checkpoint_id: str, parent_id: str | None, metadata_view: Any, rev: int = 1) -> dict[str, str]:
    labels = {LABEL_CHECKPOINT: checkpoint_id}
    if parent_id:
        labels[LABEL_PARENT] = parent_id
    if subject_for(thread_id).name != thread_id:
        labels[LABEL_THREAD] = thread_id
    if ns:
        labels[LABEL_NS] = ns
    if type(metadata_view) is dict:
        step, source = metadata_view.get("step"), metadata_view.get("source")
        if type(step) is int:
            labels[LABEL_STEP] = str(step)
        if type(source) is str and len(source) <= 64:
            labels[LABEL_SOURCE] = source
        ttl, strategy = metadata_view.get(TTL_KEY), metadata_view.get(TTL_STRATEGY_KEY)
        if isinstance(ttl, (int, float)) and type(ttl) is not bool and 0 <= ttl < float("inf"):
            labels[LABEL_TTL] = f"{ttl:g}" + (f" {strategy}" if strategy in ("delete", "keep_latest") else "")
    if rev > 1:
        labels[LABEL_REV] = str(rev)
    return labels


def relabel(labels: Mapping[str, str], thread_id: str, rev: int = 1) -> dict[str, str]:
    """The labels of a checkpoint copied to thread `thread_id` as revision `rev`
    (`CkptSaver.copy_thread`): its own, but the ones that name its thread and revision.
    Nothing else in a LangGraph checkpoint names its thread (LangGraph keeps the thread
    id out of the metadata), so the copy's sections are the source's, unchanged."""
    out = {k: v for k, v in labels.items() if k not in (LABEL_THREAD, LABEL_REV)}
    if subject_for(thread_id).name != thread_id:
        out[LABEL_THREAD] = thread_id
    if rev > 1:
        out[LABEL_REV] = str(rev)
    return out


def manifest_for(
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    parent_id: str | None,
    sections: dict[str, bytes],
    *,
    metadata_view: Any,
    parents: list[bytes],
    created_ns: int,
    rev: int = 1,
    format_version: int = limits.FORMAT_VERSION,
) -> Manifest:
    return Manifest(
        subject=subject_for(thread_id),
        sections=sections,
        layout=dict(LAYOUT),
        parents=parents[: limits.MAX_PARENTS],
        created_ns=created_ns,
        producer=dict(PRODUCER),
        labels=labels_for(thread_id, ns, checkpoint_id, parent_id, metadata_view, rev),
        deps={"ckptcli": __version__},
        format_version=format_version,
    )


def thread_ttl(labels: Mapping[str, str]) -> tuple[float, str | None] | None:
    """A checkpoint's own thread TTL: (minutes, strategy or None for the sweeper's), or
    None when it has none (or a label that is not one). 0 minutes: the thread never expires."""
    words = labels.get(LABEL_TTL, "").split()
    if not 1 <= len(words) <= 2 or (len(words) == 2 and words[1] not in ("delete", "keep_latest")):
        return None
    try:
        minutes = float(words[0])
    except ValueError:
        return None
    if not 0 <= minutes < float("inf"):
        return None
    return minutes, words[1] if len(words) == 2 else None


# -- reading ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Key:
    """Where a LangGraph checkpoint is, read from a manifest's labels alone."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    rev: int


def key_of(subject: Subject, labels: Mapping[str, str]) -> Key | None:
    """The LangGraph checkpoint a manifest holds, or None (not a LangGraph checkpoint,
    or a `ckpt fork` of one, which LangGraph did not write)."""
    cid = labels.get(LABEL_CHECKPOINT)
    if cid is None or LABEL_FORK_OF in labels or subject.kind != "agent":
        return None
    rev_text = labels.get(LABEL_REV, "1")
    return Key(
        labels.get(LABEL_THREAD, subject.name),
        labels.get(LABEL_NS, ""),
        cid,
        labels.get(LABEL_PARENT),
        int(rev_text) if rev_text.isdecimal() else 1,
    )


def key_of_row(row: list[Any]) -> tuple[Key, Summary] | None:
    """The LangGraph checkpoint a catalog row (`ckptcli.store.catalog`) describes, with
    the row's summary; None for a row of anything else, or one that does not decode (the
    manifest is then verify's business)."""
    from ckptcli.store.catalog import Summary

    if type(row[5]) is not dict or LABEL_CHECKPOINT not in row[5]:
        return None
    try:
        _cid, summary = Summary.from_row(row)
    except (ValueError, TypeError, CkptError):
        return None
    k = key_of(summary.subject, summary.labels)
    return None if k is None else (k, summary)


@dataclass
class Stored:
    """A LangGraph checkpoint read back from its ckpt checkpoint (values not decoded)."""

    skeleton: Typed
    metadata: Typed
    versions: dict[str, Any]
    channel_types: dict[str, str]
    writes: list[Write]


def read_ext(ext: Any, events: Any, where: str) -> Stored:
    """Decode the ext:langgraph and events sections of one checkpoint."""
    if type(ext) is not dict or type(ext.get("v")) is not int:
        raise CorruptError(f"{where}: section {EXT_SECTION} is not a LangGraph checkpoint record")
    if ext["v"] > LAYOUT_FORMAT:
        from ckptcli.errors import UnsupportedVersionError

        raise UnsupportedVersionError(
            f"{where}: written by a newer ckpt (LangGraph layout {ext['v']}, this ckpt reads {LAYOUT_FORMAT})", hint="upgrade ckpt"
        )
    skel_tag = ext.get("checkpoint_type", MSGPACK)
    md_tag = ext.get("metadata_type", MSGPACK)
    skeleton = view_typed(skel_tag, ext.get("checkpoint"), f"{where} checkpoint")
    metadata = view_typed(md_tag, ext.get("metadata"), f"{where} metadata")
    versions = ext.get("versions")
    if type(versions) is not dict:
        skel_view = ext.get("checkpoint")
        versions = skel_view.get("channel_versions") if type(skel_view) is dict else None
        if type(versions) is not dict:
            versions = {}
    types = ext.get("types", {})
    if type(types) is not dict:
        raise CorruptError(f"{where}: malformed value types in {EXT_SECTION}")
    writes = []
    # pending writes applied by a replay (ckpt fork keeps them in the snapshot), then the tail
    for ev in [*(ext.get("writes") or []), *(events if type(events) is list else [])]:
        if type(ev) is not dict or ev.get("kind", WRITE_KIND) != WRITE_KIND:
            continue
        tag = ev.get("type", MSGPACK)
        task_id, channel = ev.get("task_id"), ev.get("channel")
        if type(task_id) is not str or type(channel) is not str or type(tag) is not str:
            raise CorruptError(f"{where}: malformed pending write")
        idx = ev.get("idx", 0)
        ts = ev.get("ts", 0)
        writes.append(
            Write(
                task_id,
                channel,
                view_typed(tag, ev.get("value"), f"{where} write"),
                str(ev.get("task_path", "")),
                idx if type(idx) is int else 0,
                ts if type(ts) is int else 0,
            )
        )
    return Stored(skeleton, metadata, dict(versions), {str(k): str(v) for k, v in types.items()}, writes)

"""How the LangGraph saver turns channel values into blobs (`ValueCodec`): a list value
(messages) is stored item by item, each item serialized once and the items a put shares
with its parent's value recognised by identity (checked by a fingerprint), so a put costs
O(new items); any other value, or any value of another serializer, is stored whole."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, cast

import ormsgpack
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.layout import MSGPACK, SectionWriter
from ckptcli.adapters.langgraph.resident import EMPTY, MISSING, Blob, ItemLog, Staging, copy_log
from ckptcli.errors import CorruptError
from ckptcli.format.msgpack_view import to_view
from ckptcli.format.values import ListTree, array_header

__all__ = ["ValueCodec", "fingerprint", "item_encoder"]


def item_encoder(serde: SerializerProtocol) -> Callable[[Any], bytes] | None:
    """JsonPlusSerializer's msgpack encoder of one value, when `serde` is exactly that
    serializer and a list's bytes are its header and its items' (checked here): then a
    list value can be stored item by item. None otherwise (values are stored whole)."""
    if type(serde) is not JsonPlusSerializer:
        return None
    try:
        from langgraph.checkpoint.serde.jsonplus import _msgpack_enc as enc
    except ImportError:  # pragma: no cover - another langgraph-checkpoint: the slow path
        return None
    sample = [1, "two", {"three": [3.0]}, None]
    try:
        if serde.dumps_typed(sample) != (MSGPACK, array_header(len(sample)) + b"".join(enc(x) for x in sample)):
            return None
    except Exception:  # noqa: BLE001 - any surprise: the slow path
        return None
    return cast(Callable[[Any], bytes], enc)


try:
    from langgraph.checkpoint.serde.jsonplus import _msgpack_enc
except ImportError:  # pragma: no cover - another langgraph-checkpoint: no item-wise lists, no fingerprints
    _msgpack_enc = None  # type: ignore[assignment]  # then _fp_default is never called


def _fp_default(obj: Any) -> Any:
    """How `fingerprint` packs what msgpack has no type for: a pydantic model (a
    LangChain message) by its fields as they are now, anything else by the serializer's
    own bytes."""
    extra = getattr(obj, "__pydantic_extra__", MISSING)
    if extra is not MISSING:
        return [type(obj).__name__, obj.__dict__, extra]
    assert _msgpack_enc is not None  # fingerprints are taken only when lists are stored item by item
    return _msgpack_enc(obj)


def fingerprint(value: list[Any]) -> bytes | None:
    """The items of a list packed as they are now (without the list's header), deep: an
    item edited in place packs differently. About 1 us a message, 0.1 us a small dict
    (natively packed, the serializer's slower hooks skipped where the fields say it
    all); None for a value it cannot pack (then the items' bytes are compared)."""
    try:
        full = ormsgpack.packb(value, default=_fp_default, option=ormsgpack.OPT_NON_STR_KEYS)
    except (TypeError, ValueError, OverflowError, ormsgpack.MsgpackEncodeError):
        return None
    return full[len(array_header(len(value))) :]


class ValueCodec:
    """Channel values to blobs and back to journal specs, and blobs to their EVs (the
    objects they are staged as). `item_memo`: list item bytes -> them, their EV and tool
    records (the newest 4,096, as SectionWriter.remember keeps)."""

    __slots__ = ("check_items", "enc", "fast", "item_memo", "serde", "staging", "trust_identity", "writer")

    def __init__(self, serde: SerializerProtocol, trust_identity: bool | str, writer: SectionWriter, staging: Staging) -> None:
        self.serde = serde
        self.trust_identity = bool(trust_identity)
        self.check_items = trust_identity is True  # identity confirmed by a fingerprint
        self.writer = writer
        self.staging = staging
        self.item_memo: dict[bytes, tuple[bytes, bytes, tuple[bytes, ...]]] = {}
        self.enc = item_encoder(serde)
        self.fast = self.enc is not None

    def extend_log(self, log: ItemLog, raws: list[bytes], objs: list[Any]) -> None:
        writer = self.writer
        memo = self.item_memo
        for raw, obj in zip(raws, objs, strict=True):
            known = memo.get(raw)
            if known is None:  # (an item seen lately, e.g. a subgraph's copy of its parent's messages, is not converted again)
                view = to_view(raw)
                ev = writer.item_ev(view)
                known = memo[raw] = (raw, ev, tuple(layout.tool_record_evs(view, ev, writer)))
                if len(memo) > 4096:
                    for old in list(memo)[:1024]:
                        del memo[old]
            raw, ev, tools = known  # the same bytes object for the same item in every log
            writer.remember(raw, ev)
            log.raw.append(raw)
            log.objs.append(obj)
            log.evs.append(ev)
            log.tree.append(ev)
            log.tools.extend(tools)
            log.tool_count.append(len(log.tools))
        log.fp = None  # the caller sets it again when it has the objects' fingerprint

    def list_blob(self, value: list[Any], base: Blob | None) -> tuple[Blob, list[Any]]:
        """A list value as items of a log: the base's log, extended, when the value is
        the base's items and then new ones (the common case: only the new items are
        serialized); a new log otherwise. Returns the blob and its journal spec.

        With trust_identity, the base's items are recognised by identity, and then
        checked against the fingerprint of the objects the log last took (an item a
        node edited in place has the same identity but another fingerprint)."""
        enc = self.enc
        assert enc is not None
        log = base.log if base is not None else None
        fp: bytes | None = None
        if log is not None and base is not None and len(value) >= base.n:
            n = base.n
            same = bytewise = False
            if self.trust_identity and all(map(operator.is_, log.objs[:n], value[:n])):
                if not self.check_items:  # "unchecked": identity alone
                    same = True
                else:
                    fp = fingerprint(value)
                    if fp is not None and log.fp is not None and n == len(log):
                        same = fp.startswith(log.fp)  # unchanged items pack to the same bytes, first
                    else:  # no fingerprint to compare: the items' bytes are
                        same = all(enc(v) == r for v, r in zip(value[:n], log.raw[:n], strict=True))
            elif not self.trust_identity or any(o is None for o in log.objs[:n]):
                # the objects behind the base are not known (read from the store, or let go of):
                # its items' bytes tell
                same = all(enc(v) == r for v, r in zip(value[:n], log.raw[:n], strict=True))
                bytewise = same
            if same:
                new = value[n:]
                raws = [enc(v) for v in new]
                if n != len(log):  # the log went on along another branch: a copy of its prefix
                    log = copy_log(log, n)
                self.extend_log(log, raws, list(new))
                if bytewise:  # the items are these objects now: the next put tells them by identity
                    log.objs[:n] = value[:n]
                    fp = fingerprint(value) if self.check_items else None
                log.fp = fp
                return Blob(log=log, n=len(log)), ["l", n, raws]
        # not the base and more: every item is serialized (an item edited in place may
        # still be the object the base has)
        if log is not None and base is not None and self.trust_identity and not self.check_items:
            raws = [log.raw[i] if i < base.n and log.objs[i] is v else enc(v) for i, v in enumerate(value)]
        else:
            raws = [enc(v) for v in value]
        fresh = ItemLog()
        self.extend_log(fresh, raws, list(value))
        fresh.fp = fingerprint(value) if self.check_items else None
        return Blob(log=fresh, n=len(fresh)), ["l", 0, raws]

    def blob_from_value(self, value: Any, base: Blob | None) -> tuple[Blob, list[Any]]:
        if value is MISSING:
            return EMPTY, ["e"]
        if self.fast and type(value) is list:
            try:
                return self.list_blob(value, base)
            except Exception:  # noqa: BLE001 - an item the fast path cannot take: the serializer decides, below
                pass
        typed = self.serde.dumps_typed(value)
        return Blob(typed=typed), ["t", typed[0], typed[1]]

    def blob_from_spec(self, spec: list[Any], base: Blob | None, where: str) -> Blob:
        kind = spec[0]
        if kind == "e":
            return EMPTY
        if kind == "t":
            return Blob(typed=(spec[1], spec[2]))
        keep, raws = spec[1], list(spec[2])
        if keep:
            if base is None or base.log is None or base.n < keep:
                raise CorruptError(
                    f"{where}: a journal record continues a list value that is not there", hint="the journal does not belong to this store"
                )
            log = base.log if keep == len(base.log) else copy_log(base.log, keep)
        else:
            log = ItemLog()
        if not self.fast:  # another serializer's journal: the items are whole values
            return Blob(typed=(MSGPACK, array_header(keep + len(raws)) + b"".join([*log.raw[:keep], *raws])))
        self.extend_log(log, raws, [None] * len(raws))
        return Blob(log=log, n=len(log))

    def blob_ev(self, b: Blob) -> bytes:
        if b.ev is None:
            if b.log is not None:
                log = b.log
                if b.n == len(log):
                    b.ev, b.tools_ev = log.tree.ev(self.staging), log.tools.ev(self.staging)
                else:  # a prefix of a log that grew since: its own trees
                    tree, tools = ListTree(), ListTree()
                    tree.extend(log.evs[: b.n])
                    tools.extend(log.tools.items[: log.tool_count[b.n - 1] if b.n else 0])
                    b.ev, b.tools_ev = tree.ev(self.staging), tools.ev(self.staging)
            else:
                assert b.typed is not None
                b.ev = self.writer.typed_ev(b.typed)
        return b.ev

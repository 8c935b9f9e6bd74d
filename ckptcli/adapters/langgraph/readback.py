"""Reading committed LangGraph checkpoints back from the store into the saver's memory
(`Readback`): a checkpoint's record (`load`) and its channel values (`load_blobs`). A list
value becomes items of a log the thread already has where it can, so reading a whole
history decodes O(new items) per checkpoint (docs/langgraph.md, "Memory")."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any

from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.layout import MSGPACK, SectionWriter
from ckptcli.adapters.langgraph.read import ListReader
from ckptcli.adapters.langgraph.resident import EMPTY, Blob, Entry, ItemLog, copy_log
from ckptcli.errors import CorruptError
from ckptcli.format.msgpack_view import from_view
from ckptcli.format.values import EXT_LIST, EXT_MAP, EXT_REF, Budget, Decoder, Ext, unpack_ev
from ckptcli.store.repository import Store

__all__ = ["Readback"]


class Readback:
    """Reads committed checkpoints back into entries and the saver's blobs (`blobs`, the
    saver's own map: (thread, ns, channel, version) -> blob). The caller holds the
    saver's lock."""

    def __init__(self, store: Store, writer: SectionWriter, blobs: dict[tuple[str, str, str, Any], Blob], fast: bool) -> None:
        self.store = store
        self.writer = writer
        self.blobs = blobs
        self.fast = fast  # list values are stored item by item (`ValueCodec.fast`)
        #: the item logs of each (thread, channel) read or made lately (a subgraph's list
        #: is a prefix of its parent's), weakly: a log lives as long as a blob has it, or
        #: while it is among the few used last (a pending write's list is read before any
        #: blob holds its log); and the list nodes read lately
        self.logs: dict[tuple[str, str], list[weakref.ref[ItemLog]]] = {}
        self.logs_swept = 0
        self.logs_pinned: OrderedDict[tuple[str, str], ItemLog] = OrderedDict()
        self.lists = ListReader()

    def load(self, e: Entry) -> None:
        """Read a committed checkpoint's record (not its values) from the store."""
        if e.loaded:
            return
        from ckptcli.checkpoint import Checkpoint

        assert e.committed is not None
        ck = Checkpoint(self.store, e.committed)
        where = f"checkpoint {ck.hex[:12]}"
        events_ev = ck.manifest.sections.get("events")
        events = self.read_events(e, events_ev, f"{where} section events") if events_ev is not None else []
        stored = layout.read_ext(ck.section(layout.EXT_SECTION), events, where)
        e.skeleton, e.metadata, e.versions, e.types = stored.skeleton, stored.metadata, stored.versions, stored.channel_types
        e.writes = {(w.task_id, w.idx): w for w in stored.writes}
        e.loaded = True

    def read_events(self, e: Entry, ev: bytes, where: str) -> Any:
        """The events section (pending writes) of a committed checkpoint, as
        `Checkpoint.section` decodes it, but a write of a long list (a subgraph's whole
        message list) is read as `load_blobs` reads a list channel: its item EVs from
        the cached tree nodes, and only the items no log of the thread holds decoded
        (`layout.Serialized`). Decoding each such write whole took ~0.7 s of a
        1,000-checkpoint history."""
        dec = Decoder(self.store, budget=Budget())
        raw = self.lists.deref(dec, unpack_ev(ev, where), where)
        if type(raw) is Ext and raw.code == EXT_LIST:
            items: list[Any] = list(dec.tree_items(raw.oid, EXT_LIST))
        elif type(raw) is list:
            items = raw
        else:
            return dec.walk(raw)  # not a list of events: read_ext says what is wrong
        out: list[Any] = []
        for item in items:
            item = self.lists.deref(dec, item, where)
            if type(item) is Ext and item.code == EXT_MAP:
                pairs = list(dec.tree_items(item.oid, EXT_MAP))
                item = dict(pairs)
                if len(item) != len(pairs):
                    raise CorruptError(f"{where}: an event has a key twice")
            value = item.get("value") if type(item) is dict else None
            channel = item.get("channel") if type(item) is dict else None
            if (
                type(value) is not Ext
                or value.code not in (EXT_LIST, EXT_REF)
                or type(channel) is not str
                or item.get("type", MSGPACK) != MSGPACK
            ):
                out.append(dec.walk(item, 1, 0))
                continue
            keys = self.lists.keys(dec, value, f"{where} write {channel}")
            if keys is None:  # a reference to something else than a list
                out.append(dec.walk(item, 1, 0))
                continue
            event = dec.walk({k: v for k, v in item.items() if k != "value"}, 1, 0)
            blob = self.log_blob((e.key[0], channel), keys, dec, f"{where} write {channel}")
            event["value"] = layout.Serialized(blob.to_typed()[1])
            out.append(event)
        return out

    def load_blobs(self, e: Entry) -> None:
        """Bring a committed checkpoint's channel values into memory, as blobs. A list
        value becomes items of a log the thread already has when it can (its items'
        EVs are read from the list's tree, whose shared nodes are cached): only the
        items no log holds are decoded, so reading a whole history costs O(new items)
        per checkpoint, not O(items)."""
        if e.blobs_loaded or e.committed is None:
            return
        from ckptcli.checkpoint import Checkpoint

        self.load(e)
        ck = Checkpoint(self.store, e.committed)
        where = f"checkpoint {ck.hex[:12]}"
        dec = Decoder(self.store, budget=Budget())
        if "memory" not in ck.manifest.sections:
            raise CorruptError(f"{where}: it has no memory section")
        memory = self.lists.channels(dec, ck.manifest.sections["memory"], f"{where} section memory")
        types = e.types if e.types is not None else layout.read_ext(ck.section(layout.EXT_SECTION), [], where).channel_types
        thread, ns, _cid = e.key
        for ch, ver in e.versions.items():
            bkey = (thread, ns, ch, ver)
            if bkey in self.blobs:
                continue
            if ch not in memory:
                self.blobs[bkey] = EMPTY
                continue
            tag = types.get(ch, MSGPACK)
            keys = self.lists.keys(dec, memory[ch], f"{where} channel {ch}") if tag == MSGPACK and self.fast else None
            if keys is not None:
                self.blobs[bkey] = self.log_blob((thread, ch), keys, dec, f"{where} channel {ch}")
            else:
                view = dec.walk(memory[ch], 1, 0)
                self.blobs[bkey] = Blob(typed=layout.view_typed(tag, view, f"{where} channel {ch}"))
        e.blobs_loaded = True

    def log_blob(self, lkey: tuple[str, str], keys: list[bytes], dec: Decoder, where: str) -> Blob:
        """A list value read back, as items [0, n) of a log: a log of the same channel
        that starts with these items (a later checkpoint's), or one that they extend
        (an earlier one's, extended in place: a log only grows), or a copy of the longest
        common prefix; only the items after it are decoded."""
        n = len(keys)
        refs = self.logs.setdefault(lkey, [])
        logs = [log for log in (r() for r in refs) if log is not None]
        best: ItemLog | None = None
        common = 0
        for log in logs:
            size = len(log)
            if size >= n and log.evs[:n] == keys:
                self.remember_log(lkey, logs, log)
                return Blob(log=log, n=n)
            if size <= n and log.evs == keys[:size]:
                m = size
            else:  # the longest common prefix, by bisection (slices compare in C)
                lo, hi = 0, min(size, n)
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if log.evs[:mid] == keys[:mid]:
                        lo = mid
                    else:
                        hi = mid - 1
                m = lo
            if m > common or best is None:
                best, common = log, m
        if best is None or common == 0:
            log = ItemLog()
        elif common == len(best):
            log = best  # extended in place: blobs of it hold their first n items only
        else:
            log = copy_log(best, common)
        raws, views = [], []
        for key in keys[len(log) :]:
            view = dec.walk(unpack_ev(key, where), 2, 0)
            try:
                raws.append(from_view(view))
            except (ValueError, TypeError, OverflowError) as exc:
                raise CorruptError(f"{where}: an item cannot be turned back into LangGraph's bytes ({exc})") from None
            views.append(view)
        self.extend_log_read(log, raws, views, keys[len(log) :])
        self.remember_log(lkey, logs, log)
        return Blob(log=log, n=n)

    def remember_log(self, lkey: tuple[str, str], logs: list[ItemLog], log: ItemLog) -> None:
        """`log` first among the few logs kept for reading `lkey` back (dead ones swept
        now and then: the map does not grow with every thread ever read)."""
        self.logs[lkey] = [weakref.ref(x) for x in [log, *(x for x in logs if x is not log)][:4]]
        self.logs_pinned[lkey] = log
        self.logs_pinned.move_to_end(lkey)
        if len(self.logs_pinned) > 8:
            self.logs_pinned.popitem(last=False)
        if len(self.logs) > 2 * self.logs_swept + 64:
            self.logs = {k: v for k, v in self.logs.items() if any(r() is not None for r in v)}
            self.logs_swept = len(self.logs)

    def extend_log_read(self, log: ItemLog, raws: list[bytes], views: list[Any], evs: list[bytes]) -> None:
        """`ValueCodec.extend_log` for items read from the store: their views and EVs are known."""
        writer = self.writer
        for raw, view, ev in zip(raws, views, evs, strict=True):
            writer.remember(raw, ev)
            log.raw.append(raw)
            log.objs.append(None)
            log.evs.append(ev)
            log.tree.append(ev)
            log.tools.extend(layout.tool_record_evs(view, ev, writer))
            log.tool_count.append(len(log.tools))
        log.fp = None

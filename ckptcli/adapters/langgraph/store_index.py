"""What the LangGraph saver knows of the store's checkpoints (`StoreIndex`): every
manifest it has seen and, for the LangGraph ones, their thread, revision, creation time
and key, kept up to date from the manifests' names without reading the catalog again."""

from __future__ import annotations

import hashlib

from ckptcli.adapters.langgraph import layout
from ckptcli.adapters.langgraph.layout import Key
from ckptcli.errors import CkptError, CorruptError, NotFoundError
from ckptcli.format.manifest import Manifest
from ckptcli.store.repository import Store

__all__ = ["Row", "StoreIndex", "StoreKeys", "make_row"]

#: (thread, namespace, checkpoint id) -> [(rev, created, manifest id, key)]
StoreKeys = dict[tuple[str, str, str], list[tuple[int, int, bytes, Key]]]
#: a checkpoint's row in `StoreIndex.rows`: (rev, created, (thread, namespace, id, parent id, rev)), plain
#: tuples of str and int, which Python's garbage collector stops tracking once it has seen them (a `Key`
#: it walks on every full collection of the host process: one per checkpoint of the store)
Row = tuple[int, int, tuple[str, str, str, str | None, int]]


def make_row(rev: int, created: int, k: Key) -> Row:
    """The row of checkpoint `k` (`Row`)."""
    return rev, created, (k.thread_id, k.ns, k.checkpoint_id, k.parent_id, k.rev)


class StoreIndex:
    """`known`: every manifest of the store seen -> its LangGraph thread (None: not a
    LangGraph checkpoint; None as a whole until the catalog was first read); `rows`:
    each thread's rows (`Row`: rev, created, key) by manifest id."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.known: dict[bytes, str | None] | None = None
        self.rows: dict[str, dict[bytes, Row]] = {}

    def add(self, mid: bytes, rev: int, created: int, k: Key) -> None:
        """Note a checkpoint this saver wrote (without reading it back), once `known` is there."""
        if self.known is not None:
            self.known[mid] = k.thread_id
            self.rows.setdefault(k.thread_id, {})[mid] = make_row(rev, created, k)

    def keys(self, thread: str | None = None) -> dict[tuple[str, str, str], list[tuple[int, int, bytes, Key]]]:
        """Every LangGraph checkpoint in the store (of `thread`): key -> [(rev, created, manifest id, key)].

        All threads: from the store's catalog (brought up to date), which also starts
        `_known`, what this saver knows of every manifest. One thread, once that is there
        (a thread read again after another process wrote it): the manifests' names, and
        only the manifests new since this saver last looked; never the whole catalog."""
        if thread is not None and self.known is not None:
            return self.thread_keys(thread)
        from ckptcli.store import catalog

        out: dict[tuple[str, str, str], list[tuple[int, int, bytes, Key]]] = {}
        subject = layout.subject_for(thread) if thread is not None else None
        known: dict[bytes, str | None] = {}
        rows: dict[str, dict[bytes, Row]] = {}
        for cid, row in catalog.rows(self.store).items():
            known[cid] = None
            if subject is not None and (row[1], row[2]) != (subject.kind, subject.name):
                continue
            found = layout.key_of_row(row)
            if found is None:
                continue
            k, summary = found
            known[cid] = k.thread_id
            rows.setdefault(k.thread_id, {})[cid] = make_row(k.rev, summary.created_ns, k)
            if thread is None or k.thread_id == thread:
                out.setdefault((k.thread_id, k.ns, k.checkpoint_id), []).append((k.rev, summary.created_ns, cid, k))
        if thread is None:
            self.known, self.rows = known, rows
        return out

    def thread_keys(self, thread: str) -> dict[tuple[str, str, str], list[tuple[int, int, bytes, Key]]]:
        """`_store_keys(thread)` from `_known`, brought up to date with the manifests'
        names: those gone are forgotten, those new are read (each once: the commits of
        other processes and of this saver since it last looked)."""
        known, rows = self.known, self.rows
        assert known is not None
        names = set(self.store.manifest_ids())
        for cid in known.keys() - names:
            t = known.pop(cid)
            by = rows.get(t) if t is not None else None
            if by is not None:
                by.pop(cid, None)
                if not by:
                    del rows[t]  # type: ignore[arg-type]
        damaged: list[tuple[bytes, str]] = []
        for cid in names - known.keys():
            name = f"manifests/{cid.hex()}"
            try:
                data = self.store.backend.read(name)
                if hashlib.sha256(data).digest() != cid:
                    raise CorruptError(f"{name}: content does not match its name (the manifest is damaged)")
                m = Manifest.decode(data, name)
            except NotFoundError:
                continue  # removed since the listing
            except CkptError as exc:
                damaged.append((cid, exc.message))  # left out, and said so (read again next time, as the catalog does)
                continue
            k = layout.key_of(m.subject, m.labels)
            known[cid] = k.thread_id if k is not None else None
            if k is not None:
                rows.setdefault(k.thread_id, {})[cid] = make_row(k.rev, m.created_ns, k)
        if damaged:
            more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
            self.store.warn(f"checkpoint {damaged[0][0].hex()[:12]}{more} is left out: {damaged[0][1]}; run `ckpt verify`")
        out: dict[tuple[str, str, str], list[tuple[int, int, bytes, Key]]] = {}
        for cid, (rev, created, kt) in rows.get(thread, {}).items():
            out.setdefault(kt[:3], []).append((rev, created, cid, Key(*kt)))
        return out

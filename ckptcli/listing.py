"""Listing checkpoints: what `ckpt ls` needs, and nothing heavier (no value codec, no
blob code), so that listing 10,000 checkpoints starts fast. Re-exported by ckptcli.api."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ckptcli.errors import CkptError, InvalidInputError
from ckptcli.format.manifest import LABEL_KEY_RE, Manifest, Subject
from ckptcli.store import catalog
from ckptcli.store.catalog import Summary
from ckptcli.store.repository import Store

# labels a program writes for itself (the recorder, fork, LangGraph, ckpt): `ckpt ls`
# leaves them out of its default view (--columns all-labels, --json show them)
MACHINE_LABEL_PREFIXES = ("ckpt.", "langgraph.", "recorder.", "events.", "fork.")


def is_machine_label(key: str) -> bool:
    return key.startswith(MACHINE_LABEL_PREFIXES)


def refs_by_target(store: Store) -> dict[bytes, list[str]]:
    """Checkpoint id -> the refs that name it ("latest/agent/bot", "tags/good", ...)."""
    out: dict[bytes, list[str]] = {}
    for name, target in sorted(store.refs().items()):
        out.setdefault(target, []).append(name)
    return out


def info_dict(cid: bytes, m: Manifest | Summary) -> dict[str, Any]:
    return {
        "id": cid.hex(),
        "created": format_time(m.created_ns),
        "created_ns": m.created_ns,
        "subject": str(m.subject),
        "parents": [p.hex() for p in m.parents],
        "labels": dict(m.labels),
        "message": m.message,
        "producer": dict(m.producer),
        "format": m.format_version,
        "schema_version": m.schema_version,
        "config_hash": m.config_hash,
        "deps": dict(m.deps),
        "stats": dict(m.stats),
    }


def format_time(ns: int) -> str:
    secs, rem = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{rem // 1000:06d}Z"


@dataclass
class ListFilter:
    subject: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    since_ns: int | None = None
    until_ns: int | None = None
    limit: int | None = None


def list_checkpoints(store: Store, flt: ListFilter | None = None) -> list[tuple[bytes, Summary]]:
    """Checkpoints newest first, filtered; summaries come from the store's catalog."""
    f = flt or ListFilter()
    subj = Subject.parse(f.subject) if f.subject else None
    # filter and sort the catalog's raw rows (see catalog.Summary.row), build objects last
    chosen = []
    # one subject: its own rows (catalog.subject_rows), not a pass over every checkpoint
    found = catalog.subject_rows(store, subj) if subj else catalog.rows(store).values()
    for row in found:
        if subj and (row[1] != subj.kind or row[2] != subj.name):
            continue
        if f.labels and any(row[5].get(k) != v for k, v in f.labels.items()):
            continue
        if f.since_ns is not None and row[4] < f.since_ns:
            continue
        if f.until_ns is not None and row[4] > f.until_ns:
            continue
        chosen.append(row)
    chosen.sort(key=lambda r: (r[4], r[0]), reverse=True)
    if f.limit:
        chosen = chosen[: f.limit]
    out = []
    for row in chosen:
        try:
            out.append(Summary.from_row(row))
        except (ValueError, TypeError, CkptError):
            # a bad catalog row: the manifest decides (a damaged one is verify's business)
            try:
                out.append((row[0], Summary.of(store.manifest(row[0]))))
            except CkptError:
                continue
    return out


def parse_labels(items: list[str] | dict[str, str] | None) -> dict[str, str]:
    if not items:
        return {}
    pairs = items.items() if isinstance(items, dict) else (_split_kv(i, "label") for i in items)
    out = {}
    for k, v in pairs:
        if not LABEL_KEY_RE.match(k):
            raise InvalidInputError(f"label key {k!r} is not valid", hint="use letters, digits, '.', '_', '/', '-'")
        out[k] = str(v)
    return out


def _split_kv(text: str, what: str) -> tuple[str, str]:
    k, sep, v = text.partition("=")
    if not sep or not k:
        raise InvalidInputError(f"{what} {text!r} is not KEY=VALUE")
    return k, v

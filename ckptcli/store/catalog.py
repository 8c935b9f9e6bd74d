"""The catalog: a private, rebuildable cache of manifest summaries, so that `ckpt ls`
on a store of 10,000 checkpoints reads one file instead of decoding 10,000 manifests.

It lives at `cache/catalog` (formats/v1.md, "Store layout": readers of the format
ignore `cache/`). Beside it, `cache/catalog-subjects/<sha256 of KIND:NAME>` holds one
subject's rows and the state of manifests/ they were read at (`subject_rows`): while
that directory is unchanged and settled (`Store.settled_state`), `ls` of one subject
reads that file alone, whatever the size of the store. Manifests are immutable and named by their hash, so an entry never
goes stale; entries whose manifest is gone (pruned) are dropped, new manifests are
read and added. A catalog that is missing, damaged or of another version is ignored
and rebuilt; it is never the only copy of anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from typing import TYPE_CHECKING, Any, NamedTuple

from ckptcli.errors import CkptError
from ckptcli.format import framing
from ckptcli.format.manifest import Manifest, Subject
from ckptcli.store.layout import CACHE, CATALOG, MANIFESTS

if TYPE_CHECKING:
    from ckptcli.store.repository import Store

CATALOG_PATH = CATALOG
CATALOG_VERSION = 2
SUBJECTS_DIR = f"{CACHE}/catalog-subjects"
PARTS_DIR = f"{CACHE}/catalog-parts"
#: rows a catalog record holds at most (about 12 MB): a bigger catalog is written in parts
PART_ROWS = 100_000
SUBJECT_VERSION = 1


class Summary(NamedTuple):
    """A manifest's metadata without its sections: what `ls` shows. (A NamedTuple:
    building 10,000 of them must cost milliseconds, not a frozen dataclass's tens.)"""

    subject: Subject
    parents: list[bytes]
    created_ns: int
    labels: dict[str, str]
    message: str
    producer: dict[str, str]
    format_version: int
    schema_version: int | str | None
    config_hash: str | None
    deps: dict[str, str]
    stats: dict[str, int]

    @classmethod
    def of(cls, m: Manifest) -> Summary:
        return cls(
            m.subject,
            list(m.parents),
            m.created_ns,
            dict(m.labels),
            m.message,
            dict(m.producer),
            m.format_version,
            m.schema_version,
            m.config_hash,
            dict(m.deps),
            dict(m.stats),
        )

    def row(self, cid: bytes) -> list[Any]:
        # what ls filters and sorts on stays plain; the rest travels as one msgpack blob
        # that is decoded only for the rows shown (most of the cost of reading 10,000 rows
        # would otherwise be building dicts nobody looks at)
        rest = framing.pack([self.producer, self.format_version, self.schema_version, self.config_hash, self.deps, self.stats])
        return [cid, self.subject.kind, self.subject.name, self.parents, self.created_ns, self.labels, self.message, rest]

    @classmethod
    def from_row(cls, row: list[Any]) -> tuple[bytes, Summary]:
        cid, kind, name, parents, created, labels, message, rest = row
        producer, fmt, sv, ch, deps, stats = framing.unpack(rest, CATALOG_PATH)
        ok = (
            type(cid) is bytes
            and type(kind) is str
            and type(name) is str
            and type(parents) is list
            and type(created) is int
            and type(labels) is dict
            and type(message) is str
            and type(producer) is dict
            and type(deps) is dict
            and type(stats) is dict
        )
        if not ok:
            raise ValueError("malformed catalog row")
        return cid, cls(Subject(kind, name), parents, created, labels, message, producer, fmt, sv, ch, deps, stats)


def _load(store: Store) -> dict[bytes, list[Any]]:
    try:
        data = store.backend.read(CATALOG_PATH)
        _v, body = framing.decode_record(data, framing.KIND_CACHE, CATALOG_PATH)
        if body.get("version") != CATALOG_VERSION:
            return {}
        rows = body["entries"]
        if "parts" in body:  # a big catalog: its rows are in its parts (_save)
            rows = list(rows)
            for i in range(int(body["parts"])):
                path = f"{PARTS_DIR}/{i}"
                _v, part = framing.decode_record(store.backend.read(path), framing.KIND_CACHE, path)
                if part.get("version") != CATALOG_VERSION or part.get("token") != body["token"] or part.get("part") != i:
                    return {}  # a part of another catalog (one written meanwhile): rebuilt
                rows.extend(part["entries"])
        # the fields ls filters and sorts on are checked here; a row that fails is dropped
        # and rebuilt from its manifest
        return {r[0]: r for r in rows if _good_row(r)}
    except (CkptError, AttributeError, KeyError, TypeError, ValueError):
        return {}  # missing or unusable: rebuilt from the manifests


def _subject_path(subject: Subject) -> str:
    return f"{SUBJECTS_DIR}/{hashlib.sha256(str(subject).encode()).hexdigest()}"


def _good_row(r: Any) -> bool:
    return (
        type(r) is list
        and len(r) == 8
        and type(r[0]) is bytes
        and type(r[1]) is str
        and type(r[2]) is str
        and type(r[4]) is int
        and type(r[5]) is dict
    )


def subject_rows(store: Store, subject: Subject, save: bool = True) -> list[list[Any]]:
    """The raw catalog rows of one subject's checkpoints (as `rows`, filtered). While
    the store's manifests/ directory is as it was when this subject's rows were last
    saved, and settled (`Store.settled_state`), they are read from its own file,
    `cache/catalog-subjects/<sha256 of KIND:NAME>`, and nothing else: no listing of the
    manifests, no other subject's rows. Otherwise they come from `rows` and are saved
    for next time (unless not `save`)."""
    state = store.settled_state(MANIFESTS)
    path = _subject_path(subject)
    if state is not None:
        try:
            _v, body = framing.decode_record(store.backend.read(path), framing.KIND_CACHE, path)
            if (
                body.get("version") == SUBJECT_VERSION
                and body.get("state") == list(state)
                and body.get("subject") == str(subject)
                and type(body.get("entries")) is list
                and all(_good_row(r) for r in body["entries"])
            ):
                return list(body["entries"])
        except (CkptError, AttributeError, KeyError, TypeError, ValueError):
            pass  # missing or unusable: read from the catalog
    found = [r for r in rows(store, save=save).values() if r[1] == subject.kind and r[2] == subject.name]
    if save and state is not None and state == store.settled_state(MANIFESTS):  # unchanged while it was read
        body = {"version": SUBJECT_VERSION, "state": list(state), "subject": str(subject), "entries": found}
        with contextlib.suppress(CkptError, OSError):
            store.backend.write_atomic(path, framing.encode_record(framing.KIND_CACHE, body, store.version))
    return found


def rows(store: Store, save: bool = True) -> dict[bytes, list[Any]]:
    """Every checkpoint of the store as a raw catalog row ([id, kind, name, parents,
    created_ns, labels, ...], see Summary.row), the catalog brought up to date (unless
    not `save`: `ckpt doctor` writes nothing). Rows are turned into Summary objects only
    for what a caller keeps (Summary.from_row)."""
    ids = store.manifest_ids()
    cached = _load(store)
    out: dict[bytes, list[Any]] = {}
    changed = False
    damaged: list[tuple[bytes, str]] = []
    for cid in ids:
        row = cached.get(cid)
        if row is None:
            try:
                row = Summary.of(store.manifest(cid)).row(cid)
            except CkptError as exc:
                damaged.append((cid, exc.message))  # left out, and said so
                continue
            changed = True
        out[cid] = row
    if damaged:
        more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
        store.warn(f"checkpoint {damaged[0][0].hex()[:12]}{more} is left out: {damaged[0][1]}; run `ckpt verify`")
    if save and (changed or len(out) != len(cached)):
        with contextlib.suppress(CkptError, OSError):  # a read-only store simply has no catalog
            _save(store, list(out.values()))
    return out


def _save(store: Store, entries: list[list[Any]]) -> None:
    """Write the catalog: one record, or, above PART_ROWS rows (a record holds at most
    64 MiB), parts of PART_ROWS rows each (cache/catalog-parts/<i>, written first) and a
    record naming how many, all sharing a random token, so that parts of another
    catalog are never taken for its own."""
    if len(entries) <= PART_ROWS:
        body: dict[str, Any] = {"version": CATALOG_VERSION, "entries": entries}
    else:
        token = secrets.token_bytes(8)
        chunks = [entries[i : i + PART_ROWS] for i in range(0, len(entries), PART_ROWS)]
        for i, chunk in enumerate(chunks):
            part = {"version": CATALOG_VERSION, "token": token, "part": i, "entries": chunk}
            store.backend.write_atomic(f"{PARTS_DIR}/{i}", framing.encode_record(framing.KIND_CACHE, part, store.version))
        body = {"version": CATALOG_VERSION, "token": token, "parts": len(chunks), "entries": []}
    store.backend.write_atomic(CATALOG_PATH, framing.encode_record(framing.KIND_CACHE, body, store.version))

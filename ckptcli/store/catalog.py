"""The catalog: a private, rebuildable cache of manifest summaries, so that `ckpt ls`
on a store of 10,000 checkpoints reads one file instead of decoding 10,000 manifests.

It lives at `cache/catalog` (formats/v1.md, "Store layout": readers of the format
ignore `cache/`). Beside it, `cache/catalog-subjects/<sha256 of KIND:NAME>` holds one
subject's rows and the state of manifests/ they were read at (`subject_rows`): while
that directory is unchanged and settled (`Store.settled_state`) and each of those
manifest files is the file the row was read from, `ls` of one subject reads that file
and stats the subject's manifests alone, whatever the size of the store.

Nothing under `cache/` may change what `ls` shows (docs/design.md, "The catalog's trust
model"): a cached row is used only for a manifest file that is there under the row's id
(the listing of manifests/) and, in a local store, is the same file it was read from:
the same inode, size, mtime and ctime, recorded with the row once that file had settled
(`Store.INDEX_DIR_SETTLED_NS`). Any other row (a manifest replaced in place or repaired,
a row no manifest backs, a forged or damaged catalog) is read again from its manifest.
A catalog that is missing, damaged or of another version is ignored and rebuilt; it is
never the only copy of anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
import struct
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from ckptcli.errors import CkptError
from ckptcli.format import framing
from ckptcli.format.manifest import Manifest, Subject
from ckptcli.store.backend import LocalBackend
from ckptcli.store.layout import CACHE, CATALOG, MANIFESTS

if TYPE_CHECKING:
    from ckptcli.store.repository import Store

CATALOG_PATH = CATALOG
CATALOG_VERSION = 3  # 3: each row with the stamp of the manifest file it was read from
SUBJECTS_DIR = f"{CACHE}/catalog-subjects"
PARTS_DIR = f"{CACHE}/catalog-parts"
#: rows a catalog record holds at most (about 12 MB): a bigger catalog is written in parts
PART_ROWS = 100_000
SUBJECT_VERSION = 2
#: a manifest file's inode, size, mtime_ns and ctime_ns, packed (`_stamp`); NO_STAMP: not
#: known, or changed too recently to tell a later change from it (32 bytes a row: packed,
#: they cost a catalog of 10,000 rows one bytes string to decode, not 10,000 lists)
_STAMP = struct.Struct("<QQqq")
NO_STAMP = bytes(_STAMP.size)
Stamp = bytes


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


def _load(store: Store) -> dict[bytes, tuple[list[Any], Stamp]]:
    """The saved catalog: id -> (row, the stamp of the manifest file it was read from)."""
    try:
        data = store.backend.read(CATALOG_PATH)
        _v, body = framing.decode_record(data, framing.KIND_CACHE, CATALOG_PATH)
        if body.get("version") != CATALOG_VERSION:
            return {}
        rows, stamps = body["entries"], body["stamps"]
        if "parts" in body:  # a big catalog: its rows are in its parts (_save)
            rows = list(rows)
            for i in range(int(body["parts"])):
                path = f"{PARTS_DIR}/{i}"
                _v, part = framing.decode_record(store.backend.read(path), framing.KIND_CACHE, path)
                if part.get("version") != CATALOG_VERSION or part.get("token") != body["token"] or part.get("part") != i:
                    return {}  # a part of another catalog (one written meanwhile): rebuilt
                rows.extend(part["entries"])
                stamps += part["stamps"]
        n = _STAMP.size
        if type(rows) is not list or type(stamps) is not bytes or len(stamps) != n * len(rows):
            return {}
        # the fields ls filters and sorts on are checked here; a row that fails is dropped
        # and rebuilt from its manifest
        return {r[0]: (r, stamps[i * n : i * n + n]) for i, r in enumerate(rows) if _good_row(r)}
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


def _manifests_dir(store: Store) -> str | None:
    """The manifests directory of a local store (whose files can be stat-ed), else None."""
    if isinstance(store.backend, LocalBackend):
        return os.path.join(store.backend.root, MANIFESTS)
    return None


def _stamp(st: os.stat_result, settled_before_ns: int) -> Stamp:
    """A regular file's inode, size, mtime_ns and ctime_ns, packed; NO_STAMP when it
    changed after `settled_before_ns` (a rewrite in the same clock tick could leave the
    same times)."""
    if not stat.S_ISREG(st.st_mode) or max(st.st_mtime_ns, st.st_ctime_ns) > settled_before_ns:
        return NO_STAMP
    return _STAMP.pack(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _settled_before(store: Store) -> int:
    return time.time_ns() - store.INDEX_DIR_SETTLED_NS


def _listing(store: Store) -> tuple[dict[bytes, Stamp], bool]:
    """Every manifest's id (its file's name), with its file's stamp; and whether the
    stamps are known (a local store). Elsewhere every stamp is NO_STAMP."""
    directory = _manifests_dir(store)
    if directory is None:
        return dict.fromkeys(store.manifest_ids(), NO_STAMP), False
    before = _settled_before(store)
    out: dict[bytes, Stamp] = {}
    # one stat a manifest (about 4 µs: 40 ms of CPU for 10,000), relative to the directory
    pack, is_reg, fromhex, lstat = _STAMP.pack, stat.S_ISREG, bytes.fromhex, os.stat
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}, True
    except OSError:
        return dict.fromkeys(store.manifest_ids(), NO_STAMP), True  # raises the backend's error, or all are read
    try:
        for name in os.listdir(fd):
            if len(name) != 64:
                continue
            try:
                cid = fromhex(name)
                st = lstat(name, dir_fd=fd, follow_symlinks=False)
            except (ValueError, OSError):
                continue  # not a manifest's name, or gone meanwhile (a prune)
            if is_reg(st.st_mode):
                m, c = st.st_mtime_ns, st.st_ctime_ns
                out[cid] = pack(st.st_ino, st.st_size, m, c) if m <= before and c <= before else NO_STAMP
            else:
                # a link, a FIFO, a device, a directory: read every time, and refused: left
                # out with a warning, not hidden (the read opens with O_NONBLOCK: a FIFO
                # never blocks)
                out[cid] = NO_STAMP
    except OSError:
        return dict.fromkeys(store.manifest_ids(), NO_STAMP), True
    finally:
        os.close(fd)
    return out, True


def _same_files(directory: str, stamps: list[Any], before: int) -> bool:
    """Whether each [hex id, stamp] names a manifest file that is still that file."""
    for item in stamps:
        if type(item) is not list or len(item) != 2 or type(item[0]) is not str or len(item[0]) != 64 or item[1] == NO_STAMP:
            return False
        try:
            st = os.stat(os.path.join(directory, item[0]), follow_symlinks=False)
        except (OSError, ValueError):
            return False
        if _stamp(st, before) != item[1]:
            return False
    return True


def subject_rows(store: Store, subject: Subject, save: bool = True) -> list[list[Any]]:
    """The raw catalog rows of one subject's checkpoints (as `rows`, filtered). While
    the store's manifests/ directory is as it was when this subject's rows were last
    saved, and settled (`Store.settled_state`), and each of those rows' manifest files
    (and each manifest then found damaged) is still the file it was (its stamp), they are
    read from the subject's own file, `cache/catalog-subjects/<sha256 of KIND:NAME>`: no
    listing of the manifests, no other subject's rows. Otherwise they come from `rows`
    and are saved for next time (unless not `save`)."""
    state = store.settled_state(MANIFESTS)
    directory = _manifests_dir(store)
    path = _subject_path(subject)
    if state is not None and directory is not None:
        try:
            _v, body = framing.decode_record(store.backend.read(path), framing.KIND_CACHE, path)
            entries = body.get("entries")
            files = body.get("files")
            if (
                body.get("version") == SUBJECT_VERSION
                and body.get("state") == list(state)
                and body.get("subject") == str(subject)
                and type(entries) is list
                and type(files) is list
                and all(_good_row(r) and r[1] == subject.kind and r[2] == subject.name for r in entries)
                and sorted(r[0].hex() for r in entries) == sorted(f[0] for f in files if type(f) is list and f[2:] == [True])
                and _same_files(directory, [f[:2] for f in files], _settled_before(store))
            ):
                return list(entries)
        except (CkptError, AttributeError, KeyError, TypeError, ValueError):
            pass  # missing or unusable: read from the catalog
    every, stamps, damaged = _rows(store, save=save)
    found = [r for r in every.values() if r[1] == subject.kind and r[2] == subject.name]
    if save and state is not None and state == store.settled_state(MANIFESTS):  # unchanged while it was read
        # the files the answer rests on: this subject's manifests, and the damaged ones
        # (left out: one repaired in place must show again)
        files = [[r[0].hex(), stamps[r[0]], True] for r in found] + [[cid.hex(), st, False] for cid, st in damaged]
        if all(f[1] != NO_STAMP for f in files):
            body = {"version": SUBJECT_VERSION, "state": list(state), "subject": str(subject), "entries": found, "files": files}
            with contextlib.suppress(CkptError, OSError):
                store.backend.write_atomic(path, framing.encode_record(framing.KIND_CACHE, body, store.version))
    return found


def rows(store: Store, save: bool = True) -> dict[bytes, list[Any]]:
    """Every checkpoint of the store as a raw catalog row ([id, kind, name, parents,
    created_ns, labels, ...], see Summary.row), the catalog brought up to date (unless
    not `save`: `ckpt doctor` writes nothing). Rows are turned into Summary objects only
    for what a caller keeps (Summary.from_row)."""
    return _rows(store, save)[0]


def _rows(store: Store, save: bool) -> tuple[dict[bytes, list[Any]], dict[bytes, Stamp], list[tuple[bytes, Stamp]]]:
    """`rows`, with each row's stamp, and the damaged manifests (left out) with theirs."""
    listing, local = _listing(store)
    cached = _load(store)
    out: dict[bytes, list[Any]] = {}
    stamps: dict[bytes, Stamp] = {}
    changed = False
    damaged: list[tuple[bytes, str, Stamp]] = []
    for cid, now in listing.items():
        hit = cached.get(cid)
        # a cached row stands for the manifest file it was read from, when that file is
        # still there, settled and unchanged (local), or there at all (elsewhere)
        if hit is not None and (not local or (hit[1] == now and now != NO_STAMP)):
            row = hit[0]
        else:
            try:
                row = Summary.of(store.manifest(cid)).row(cid)
            except CkptError as exc:
                damaged.append((cid, exc.message, now))  # left out, and said so
                continue
            # a file still too fresh to stamp is read again by each ls until it settles;
            # the catalog is written again only when it learns something
            changed = changed or hit is None or hit[1] != now or hit[0] != row
        out[cid] = row
        stamps[cid] = now
    if damaged:
        more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
        store.warn(f"checkpoint {damaged[0][0].hex()[:12]}{more} is left out: {damaged[0][1]}; run `ckpt verify`")
    if save and (changed or len(out) != len(cached)):
        with contextlib.suppress(CkptError, OSError):  # a read-only store simply has no catalog
            _save(store, list(out.values()), b"".join(stamps[cid] for cid in out))
    return out, stamps, [(cid, st) for cid, _msg, st in damaged]


def _save(store: Store, entries: list[list[Any]], stamps: bytes) -> None:
    """Write the catalog: one record, or, above PART_ROWS rows (a record holds at most
    64 MiB), parts of PART_ROWS rows each (cache/catalog-parts/<i>, written first) and a
    record naming how many, all sharing a random token, so that parts of another
    catalog are never taken for its own."""
    if len(entries) <= PART_ROWS:
        body: dict[str, Any] = {"version": CATALOG_VERSION, "entries": entries, "stamps": stamps}
    else:
        token = secrets.token_bytes(8)
        for i, start in enumerate(range(0, len(entries), PART_ROWS)):
            n = _STAMP.size
            chunk, chunk_stamps = entries[start : start + PART_ROWS], stamps[start * n : (start + PART_ROWS) * n]
            part = {"version": CATALOG_VERSION, "token": token, "part": i, "entries": chunk, "stamps": chunk_stamps}
            store.backend.write_atomic(f"{PARTS_DIR}/{i}", framing.encode_record(framing.KIND_CACHE, part, store.version))
        parts = (len(entries) + PART_ROWS - 1) // PART_ROWS
        body = {"version": CATALOG_VERSION, "token": token, "parts": parts, "entries": [], "stamps": b""}
    store.backend.write_atomic(CATALOG_PATH, framing.encode_record(framing.KIND_CACHE, body, store.version))

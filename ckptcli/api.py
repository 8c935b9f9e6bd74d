"""The Python API the CLI is built on: open a store, take, get, list, restore, verify,
export and import. No UI imports here (tests/test_import_hygiene.py).

    >>> import ckptcli
    >>> store = ckptcli.init_store("/tmp/demo/.ckpt")          # doctest: +SKIP
    >>> cid = ckptcli.take(store, {"memory": {"goal": "x"}}, subject="agent:bot").id  # doctest: +SKIP
    >>> ckptcli.open_checkpoint(cid.hex(), store).state()    # doctest: +SKIP
    {'memory': {'goal': 'x'}}
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ckptcli import __version__
from ckptcli.blobs import CaptureReport, FileInfo, RestoreReport, capture, find_entry, list_files, restore_blobs, tree_size, validate
from ckptcli.document import refuse_json
from ckptcli.errors import (
    CkptError,
    CorruptError,
    InvalidInputError,
    LatestMovedError,
    LimitExceededError,
    NotFoundError,
    UnsupportedVersionError,
)
from ckptcli.format import framing, limits
from ckptcli.format.manifest import (
    DOC_SECTION_KEYS,
    EXT_PREFIX,
    LAYOUT_DOCUMENT,
    LAYOUT_SECTIONS,
    NAMESPACE_RE,
    Manifest,
    Subject,
    check_name,
    is_nested,
)
from ckptcli.format.values import Budget, Decoder, Encoder, LazyBytes, packable
from ckptcli.format.walk import walk_checkpoint
from ckptcli.listing import ListFilter as ListFilter  # re-exported: the API offers listing too
from ckptcli.listing import format_time as format_time
from ckptcli.listing import info_dict as info_dict
from ckptcli.listing import list_checkpoints as list_checkpoints
from ckptcli.listing import parse_labels as parse_labels
from ckptcli.progress import NULL, Progress
from ckptcli.store.backend import write_file_atomic
from ckptcli.store.repository import Store
from ckptcli.store.single import CheckpointFile, is_checkpoint_file, write_checkpoint_file

PathLike = str | os.PathLike[str]


# -- stores ------------------------------------------------------------------------
def open_store(path: PathLike | None = None) -> Store:
    """Open the store at `path` (a store directory or a directory holding `.ckpt/`),
    or find one as git does: CKPT_STORE, then `.ckpt/` in cwd or any parent."""
    return Store.open(Path(path) if path is not None else None)


def init_store(path: PathLike, version: int = limits.FORMAT_VERSION) -> Store:
    """Create an empty store directory at `path`, writing format `version` (the newest by default)."""
    return Store.init(Path(path), version)


def store_or_init(path: PathLike) -> Store | Path:
    """The store at `path` (a store directory, or a directory holding ``.ckpt/``) as its
    path, or a new empty store made there (as `ckpt init` would) when there is none: what
    `CkptSaver.open` and `CkptStore.open` give their constructor. Raises: CorruptError and
    the like for a store that is there but does not open (never made again on top)."""
    from ckptcli.store.repository import resolve_store_path

    p = Path(path)
    try:
        resolve_store_path(p)
    except CkptError:
        if (p / "config").exists():
            raise
        return init_store(p)
    return p


# -- state documents -----------------------------------------------------------------
def split_document(doc: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Map a state document onto sections; returns (layout, {section: value}).

    A map whose keys are all among memory/plan/tools/events/ext is split into those
    sections (ext: {namespace: value} becomes `ext:<namespace>` sections). Anything
    else is kept whole as `memory`. The layout records which, so restore gives back
    exactly the document that was taken.
    """
    if isinstance(doc, dict) and doc and all(isinstance(k, str) and k in DOC_SECTION_KEYS for k in doc):
        ext = doc.get("ext", {})
        if isinstance(ext, dict) and all(isinstance(ns, str) and NAMESPACE_RE.match(ns) for ns in ext):
            sections = {k: v for k, v in doc.items() if k != "ext"}
            for ns, v in ext.items():
                sections[EXT_PREFIX + ns] = v
            layout = {"kind": LAYOUT_SECTIONS, "keys": list(doc.keys()), "ext": list(ext.keys()) if "ext" in doc else []}
            return layout, sections
    return {"kind": LAYOUT_DOCUMENT}, {"memory": doc}


def join_document(layout: dict[str, Any], sections: dict[str, Any]) -> Any:
    if layout.get("kind") == LAYOUT_DOCUMENT:
        return sections.get("memory")
    doc: dict[str, Any] = {}
    for key in layout.get("keys", []):
        if key == "ext":
            doc["ext"] = {ns: sections[EXT_PREFIX + ns] for ns in layout.get("ext", []) if EXT_PREFIX + ns in sections}
        elif key in sections:
            doc[key] = sections[key]
    return doc


def read_document(stream: IO[bytes], fmt: str = "auto", where: str = "state document") -> tuple[Any, str]:
    """Parse a JSON or msgpack state document; returns (value, format name)."""
    data = stream.read()
    if fmt == "auto":
        stripped = data.lstrip()[:1]
        fmt = "json" if stripped in (b"{", b"[", b'"') or stripped.isdigit() or stripped in (b"-", b"t", b"f", b"n") else "msgpack"
    if fmt == "json":
        try:
            return json.loads(data), "json"
        except RecursionError:
            raise LimitExceededError(f"{where}: nesting is deeper than {limits.MAX_DEPTH} levels") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"{where}: not valid JSON ({exc})", hint="check the file, or pass --format msgpack") from None
    if fmt == "msgpack":
        import msgpack

        try:
            return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_document_ext, timestamp=0), "msgpack"
        except msgpack.StackError:
            raise LimitExceededError(f"{where}: nesting is deeper than the decoder allows") from None
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"{where}: not valid msgpack ({exc})", hint="check the file, or pass --format json") from None
    raise InvalidInputError(f"unknown document format {fmt!r}", hint="use json, msgpack or auto")


def write_document(value: Any, out: IO[bytes], fmt: str) -> None:
    if fmt == "msgpack":
        out.write(framing.pack(packable(value)))
        return
    try:
        text = json.dumps(value, ensure_ascii=False, indent=2, allow_nan=True, default=refuse_json)
    except ValueError as exc:
        raise InvalidInputError(f"the state cannot be written as JSON ({exc})", hint="pass --format msgpack") from None
    out.write(text.encode("utf-8") + b"\n")


def _document_ext(code: int, data: bytes) -> Any:
    if code == 1 and 0 < len(data) <= limits.MAX_BIGINT_BYTES:
        return int.from_bytes(data, "big", signed=True)
    raise InvalidInputError(f"msgpack ext type {code} is not supported in a state document", hint="use plain msgpack types (ext 1 = big integer)")


def states_equal(a: Any, b: Any) -> bool:
    """Exact equality of states: types must match, NaN equals NaN, 0.0 and -0.0 differ."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(states_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a.keys()) == list(b.keys()) and all(states_equal(a[k], b[k]) for k in a)
    return bool(a == b)


# -- take --------------------------------------------------------------------------------
@dataclass
class TakeResult:
    id: bytes
    manifest: Manifest
    new_objects: int
    new_bytes: int
    capture: CaptureReport = field(default_factory=CaptureReport)
    latest_moved: bool = True  # whether the subject's latest names it (see take's move_latest)

    @property
    def hex(self) -> str:
        return self.id.hex()


def take(
    store: Store,
    state: Any,
    *,
    subject: str | Subject,
    labels: list[str] | dict[str, str] | None = None,
    parents: list[str] | None = None,
    message: str = "",
    blobs: Mapping[str, PathLike] | None = None,
    branch: str | None = None,
    schema_version: int | str | None = None,
    config_hash: str | None = None,
    producer: dict[str, str] | None = None,
    doc_format: str = "python",
    force_read: bool = False,
    carry: Mapping[str, bytes] | None = None,
    progress: Progress = NULL,
    move_latest: bool | None = True,
    reason: str | None = None,
) -> TakeResult:
    """Take a checkpoint of `state` (and files under `blobs`) into `store`.

    Args:
        state: the state document (maps with string keys, lists, str, bytes, int,
            float, bool, None); see split_document for how it maps onto sections.
        subject: "KIND:NAME", e.g. "agent:support-bot".
        parents: checkpoint references; default is the branch head when `branch` is
            given, else the subject's latest; [] for a root checkpoint.
        blobs: name -> file or directory to store in the `blobs` section. Files whose
            size, mtime, ctime and inode match the first parent's are not read again
            (`force_read=True` reads everything).
        carry: section name -> encoded root (EV bytes) taken verbatim from another
            checkpoint of this store, e.g. `Checkpoint.section_ev("blobs")`, so a
            derived checkpoint (a migration, a fork) shares it without re-encoding.
            Every object it references must already be in the store.
        move_latest: whether the subject's `latest` moves to the new checkpoint (as
            far as it is the newest: see Store.advance_latest). None: only when its
            first parent is the subject's head (a migration of the latest state moves
            it, one of an older state does not). False: latest stays where it is (a
            fork of an earlier point). The reflog records `reason` (default "take").
    Returns:
        TakeResult with the new id and what it added to the store; `latest_moved`
        says whether the subject's latest now names it.
    Raises:
        InvalidInputError, LimitExceededError for state ckpt cannot store;
        StoreIOError when the disk refuses; nothing is committed then.
        LatestMovedError (a ConflictError) when the subject's latest was reset to
        another checkpoint while the take ran: the checkpoint is committed (its id is
        the error's `kept`) but latest stays where the reset put it.
    """
    subj = subject if isinstance(subject, Subject) else Subject.parse(subject)
    label_map = parse_labels(labels)
    blob_paths = {check_name(k, "blob name"): Path(v) for k, v in (blobs or {}).items()}
    if branch is not None:
        check_name(branch, "branch name")
    layout, sections = split_document(state)
    layout["format"] = doc_format
    with store.backend.lock("store", shared=True):
        store.clean_stale_temps()
        # latest as this take found it: a reset while it runs is not undone (advance_latest)
        expect = store.latest_state(subj)
        if parents is None:
            head = store.read_ref(f"refs/branches/{branch}") if branch else None
            if head is None:
                head = store.head(subj)  # latest, or a newer checkpoint a killed take left it behind
            parent_ids = [head] if head is not None else []
        else:
            parent_ids = [store.resolve(p) for p in parents]
        if len(parent_ids) > limits.MAX_PARENTS:
            raise InvalidInputError(f"{len(parent_ids)} parents; a checkpoint may have at most {limits.MAX_PARENTS}")
        txn = store.transaction()
        try:
            enc = Encoder(txn, cdc=store.config.cdc)
            encoded = {name: enc.encode_root(value, where=name) for name, value in sections.items()}
            for name, ev in (carry or {}).items():
                if name in encoded or (name == "blobs" and blob_paths):
                    raise InvalidInputError(f"section {name!r} is both carried over and given")
                encoded[name] = ev
            report = CaptureReport()
            if blob_paths:
                # files unchanged since the first parent (size, mtime, ctime, inode) are not read again
                previous = {} if force_read or not parent_ids else _parent_blobs(store, parent_ids[0])
                total = sum(tree_size(p) for p in blob_paths.values())
                progress.start("reading blobs", total)
                try:
                    entries = {name: capture(p, enc, progress, report, previous.get(name)) for name, p in blob_paths.items()}
                finally:
                    progress.finish()
                for name, p in blob_paths.items():
                    if entries[name].get("type") != "skipped":
                        entries[name]["origin"] = origin_of(p)  # where `restore --in-place` puts it back
                encoded["blobs"] = enc.encode_root(entries, where="blobs")
            txn.commit()
        except BaseException:
            txn.abort()
            raise
        manifest = Manifest(
            subject=subj,
            sections=encoded,
            layout=layout,
            parents=parent_ids,
            producer=producer or {"name": "ckptcli", "version": __version__},
            labels=label_map,
            message=message,
            schema_version=schema_version,
            config_hash=config_hash,
            deps={"ckptcli": __version__, "python": platform.python_version()},
            stats={"logical_bytes": enc.logical_bytes, "new_objects": txn.new_objects, "new_bytes": txn.new_stored_bytes},
            format_version=store.version,
        )
        if move_latest is None:
            move_latest = bool(parent_ids) and parent_ids[0] == store.head(subj)
        why = reason if reason is not None else ("take: " + message.splitlines()[0][:80] if message.strip() else "take")
        # the commit point; the head hint first, so a kill before the ref moves forks
        # nothing (none when latest stays: the next take must not adopt this one)
        cid = store.write_manifest(manifest, note_head=move_latest)
        # refs move while the store lock is still held, so a prune (which takes it
        # exclusively) never sees a new checkpoint without its refs
        try:
            moved = bool(move_latest) and store.advance_latest(subj, cid, manifest.created_ns, reason=why, expect=expect)
        except LatestMovedError:
            if branch:
                store.set_branch(branch, cid, reason=why)
            raise
        if not move_latest:
            store.keep_latest(subj, f"{why} (latest kept)")
        if branch:
            store.set_branch(branch, cid, reason=why)
    return TakeResult(cid, manifest, txn.new_objects, txn.new_stored_bytes, report, latest_moved=moved)


def origin_of(path: Path) -> str:
    """The absolute path a blob is taken from, as recorded in its entry (`origin`):
    normalized, symlinks in it not resolved (the path the user named)."""
    p = os.path.abspath(path)
    return "/" + p.lstrip("/")  # POSIX keeps a leading "//"; the recorded path never has one


def _parent_blobs(store: Store, parent: bytes) -> dict[str, Any]:
    """The parent's blob entries (file data left in the store), or {} if it has none
    or cannot be read: then every file is simply read again."""
    try:
        return Checkpoint(store, parent).blobs()
    except CkptError:
        return {}


# -- reading -----------------------------------------------------------------------------
Source = Store | CheckpointFile


class Checkpoint:
    """One checkpoint, in a store or a checkpoint file. Sections are decoded on demand."""

    def __init__(self, source: Source, cid: bytes) -> None:
        self.source = source
        self.id = cid
        self.manifest = source.manifest(cid)

    @property
    def hex(self) -> str:
        return self.id.hex()

    def _decoder(self, lazy: bool = False) -> Decoder:
        return Decoder(self.source, budget=Budget(), lazy_bytes=lazy)

    def section_names(self) -> list[str]:
        return list(self.manifest.sections)

    def section_ev(self, name: str) -> bytes:
        """A section's encoded root, as stored (for `take(carry=...)`)."""
        ev = self.manifest.sections.get(name)
        if ev is None:
            raise NotFoundError(f"checkpoint {self.hex[:12]} has no section {name!r}")
        return ev

    def section(self, name: str, *, lazy_bytes: bool = False) -> Any:
        ev = self.manifest.sections.get(name)
        if ev is None:
            have = ", ".join(self.manifest.sections) or "none"
            raise NotFoundError(f"checkpoint {self.hex[:12]} has no section {name!r} (it has: {have})")
        return self._decoder(lazy_bytes).decode(ev, f"section {name}")

    def state(self) -> Any:
        """The state document exactly as it was taken (without blobs)."""
        dec = self._decoder()
        sections = {n: dec.decode(ev, f"section {n}") for n, ev in self.manifest.sections.items() if n != "blobs"}
        return join_document(self.manifest.layout, sections)

    def write_state(self, out: IO[bytes], fmt: str) -> None:
        """Write the state document (as `state()` gives it) to `out` as "json" or "msgpack",
        streamed from the store: memory stays O(largest object), whatever the state's size
        (ckptcli.document). Refused (LimitExceededError) before the first byte when the
        state is larger than CKPT_MAX_DECODED_BYTES; other errors may come after part of
        the output, so write to a temporary file (write_file_atomic) or a spool."""
        from ckptcli.document import Section, write_document

        sections = {n: Section(ev, f"section {n}") for n, ev in self.manifest.sections.items() if n != "blobs"}
        write_document(join_document(self.manifest.layout, sections), self.source, out, fmt)

    def write_view(self, out: IO[bytes], *, indent: int | None = None) -> None:
        """Write the whole checkpoint (metadata, layout, every section) in the JSON view
        (jsonview; file data as {"$blob": ...}), streamed as `write_state` is (`ckpt cat`)."""
        from ckptcli.document import Section, write_document

        doc: dict[str, Any] = info_dict(self.id, self.manifest)
        doc["layout"] = self.manifest.layout
        doc["sections"] = {n: Section(ev, f"section {n}", lazy_bytes=n == "blobs") for n, ev in self.manifest.sections.items()}
        write_document(doc, self.source, out, "view", indent=indent)

    def blobs(self) -> dict[str, Any]:
        """Blob entries, with file data left in the store (LazyBytes) until written."""
        if "blobs" not in self.manifest.sections:
            return {}
        value = self.section("blobs", lazy_bytes=True)
        if not isinstance(value, dict):
            raise CorruptError(f"checkpoint {self.hex[:12]}: blobs section is not a map")
        return value

    def restore_blobs(
        self,
        target: PathLike | None,
        *,
        names: list[str] | None = None,
        overwrite: bool = False,
        keep_special_modes: bool = False,
        force: bool = False,
        report: RestoreReport | None = None,
        progress: Progress = NULL,
        in_place: bool = False,
        delete: bool = False,
        include: list[str] | None = None,
        dry_run: bool = False,
    ) -> int:
        """Write the blobs (all, or `names`) under `target`; returns the bytes written.
        All or nothing, set-uid/set-gid/sticky bits dropped unless `keep_special_modes`
        (see blobs.restore_blobs; `report` receives the counts and paths).

        `in_place` (no `target`): each blob back to the path it was taken from, replacing
        what is there. `delete`: also remove what the target holds that the checkpoint
        does not. `include`: only paths matching these globs. `dry_run`: write nothing,
        `report` says what would change.

        Raises:
            UnsafePathError, CorruptError before anything is written (blobs.validate);
            LimitExceededError, also before anything is written, when the files declare
            more bytes than the file system of `target` has free (less a margin), unless
            `force`; ConflictError, StoreIOError while writing (what was written is undone).
        """
        from ckptcli.blobs import check_origin

        blobs = self.blobs()
        if names:
            missing = [n for n in names if n not in blobs]
            if missing:
                raise NotFoundError(f"checkpoint {self.hex[:12]} has no blob {missing[0]!r} (it has: {', '.join(blobs) or 'none'})")
        where = f"checkpoint {self.hex[:12]}"
        if in_place:
            for name, entry in blobs.items():
                if (names is None or name in names) and isinstance(entry, dict):
                    refuse_output_into_source(self, check_origin(entry.get("origin"), name, where), f"blob {name!r}'s origin")
        elif target is None:
            raise InvalidInputError("no target directory for the blobs", hint="give one, or restore them in place")
        else:
            refuse_output_into_source(self, target, "the blobs directory", names or list(blobs))
        return restore_blobs(
            blobs,
            Path(target) if target is not None else None,
            self._decoder(),
            names=names,
            overwrite=overwrite,
            keep_special_modes=keep_special_modes,
            check_space=not force,
            progress=progress,
            where=where,
            report=report,
            in_place=in_place,
            delete=delete,
            include=include,
            dry_run=dry_run,
            protect=[Path(self.source.location)] if isinstance(self.source, Store) else None,
        )

    def list_files(self, path: str = "") -> list[FileInfo]:
        """The entries of the blobs section (all, or the one at NAME/sub/path and below):
        path, type, size, mode, mtime and where it was taken from. Raises: NotFoundError."""
        return list_files(self.blobs(), path, f"checkpoint {self.hex[:12]}")

    def write_blob(self, path: str, out: IO[bytes]) -> int:
        """Write the file at NAME/sub/path of the blobs section to `out`, streamed from
        the store; returns its size. Raises: NotFoundError; InvalidInputError for a
        directory or link; CorruptError (possibly after part of it was written)."""
        where = f"checkpoint {self.hex[:12]}"
        entry = find_entry(self.blobs(), path, where)
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind != "file":
            what = {"dir": "a directory", "symlink": f"a symlink to {entry.get('target')!r}", "skipped": "not stored (skipped when taken)"}.get(str(kind), "not a file")
            raise InvalidInputError(f"{where}: {path} is {what}", hint="give the path of a file (`ckpt ls-files` lists them); `ckpt restore --include` restores directories")
        size = validate(entry, path, where)
        data = entry["data"]
        if isinstance(data, LazyBytes):
            for piece in self._decoder().iter_bytes(data.oid):
                out.write(piece)
        else:
            out.write(data)
        return size

    def summary(self) -> dict[str, Any]:
        """Metadata and a short description of each section (for `ckpt show`)."""
        out = info_dict(self.id, self.manifest)
        out["sections"] = {name: describe_section(self, name) for name in self.manifest.sections}
        return out


def describe_section(ck: Checkpoint, name: str) -> dict[str, Any]:
    return describe_value(ck.section(name, lazy_bytes=True), name)


def describe_value(value: Any, name: str = "") -> dict[str, Any]:
    """What `ckpt show` says of a section's value: its type, items and bytes."""
    desc: dict[str, Any] = {"type": _type_name(value)}
    if isinstance(value, (list, dict)):
        desc["items"] = len(value)
    if name == "blobs" and isinstance(value, dict):
        files, nbytes = _count_blob_files(value)
        desc["files"] = files
        desc["bytes"] = nbytes
    else:
        desc["bytes"] = _value_bytes(value)
    return desc


def _type_name(v: Any) -> str:
    # a large byte string is decoded lazily (LazyBytes): it is still "bytes" to the user
    return {dict: "map", list: "list", str: "string", bytes: "bytes", LazyBytes: "bytes", int: "int", float: "float", bool: "bool", type(None): "null"}.get(
        type(v), type(v).__name__
    )


def _value_bytes(v: Any) -> int:
    if isinstance(v, (str, bytes)):
        return len(v.encode() if isinstance(v, str) else v)
    if isinstance(v, LazyBytes):
        return v.size
    if isinstance(v, list):
        return sum(_value_bytes(x) for x in v)
    if isinstance(v, dict):
        return sum(len(k) + _value_bytes(x) for k, x in v.items())
    return 8


def _count_blob_files(entries: dict[str, Any]) -> tuple[int, int]:
    files = nbytes = 0
    stack = list(entries.values())
    while stack:
        e = stack.pop()
        if not isinstance(e, dict):
            continue
        if e.get("type") == "file":
            files += 1
            nbytes += e.get("size", 0) if isinstance(e.get("size"), int) else 0
        elif e.get("type") == "dir" and isinstance(e.get("entries"), dict):
            stack.extend(e["entries"].values())
    return files, nbytes


def names_a_file(ref: str) -> bool:
    """A reference is a checkpoint file if it looks like a path to one, or is a checkpoint
    file; a bare name that merely matches some other file in cwd is still a tag or branch."""
    p = Path(ref)
    return p.is_file() and (ref.endswith(".ckpt") or os.sep in ref or is_checkpoint_file(p))


def refuse_output_into_source(ck: Checkpoint, out: PathLike, what: str, names: Collection[str] | None = None) -> None:
    """An output path (`export -o`, `restore -o`, `restore --blobs`) must not lie inside
    the store the checkpoint is read from, nor be the checkpoint file itself: it would
    replace the only copy of what it is made of. For a blobs directory, `names` are the
    top-level names restore writes there: none may lead into the store either.

    Raises:
        InvalidInputError naming both paths.
    """
    real = Path(os.path.realpath(out))
    src = ck.source
    if isinstance(src, CheckpointFile):
        if real == Path(os.path.realpath(src.path)):
            raise InvalidInputError(f"{what} {out} is the checkpoint file it is read from", hint="write it elsewhere")
        return
    root = Path(os.path.realpath(src.location))
    if real == root or root in real.parents:
        raise InvalidInputError(f"{what} {out} is inside the store at {src.location}, which it would damage", hint="write it outside the store")
    if names is not None and real in root.parents:
        # the store is below the blobs directory: a blob named after the directory that
        # holds it would be merged into the store
        first = root.relative_to(real).parts[0]
        if first in names:
            raise InvalidInputError(
                f"blob {first!r} would be restored into {real / first}, which holds the store at {src.location}", hint="restore into another directory"
            )


def open_checkpoint(ref: str, store: Store | None = None, *, store_path: PathLike | None = None) -> Checkpoint:
    """A checkpoint by reference: a checkpoint file's path, an id or unique prefix,
    a tag, a branch, KIND:NAME (its latest), or `latest`; `~N` walks back N parents."""
    p = Path(ref)
    if names_a_file(ref):
        if not is_checkpoint_file(p):
            with open(p, "rb") as fh:
                framing.check_header(fh.read(framing.HEADER_SIZE), framing.KIND_FILE, str(p), outer=True)
        f = CheckpointFile(p)
        return Checkpoint(f, f.id)
    if ref.endswith(".ckpt") and not p.exists():
        raise NotFoundError(f"{ref} does not exist")
    st = store if store is not None else open_store(store_path)
    return Checkpoint(st, st.resolve(ref))


# -- export / import -----------------------------------------------------------------------
def export_checkpoint(ck: Checkpoint, out: PathLike | IO[bytes], progress: Progress = NULL) -> int:
    """Write `ck` as a single checkpoint file; returns its size in bytes."""
    src = ck.source
    walked = walk_checkpoint(src, ck.manifest)
    objects = []
    progress.start("exporting", len(walked.objects))
    for oid, (typ, _section) in walked.objects.items():
        entry, stored = src.read_stored(oid)
        objects.append((oid, typ, entry.codec, stored, entry.raw_len))
        progress.advance(1)
    progress.finish()
    manifest_bytes = src.manifest_bytes if isinstance(src, CheckpointFile) else src.manifest_bytes(ck.id)
    if not isinstance(out, (str, os.PathLike)):
        return write_checkpoint_file(out, manifest_bytes, objects)
    path = Path(out)
    refuse_output_into_source(ck, path, "the export")
    size = 0

    def write(fh: IO[bytes]) -> None:
        nonlocal size
        size = write_checkpoint_file(fh, manifest_bytes, objects)

    write_file_atomic(path, write)  # (through a descriptor or a device, too)
    return size


def import_checkpoint(store: Store, path: PathLike, progress: Progress = NULL) -> bytes:
    """Copy a checkpoint file into `store` (objects verbatim); returns the checkpoint id."""
    from ckptcli.store.verify import verify_file

    f = CheckpointFile(Path(path))
    try:
        # what `verify --read-data` refuses, import refuses, before anything lands: the
        # structural check here (checksum, object checks, every object present, data sizes
        # as their nodes say), the read-data part as each object is copied (read_checked)
        report = verify_file(f, read_data=False)
        if report.problems:
            first = report.problems[0]
            more = f" (and {len(report.problems) - 1} more problem(s))" if len(report.problems) > 1 else ""
            message = first.message if first.kind == "file" else f"{path}: {first.message}"
            raise CorruptError(message + more, hint="the file is damaged; `ckpt verify --read-data FILE` lists every problem; export it again")
        written = f.manifest().format_version
        if written > store.version:
            raise UnsupportedVersionError(
                f"{path} holds a checkpoint written in format version {written}; the store at {store.location} is version {store.version}",
                hint="upgrade the store first: ckpt migrate --format",
            )
        with store.backend.lock("store", shared=True):
            txn = store.transaction()
            try:
                progress.start("importing", len(f.entries))
                for oid, entry in f.entries.items():
                    _e, stored, raw = f.read_checked(oid)  # the hash is checked before anything lands in the store
                    txn.put_stored(oid, entry.obj_type, entry.codec, stored, len(raw))
                    progress.advance(1)
                progress.finish()
                txn.commit()
            except BaseException:
                txn.abort()
                raise
            cid = store.add_manifest_bytes(f.manifest_bytes)
            m = f.manifest()
            store.advance_latest(m.subject, cid, m.created_ns, nested=is_nested(m.labels), reason="import")
        return cid
    finally:
        f.close()


# -- verify ----------------------------------------------------------------------------------
from ckptcli.store.verify import Problem as Problem  # noqa: E402  (the verify result types live beside verify_store)
from ckptcli.store.verify import VerifyReport  # noqa: E402


def verify(
    source: Source,
    refs: list[str] | None = None,
    *,
    read_data: bool = False,
    progress: Progress = NULL,
) -> VerifyReport:
    """Check checkpoints (all when `refs` is None). Structure always: every manifest,
    index, ref and node object parses and every referenced object exists. With
    `read_data`, every pack and every object is re-hashed too."""
    from ckptcli.store.verify import verify_file, verify_store

    if isinstance(source, CheckpointFile):
        return verify_file(source, read_data=read_data, progress=progress)
    with source.backend.reading_lock("store"):  # a prune repacking meanwhile is not damage
        return verify_store(source, refs, read_data=read_data, progress=progress)

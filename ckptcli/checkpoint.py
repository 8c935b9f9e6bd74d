"""The read side of a checkpoint: `Checkpoint` (one checkpoint in a store or a checkpoint
file, its sections decoded on demand), what `ckpt show` says of its sections,
`open_checkpoint`, which resolves a reference to one, and `store_or_init`. Layout of a checkpoint:
formats/v2.md; of a state document: ckptcli.document."""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import IO, Any

from ckptcli.blobs import RestoreReport, restore_blobs
from ckptcli.blobtree import FileInfo, check_origin, find_entry, list_files, validate
from ckptcli.document import Section, join_document, write_document
from ckptcli.errors import CkptError, ConflictError, CorruptError, InvalidInputError, NotFoundError, StoreNotFoundError, UsageError
from ckptcli.format import framing, limits
from ckptcli.format.manifest import NAME_RE
from ckptcli.format.values import Budget, Decoder, Encoded, LazyBytes
from ckptcli.listing import info_dict
from ckptcli.progress import NULL, Progress
from ckptcli.store import layout
from ckptcli.store.backends import known_schemes, parse_location, redact
from ckptcli.store.repository import Store, resolve_store_path, store_location
from ckptcli.store.single import CheckpointFile, add_damaged_hint, is_checkpoint_file

__all__ = [
    "Checkpoint",
    "PathLike",
    "Source",
    "describe_section",
    "describe_value",
    "looks_like_a_path",
    "names_a_file",
    "open_checkpoint",
    "refuse_file_and_ref",
    "refuse_output_into_source",
    "refuse_url",
    "store_or_init",
]

PathLike = str | os.PathLike[str]


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

    def carried(self, name: str) -> Encoded:
        """A section to carry into another take (`take(carry=...)`) with its logical size
        (logical_size), so the new checkpoint's SIZE counts it as a take of the same value
        does: the section's tree is read once here, never by `ckpt ls`."""
        return Encoded(self.section_ev(name), logical_size(self.section(name, lazy_bytes=True), name))

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
        the output, so write to a temporary file (write_file_atomic) or a spool.

        JSON is strict, as JSON has no byte strings, NaN or infinities: a state holding
        one is refused (InvalidInputError), except NaN and infinities in a document taken
        as JSON, which held them as Python's json writes them (NaN, Infinity) and gets
        them back so: restore gives back the document that was taken."""
        sections = {n: Section(ev, f"section {n}") for n, ev in self.manifest.sections.items() if n != "blobs"}
        as_taken = self.manifest.layout.get("format") == "json"
        write_document(join_document(self.manifest.layout, sections), self.source, out, fmt, allow_nan=as_taken)

    def write_view(self, out: IO[bytes], *, indent: int | None = None) -> None:
        """Write the whole checkpoint (metadata, layout, every section) in the JSON view
        (jsonview; file data as {"$blob": ...}), streamed as `write_state` is (`ckpt cat`)."""
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
        durable: bool = False,
        protect: list[Path] | None = None,
    ) -> int:
        """Write the blobs (all, or `names`) under `target`; returns the bytes written.
        All or nothing, set-uid/set-gid/sticky bits dropped unless `keep_special_modes`
        (see blobs.restore_blobs; `report` receives the counts and paths).

        `in_place` (no `target`): each blob back to the path it was taken from, replacing
        what is there. `delete`: also remove what the target holds that the checkpoint
        does not. `include`: only paths matching these globs. `dry_run`: write nothing,
        `report` says what would change. `durable`: everything written is on disk before
        this returns (one syncfs of the target's file system; without it the files are
        in the page cache, as after tar or restic restore). Nothing at or below a path in
        `protect` (a file the caller is about to rename into place) is written or deleted.

        Raises:
            UnsafePathError, CorruptError before anything is written (blobs.validate);
            LimitExceededError, also before anything is written, when the files declare
            more bytes than the file system of `target` has free (less a margin), unless
            `force`; ConflictError, StoreIOError while writing (what was written is undone);
            InvalidInputError, before anything is written, for `delete` when what was
            chosen (the blobs, `names`, cut down to `include`) holds no file or link.
        """
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
            durable=durable,
            protect=[
                *([self.source.directory] if isinstance(self.source, Store) and self.source.directory is not None else []),
                *(protect or []),
            ],
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
            what = {
                "dir": "a directory",
                "symlink": f"a symlink to {entry.get('target')!r}",
                "skipped": "not stored (skipped when taken)",
            }.get(str(kind), "not a file")
            raise InvalidInputError(
                f"{where}: {path} is {what}",
                hint="give the path of a file (`ckpt ls-files` lists them); `ckpt restore --include` restores directories",
            )
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


def logical_size(value: Any, name: str = "") -> int:
    """A section's share of its checkpoint's logical size (stats.logical_bytes, the SIZE
    of `ckpt ls`), as a take counts it: the bytes of its strings (UTF-8) and byte strings;
    of the blobs section, the bytes of its files. Map keys, numbers and structure count
    nothing, nor does a blob listing's own strings (names, types, link targets, origins).
    Not `ckpt show`'s bytes (describe_value), which counts keys, and 8 a number."""
    if name == "blobs" and isinstance(value, dict):
        return _count_blob_files(value)[1]
    total = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v.encode("utf-8", "surrogatepass"))
        elif isinstance(v, bytes):
            total += len(v)
        elif isinstance(v, LazyBytes):
            total += v.size
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return total


def _type_name(v: Any) -> str:
    # a large byte string is decoded lazily (LazyBytes): it is still "bytes" to the user
    return {
        dict: "map",
        list: "list",
        str: "string",
        bytes: "bytes",
        LazyBytes: "bytes",
        int: "int",
        float: "float",
        bool: "bool",
        type(None): "null",
    }.get(type(v), type(v).__name__)


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


#: a URL as given (s3://b/x), or as a Path keeps it (s3:/b/x: one slash is lost)
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):/(/?)(.*)", re.DOTALL)


def refuse_url(arg: str | os.PathLike[str], what: str) -> None:
    """`arg` is a local path by design (`what`: "the output", "a checkpoint file"); a
    store's URL there (s3://bucket/x) is never taken for the relative path `s3:/bucket/x`.

    Raises:
        UsageError naming the URL (its secrets left out) and where a URL goes instead."""
    text = os.fspath(arg)
    if not isinstance(text, str) or not text:
        return
    found = _URL.fullmatch(text)  # s3:/x too: a Path argument has its "//" made one "/"
    if found is None or (not found[2] and found[1].lower() not in known_schemes()):
        parse_location(text)  # s3:bucket, file:s3:/x: a mistyped URL, refused as --store refuses it
        return  # a path; or a directory named like "dir:" with no store scheme
    url = redact(f"{found[1]}://{found[3]}")
    raise UsageError(
        f"{what} is a local path, and {url} is a URL",
        hint="a store on object storage is given as --store URL; `ckpt copy` copies checkpoints into one",
    )


def names_a_file(ref: str) -> bool:
    """A reference is a checkpoint file if it looks like a path to one, or is a checkpoint
    file; a bare name that merely matches some other file in cwd is still a tag or branch."""
    p = Path(ref)
    return p.is_file() and (looks_like_a_path(ref) or is_checkpoint_file(p))


def looks_like_a_path(ref: str) -> bool:
    """Whether `ref` is a path, never a reference: it ends in ".ckpt", is absolute or
    starts with "./" or "../" (no reference does), or holds a "/" and something is
    there (a reference may hold one: a reflog entry, `tags/good@{1}`). A path that does
    not exist is NotFoundError, a directory InvalidInputError (CheckpointFile), whether
    or not there is a store, as `ckpt import` says of the same path."""
    if ref.endswith(".ckpt") or ref.startswith(("/", "./", "../", os.sep, f".{os.sep}", f"..{os.sep}")):
        return True
    return ("/" in ref or os.sep in ref) and os.path.lexists(ref)


def refuse_file_and_ref(ref: str, store: Store | None = None, *, store_path: PathLike | None = None) -> None:
    """A bare word that is both a checkpoint file here (names_a_file, without the marks
    of a path: a .ckpt suffix, a "/", "./" or "../") and a reference the store resolves
    (a tag, a branch, an id prefix, `latest`, KIND:NAME...) is neither one silently.
    Only the store of `store`, else of `store_path`, else the one found from here, is
    asked; with no store (or none that opens), or a word it does not resolve, the word
    is the file, as it always was.

    Raises:
        InvalidInputError naming both meanings and how to give each."""
    if looks_like_a_path(ref) or not names_a_file(ref):
        return
    opened = None
    if store is None:
        try:
            store = opened = Store.open(store_location(store_path) if store_path is not None else None)
        except CkptError:
            return  # no store: the word can only be the file
    # what the store says while it is asked (a damaged ref read around) is said again,
    # if it matters, when it is read for the checkpoint it names
    said, store.on_warning, warnings = store.on_warning, None, list(store.warnings)
    try:
        cid = store.resolve(ref)
        what = _what_ref(store, ref)
    except NotFoundError:
        return  # not a reference there: the file
    except CkptError as exc:  # a reference there that cannot be read (damaged, several ids): still a second meaning
        raise InvalidInputError(
            f"{ref!r} is ambiguous: it is the checkpoint file ./{ref}, and a reference of the store at {store.location} "
            f"that cannot be resolved ({exc.message})",
            hint=f"give ./{ref} for the file; for the reference: {exc.hint or 'repair it first (ckpt repair refs)'}",
        ) from None
    finally:
        store.on_warning, store.warnings[:] = said, warnings
        if opened is not None:
            opened.close()
    other = f"{ref}~0" if "~" not in ref else f"its id {cid.hex()[:12]}"
    raise InvalidInputError(
        f"{ref!r} is ambiguous: it is the checkpoint file ./{ref}, and {what} in the store at {store.location} "
        f"(checkpoint {cid.hex()[:12]})",
        hint=f"give ./{ref} for the file, or {other} for the checkpoint of the store",
    )


def _what_ref(st: Store, ref: str) -> str:
    """What kind of reference `ref` is, in words, for the line that says it is ambiguous."""
    base, back = ref, ""
    if "~" in ref:
        base, _, n = ref.rpartition("~")
        back = f"{n} parent(s) back from "
    if base.endswith("}") and "@{" in base:
        return f"{back}the reflog entry {base}"
    if base == "latest":
        return f"{back}`latest`"
    if NAME_RE.match(base):
        for ns in ("tags", "branches"):
            if st.read_ref(layout.ref_path(f"{ns}/{base}")) is not None:
                return f"{back}the {ns[:-1]} {base}"
    if ":" in base:
        return f"{back}the latest checkpoint of {base}"
    return f"{back}the checkpoint whose id starts with {base}"


def refuse_output_into_source(ck: Checkpoint, out: PathLike, what: str, names: Collection[str] | None = None) -> None:
    """An output path (`export -o`, `restore -o`, `restore --blobs`) must not lie inside
    the store the checkpoint is read from, nor be the checkpoint file itself: it would
    replace the only copy of what it is made of. For a blobs directory, `names` are the
    top-level names restore writes there: none may lead into the store either.

    Raises:
        InvalidInputError naming both paths.
    """
    refuse_url(out, what)
    real = Path(os.path.realpath(out))
    src = ck.source
    if isinstance(src, CheckpointFile):
        if real == Path(os.path.realpath(src.path)):
            raise InvalidInputError(f"{what} {out} is the checkpoint file it is read from", hint="write it elsewhere")
        return
    if src.directory is None:
        return  # a store on object storage: no local path is inside it
    root = Path(os.path.realpath(src.directory))
    if real == root or root in real.parents:
        raise InvalidInputError(
            f"{what} {out} is inside the store at {src.location}, which it would damage", hint="write it outside the store"
        )
    if names is not None and real in root.parents:
        # the store is below the blobs directory: a blob named after the directory that
        # holds it would be merged into the store
        first = root.relative_to(real).parts[0]
        if first in names:
            raise InvalidInputError(
                f"blob {first!r} would be restored into {real / first}, which holds the store at {src.location}",
                hint="restore into another directory",
            )


def open_checkpoint(ref: str, store: Store | None = None, *, store_path: PathLike | None = None) -> Checkpoint:
    """A checkpoint by reference: a checkpoint file's path, an id or unique prefix,
    a tag, a branch, KIND:NAME (its latest), or `latest`; `~N` walks back N parents.
    A URL is neither (UsageError): a store at a URL is `store`."""
    refuse_url(ref, "a checkpoint file")
    p = Path(ref)
    if names_a_file(ref):
        refuse_file_and_ref(ref, store, store_path=store_path)
        if not is_checkpoint_file(p):
            with open(p, "rb") as fh:
                try:
                    framing.check_header(fh.read(framing.HEADER_SIZE), framing.KIND_FILE, str(p), outer=True)
                except CorruptError as exc:
                    add_damaged_hint(exc, p)
                    raise
        f = CheckpointFile(p)
        f.check_checksum()
        return Checkpoint(f, f.id)
    if looks_like_a_path(ref):
        f = CheckpointFile(p)  # not a regular file: NotFoundError, or a directory's InvalidInputError
        f.check_checksum()
        return Checkpoint(f, f.id)
    st = store if store is not None else Store.open(store_location(store_path) if store_path is not None else None)
    return Checkpoint(st, st.resolve(ref))


def store_or_init(path: PathLike) -> Store | Path:
    """The store at `path` (a store directory, a directory holding ``.ckpt/``, or a URL
    of object storage: ``s3://bucket/prefix``...) as its path (a URL's: the store,
    opened), or a new empty store made there (as `ckpt init` would) when there is none:
    what `CkptSaver.open` and `CkptStore.open` give their constructor. Raises:
    CorruptError and the like for a store that is there but does not open (never made
    again on top)."""
    where = store_location(path)
    if isinstance(where, str):
        return _remote_store_or_init(where)
    p = where
    try:
        resolve_store_path(p)
    except CkptError:
        if (p / "config").exists():
            raise
        return Store.init(p, limits.FORMAT_VERSION)
    return p


def _remote_store_or_init(url: str) -> Store:
    """The store at `url`, made there first when there is none (a store another process
    makes meanwhile is opened)."""
    try:
        return Store.open(url)
    except StoreNotFoundError:
        pass
    try:
        return Store.init(url, limits.FORMAT_VERSION)
    except ConflictError:
        return Store.open(url)

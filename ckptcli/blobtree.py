"""The blob tree of the `blobs` section: capturing files and directories into it, the
checks every entry passes before anything is restored, and finding and listing its
paths. Restoring is ckptcli.blobs.

A blob entry is a map (formats/v1.md "The blobs section")::

    {"type": "file", "size": int, "mode": int, "mtime_ns": int, "data": bytes,
     "ctime_ns": int, "ino": int}          (ctime_ns and ino: optional, to skip unchanged files)
    {"type": "dir", "mode": int, "mtime_ns": int, "entries": {name: entry, ...}}
    {"type": "symlink", "target": str}     (relative, no ".." component)
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ckptcli.errors import CorruptError, InvalidInputError, NotFoundError, StoreIOError, UnsafePathError
from ckptcli.format.values import Encoded, Encoder, LazyBytes, bytes_ev
from ckptcli.progress import NULL, Progress

__all__ = [
    "NAME_MAX",
    "CaptureReport",
    "FileInfo",
    "Matcher",
    "capture",
    "check_component",
    "check_origin",
    "filter_tree",
    "find_entry",
    "holds_files",
    "list_files",
    "make_matcher",
    "split_blob_path",
    "tree_size",
    "validate",
]

#: the longest file name (bytes) a file system holds (NAME_MAX)
NAME_MAX = 255


def tree_size(path: Path) -> int:
    """Bytes of regular files under `path` (for a progress total)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if stat.S_ISREG(st.st_mode):
        return st.st_size
    total = 0
    if stat.S_ISDIR(st.st_mode):
        for root, _dirs, files in os.walk(path):
            for f in files:
                try:
                    fst = os.lstat(os.path.join(root, f))
                except OSError:
                    continue
                if stat.S_ISREG(fst.st_mode):
                    total += fst.st_size
    return total


@dataclass
class CaptureReport:
    files: int = 0
    #: files not read again: unchanged since the parent checkpoint
    reused_files: int = 0
    dirs: int = 0
    bytes: int = 0
    #: of `bytes`, those of the files not read again
    reused_bytes: int = 0
    skipped: list[str] = field(default_factory=list)
    #: files whose size or mtime changed while they were read: what was stored may be a
    #: mix of old and new content (a log still being appended to, a file being rewritten)
    changed: list[str] = field(default_factory=list)


def _reusable(parent: Any, st: os.stat_result) -> Any:
    """The parent's file data, if the file looks unchanged (same size, mtime, ctime and
    inode, as restic decides); None when it must be read."""
    if not (isinstance(parent, dict) and parent.get("type") == "file"):
        return None
    same = (
        parent.get("size") == st.st_size
        and parent.get("mtime_ns") == st.st_mtime_ns
        and parent.get("ctime_ns") == st.st_ctime_ns
        and parent.get("ino") == st.st_ino
    )
    data = parent.get("data")
    if not same or not isinstance(data, (bytes, LazyBytes)):
        return None
    return data


@dataclass
class _FileRead:
    """A file `capture` reads: its entry (filled in once read) and its stat when found."""

    path: Path
    st: os.stat_result
    entry: dict[str, Any]
    after: os.stat_result | None = None

    @contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        """The open file; its fstat after the last read is kept (on the reading thread)."""
        with open(self.path, "rb") as fh:
            yield fh
            self.after = os.fstat(fh.fileno())


def capture(
    path: Path,
    encoder: Encoder,
    progress: Progress = NULL,
    report: CaptureReport | None = None,
    parent: Any = None,
    name: str | None = None,
) -> dict[str, Any]:
    """Read a file or directory tree into a blob entry (file data as BYTES chunk trees).

    `parent` is the same entry in the parent checkpoint (decoded with lazy bytes): a
    file whose size, mtime, ctime and inode match it is not read again, its data is
    referenced as it is (the objects are in the store already).

    The tree is walked first; then the files to read go through `encoder.encode_streams`
    in tree order, which reads several large files at once and stores their objects in
    that order, so the same tree always gives the same objects in the same order.
    """
    rep = report if report is not None else CaptureReport()
    reads: list[_FileRead] = []
    # the path the user gave: said wrong here in the user's words (which blob, and where a
    # relative path was looked for); anything else wrong with it, _walk says
    blob = f"blob {name}: " if name else "blob "
    try:
        kind = _special(os.lstat(path).st_mode)
    except FileNotFoundError:
        at = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        raise InvalidInputError(
            f"{blob}{path} does not exist{at}", hint="give the path of an existing file or directory (--blob NAME=PATH)"
        ) from None
    except OSError:
        kind = None
    if kind is not None:
        # below the top such a file is skipped with a warning, as tar does; as the top it
        # would make a blob that holds nothing, taken without a word but that warning
        raise InvalidInputError(
            f"{blob}{path} is {kind}, not a file or directory: a blob holds files, directories and links",
            hint="give the path of a regular file or a directory (--blob NAME=PATH)",
        )
    entry = _walk(path, progress, rep, parent, reads)
    streams = encoder.encode_streams([(r.open, r.st.st_size) for r in reads], progress.advance)
    try:
        for r in reads:
            try:
                ev, size = next(streams)
            except OSError as exc:
                raise StoreIOError(f"cannot read {r.path}: {exc.strerror}") from None
            r.entry["size"] = size
            r.entry["data"] = Encoded(ev)
            rep.bytes += size
            after, st = r.after, r.st
            if after is None or size != st.st_size or after.st_size != st.st_size or after.st_mtime_ns != st.st_mtime_ns:
                rep.changed.append(
                    f"{r.path} (changed while it was read: {st.st_size} bytes when opened, "
                    f"{after.st_size if after else '?'} after; {size} bytes stored)"
                )
    finally:
        streams.close()
    return entry


def _special(mode: int) -> str | None:
    """What a file of this mode is when a blob cannot hold it (None: a file, directory or link)."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _walk(path: Path, progress: Progress, rep: CaptureReport, parent: Any, reads: list[_FileRead]) -> dict[str, Any]:
    """The blob entry of `path`, with the files that must be read added to `reads`
    (their entries get their size and data once read)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        # the top was there (capture checks it): this one went away while the tree was read
        raise InvalidInputError(
            f"blob path {path} disappeared while the blob was read", hint="take again once the files stop changing"
        ) from None
    except OSError as exc:
        raise StoreIOError(f"cannot read {path}: {exc.strerror}") from None
    if stat.S_ISREG(st.st_mode):
        entry: dict[str, Any] = {
            "type": "file",
            "size": st.st_size,
            "mode": stat.S_IMODE(st.st_mode),
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "ino": st.st_ino,
            "data": None,
        }
        rep.files += 1
        reused = _reusable(parent, st)
        if reused is not None:
            entry["data"] = Encoded(bytes_ev(reused), st.st_size)  # in the checkpoint's logical size, though not read
            rep.reused_files += 1
            rep.reused_bytes += st.st_size
            rep.bytes += st.st_size
            progress.advance(st.st_size)
        else:
            reads.append(_FileRead(path, st, entry))
        return entry
    if stat.S_ISDIR(st.st_mode):
        entries: dict[str, Any] = {}
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            raise StoreIOError(f"cannot list {path}: {exc.strerror}") from None
        parent_entries = parent.get("entries") if isinstance(parent, dict) and parent.get("type") == "dir" else None
        for name in names:
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInputError(f"file name {name!r} in {path} is not valid UTF-8; ckpt stores UTF-8 names") from None
            if len(name.encode()) > NAME_MAX:  # a file system that allows longer names: restore could not write it
                raise InvalidInputError(
                    f"file name {name[:40]!r}... in {path} is longer than {NAME_MAX} bytes",
                    hint="rename it; restore could not write it back",
                )
            sub_parent = parent_entries.get(name) if isinstance(parent_entries, dict) else None
            entries[name] = _walk(path / name, progress, rep, sub_parent, reads)
        rep.dirs += 1
        return {"type": "dir", "mode": stat.S_IMODE(st.st_mode), "mtime_ns": st.st_mtime_ns, "entries": entries}
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        if target.startswith("/") or ".." in target.split("/"):
            rep.skipped.append(f"{path} (symlink to {target}: only links that point down into the tree are kept)")
            return {"type": "skipped", "reason": f"symlink to {target!r} leaves the tree"}
        return {"type": "symlink", "target": target}
    rep.skipped.append(f"{path} (not a regular file, directory or symlink)")
    return {"type": "skipped", "reason": "not a regular file, directory or symlink"}


def check_component(name: Any, where: str) -> str:
    """A single path component that cannot climb out of its directory. Every name a
    POSIX file system can hold passes (a backslash is an ordinary character); refused
    are those no directory can hold: empty, '.', '..', '/' or NUL inside, more than 255
    bytes (NAME_MAX), not UTF-8."""
    try:
        size = len(name.encode()) if isinstance(name, str) else -1
    except UnicodeEncodeError:
        size = -1
    if not isinstance(name, str) or size < 0 or name in ("", ".", "..") or "/" in name or "\x00" in name:
        raise UnsafePathError(
            f"{where}: unsafe path component {name!r} inside the checkpoint",
            hint="the checkpoint is hostile or damaged; nothing was written",
        )
    if size > NAME_MAX:
        raise UnsafePathError(
            f"{where}: file name {name[:40]!r}... inside the checkpoint is {size} bytes long, "
            f"more than the {NAME_MAX} a file system allows",
            hint="nothing was written",
        )
    return name


def _check_link(target: Any, rel: str, where: str) -> None:
    """A symlink may only point down: relative, with no '..' component. Lexical checks of
    '..' are not enough, because other links of the same tree can make 'a/..' mean
    anything; a target that only descends stays inside whatever links it passes."""
    if not isinstance(target, str) or not target or target.startswith("/") or "\x00" in target or ".." in target.split("/"):
        raise UnsafePathError(
            f"{where}: symlink {rel} points to {target!r}; ckpt restores only links that point down into the tree",
            hint="nothing was written",
        )


def _check_meta(entry: dict[str, Any], rel: str, where: str) -> None:
    for key in ("mode", "mtime_ns"):
        value = entry.get(key, 0)
        if type(value) is not int:
            raise CorruptError(f"{where}: blob entry {rel} has a {key} that is not an integer: {value!r}")


def validate(entry: Any, rel: str, where: str) -> int:
    """Check a whole blob tree before anything is written; returns its byte size."""
    if not isinstance(entry, dict):
        raise CorruptError(f"{where}: blob entry {rel} is not a map")
    kind = entry.get("type")
    if kind == "file":
        data = entry.get("data")
        if not isinstance(data, (bytes, LazyBytes)):
            raise CorruptError(f"{where}: file {rel} has no data")
        size = data.size if isinstance(data, LazyBytes) else len(data)
        if entry.get("size") != size:
            raise CorruptError(f"{where}: file {rel} declares {entry.get('size')} bytes but holds {size}")
        _check_meta(entry, rel, where)
        return size
    if kind == "dir":
        children = entry.get("entries")
        if not isinstance(children, dict):
            raise CorruptError(f"{where}: directory {rel} has no entries")
        _check_meta(entry, rel, where)
        return sum(validate(child, f"{rel}/{check_component(name, where)}", where) for name, child in children.items())
    if kind == "symlink":
        _check_link(entry.get("target"), rel, where)
        return 0
    if kind == "skipped":
        return 0
    raise CorruptError(f"{where}: blob entry {rel} has unknown type {kind!r}")


Matcher = Callable[[str], bool]


def make_matcher(patterns: list[str] | None) -> Matcher | None:
    """A test of paths NAME/sub/file (a blob's name first) against --include globs, or
    None for no patterns. A pattern without `/` matches any single name on the way (`*.py`
    every .py file, `src` every directory called src and what it holds); one with `/`
    matches the path from the blob name on (`w/src/*`; `*` matches `/` too). A path
    matches when it, or a directory it is in, matches."""
    if not patterns:
        return None
    pats = [p.strip("/") for p in patterns if p.strip("/")]

    def match(rel: str) -> bool:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            for pat in pats:
                if fnmatch.fnmatchcase(prefix if "/" in pat else parts[i - 1], pat):
                    return True
        return False

    return match


def filter_tree(entries: dict[str, Any], match: Matcher, prefix: str = "") -> dict[str, Any]:
    """The part of a validated blob tree whose paths (`prefix` + name) match; a directory
    that does not match is kept with only what matches below it."""
    out: dict[str, Any] = {}
    for name, entry in entries.items():
        rel = prefix + name
        if match(rel):
            out[name] = entry
        elif entry.get("type") == "dir":
            sub = filter_tree(entry["entries"], match, rel + "/")
            if sub:
                out[name] = {**entry, "entries": sub}
    return out


def holds_files(entries: dict[str, Any]) -> bool:
    """Whether a validated blob tree (entries by name) holds a file or a symbolic link at
    any depth: one of empty directories, or of entries skipped when taken, holds none (a
    restore of it writes no file)."""
    stack = list(entries.values())
    while stack:
        entry = stack.pop()
        kind = entry.get("type")
        if kind == "dir":
            stack.extend(entry["entries"].values())
        elif kind != "skipped":
            return True
    return False


def check_origin(origin: Any, name: str, where: str) -> Path:
    """The absolute path blob `name` was taken from, as recorded (`origin`), checked: a
    normalized absolute path (no `.` or `..` component, no NUL), not the root.

    Raises:
        InvalidInputError when none was recorded (taken by ckpt 0.4 or older);
        UnsafePathError for anything else."""
    if origin is None:
        raise InvalidInputError(
            f"{where}: blob {name!r} does not record where it was taken from (taken by an older ckpt)",
            hint="restore it into a directory with --blobs DIR",
        )
    if (
        not isinstance(origin, str)
        or not origin.startswith("/")
        or "\x00" in origin
        or os.path.normpath(origin) != origin
        or origin == "/"
        or origin.startswith("//")
    ):
        raise UnsafePathError(
            f"{where}: blob {name!r} records an unusable origin {origin!r}",
            hint="the checkpoint is hostile or damaged; nothing was written",
        )
    return Path(origin)


@dataclass
class FileInfo:
    """One entry of a blob tree, for listing (`ckpt ls-files`)."""

    path: str  # NAME/sub/file
    type: str  # file, dir, symlink, skipped
    size: int
    mode: int
    mtime_ns: int
    origin: str | None  # where it was taken from (None when the blob records no origin)
    target: str | None = None  # a symlink's

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def split_blob_path(path: str) -> list[str]:
    """NAME/sub/file as its components (leading, trailing and doubled slashes ignored)."""
    return [p for p in path.split("/") if p]


def find_entry(blobs: dict[str, Any], path: str, where: str) -> Any:
    """The entry at NAME/sub/file. Raises: NotFoundError naming what is there."""
    parts = split_blob_path(path)
    if not parts:
        raise NotFoundError(f"{where}: no blob path given", hint="give NAME or NAME/sub/file (`ckpt ls-files` lists them)")
    entries: Any = blobs
    entry: Any = None
    for i, part in enumerate(parts):
        if not isinstance(entries, dict) or part not in entries:
            have = ", ".join(list(entries)[:10]) if isinstance(entries, dict) else "nothing"
            at = "/".join(parts[:i]) or "the blobs section"
            raise NotFoundError(
                f"{where}: {'/'.join(parts[: i + 1])} does not exist (in {at}: {have or 'nothing'})",
                hint="`ckpt ls-files REF` lists the paths",
            )
        entry = entries[part]
        entries = entry.get("entries") if isinstance(entry, dict) and entry.get("type") == "dir" else None
    return entry


def list_files(blobs: dict[str, Any], path: str = "", where: str = "checkpoint") -> list[FileInfo]:
    """Every entry of the blob trees (or of the one at `path`, and what is below it), in
    tree order, directories before their contents."""
    out: list[FileInfo] = []

    def add(rel: str, entry: Any, origin: str | None) -> None:
        if not isinstance(entry, dict):
            return
        kind = str(entry.get("type"))
        data = entry.get("data")
        size = entry.get("size") if isinstance(entry.get("size"), int) else (len(data) if isinstance(data, bytes) else 0)
        mode = entry.get("mode", 0)
        mtime = entry.get("mtime_ns", 0)
        target = entry.get("target")
        out.append(
            FileInfo(
                rel,
                kind,
                size if isinstance(size, int) else 0,
                mode if isinstance(mode, int) else 0,
                mtime if isinstance(mtime, int) else 0,
                origin,
                target if isinstance(target, str) else None,
            )
        )
        if kind == "dir" and isinstance(entry.get("entries"), dict):
            for name, child in entry["entries"].items():
                add(f"{rel}/{name}", child, f"{origin}/{name}" if origin else None)

    parts = split_blob_path(path)
    if parts:
        top = blobs.get(parts[0])
        origin = top.get("origin") if isinstance(top, dict) and isinstance(top.get("origin"), str) else None
        add("/".join(parts), find_entry(blobs, path, where), "/".join([origin, *parts[1:]]) if origin else None)
    else:
        for name, entry in blobs.items():
            origin = entry.get("origin") if isinstance(entry, dict) and isinstance(entry.get("origin"), str) else None
            add(str(name), entry, origin)
    return out

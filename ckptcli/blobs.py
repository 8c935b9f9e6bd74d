"""Files and directories in the `blobs` section: capture, and restore that cannot escape.

A blob entry is a map (formats/v1.md "The blobs section")::

    {"type": "file", "size": int, "mode": int, "mtime_ns": int, "data": bytes,
     "ctime_ns": int, "ino": int}          (ctime_ns and ino: optional, to skip unchanged files)
    {"type": "dir", "mode": int, "mtime_ns": int, "entries": {name: entry, ...}}
    {"type": "symlink", "target": str}     (relative, no ".." component)

Restore checks every name and link target before writing anything, then writes
through directory file descriptors with O_NOFOLLOW, so neither a hostile name
(``../../x``, ``/etc/x``) nor a symlink planted in the target can lead outside it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptcli.errors import ConflictError, CorruptError, InvalidInputError, StoreIOError, UnsafePathError
from ckptcli.format.values import Decoder, Encoded, Encoder, LazyBytes, bytes_ev
from ckptcli.progress import NULL, Progress


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


def capture(
    path: Path,
    encoder: Encoder,
    progress: Progress = NULL,
    report: CaptureReport | None = None,
    parent: Any = None,
) -> dict[str, Any]:
    """Read a file or directory tree into a blob entry (file data as BYTES chunk trees).

    `parent` is the same entry in the parent checkpoint (decoded with lazy bytes): a
    file whose size, mtime, ctime and inode match it is not read again, its data is
    referenced as it is (the objects are in the store already).
    """
    rep = report if report is not None else CaptureReport()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise InvalidInputError(f"blob path {path} does not exist") from None
    except OSError as exc:
        raise StoreIOError(f"cannot read {path}: {exc.strerror}") from None
    if stat.S_ISREG(st.st_mode):
        reused = _reusable(parent, st)
        if reused is not None:
            data: Any = Encoded(bytes_ev(reused))
            size = st.st_size
            rep.reused_files += 1
            progress.advance(size)
        else:
            try:
                with open(path, "rb") as fh:
                    ev, size = encoder.encode_stream(fh, progress.advance)
                    after = os.fstat(fh.fileno())
            except OSError as exc:
                raise StoreIOError(f"cannot read {path}: {exc.strerror}") from None
            data = Encoded(ev)
            if size != st.st_size or after.st_size != st.st_size or after.st_mtime_ns != st.st_mtime_ns:
                rep.changed.append(f"{path} (changed while it was read: {st.st_size} bytes when opened, {after.st_size} after; {size} bytes stored)")
        rep.files += 1
        rep.bytes += size
        return {
            "type": "file",
            "size": size,
            "mode": stat.S_IMODE(st.st_mode),
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "ino": st.st_ino,
            "data": data,
        }
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
            sub_parent = parent_entries.get(name) if isinstance(parent_entries, dict) else None
            entries[name] = capture(path / name, encoder, progress, rep, sub_parent)
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
    """A single path component that cannot climb out of its directory."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name or "\x00" in name or len(name.encode()) > 255:
        raise UnsafePathError(
            f"{where}: unsafe path component {name!r} inside the checkpoint",
            hint="the checkpoint is hostile or damaged; nothing was written",
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
        return size
    if kind == "dir":
        children = entry.get("entries")
        if not isinstance(children, dict):
            raise CorruptError(f"{where}: directory {rel} has no entries")
        return sum(validate(child, f"{rel}/{check_component(name, where)}", where) for name, child in children.items())
    if kind == "symlink":
        _check_link(entry.get("target"), rel, where)
        return 0
    if kind == "skipped":
        return 0
    raise CorruptError(f"{where}: blob entry {rel} has unknown type {kind!r}")


class _Writer:
    def __init__(self, decoder: Decoder, progress: Progress, overwrite: bool) -> None:
        self.decoder = decoder
        self.progress = progress
        self.overwrite = overwrite

    def write(self, dir_fd: int, name: str, entry: dict[str, Any], rel: str) -> None:
        kind = entry["type"]
        if kind == "file":
            self._file(dir_fd, name, entry, rel)
        elif kind == "dir":
            try:
                os.mkdir(name, 0o700, dir_fd=dir_fd)
            except FileExistsError:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    self._replace_or_fail(dir_fd, name, rel)
                    os.mkdir(name, 0o700, dir_fd=dir_fd)
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            try:
                for child, sub in entry["entries"].items():
                    self.write(fd, child, sub, f"{rel}/{child}")
                os.chmod(fd, entry.get("mode", 0o755) & 0o7777)
            finally:
                os.close(fd)
        elif kind == "symlink":
            self._replace_if_exists(dir_fd, name, rel)
            os.symlink(entry["target"], name, dir_fd=dir_fd)

    def _replace_or_fail(self, dir_fd: int, name: str, rel: str) -> None:
        if not self.overwrite:
            raise ConflictError(f"{rel} already exists in the target", hint="pass --overwrite, or restore into an empty directory")
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            raise ConflictError(f"{rel} exists as a directory in the target; remove it first")
        os.unlink(name, dir_fd=dir_fd)

    def _replace_if_exists(self, dir_fd: int, name: str, rel: str) -> None:
        try:
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        self._replace_or_fail(dir_fd, name, rel)

    def _file(self, dir_fd: int, name: str, entry: dict[str, Any], rel: str) -> None:
        self._replace_if_exists(dir_fd, name, rel)
        tmp = f".{name}.ckpt-partial"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        try:
            data = entry["data"]
            if isinstance(data, LazyBytes):
                for piece in self.decoder.iter_bytes(data.oid):
                    os.write(fd, piece)
                    self.progress.advance(len(piece))
            else:
                os.write(fd, data)
                self.progress.advance(len(data))
            os.fchmod(fd, entry.get("mode", 0o644) & 0o7777)
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        mtime = entry.get("mtime_ns")
        if isinstance(mtime, int):
            os.utime(name, ns=(mtime, mtime), dir_fd=dir_fd, follow_symlinks=False)


def restore_blobs(
    blobs: dict[str, Any],
    target: Path,
    decoder: Decoder,
    *,
    names: list[str] | None = None,
    overwrite: bool = False,
    progress: Progress = NULL,
    where: str = "checkpoint",
) -> int:
    """Write blob entries under `target` (created if missing); returns bytes written."""
    chosen = {k: v for k, v in blobs.items() if names is None or k in names}
    total = 0
    for name, entry in chosen.items():
        total += validate(entry, check_component(name, where), where)
    try:
        target.mkdir(parents=True, exist_ok=True)
        root_fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise StoreIOError(f"cannot use {target} as the restore target: {exc.strerror}") from None
    progress.start("restoring blobs", total)
    try:
        w = _Writer(decoder, progress, overwrite)
        for name, entry in chosen.items():
            w.write(root_fd, name, entry, name)
    except OSError as exc:
        raise StoreIOError(f"cannot write into {target}: {exc.strerror}") from None
    finally:
        os.close(root_fd)
        progress.finish()
    return total

"""Where the digest cache (ckptcli/format/digests.py) lives: the user's own cache
directory, one file per store and subject, never the store.

A pair in the cache names the bytes a take stores, so the file must be one only its user
can write: a file in a shared store's `cache/` could be planted by anyone who can write
the store, and one planted pair would make a take store the wrong bytes. So it is kept
where restic keeps its cache and ckpt its object cache: CKPT_CACHE_DIR/digests when that
is set (empty: no cache), else $XDG_CACHE_HOME/ckpt/digests, else ~/.cache/ckpt/digests;
the directory is made 0700, each file 0600; a directory or file there that is a link, or
is not the user's own (owned by another, or writable by group or others), is never read
or written through. Any file may be deleted at any time; the directory
keeps the MAX_FILES most recently written, and ckpt never removes a file there it did not
name (a directory `digests` the user already had keeps the user's files).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
from pathlib import Path

from ckptcli.format.digests import HEAD_SIZE, decode_file, encode_file, file_size

__all__ = ["MAX_FILES", "DigestFile", "digest_dir"]

#: cache files kept (one per store and subject taken with files); the oldest go first
MAX_FILES = 256
#: the names ckpt gives the files of the directory: a cache file, or a temporary one
_OURS = re.compile(r"[0-9a-f]{32}|\.[0-9a-f]{32}\.[0-9]+\.[0-9a-f]{8}\.tmp")


def digest_dir() -> Path | None:
    """The directory of the digest cache files (see the module docstring); None when
    CKPT_CACHE_DIR is set empty."""
    given = os.environ.get("CKPT_CACHE_DIR")
    if given is not None:
        return Path(given) / "digests" if given else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ckpt" / "digests"


def _private(st: os.stat_result) -> bool:
    """Whether a file or directory is the user's own: owned by them, and no one else may
    write it (as ssh asks of ~/.ssh). Another user who could write it could plant a pair."""
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _private_dir(d: Path, make: bool) -> bool:
    """Whether `d` is a directory (not a link) of the user's own to read and write cache
    files in; made (0700) when missing and `make`."""
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        if not make:
            return False
        try:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.lstat(d)
        except OSError:
            return False
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and _private(st)


class DigestFile:
    """The digest cache file of one subject of one store (`location`: the store's path
    or URL, as Store.location gives it)."""

    def __init__(self, location: str, subject: str, directory: Path | None = None) -> None:
        self.dir = directory if directory is not None else digest_dir()
        name = hashlib.sha256(f"{location}\0{subject}".encode()).hexdigest()[:32]
        self.path = self.dir / name if self.dir is not None else None

    def load(self) -> dict[bytes, bytes]:
        """The pairs of the file; {} when there is none, or it is not one whole and sound
        regular file (a link, a FIFO, a directory, damaged, cut short, too large)."""
        if self.path is None or self.dir is None or not _private_dir(self.dir, make=False):
            return {}
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return {}
        try:
            st = os.fstat(fd)
            size = file_size(os.pread(fd, HEAD_SIZE, 0)) if stat.S_ISREG(st.st_mode) and _private(st) else None
            if size is None or st.st_size != size:
                return {}
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(size + 1)
        except OSError:
            return {}
        finally:
            os.close(fd)
        return decode_file(data) or {}

    def save(self, pairs: list[tuple[bytes, bytes]]) -> None:
        """Write the file whole (a temporary file renamed over it; not made durable: a
        cache). Skipped when the directory cannot be made or written."""
        if self.path is None or self.dir is None or not _private_dir(self.dir, make=True):
            return
        temp = self.dir / f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(encode_file(pairs))
            os.replace(temp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                temp.unlink()
            return
        self._bound()

    def drop(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()

    def _bound(self) -> None:
        """Keep the MAX_FILES most recently written cache files of the directory (and the
        temporary files of writers killed before their rename). Only files named as ckpt
        names them are counted or removed: anything else there is not ckpt's to delete."""
        assert self.dir is not None
        try:
            with os.scandir(self.dir) as it:
                files = [
                    (e.stat(follow_symlinks=False).st_mtime_ns, e.path)
                    for e in it
                    if _OURS.fullmatch(e.name) and e.is_file(follow_symlinks=False)
                ]
        except OSError:
            return
        if len(files) <= MAX_FILES:
            return
        files.sort()
        for _mtime, path in files[: len(files) - MAX_FILES]:
            with contextlib.suppress(OSError):
                os.unlink(path)

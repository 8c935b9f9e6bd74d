"""A local cache of the small content-named objects of remote stores: index files and
manifests, whose names are the SHA-256 of their bytes. A cached copy is checked against
its name whenever it is read, so it is never stale and a damaged or planted one is
ignored (and replaced); any file of the cache may be deleted at any time.

Where: CKPT_CACHE_DIR, else $XDG_CACHE_HOME/ckpt/objects, else ~/.cache/ckpt/objects;
shared by every remote store of the user (equal bytes are equal objects).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
from pathlib import Path

from ckptcli.errors import UnsafePathError

__all__ = ["ObjectCache", "default_cache"]

_NAME = re.compile(r"[0-9a-f]{64}")
_MAX = 64 << 20  # larger objects are not cached (an index file is far smaller)


class ObjectCache:
    """Files `root/<2 hex>/<64 hex>` holding the object of that SHA-256."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def cacheable(name: str) -> bool:
        return bool(_NAME.fullmatch(name))

    def _shard(self, name: str) -> Path:
        """The directory of `name` (root/<2 hex>), refused if it is a symbolic link: the
        cache writes (and removes) files in it, never anywhere it would lead. The root
        itself may be a link (a cache directory kept elsewhere). Raises: UnsafePathError."""
        d = self.root / name[:2]
        try:
            linked = stat.S_ISLNK(os.lstat(d).st_mode)
        except OSError:
            linked = False  # not there yet: made below, a directory
        if linked:
            raise UnsafePathError(
                f"{d} is a symbolic link; ckpt writes nothing through it (it would write outside its object cache)",
                hint="remove it (any file of the cache may be deleted), or set CKPT_CACHE_DIR to another directory",
            )
        return d

    def get(self, name: str) -> bytes | None:
        """The object named `name` if a good copy is cached, else None.
        Raises: UnsafePathError (`_shard`)."""
        path = self._shard(name) / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(_MAX + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        if hashlib.sha256(data).hexdigest() != name:
            with contextlib.suppress(OSError):
                path.unlink()  # damaged or planted: fetched again and replaced
            return None
        return data

    def put(self, name: str, data: bytes) -> None:
        """Keep `data` (whose SHA-256 is `name`); a cache that cannot be written is skipped.
        Raises: UnsafePathError (`_shard`)."""
        if len(data) > _MAX or hashlib.sha256(data).hexdigest() != name:
            return
        d = self._shard(name)
        temp = d / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            d.mkdir(parents=True, exist_ok=True)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(temp, d / name)
        except OSError:
            with contextlib.suppress(OSError):
                temp.unlink()


def default_cache() -> ObjectCache | None:
    """The user's cache (see the module docstring); None when CKPT_CACHE_DIR is set empty."""
    given = os.environ.get("CKPT_CACHE_DIR")
    if given is not None:
        return ObjectCache(Path(given)) if given else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return ObjectCache(Path(base) / "ckpt" / "objects")

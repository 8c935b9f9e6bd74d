"""Any other protocol fsspec knows (`memory://`, `sftp://`, `abfs://`, `hdfs://`, ...): a
store through an fsspec filesystem (`pip install 'ckptcli[fsspec]'` and the protocol's own
package). `--store-option KEY=VALUE` pairs go to the filesystem's constructor as strings.

fsspec has no conditional writes, so this backend says `conditional_writes = False`: its
put_if_absent and put_if_match check, then write. Between the check and the write another
host may write too; a store on this backend serialises its ref moves under its lock.
"""

from __future__ import annotations

import datetime
import gc
import hashlib
import io
import sys
import traceback
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from ckptcli.errors import CkptError, InvalidInputError, NotFoundError, StoreIOError
from ckptcli.store.backends.base import ObjectBackend, ObjectInfo, ObjectWriter
from ckptcli.store.backends.paths import check_limit, check_path, check_prefix
from ckptcli.store.backends.s3 import _scrub, _secrets, redact_url

__all__ = ["FsspecBackend"]

# keys of fsspec's info() that change when a file's bytes are replaced, in order of trust
_VERSION_KEYS = (
    "ETag",
    "etag",
    "e_tag",
    "md5Hash",
    "generation",
    "version_id",
    "VersionId",
    "mtime",
    "LastModified",
    "last_modified",
    "created",
)


class FsspecBackend(ObjectBackend):
    """A store under a directory of an fsspec filesystem. put_if_absent and put_if_match
    are check-then-write (not atomic against other writers: conditional_writes is False).
    The etag is the one the filesystem reports (ETag, generation, or modification time
    with the size), else a hash of the content."""

    conditional_writes = False

    def __init__(self, fs: Any, root: str, url: str, secrets: list[str]) -> None:
        self._fs, self._root, self.url, self._secrets = fs, root.rstrip("/"), url, secrets

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, str]) -> FsspecBackend:
        """Args: `PROTOCOL://PATH`, the `--store-option` pairs (the filesystem's keyword
        arguments). Raises: InvalidInputError for an unknown protocol or a missing package."""
        shown = redact_url(url)
        try:
            import fsspec
        except ImportError:
            raise InvalidInputError(f"{shown}: needs the fsspec package", hint="pip install 'ckptcli[fsspec]'") from None
        protocol = urlsplit(url).scheme.lower()
        secrets = _secrets(options, {}, url)
        failure: CkptError | None = None
        try:
            cls_ = fsspec.get_filesystem_class(protocol)
            root = cls_._strip_protocol(url)
            # what the URL says (an ftp:// or sftp:// host, port, user), the options over it
            fs = fsspec.filesystem(protocol, **{**cls_._get_kwargs_from_urls(url), **dict(options)})
        except Exception as exc:  # noqa: BLE001 - each fsspec filesystem raises its own
            first = _scrub(" ".join(str(exc).split())[:300] or type(exc).__name__, secrets)
            if isinstance(exc, (ValueError, ImportError, TypeError)):
                failure = InvalidInputError(
                    f"{shown}: {first}", hint="install the package of that protocol, or check the URL and --store-option keys"
                )
            else:  # it could not reach its server (a refused connection, a timeout, a login)
                failure = StoreIOError(
                    f"{shown}: cannot connect: {first}", hint="check that the server is up, the URL and the store options"
                )
            _drop_quietly(exc)
        if failure is not None:
            raise failure
        return cls(fs, root if isinstance(root, str) else root[0], shown, secrets)

    def _full(self, path: str) -> str:
        check_path(path, self.url)
        return f"{self._root}/{path}" if self._root else path

    def _error(self, path: str, verb: str, exc: BaseException) -> CkptError:
        if isinstance(exc, FileNotFoundError):
            return NotFoundError(f"{self.url}/{path}: no such object")
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        return StoreIOError(_scrub(f"{self.url}/{path}: {verb} failed: {reason}", self._secrets))

    def _etag(self, info: Mapping[str, Any], data: bytes | None = None) -> str:
        for key in _VERSION_KEYS:
            value = info.get(key)
            if value not in (None, ""):
                if isinstance(value, datetime.datetime):  # info() and find() of one filesystem may differ
                    value = value.timestamp()
                return f"{key}:{value}:{info.get('size')}"
        if data is None:
            data = self._fs.cat_file(info["name"])
        return "sha256:" + hashlib.sha256(data).hexdigest()

    def _relative(self, name: str) -> str:
        name = self._fs._strip_protocol(name)
        root = self._root
        return name[len(root) + 1 :] if root and name.startswith(root + "/") else name.lstrip("/")

    def get(self, path: str) -> bytes:
        return self.get_versioned(path)[0]

    def get_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str]:
        # fsspec reads bytes and stat apart: read the stat on both sides, and again if the
        # object changed in between, so the etag is the one of these bytes. With a limit,
        # one ranged read; a filesystem without a version key (_VERSION_KEYS) hashes an
        # object longer than the limit whole for its etag (read again by _etag)
        full = self._full(path)
        check_limit(limit, f"{self.url}/{path}")
        try:
            for _ in range(5):
                before = self._fs.info(full)
                size = int(before["size"])
                if limit is None:
                    data = bytes(self._fs.cat_file(full))
                else:
                    data = bytes(self._fs.cat_file(full, start=0, end=min(limit, size))) if min(limit, size) > 0 else b""
                whole = data if limit is None or size <= limit else None
                after = self._fs.info(full)
                if self._etag(before, whole) == self._etag(after, whole):
                    return data, self._etag(after, whole)
            raise StoreIOError(f"{self.url}/{path}: changed on every read; try again")
        except CkptError:
            raise
        except Exception as exc:  # noqa: BLE001 - each fsspec filesystem raises its own
            raise self._error(path, "get", exc) from None

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InvalidInputError(f"{self.url}/{path}: a range needs offset >= 0 and length >= 0, not {offset}, {length}")
        full = self._full(path)
        try:
            size = int(self._fs.info(full)["size"])
            if length == 0 or offset >= size:
                return b""
            return bytes(self._fs.cat_file(full, start=offset, end=min(offset + length, size)))
        except CkptError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._error(path, "get", exc) from None

    def stat(self, path: str) -> ObjectInfo:
        full = self._full(path)
        try:
            info = self._fs.info(full)
            if info.get("type") == "directory":
                raise FileNotFoundError(full)
            return ObjectInfo(path, int(info["size"]), self._etag(info))
        except CkptError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._error(path, "stat", exc) from None

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        directory = check_prefix(prefix, self.url).rpartition("/")[0]
        base = f"{self._root}/{directory}" if directory else self._root
        try:
            found = self._fs.find(base or "/", detail=True, withdirs=False) if self._fs.exists(base or "/") else {}
            infos = [
                ObjectInfo(rel, int(info["size"]), self._etag(info))
                for name, info in found.items()
                if (rel := self._relative(name)).startswith(prefix) and info.get("type") != "directory"
            ]
        except CkptError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._error(prefix, "list", exc) from None
        infos.sort(key=lambda info: info.path)
        yield from infos

    def put(self, path: str, data: bytes) -> ObjectInfo:
        full = self._full(path)
        data = bytes(data)
        try:
            parent = full.rpartition("/")[0]
            if parent:
                self._fs.makedirs(parent, exist_ok=True)
            self._fs.pipe_file(full, data)
            return ObjectInfo(path, len(data), self._etag(self._fs.info(full), data))
        except CkptError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._error(path, "put", exc) from None

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Check, then write: not atomic against another writer (conditional_writes is False)."""
        if self.exists(path):
            return False
        self.put(path, data)
        return True

    def put_if_match(self, path: str, data: bytes, etag: str | None) -> ObjectInfo | None:
        """Check the etag, then write: not atomic against another writer (conditional_writes is False)."""
        try:
            now: str | None = self.stat(path).etag
        except NotFoundError:
            now = None
        if now != etag:
            return None
        return self.put(path, data)

    def open_writer(self, path: str) -> ObjectWriter:
        self._full(path)
        return _FsspecWriter(self, path)

    def delete(self, path: str) -> None:
        full = self._full(path)
        try:
            self._fs.rm_file(full)
        except FileNotFoundError:
            return
        except Exception as exc:  # noqa: BLE001
            raise self._error(path, "delete", exc) from None


def _drop_quietly(exc: BaseException) -> None:
    """Forget the filesystem a failed constructor left half-built (`exc`'s frames hold it):
    its destructor runs now, and what it raises about the attributes it never got (fsspec's
    FTPFileSystem.__del__) is not printed as a traceback, at once or at exit."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda _unraisable: None
    try:
        traceback.clear_frames(exc.__traceback__)
        exc.__traceback__ = None
        gc.collect()
    finally:
        sys.unraisablehook = hook


class _FsspecWriter(ObjectWriter):
    """Parts held in memory and put whole at commit: fsspec has no multipart upload that
    every protocol shares, and nothing may be visible before commit."""

    def __init__(self, backend: FsspecBackend, path: str) -> None:
        self._backend, self._path = backend, path
        self._buffer: io.BytesIO | None = io.BytesIO()

    def write(self, data: bytes | memoryview) -> None:
        if self._buffer is None:
            raise ValueError("write to a committed or aborted writer")
        self._buffer.write(data)

    def commit(self) -> ObjectInfo:
        if self._buffer is None:
            raise ValueError("commit of a committed or aborted writer")
        data, self._buffer = self._buffer.getvalue(), None
        return self._backend.put(self._path, data)

    def abort(self) -> None:
        self._buffer = None

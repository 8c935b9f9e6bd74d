"""Where the LangGraph saver and memory store keep their files on this host (`local_root`).

On a local store, beside the store: ``<store>/langgraph/`` (journals, thread leases,
the recovery lock, the memory store's logs) and ``<store>/locks/``. On a store on object
storage (``s3://...``, ``memory://...``, any fsspec URL) the same files, laid out the
same way, live in a directory on this host's disk: the ``journal_dir`` the application
gives, else one per store URL under the user's state directory,
``$XDG_STATE_HOME/ckpt/journals/<16 hex digits>`` (``~/.local/state`` when XDG_STATE_HOME
is not set), the digits being the start of the SHA-256 of the store's redacted URL. The
directory names its store in ``store-url`` (the URL without secrets), so that it is never
replayed into another store, and a directory inside a local store (its own files) is
refused. A ``memory://`` store lives and dies with its process: its default directory is
in one of the process's own, ``.../journals/memory-<pid>.<start time>/``, removed when the
process exits, and its ``store-url`` names the process too, so that a journal of a memory
store never comes back into another process's store of the same name. docs/langgraph.md ("A store on
object storage") is the user's view."""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ckptcli.adapters.langgraph.journal import open_regular, own_dir
from ckptcli.errors import InvalidInputError, StoreIOError
from ckptcli.store import layout
from ckptcli.store.backend import LocalBackend
from ckptcli.store.backends import redact
from ckptcli.store.locking import LocalLocks
from ckptcli.store.repository import Store, store_location

__all__ = ["STORE_URL_FILE", "HostLocks", "ToMake", "default_dir", "host_branch", "is_remote", "local_root", "store_for"]

STORE_URL_FILE = "store-url"  # in a journal directory of a remote store: the store it belongs to (redacted)
_URL_MAX = 4096  # the most of `store-url` read


def is_remote(store: Store) -> bool:
    """Whether `store` is on object storage (not a directory of this host)."""
    return not isinstance(store.backend, LocalBackend)


def _is_memory(location: str) -> bool:
    return location.split(":", 1)[0].lower() == "memory"


_process_dirs: set[Path] = set()  # removed at exit
_process_lock = threading.Lock()


def _process_tag() -> str:
    """This process, as no other process (now or later) is: its pid and start time."""
    try:
        with open(f"/proc/{os.getpid()}/stat", "rb") as f:
            started = f.read().rsplit(b")", 1)[1].split()[19].decode()  # field 22: start time, in clock ticks since boot
    except (OSError, IndexError):
        started = str(_STARTED)
    return f"{os.getpid()}.{started}"


_STARTED = time.time_ns()  # where /proc is not: when this module was loaded


def _memory_dir(base: Path) -> Path:
    """This process's directory, in `base`, of the journal directories of its memory://
    stores (removed when the process exits)."""
    path = base / f"memory-{_process_tag()}"
    with _process_lock:
        if path not in _process_dirs:
            _process_dirs.add(path)
            atexit.register(shutil.rmtree, path, True)
    return path


def _identity(url: str) -> str:
    """What a journal directory's `store-url` says of the store at `url` (redacted): the
    URL, and for a memory:// store the process it lives in."""
    return f"{url} (in process {_process_tag()})" if _is_memory(url) else url


def default_dir(location: str) -> Path:
    """The journal directory of the store at URL `location` on this host when the
    application names none (module docstring)."""
    state = os.environ.get("XDG_STATE_HOME") or ""
    base = (Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state") / "ckpt" / "journals"
    digest = hashlib.sha256(redact(location).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return (_memory_dir(base) if _is_memory(location) else base) / digest


@dataclass(frozen=True)
class ToMake:
    """The store at `path`, made (as `ckpt init` would) when there is none: what `open`
    gives the saver's and the memory store's constructor, which make it only once every
    option is checked."""

    path: str | os.PathLike[str]


def store_for(store: Store | ToMake | str | os.PathLike[str], journal_dir: str | os.PathLike[str] | None) -> Store:
    """The store a constructor was given (opened, or made for a `ToMake`), once its other
    options are checked. InvalidInputError, before anything is made, for a journal_dir
    beside a local store or inside one."""
    if isinstance(store, Store):
        return store
    path = store.path if isinstance(store, ToMake) else store
    if journal_dir is not None and not isinstance(store_location(path), str):
        raise InvalidInputError(
            f"journal_dir is for a store on object storage; the local store {path} keeps its journal in it", hint="leave journal_dir out"
        )
    if journal_dir is not None:
        _outside_stores(Path(journal_dir).expanduser())
    if isinstance(store, ToMake):
        from ckptcli.checkpoint import store_or_init

        made = store_or_init(path)
        return made if isinstance(made, Store) else Store.open(made)
    return Store.open(store_location(path))


def local_root(store: Store, journal_dir: str | os.PathLike[str] | None = None, create: bool = True) -> Path | None:
    """The directory this host keeps the saver's and the memory store's files of `store`
    in (module docstring): the store's own directory for a local store. `create`: make it
    (and say in it which store it is for) when missing; without, None when missing (a
    `ckpt prune` looks for the leases of savers on this host and makes nothing).
    Raises: InvalidInputError (a journal_dir for a local store, or one that belongs to
    another store), StoreIOError (cannot be made)."""
    if not is_remote(store):
        if journal_dir is not None:
            raise InvalidInputError(
                f"journal_dir is for a store on object storage; the local store {store.location} keeps its journal in it",
                hint="leave journal_dir out",
            )
        return Path(store.location)
    url = redact(store.location)
    root = Path(journal_dir).expanduser() if journal_dir is not None else default_dir(url)
    if journal_dir is not None:
        _outside_stores(root)
    url = _identity(url)
    if not root.is_dir():
        if not create:
            return None
        try:
            root.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StoreIOError(
                f"cannot create the journal directory {root}: {exc.strerror}",
                hint="pass journal_dir= a directory you may write to, or set XDG_STATE_HOME",
            ) from None
        own_dir(root)
    _claim_for(root, url, create)
    return root


def _outside_stores(root: Path) -> None:
    """InvalidInputError when journal directory `root` is a local store or inside one
    (its files are that store's: a journal there would be replayed into it)."""
    try:
        where = root.resolve()
    except (OSError, RuntimeError):
        return  # not there (yet): made below, or said there
    for d in (where, *where.parents):
        if (d / layout.CONFIG).is_file() and (d / layout.MANIFESTS).is_dir():
            raise InvalidInputError(
                f"journal_dir {root} is {'the' if d == where else 'inside the'} local ckpt store {d}: "
                "a journal directory belongs to one store on object storage, and this one is another store's",
                hint="give a directory of its own, outside every store (or leave journal_dir out: one is made per store URL)",
            )


def _claim_for(root: Path, url: str, create: bool) -> None:
    """Check that journal directory `root` is `url`'s (write that it is when it names no store)."""
    path = root / STORE_URL_FILE
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        if create:
            _write_url(root, url)
        return
    except OSError as exc:
        raise StoreIOError(f"cannot read {path}: {exc.strerror}", hint="pass journal_dir= a directory you may read and write") from None
    if isinstance(fd, str):
        raise StoreIOError(f"{path} is {fd}, not the name of a store", hint="move it away")
    try:
        named = os.pread(fd, _URL_MAX, 0).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    if named and named != url:
        raise InvalidInputError(
            f"the journal directory {root} belongs to the store {named}, not {url}",
            hint="give each store its own journal_dir (or leave it out: one is made per store URL)",
        )


def _write_url(root: Path, url: str) -> None:
    path = root / STORE_URL_FILE
    try:
        with open(path, "x", encoding="utf-8") as f:
            f.write(url + "\n")
    except FileExistsError:
        _claim_for(root, url, False)  # another process wrote it meanwhile: check it
    except OSError as exc:
        raise StoreIOError(f"cannot write {path}: {exc.strerror}", hint="pass journal_dir= a directory you may write to") from None


def host_branch(root: Path) -> str:
    """The branch that keeps this host's memory-store snapshot of a remote store from
    prune: ``langgraph-store.<12 hex digits>`` of the host's name and the directory."""
    digest = hashlib.sha256(f"{socket.gethostname()}\0{root.resolve()}".encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"langgraph-store.{digest}"


class HostLocks(LocalLocks):
    """`flock` locks in ``<root>/locks/`` (as a local store's), for what processes of one
    host share in a journal directory (the memory store's logs)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        own_dir(layout.locks_dir(root))

    def _p(self, path: str) -> Path:
        return self.root / path

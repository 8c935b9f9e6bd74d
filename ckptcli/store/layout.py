"""Every path of a store, in one place (formats/v1.md, "Store layout")::

    config                      store version, id, chunker parameters
    packs/<2 hex>/<64 hex>      objects, back to back, with their table at the end
    index/<64 hex>              which pack holds which object
    manifests/<64 hex>          one per checkpoint; the name is the checkpoint id
    refs/{latest/<kind>/<name>, branches/<name>, tags/<name>}
    logs/refs/...               the reflog of each ref (formats/reflog.md)
    cache/  locks/  tmp/        rebuildable caches, local coordination, in-flight writes

Invariants: paths inside a store are relative to its root and use "/", as a `Backend`
takes them; the files adapters keep beside a store (the LangGraph saver's journals, leases
and memory-store logs: formats/langgraph-journal.md, formats/langgraph-store.md) are
`Path`s under a local store's directory. Nothing here touches the disk."""

from __future__ import annotations

from pathlib import Path

from ckptcli.format import framing, limits

__all__ = [
    "CACHE",
    "CATALOG",
    "CONFIG",
    "CREATED_DIRS",
    "INDEX",
    "INDEX_SNAPSHOT",
    "JOURNAL_DIR",
    "LEASE_DIR",
    "LOCAL_DIRS",
    "LOCKS",
    "LOGS",
    "MANIFESTS",
    "MEMORY_STORE_DIR",
    "PACKS",
    "PACK_FILE_MAX",
    "PACK_TARGET_MAX",
    "RECOVER_LOCK",
    "REFS",
    "STORE_DIRNAME",
    "TMP",
    "WANT_DIR",
    "WRITERS",
    "branch_ref",
    "head_hint_path",
    "index_path",
    "journal_dir",
    "latest_ref",
    "lease_dir",
    "lock_file",
    "lock_object_path",
    "lock_path",
    "locks_dir",
    "log_path",
    "manifest_path",
    "memory_store_dir",
    "pack_path",
    "read_cap",
    "recover_lock_file",
    "ref_path",
    "tag_ref",
    "versioned_cap",
    "want_dir",
]

STORE_DIRNAME = ".ckpt"  # the store `ckpt init` makes in a project directory

CONFIG = "config"
PACKS = "packs"  # packs/<2 hex>/<64 hex>
INDEX = "index"  # index/<64 hex>
MANIFESTS = "manifests"  # manifests/<64 hex>: the name is the checkpoint id
REFS = "refs"  # refs/latest/<kind>/<name>, refs/branches/<name>, refs/tags/<name>
LOGS = "logs"  # logs/refs/...: the reflog of each ref (formats/reflog.md)
LOCKS = "locks"  # locks/<name>.lock: local coordination; locks/<32 hex>: a lock object; never data
TMP = "tmp"  # in-flight writes, renamed into place
CACHE = "cache"  # rebuildable, ignored by readers of the format
CATALOG = f"{CACHE}/catalog"
INDEX_SNAPSHOT = f"{CACHE}/index-snapshot"  # the whole object index, one file (store/index.py)
WRITERS = f"{LOCKS}/writers"  # one file per live writer process (`Backend.live_writers`)

CREATED_DIRS = (PACKS, INDEX, MANIFESTS, REFS, LOCKS, TMP)  # what `Store.init` makes
#: the directories a store may hold; none of them may be a symbolic link (`LocalBackend.check_top_dirs`)
STORE_DIRS = frozenset((PACKS, INDEX, MANIFESTS, REFS, LOGS, LOCKS, TMP, CACHE))
LOCAL_DIRS = (TMP, LOCKS)  # absent from a copied store; made again on open


#: the largest record file (config, index file, manifest, ref, catalog, head hint) a reader
#: takes whole: a record's head, a body of at most MAX_RECORD_SIZE and its checksum
RECORD_FILE_MAX = framing.RECORD_HEAD_SIZE + limits.MAX_RECORD_SIZE + framing.CHECKSUM_SIZE
_RECORD_DIRS = (INDEX, MANIFESTS, REFS, f"{CACHE}/heads")


#: the most bytes of objects a writer puts in one pack before it finishes it (the largest
#: `Backend.pack_target`; 64 MiB since the first ckpt)
PACK_TARGET_MAX = 64 * 1024 * 1024
#: the largest pack ckpt writes: its header, objects up to PACK_TARGET_MAX less one byte,
#: the object that crosses it (stored: at most MAX_OBJECT_SIZE + 1024, index.py), its table
#: (a record file) and the table's 4-byte length. A larger pack (formats/v1.md, "Limits")
#: is refused before it is read whole (`ckpt verify --read-data`, `ckpt repair index`)
PACK_FILE_MAX = framing.HEADER_SIZE + PACK_TARGET_MAX - 1 + limits.MAX_OBJECT_SIZE + 1024 + RECORD_FILE_MAX + 4


def read_cap(path: str) -> int | None:
    """The most bytes the file at `path` can hold when ckpt wrote it, where a reader reads
    it whole (a record file: RECORD_FILE_MAX; a pack: PACK_FILE_MAX); None where no cap
    applies (reflogs: versioned_cap)."""
    if path in (CONFIG, CATALOG) or path.startswith(tuple(d + "/" for d in _RECORD_DIRS)):
        return RECORD_FILE_MAX
    if path.startswith(PACKS + "/"):
        return PACK_FILE_MAX
    return None


#: the most components a path ckpt writes has, by its top directory (refs/latest/<kind>/<name>,
#: logs/refs/latest/<kind>/<name>, packs/<2 hex>/<id>, cache/heads/<kind>/<name>...); the
#: deepest of all is MAX_PATH_DEPTH. A directory at that depth holds nothing ckpt wrote:
#: the listings of a local store do not enter it (dirwalk.py) but name it, as a problem
#: (a planted tree 1,000 levels deep is named, never walked down to its bottom).
PATH_DEPTHS = {PACKS: 3, INDEX: 2, MANIFESTS: 2, REFS: 4, LOGS: 5, LOCKS: 3, TMP: 2, CACHE: 4}
MAX_PATH_DEPTH = max(PATH_DEPTHS.values())


def path_depth(path: str) -> int:
    """The most components a file ckpt writes at or below store path `path` has."""
    return PATH_DEPTHS.get(path.strip("/").split("/", 1)[0], MAX_PATH_DEPTH)


def versioned_cap(path: str) -> int | None:
    """The most bytes a compare-and-swap (`Backend.read_versioned`) reads of the file at
    `path`: a record file's `read_cap`; a reflog's MAX_REFLOG_SIZE (a log grows until
    expiry trims it, but never near that)."""
    if path.startswith(LOGS + "/"):
        return limits.MAX_REFLOG_SIZE
    return read_cap(path)


def pack_path(pack_id: bytes) -> str:
    h = pack_id.hex()
    return f"{PACKS}/{h[:2]}/{h}"


def index_path(index_id: bytes) -> str:
    return f"{INDEX}/{index_id.hex()}"


def manifest_path(cid: bytes) -> str:
    return f"{MANIFESTS}/{cid.hex()}"


def ref_path(name: str) -> str:
    """The path of the ref `name` ("latest/agent/bot", "tags/v1")."""
    return f"{REFS}/{name}"


def latest_ref(kind: str, name: str) -> str:
    return f"{REFS}/latest/{kind}/{name}"


def branch_ref(name: str) -> str:
    return f"{REFS}/branches/{name}"


def tag_ref(name: str) -> str:
    return f"{REFS}/tags/{name}"


def head_hint_path(kind: str, name: str) -> str:
    """A subject's head hint (`Store.note_head`): 32 bytes, a hint only."""
    return f"{CACHE}/heads/{kind}/{name}"


def log_path(ref: str) -> str:
    """The reflog of the ref at `ref` ("refs/latest/agent/bot" -> "logs/refs/latest/agent/bot")."""
    return f"{LOGS}/{ref}"


def lock_path(name: str) -> str:
    return f"{LOCKS}/{name}.lock"


def lock_object_path(lock_id: str) -> str:
    """A lock held in the store itself (ckptcli.store.objlocks): one small object per
    holder, named by its random id (32 hex), beside the local flock files."""
    return f"{LOCKS}/{lock_id}"


def lock_file(store_dir: Path, name: str) -> Path:
    """The lock file `name` of the local store at `store_dir`."""
    return store_dir / lock_path(name)


# -- beside a store: the LangGraph saver's files (formats/langgraph-journal.md) -----------
JOURNAL_DIR = "langgraph"  # its write-ahead journals
LEASE_DIR = "threads"  # under JOURNAL_DIR: one lease per thread a saver holds
WANT_DIR = "want"  # under JOURNAL_DIR: requests for a held thread
RECOVER_LOCK = "recover.lock"  # under JOURNAL_DIR: held while a saver recovers journals
MEMORY_STORE_DIR = "store"  # under JOURNAL_DIR: LangGraph's memory store's logs (formats/langgraph-store.md)


def journal_dir(store_dir: Path) -> Path:
    return store_dir / JOURNAL_DIR


def locks_dir(root: Path) -> Path:
    """`flock` files under a local root: a local store's, or the journal directory a
    LangGraph saver keeps on this host for a store on object storage."""
    return root / LOCKS


def lease_dir(store_dir: Path) -> Path:
    return store_dir / JOURNAL_DIR / LEASE_DIR


def want_dir(store_dir: Path) -> Path:
    return store_dir / JOURNAL_DIR / WANT_DIR


def recover_lock_file(store_dir: Path) -> Path:
    return store_dir / JOURNAL_DIR / RECOVER_LOCK


def memory_store_dir(store_dir: Path) -> Path:
    return store_dir / JOURNAL_DIR / MEMORY_STORE_DIR

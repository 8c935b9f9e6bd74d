"""Format constants and the limits every decoder enforces (formats/v1.md, "Limits").

Writers stay well inside these; readers refuse anything beyond them with
LimitExceededError, so a hostile file can cost at most these amounts.
"""

from __future__ import annotations

import contextlib
import os

#: Container format versions this code reads; the newest is the one it writes.
FORMAT_VERSION = 2
READABLE_VERSIONS = frozenset({1, 2})

#: Largest object (decompressed) a reader accepts.
MAX_OBJECT_SIZE = 8 * 1024 * 1024
#: Largest record file body (manifest, index, ref, config), decompressed.
MAX_RECORD_SIZE = 64 * 1024 * 1024
#: Largest reflog (logs/refs/...) a compare-and-swap on object storage reads to append to or
#: trim it: expiry keeps at most 1,000 entries of a few hundred bytes per ref, so far less.
MAX_REFLOG_SIZE = 64 * 1024 * 1024
#: Deepest nesting of containers in a value, across object references.
MAX_DEPTH = 256
#: Deepest level of a chunk tree (LIST/MAP/BYTES/STR).
MAX_TREE_LEVEL = 16
#: Longest map key, in UTF-8 bytes.
MAX_KEY_BYTES = 4096
#: Most entries in one node or record array/map.
MAX_CONTAINER_LEN = 1_000_000
#: Longest BIGINT payload (8192 bits).
MAX_BIGINT_BYTES = 1024
#: Most parents one checkpoint may name.
MAX_PARENTS = 64


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        return default


def memory_bytes() -> int:
    """The memory this process may use: physical RAM, lowered by a cgroup (v2 or v1)
    memory limit and by RLIMIT_AS, whichever is smallest."""
    sizes = []
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sizes.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError), open(path) as fh:
            sizes.append(int(fh.read().strip()))  # "max" (no limit) is a ValueError
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            sizes.append(soft)
    positive = [s for s in sizes if s > 0]
    return min(positive) if positive else 8 * 1024**3


#: Most bytes one read of a checkpoint may produce (strings + byte strings), streamed or
#: held: a bound on time and output size against an object graph that references one
#: object many times (a "reference bomb"). `ckpt cat` and `ckpt restore` stream the
#: state, so only this bounds them; their output is sized from the node objects before
#: the first byte is written.
MAX_DECODED_BYTES = _env_int("CKPT_MAX_DECODED_BYTES", 4 * 1024**3)
#: Most values (scalars + containers) one read may produce, streamed or held.
MAX_DECODED_ITEMS = _env_int("CKPT_MAX_DECODED_ITEMS", 50_000_000)
#: What a decode that holds the whole value in memory (`Checkpoint.state()`, `ckpt show`,
#: `ckpt diff`, the TUI) may produce: 1/8 of memory_bytes() (a decoded byte costs a few
#: in Python objects and more when serialized), at least 64 MiB, at most MAX_DECODED_BYTES.
MEMORY_FRACTION = 8
MAX_HELD_BYTES = _env_int("CKPT_MAX_HELD_BYTES", max(64 * 1024**2, memory_bytes() // MEMORY_FRACTION))
#: ... and values: a Python value costs at least ~64 bytes.
MAX_HELD_ITEMS = _env_int("CKPT_MAX_HELD_ITEMS", max(1_000_000, MAX_HELD_BYTES // 64))

# --- writer parameters (not part of what a reader must know) -----------------

#: A child value whose encoding is longer than this is stored as its own object.
INLINE_MAX = 128
#: A list or map with more entries than this, or an inline encoding longer than
#: TREE_MIN_BYTES, is stored as a chunk tree.
TREE_MIN_ITEMS = 32
TREE_MIN_BYTES = 4096
#: A leaf closes after an item with probability len(item) / TREE_LEAF_TARGET_BYTES
#: (decided by the item's hash), so leaves average about 512 bytes whatever the item
#: size; and always at TREE_MAX_FANOUT items or TREE_LEAF_MAX_BYTES.
TREE_LEAF_TARGET_BYTES = 512
TREE_LEAF_MAX_BYTES = 64 * 1024
#: An inner node closes after a child whose id has these low bits zero (one in 4
#: on average), or at TREE_MAX_FANOUT children.
TREE_BOUNDARY_MASK = 0x03
TREE_MAX_FANOUT = 128
#: Strings and byte strings longer than this are split with FastCDC.
CHUNK_THRESHOLD = 64 * 1024
#: FastCDC parameters (min, average, max chunk sizes).
CDC_MIN = 16 * 1024
CDC_AVG = 64 * 1024
CDC_MAX = 256 * 1024
#: zstandard level for objects and records.
ZSTD_LEVEL = 3

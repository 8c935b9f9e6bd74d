"""Format constants and the limits every decoder enforces (formats/v1.md, "Limits").

Writers stay well inside these; readers refuse anything beyond them with
LimitExceededError, so a hostile file can cost at most these amounts.
"""

from __future__ import annotations

import os

#: Container format versions this code reads; the newest is the one it writes.
FORMAT_VERSION = 2
READABLE_VERSIONS = frozenset({1, 2})

#: Largest object (decompressed) a reader accepts.
MAX_OBJECT_SIZE = 8 * 1024 * 1024
#: Largest record file body (manifest, index, ref, config), decompressed.
MAX_RECORD_SIZE = 64 * 1024 * 1024
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


#: Most bytes a decoded state may hold (strings + byte strings); guards against
#: an object graph that references one object many times (a "reference bomb").
MAX_DECODED_BYTES = _env_int("CKPT_MAX_DECODED_BYTES", 4 * 1024**3)
#: Most values (scalars + containers) a decoded state may hold.
MAX_DECODED_ITEMS = _env_int("CKPT_MAX_DECODED_ITEMS", 50_000_000)

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

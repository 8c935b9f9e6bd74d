"""Generate the test vectors of a container format version (formats/v1.md, "Test vectors").

Valid vectors are made with ckptcli's own encoders; invalid ones are built by hand
from valid bytes, with checksums recomputed so that each vector fails for exactly
the reason its description gives.

Released vectors never change: an existing file is left alone unless --force is
given, and --check only compares what would be written with what is there.

    python formats/vectors/make_vectors.py                # write missing files of version 1
    python formats/vectors/make_vectors.py --version 2    # version 2 (formats/v2.md)
    python formats/vectors/make_vectors.py --check        # exit 1 if a file differs

Version 2 changed only packs and checkpoint files (and the version in every header),
so vectors/v2/ holds the header, record and file vectors again, written in version 2,
with names prefixed "v2-"; values and trees are those of vectors/v1/.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgpack
import zstandard

from ckptcli.errors import CorruptError
from ckptcli.format import framing, limits
from ckptcli.format.manifest import Manifest, Subject
from ckptcli.format.values import (
    EXT_BYTES,
    EXT_LIST,
    EXT_MAP,
    EXT_NAMES,
    EXT_REF,
    EXT_STR,
    OBJ_DATA,
    OBJ_NODE,
    Budget,
    Decoder,
    Encoded,
    Encoder,
    parse_tree_node,
)
from ckptcli.jsonview import to_json
from ckptcli.store.backend import LocalBackend
from ckptcli.store.repository import PackWriter, StoreConfig
from ckptcli.store.single import write_checkpoint_file

VERSION = 1
OUT_DIR = Path(__file__).resolve().parent / f"v{VERSION}"
#: 2026-11-02T09:30:00Z, the `created` time of every generated record.
CREATED_NS = 1_793_611_800_000_000_000
KIND_CODES = {"LIST": EXT_LIST, "MAP": EXT_MAP, "BYTES": EXT_BYTES, "STR": EXT_STR}


# -- objects ------------------------------------------------------------------------
class Objects(dict[bytes, tuple[bytes, int]]):
    """An ObjectSink and ObjectSource in memory: id -> (content, object type)."""

    def put(self, oid: bytes, content: bytes, obj_type: int) -> None:
        self.setdefault(oid, (content, obj_type))

    def get(self, oid: bytes) -> bytes:
        return self[oid][0]


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def ext(code: int, payload: bytes) -> bytes:
    return msgpack.packb(msgpack.ExtType(code, payload))


class Group:
    """The vectors of one output file, with the objects they need (each once)."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.vectors: list[dict[str, Any]] = []
        self.object_ids: set[bytes] = set()

    def add(self, name: str, description: str, kind: str, data: bytes, **fields: Any) -> None:
        v: dict[str, Any] = {"name": name, "description": description, "kind": kind, "hex": data.hex()}
        v.update(fields)
        self.vectors.append(v)

    def objects(self, objs: Objects, prefix: str, purpose: str) -> None:
        """Add one vector per object in `objs` not yet in this file (insertion order)."""
        for oid, (content, obj_type) in objs.items():
            if oid in self.object_ids:
                continue
            self.object_ids.add(oid)
            short = oid.hex()[:8]
            if obj_type == OBJ_DATA:
                self.add(f"{prefix}/data-{short}", f"Data object (raw bytes of one chunk) {purpose}.", "data", content, id=oid.hex())
                continue
            tree = _tree_kind(content)
            if tree is None:
                decoded = to_json(Decoder(objs).decode(content))
                self.add(
                    f"{prefix}/node-{short}",
                    f"Node object (content: an EV) {purpose}; a reference to {oid.hex()[:12]}... reads it.",
                    "object",
                    content,
                    id=oid.hex(),
                    decoded=decoded,
                )
                continue
            try:
                level, total, children = parse_tree_node(content, KIND_CODES[tree], oid)
            except CorruptError as exc:
                self.add(
                    f"{prefix}/{tree.lower()}-bad-{short}",
                    f"A malformed {tree} node {purpose}; refused on its own ({exc.message}).",
                    "tree-node",
                    content,
                    id=oid.hex(),
                    tree=tree,
                    expect_error="CorruptError",
                )
                continue
            fields: dict[str, Any] = {"id": oid.hex(), "tree": tree, "level": level, "total": total}
            if level > 0:
                # a referenced child by its id; the embedded open tail by its level and total
                fields["children"] = [[n, c.hex() if isinstance(c, bytes) else {"embedded": {"level": c[1], "total": c[2]}}] for n, c in children]
            role = "leaf" if level == 0 else f"level-{level}"
            self.add(f"{prefix}/{tree.lower()}-{role}-{short}", f"{tree} chunk-tree node at level {level} {purpose}.", "tree-node", content, **fields)


def _count(n: int, what: str) -> str:
    if n == 1:
        return f"1 {what}"
    return f"{n} leaves" if what == "leaf" else f"{n} {what}s"


def _tree_level(content: bytes) -> int:
    return int(msgpack.unpackb(content, raw=False, strict_map_key=False)[1])


def _tree_kind(content: bytes) -> str | None:
    """The tree kind of a node object, or None when it is a plain EV (REF target)."""
    try:
        node = msgpack.unpackb(content, raw=False, strict_map_key=False)
    except Exception:  # noqa: BLE001 - content that is not msgpack is not a tree node
        return None
    if isinstance(node, list) and len(node) == 4 and node[0] in KIND_CODES.values() and isinstance(node[1], int):
        return EXT_NAMES[node[0]]
    return None


def record_checksum(head_and_body: bytes) -> bytes:
    return head_and_body + sha(head_and_body)


def raw_record(kind: bytes, version: int, codec: int, stored: bytes, raw_len: int, magic: bytes = framing.MAGIC_PREFIX) -> bytes:
    """A record built field by field (for invalid vectors), with a correct checksum."""
    head = struct.pack(">8sHBBII", magic + kind, version, codec, 0, len(stored), raw_len)
    return record_checksum(head + stored)


# -- encoded values -------------------------------------------------------------------
def ev_vectors() -> Group:
    g = Group("Encoded values (EVs): self-contained ones and ones that reference objects")

    def valid(name: str, description: str, value: Any, *, data: bytes | None = None) -> None:
        """`data` given: bytes a reader accepts but a writer would not produce (non-canonical)."""
        objs = Objects()
        ev = Encoder(objs).encode(value) if data is None else data
        got = Decoder(objs).decode(ev)
        assert json.dumps(to_json(got)) == json.dumps(to_json(value)), name
        encoding = _encoding(value, ev)
        g.add(name, description, "ev", ev, decoded=to_json(value), encoding=encoding)
        if objs:
            g.objects(objs, name, f"used by {name}")

    valid("nil", "nil (0xc0).", None)
    valid("true", "true (0xc3).", True)
    valid("false", "false (0xc2).", False)
    valid("int-0", "0 as a positive fixint.", 0)
    valid("int-127", "127, the largest positive fixint.", 127)
    valid("int-128", "128 as uint8 (0xcc): writers use the shortest form.", 128)
    valid("int-65536", "65536 as uint32 (0xce).", 65536)
    valid("int-minus-1", "-1 as a negative fixint.", -1)
    valid("int-minus-33", "-33 as int8 (0xd0).", -33)
    valid("int-int64-min", "-2**63, the smallest value stored without BIGINT (int64, 0xd3).", -(2**63))
    valid("int-uint64-max", "2**64-1, the largest value stored without BIGINT (uint64, 0xcf).", 2**64 - 1)
    valid(
        "int-non-shortest",
        "1 written as int64 (0xd3): readers accept every msgpack integer form; a writer would use 0x01.",
        1,
        data=bytes.fromhex("d30000000000000001"),
    )
    valid("bigint-2-pow-64", "2**64: BIGINT (ext 1), 9-byte big-endian two's complement 01 00*8.", 2**64)
    valid("bigint-minus-2-pow-63-minus-1", "-2**63-1: BIGINT, 9 bytes ff 7f ff*7.", -(2**63) - 1)
    valid("bigint-2-pow-100", "2**100: BIGINT of 13 bytes.", 2**100)
    valid("bigint-minus-2-pow-100", "-2**100: BIGINT of 13 bytes.", -(2**100))
    valid(
        "bigint-minus-2-pow-71",
        "-2**71: BIGINT of floor((72 + 8) / 8) = 10 bytes (ff 80 00*8); writers use this length even where 9 would do.",
        -(2**71),
    )
    valid(
        "bigint-non-shortest",
        "5 written as a 2-byte BIGINT (00 05): readers accept any length 1..1024; a writer uses a plain int.",
        5,
        data=ext(1, b"\x00\x05"),
    )
    valid("float-1.5", "1.5: floats are always written as float64 (0xcb).", 1.5)
    valid("float-minus-0", "-0.0 (sign bit set); it differs from 0.0.", -0.0)
    valid("float-nan", "NaN, written 0xcb 7ff8000000000000; JSON view {\"$float\": \"nan\"}.", float("nan"))
    valid("float-inf", "+infinity; JSON view {\"$float\": \"inf\"}.", float("inf"))
    valid("float-minus-inf", "-infinity; JSON view {\"$float\": \"-inf\"}.", float("-inf"))
    valid(
        "float32-1.5",
        "1.5 as float32 (0xca): readers accept float32, writers always write float64.",
        1.5,
        data=bytes.fromhex("ca3fc00000"),
    )
    valid("str-empty", "The empty string (fixstr 0xa0).", "")
    valid("str-utf8", "A fixstr holding UTF-8 with a 2-byte and a 4-byte sequence.", "héllo 🌍")
    fox = "the quick brown fox jumps over the lazy dog"
    valid("str-str8", f"A string of {len(fox)} bytes (32 or more) as str8 (0xd9).", fox)
    valid("bytes-small", "A byte string as bin8 (0xc4); JSON view {\"$bytes\": base64}.", b"\x00\x01\x02\xff")
    valid("bytes-empty", "The empty byte string (c4 00).", b"")
    valid("list-inline", "An inline list of mixed scalars (fixarray).", [1, "two", None, True, 2.5])
    valid("list-empty", "The empty list (0x90).", [])
    valid(
        "map-key-order",
        "An inline map whose keys are not sorted: order is kept as written and is significant.",
        {"zeta": 1, "alpha": 2, "mid": [True, None]},
    )
    valid("map-empty", "The empty map (0x80).", {})
    valid("map-nested", "Maps and lists nested inline.", {"plan": {"steps": ["read", "reply"], "pointer": 1}, "tags": []})
    valid(
        "ref-long-string",
        "A map whose value encodes to more than 128 bytes: the value is stored as a node object and "
        "replaced by REF (ext 2, c7 20 02 + 32-byte id). The object is vector ref-long-string/node-*.",
        {"note": "checkpoint " * 20},
    )
    valid(
        "ref-in-list",
        "A list with one small and one large item; only the large one becomes a REF.",
        ["small", b"\xab" * 150],
    )
    valid(
        "ref-shared",
        "The same large value twice: both REFs name one object (content addressing).",
        ["same " * 30, "same " * 30],
    )
    return g


def ev_invalid_vectors(g: Group) -> None:
    def bad(name: str, description: str, data: bytes, error: str, **fields: Any) -> None:
        g.add(name, description, "ev", data, expect_error=error, **fields)

    bad("ev-unknown-ext-7", "ext type 7 is not defined in version 1.", bytes.fromhex("d40700"), "CorruptError")
    bad("ev-unknown-ext-negative", "ext type -2 (negative types are not used).", bytes.fromhex("d4fe00"), "CorruptError")
    bad("ev-ref-short", "A REF whose payload has 31 bytes instead of 32.", ext(EXT_REF, b"\x11" * 31), "CorruptError")
    bad("ev-list-ref-long", "A LIST reference whose payload has 33 bytes.", ext(EXT_LIST, b"\x11" * 33), "CorruptError")
    bad("ev-bigint-empty", "A BIGINT with an empty payload.", bytes.fromhex("c70001"), "CorruptError")
    bad("ev-bigint-too-long", "A BIGINT of 1025 bytes (the limit is 1024).", ext(1, b"\x01" * 1025), "CorruptError")
    bad("ev-map-int-key", "A map with an integer key: keys must be strings.", bytes.fromhex("810102"), "CorruptError")
    bad("ev-map-bin-key", "A map with a byte-string key.", bytes.fromhex("81c401610102"), "CorruptError")
    bad("ev-bad-utf8", "A str holding invalid UTF-8 (a lone continuation byte).", bytes.fromhex("a3616280"), "CorruptError")
    bad("ev-surrogate", "A str holding an encoded UTF-16 surrogate (ed a0 80), which is not valid UTF-8.", bytes.fromhex("a3eda080"), "CorruptError")
    bad("ev-trailing", "Two values where one is expected: an EV is exactly one msgpack value.", bytes.fromhex("c0c0"), "CorruptError")
    bad("ev-truncated", "A str8 that declares 5 bytes and holds 2.", bytes.fromhex("d9056162"), "CorruptError")
    bad("ev-reserved-byte", "0xc1 is never used in msgpack.", bytes.fromhex("c1"), "CorruptError")
    bad(
        "ev-array-too-long",
        "An array header declaring 1,000,001 entries (MAX_CONTAINER_LEN is 1,000,000); refused before any entry is read.",
        bytes.fromhex("dd000f4241"),
        "LimitExceededError",
    )
    bad(
        "ev-too-deep",
        "257 nested lists: containers may nest at most 256 deep (MAX_DEPTH).",
        b"\x91" * 257 + b"\xc0",
        "LimitExceededError",
    )
    ok_deep = b"\x91" * 255 + b"\xc0"
    g.add(
        "ev-deep-255",
        "255 nested lists around nil, inline: within MAX_DEPTH. Not canonical: a writer stores inner lists whose "
        "encoding exceeds 128 bytes as REFs.",
        "ev",
        ok_deep,
        decoded=_nest(255),
        encoding=_encoding(_nest(255), ok_deep),
    )

    # A reference bomb: 16 REFs to a node that holds 16 REFs to a 100-byte string.
    objs = Objects()
    leaf = msgpack.packb(b"\x42" * 100, use_bin_type=True)
    leaf_id = sha(leaf)
    objs.put(leaf_id, leaf, OBJ_NODE)
    mid = b"\xdc\x00\x10" + ext(EXT_REF, leaf_id) * 16
    mid_id = sha(mid)
    objs.put(mid_id, mid, OBJ_NODE)
    root = b"\xdc\x00\x10" + ext(EXT_REF, mid_id) * 16
    g.objects(objs, "ev-ref-bomb", "used by ev-ref-bomb")
    bad(
        "ev-ref-bomb",
        "256 references to one 100-byte string (25,600 bytes decoded) read with a decoded-size budget of "
        "10,000 bytes: the budget counts every expansion, so the decode stops.",
        root,
        "LimitExceededError",
        budget={"max_bytes": 10_000, "max_items": 1_000_000},
    )


def _encoding(value: Any, ev: bytes) -> str:
    """canonical: any writer makes these bytes (no objects involved); writer: ckpt's writer
    makes them with its current parameters; non-canonical: readers accept, writers never make."""
    objs = Objects()
    mine = Encoder(objs).encode(value)
    if mine != ev:
        return "non-canonical"
    return "writer" if objs else "canonical"


def _nest(n: int) -> Any:
    v: Any = None
    for _ in range(n):
        v = [v]
    return v


# -- chunk trees ------------------------------------------------------------------------
def tree_vectors() -> Group:
    g = Group("Chunk trees: LIST, MAP, BYTES and STR values stored as trees of node objects")

    def writer_tree(name: str, what: str, value: Any) -> Objects:
        objs = Objects()
        ev = Encoder(objs).encode(value)
        assert json.dumps(to_json(Decoder(objs).decode(ev))) == json.dumps(to_json(value))
        levels = [_tree_level(c) for c, _t in objs.values()]
        shape = ", ".join(_count(levels.count(k), "leaf" if k == 0 else f"level-{k} node") for k in range(max(levels) + 1))
        g.add(name, f"{what}: stored as {shape}; the EV is the ext reference to the root.", "ev", ev, decoded=to_json(value), encoding="writer")
        g.objects(objs, name, f"of {name}")
        return objs

    writer_tree("list-tree-one-leaf", "A list of 40 small integers (more than 32 items, so a LIST tree, ext 3)", list(range(40)))
    writer_tree(
        "list-tree-leaves",
        "A list of 60 strings of about 60 bytes (leaf boundaries are content-defined)",
        [f"step {i:02d}: " + "pending " * 6 for i in range(60)],
    )
    map_objs = writer_tree(
        "map-tree",
        "A map of 40 keys in insertion order (a MAP tree, ext 4)",
        {f"key-{i:02d}": f"value {i:02d} " + "v" * 60 for i in range(40)},
    )

    # Small BYTES/STR trees. A writer inlines values this small; readers must accept them.
    # The BYTES tree is built by the writer's own tree builder, fed with small pieces.
    objs = Objects()
    enc = Encoder(objs)
    pieces = [b"hello, ", b"chunked ", b"world"]
    root = enc._upper_levels(EXT_BYTES, [(len(p), enc._put_data(p)) for p in pieces], 1)[0]
    ev = ext(EXT_BYTES, root)
    value = b"".join(pieces)
    assert Decoder(objs).decode(ev) == value
    g.add(
        "bytes-tree-small",
        "A BYTES tree (ext 5): one level-1 node whose children are [size, data id] for three data objects. "
        "Not canonical: a writer stores byte strings of at most 64 KiB inline.",
        "ev",
        ev,
        decoded=to_json(value),
        encoding="non-canonical",
    )
    g.add(
        "bytes-tree-small-lazy",
        "The same BYTES tree read the way `ckpt cat` reads the blobs section (file data left in the store): "
        "JSON view {\"$blob\": {size, id}} with the root node's total and id.",
        "ev",
        ev,
        decoded={"$blob": {"size": len(value), "id": root.hex()}},
        encoding="non-canonical",
        lazy_bytes=True,
    )
    g.objects(objs, "bytes-tree-small", "of bytes-tree-small")

    # A two-level STR tree whose chunk boundary splits a UTF-8 sequence.
    objs = Objects()
    text = "café ☕ ok"
    raw = text.encode("utf-8")
    cut = raw.index("☕".encode()) + 1
    data = [raw[:cut], raw[cut:]]
    lvl1 = []
    for piece in data:
        did = sha(piece)
        objs.put(did, piece, OBJ_DATA)
        node = framing.pack([EXT_STR, 1, len(piece), [[len(piece), did]]])
        objs.put(sha(node), node, OBJ_NODE)
        lvl1.append((len(piece), sha(node)))
    top = framing.pack([EXT_STR, 2, len(raw), [[n, i] for n, i in lvl1]])
    objs.put(sha(top), top, OBJ_NODE)
    ev = ext(EXT_STR, sha(top))
    assert Decoder(objs).decode(ev) == text
    g.add(
        "str-tree-two-levels",
        "A STR tree (ext 6) of two levels; the boundary between the data objects falls inside a 3-byte UTF-8 "
        "sequence: only the concatenation of all pieces is decoded as UTF-8. Not canonical (a writer inlines it).",
        "ev",
        ev,
        decoded=text,
        encoding="non-canonical",
    )
    g.objects(objs, "str-tree-two-levels", "of str-tree-two-levels")

    tree_invalid_vectors(g, map_objs)
    return g


def tree_invalid_vectors(g: Group, map_objs: Objects) -> None:
    objs = Objects()

    def node(value: Any) -> bytes:
        content = framing.pack(value)
        objs.put(sha(content), content, OBJ_NODE)
        return sha(content)

    def data(piece: bytes) -> bytes:
        objs.put(sha(piece), piece, OBJ_DATA)
        return sha(piece)

    leaf_a = node([EXT_LIST, 0, 2, ["a", "b"]])
    leaf_b = node([EXT_LIST, 0, 1, ["c"]])
    bad_sum = node([EXT_LIST, 1, 4, [[2, leaf_a], [1, leaf_b]]])
    skip = node([EXT_LIST, 2, 2, [[2, leaf_a]]])
    bad_count = node([EXT_LIST, 0, 3, ["a", "b"]])
    bytes_leaf = node([EXT_BYTES, 0, 5, [[5, data(b"hello")]]])
    bad_size = node([EXT_BYTES, 1, 6, [[6, data(b"hello")]]])
    no_children = node([EXT_LIST, 1, 0, []])
    three = node([EXT_LIST, 0, 1])
    map_a = node([EXT_MAP, 0, 2, {"x": 1, "y": 2}])
    map_b = node([EXT_MAP, 0, 1, {"x": 3}])
    dup = node([EXT_MAP, 1, 3, [[2, map_a], [1, map_b]]])
    g.objects(objs, "tree-invalid", "used by the invalid tree vectors")

    def bad(name: str, description: str, code: int, oid: bytes) -> None:
        g.add(name, description, "ev", ext(code, oid), expect_error="CorruptError")

    map_leaf = next(oid for oid, (c, _t) in map_objs.items() if c[:3] == bytes([0x94, EXT_MAP, 0]))
    bad("tree-kind-mismatch", "A LIST reference (ext 3) to a MAP node: the node's kind must match.", EXT_LIST, map_leaf)
    bad("tree-totals-do-not-sum", "A LIST node declaring total 4 whose children counts sum to 3.", EXT_LIST, bad_sum)
    bad("tree-level-skip", "A level-2 LIST root whose child is a level-0 leaf: levels must decrease by exactly one.", EXT_LIST, skip)
    bad("tree-leaf-count", "A LIST leaf declaring 3 items and holding 2.", EXT_LIST, bad_count)
    bad("tree-bytes-level-0", "A BYTES node at level 0: byte-string trees start at level 1.", EXT_BYTES, bytes_leaf)
    bad("tree-data-size", "A BYTES level-1 node that says its data object has 6 bytes; it has 5.", EXT_BYTES, bad_size)
    bad("tree-no-children", "An inner LIST node with no children.", EXT_LIST, no_children)
    bad("tree-node-shape", "A node that is an array of 3 elements, not [kind, level, total, children].", EXT_LIST, three)
    bad("tree-map-duplicate-key", "A MAP tree whose two leaves both hold key \"x\".", EXT_MAP, dup)
    bad("tree-missing-object", "A LIST reference to an object that is in no vector (the store lacks it).", EXT_LIST, b"\x00" * 32)


# -- headers and records ------------------------------------------------------------------
def record_vectors() -> tuple[Group, dict[str, Any]]:
    g = Group("File headers and record files (manifest, ref, config, index, pack table)")
    for kind in (framing.KIND_PACK, framing.KIND_FILE):
        name = kind.decode()
        g.add(
            f"header-{name.lower()}",
            f"The 12-byte header of a {framing.KIND_NAMES[kind]}: 89 'CKP' '{name}', version {VERSION} (u16 BE), reserved 0 (u16).",
            "header",
            framing.encode_header(kind, VERSION),
            file_kind=name,
            version=VERSION,
        )
    hdr = framing.encode_header(framing.KIND_PACK, VERSION)
    g.add("header-wrong-magic", "A PNG signature where a checkpoint file's magic should be: not a ckpt file.", "header", b"\x89PNG\r\n\x1a\n" + framing.encode_header(framing.KIND_FILE, VERSION)[8:], file_kind="FILE", expect_error="UnsupportedVersionError")
    g.add("header-wrong-magic-inside-store", "A wrong magic on a file inside a store (here a pack) is damage, not a foreign file.", "header", b"\x89PNG\r\n\x1a\n" + hdr[8:], file_kind="PACK", expect_error="CorruptError")
    g.add("header-wrong-kind", "A pack header read where a checkpoint file is expected.", "header", hdr, file_kind="FILE", expect_error="CorruptError")
    g.add("header-future-version", f"Version {VERSION + 1}: written by a newer ckpt; refused with an upgrade hint.", "header", framing.encode_header(framing.KIND_PACK, VERSION + 1), file_kind="PACK", expect_error="UnsupportedVersionError")
    g.add("header-version-0", "Version 0 was never released.", "header", framing.encode_header(framing.KIND_PACK, 0), file_kind="PACK", expect_error="UnsupportedVersionError")
    g.add("header-truncated", "Only 8 of the 12 header bytes.", "header", hdr[:8], file_kind="PACK", expect_error="CorruptError")

    # A checkpoint's objects and manifest, shared with files.json.
    objs = Objects()
    enc = Encoder(objs)
    sections = {
        "memory": enc.encode_root({"goal": "answer ticket 4121", "context": "customer reports a failed export; " * 6}, "memory"),
        "plan": enc.encode_root({"steps": ["read ticket", "reproduce", "reply"], "pointer": 1}, "plan"),
        "tools": enc.encode_root([{"call": "search", "args": {"q": "export"}, "result": "3 hits", "status": "ok", "started": CREATED_NS - 2_000_000_000, "duration_ms": 412, "idempotency_key": "t-1"}], "tools"),
        "events": enc.encode_root(
            [
                {"seq": 7, "kind": "message", "text": "looking into it"},
                {"seq": 8, "kind": "tool_call", "text": "search export"},
                {"seq": 9, "kind": "tool_result", "text": "3 hits"},
                {"seq": 10, "kind": "message", "text": "found the cause"},
            ],
            "events",
        ),
        "ext:support.crm": enc.encode_root({"ticket": 4121}, "ext:support.crm"),
    }
    blob_root = enc._upper_levels(EXT_BYTES, [(len(p), enc._put_data(p)) for p in (b"#!/bin/sh\n", b"echo restored\n")], 1)[0]
    blob_entries = {
        "workdir": {
            "type": "dir",
            "mode": 0o755,
            "mtime_ns": CREATED_NS - 60_000_000_000,
            "entries": {
                "notes.txt": {"type": "file", "size": 6, "mode": 0o644, "mtime_ns": CREATED_NS - 61_000_000_000, "data": b"hello\n"},
                "run.sh": {"type": "file", "size": 24, "mode": 0o755, "mtime_ns": CREATED_NS - 62_000_000_000, "data": Encoded(ext(EXT_BYTES, blob_root))},
                "latest": {"type": "symlink", "target": "notes.txt"},
                "fifo": {"type": "skipped", "reason": "not a regular file, directory or symlink"},
            },
        }
    }
    sections["blobs"] = enc.encode_root(blob_entries, "blobs")
    layout = {"kind": "sections", "keys": ["memory", "plan", "tools", "events", "ext"], "ext": ["support.crm"], "format": "json"}
    manifest = Manifest(
        subject=Subject("agent", "support-bot"),
        sections=sections,
        layout=layout,
        parents=[sha(b"parent checkpoint (example)")],
        created_ns=CREATED_NS,
        producer={"name": "ckptcli", "version": "0.1.0"},
        labels={"env": "staging", "step": "42"},
        message="after reproducing the bug",
        schema_version=3,
        config_hash="sha256:" + sha(b"agent config").hex(),
        deps={"ckptcli": "0.1.0", "python": "3.11.7"},
        stats={"logical_bytes": 612, "new_objects": len(objs), "new_bytes": 700},
        format_version=VERSION,
    )
    mbytes = manifest.encode()
    g.add(
        "manifest",
        "A manifest record (kind MANI) of a checkpoint with every standard section, an ext section and blobs; "
        f"its body is {'zstd-compressed (codec 1)' if mbytes[10] else 'stored (codec 0)'}; the `events` root is larger "
        "than 128 bytes, so the manifest holds a REF to it. The checkpoint id is the SHA-256 of these bytes.",
        "record",
        mbytes,
        record_kind="MANI",
        version=VERSION,
        codec=mbytes[10],
        checkpoint_id=sha(mbytes).hex(),
        decoded=to_json(manifest.to_body()),
    )
    minimal = {
        "format": VERSION,
        "parents": [],
        "created": CREATED_NS,
        "subject": {"kind": "workflow", "name": "nightly-etl"},
        "layout": {"kind": "document", "format": "json"},
        "sections": {"memory": framing.pack([1, 2, 3])},
    }
    _record(g, "manifest-minimal", "A manifest with only the required fields and a `document` layout (the whole state in `memory`).", framing.KIND_MANIFEST, minimal)
    _record(
        g,
        "manifest-unknown-field",
        "A manifest with a field this version does not define (\"retention\"): readers ignore unknown fields.",
        framing.KIND_MANIFEST,
        {**minimal, "retention": {"days": 30}},
    )
    ref_body = {"target": sha(mbytes), "updated": CREATED_NS + 1_000_000}
    _record(g, "ref", "A ref record (kind REF_): the target checkpoint id and the update time. Short bodies are stored (codec 0).", framing.KIND_REF, ref_body)
    config = StoreConfig(VERSION, bytes(range(16)), CREATED_NS, (limits.CDC_MIN, limits.CDC_AVG, limits.CDC_MAX))
    _record(g, "config", "A store config record (kind CONF): store version, 16-byte store id, creation time, chunker parameters.", framing.KIND_CONFIG, config.to_body())

    manifest_invalid_vectors(g, minimal)
    record_invalid_vectors(g, minimal)
    return g, {"objs": objs, "manifest": manifest, "mbytes": mbytes, "blob_root": blob_root}


def _record(g: Group, name: str, description: str, kind: bytes, body: dict[str, Any], **fields: Any) -> bytes:
    data = framing.encode_record(kind, body, VERSION)
    g.add(name, description, "record", data, record_kind=kind.decode(), version=VERSION, codec=data[10], decoded=to_json(body), **fields)
    return data


def manifest_invalid_vectors(g: Group, minimal: dict[str, Any]) -> None:
    def bad(name: str, description: str, body: dict[str, Any]) -> None:
        g.add(name, description, "record", framing.encode_record(framing.KIND_MANIFEST, body, VERSION), record_kind="MANI", expect_error="CorruptError")

    other = 2 if VERSION == 1 else 1
    bad("manifest-format-mismatch", f"The body says format {other} while the file header says version {VERSION}.", {**minimal, "format": other})
    bad("manifest-unknown-section", "A section named \"scratch\": only the standard names and ext:<namespace> are allowed.", {**minimal, "sections": {"scratch": b"\xc0"}})
    bad("manifest-section-not-bin", "A section root that is a str instead of bin.", {**minimal, "sections": {"memory": "c0"}})
    bad("manifest-no-layout", "The required field `layout` is missing.", {k: v for k, v in minimal.items() if k != "layout"})
    bad("manifest-bad-layout-kind", "layout.kind is neither \"sections\" nor \"document\".", {**minimal, "layout": {"kind": "tree"}})
    bad("manifest-too-many-parents", "65 parents (MAX_PARENTS is 64).", {**minimal, "parents": [bytes([i]) * 32 for i in range(65)]})
    bad("manifest-parent-short", "A parent id of 31 bytes.", {**minimal, "parents": [b"\x01" * 31]})
    bad("manifest-created-str", "`created` as a string instead of an integer.", {**minimal, "created": "2026-11-02"})
    bad("manifest-labels-not-str", "A label whose value is an integer.", {**minimal, "labels": {"step": 42}})


def record_invalid_vectors(g: Group, minimal: dict[str, Any]) -> None:
    good = framing.encode_record(framing.KIND_REF, {"target": b"\x07" * 32, "updated": CREATED_NS}, VERSION)

    def bad(name: str, description: str, data: bytes, error: str, kind: str = "REF_") -> None:
        g.add(name, description, "record", data, record_kind=kind, expect_error=error)

    body = framing.pack({"target": b"\x07" * 32, "updated": CREATED_NS})
    bad("record-wrong-magic", "Magic \\x89CKQ instead of \\x89CKP (checksum recomputed).", raw_record(framing.KIND_REF, VERSION, 0, body, len(body), magic=b"\x89CKQ"), "CorruptError")
    bad("record-wrong-kind", "A ref record read where a config record is expected.", good, "CorruptError", kind="CONF")
    bad(
        "record-future-version",
        f"A ref record of version {VERSION + 1}: refused before anything else is read.",
        framing.encode_record(framing.KIND_REF, {"target": b"\x07" * 32}, version=VERSION + 1),
        "UnsupportedVersionError",
    )
    bad("record-truncated", "The last byte of the checksum is missing.", good[:-1], "CorruptError")
    bad("record-too-short", "Only the 20-byte record head: shorter than head + checksum.", good[:20], "CorruptError")
    bad("record-trailing-bytes", "One byte after the checksum.", good + b"\x00", "CorruptError")
    flipped = bytearray(good)
    flipped[25] ^= 0x01
    bad("record-checksum-mismatch", "One bit of the body flipped; the checksum no longer matches.", bytes(flipped), "CorruptError")
    bad("record-unknown-codec", "Codec 2 is not defined (checksum recomputed).", raw_record(framing.KIND_REF, VERSION, 2, body, len(body)), "CorruptError")
    bad("record-stored-len-mismatch", "Codec 0 with raw_len 1 larger than stored_len.", raw_record(framing.KIND_REF, VERSION, 0, body, len(body) + 1), "CorruptError")
    bomb_raw = framing.pack({"target": b"\x07" * 32, "pad": b"\x00" * 1_000_000})
    bomb = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(bomb_raw)
    bad(
        "record-zstd-bomb",
        f"A zstd frame of {len(bomb)} bytes that inflates to {len(bomb_raw)} bytes while raw_len declares 100: "
        "output beyond raw_len is an error.",
        raw_record(framing.KIND_REF, VERSION, 1, bomb, 100),
        "CorruptError",
    )
    nosize = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(bomb_raw)
    bad(
        "record-zstd-bomb-no-content-size",
        "The same bomb as a frame without its content size: decompression stops at raw_len (100) bytes.",
        raw_record(framing.KIND_REF, VERSION, 1, nosize, 100),
        "CorruptError",
    )
    bad(
        "record-raw-len-over-limit",
        "raw_len declares 64 MiB + 1 (MAX_RECORD_SIZE is 64 MiB): refused before decompressing.",
        raw_record(framing.KIND_REF, VERSION, 1, nosize, limits.MAX_RECORD_SIZE + 1),
        "LimitExceededError",
    )
    short_frame = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(body)
    bad("record-zstd-damaged", "A zstd body whose last byte is cut off (checksum recomputed).", raw_record(framing.KIND_REF, VERSION, 1, short_frame[:-1], len(body)), "CorruptError")
    bad("record-body-not-map", "A body that is a msgpack array, not a map.", raw_record(framing.KIND_REF, VERSION, 0, b"\x90", 1), "CorruptError")
    bad("record-body-malformed", "A body of one byte 0xc1 (never used by msgpack).", raw_record(framing.KIND_REF, VERSION, 0, b"\xc1", 1), "CorruptError")
    if VERSION >= 2:
        damaged = bytearray(good)
        damaged[8] ^= 0xD5
        bad(
            "record-version-damaged",
            f"The ref record with the high byte of its version flipped ({VERSION} -> {VERSION ^ 0xD500}), checksum not "
            "recomputed: a version this reader does not read is believed only when the record's checksum holds, so "
            "this is damage, not a newer format (compare record-future-version).",
            bytes(damaged),
            "CorruptError",
        )


# -- packs and checkpoint files ------------------------------------------------------------
def file_vectors(ck: dict[str, Any]) -> Group:
    g = Group("Pack files, index records and checkpoint files")
    objs: Objects = ck["objs"]
    stored = {oid: framing.compress(content) for oid, (content, _t) in objs.items()}

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "tmp").mkdir()
        backend = LocalBackend(root)
        writer = PackWriter(backend, VERSION)
        for oid, (content, obj_type) in objs.items():
            codec, data = stored[oid]
            writer.add(oid, obj_type, codec, data, len(content))
        pack_id, rows = writer.finish()()
        pack = (root / f"packs/{pack_id.hex()[:2]}/{pack_id.hex()}").read_bytes()
        backend.close()
    g.add(
        "pack",
        "A pack file holding every object of the example checkpoint (vector `manifest`): 12-byte header, stored "
        "objects back to back, a pack trailer record (PTRL), its length as u32 BE. Its name is packs/<2 hex>/<id>. "
        "`decoded` holds the entry rows rebuilt from the trailer (ids by hashing each object)."
        + (
            ""
            if VERSION == 1
            else " Version 2: each trailer entry ends with the XXH3-64 of the object's stored bytes, and the id is the "
            "SHA-256 of the header, the object ids in pack order, the trailer record and its length."
        ),
        "pack",
        pack,
        id=pack_id.hex(),
        decoded=to_json({"entries": rows}),
    )
    index_body = {"packs": [{"id": pack_id, "entries": rows}]}
    data = framing.encode_record(framing.KIND_INDEX, index_body, VERSION)
    g.add(
        "index",
        "The index record (kind INDX) written with that pack; its file name is index/<SHA-256 of these bytes>.",
        "record",
        data,
        record_kind="INDX",
        version=VERSION,
        codec=data[10],
        id=sha(data).hex(),
        decoded=to_json(index_body),
    )

    out = io.BytesIO()
    write_checkpoint_file(out, ck["mbytes"], [(oid, t, stored[oid][0], stored[oid][1], len(c)) for oid, (c, t) in objs.items()], VERSION)
    cfile = out.getvalue()
    m: Manifest = ck["manifest"]
    dec = Decoder(objs, budget=Budget())
    lazy = Decoder(objs, budget=Budget(), lazy_bytes=True)
    sections_json = {n: to_json((lazy if n == "blobs" else dec).decode(ev, n)) for n, ev in m.sections.items()}
    state = {
        "memory": dec.decode(m.sections["memory"]),
        "plan": dec.decode(m.sections["plan"]),
        "tools": dec.decode(m.sections["tools"]),
        "events": dec.decode(m.sections["events"]),
        "ext": {"support.crm": dec.decode(m.sections["ext:support.crm"])},
    }
    g.add(
        "checkpoint-file",
        "The example checkpoint exported as one file (kind FILE): header, manifest (length-prefixed, byte for byte), "
        "objects in ascending id order, PTAB record, its length, SHA-256 of everything before. `decoded` gives the "
        "checkpoint id, every section in the JSON view (blobs with file data left in the store, as `ckpt cat` prints "
        "it) and the state document rebuilt from the layout.",
        "checkpoint-file",
        cfile,
        id=sha(ck["mbytes"]).hex(),
        decoded={"id": sha(ck["mbytes"]).hex(), "sections": sections_json, "state": to_json(state)},
    )
    mlen = struct.unpack_from(">I", cfile, 12)[0]
    first_obj = 16 + mlen
    flipped = bytearray(cfile)
    notes = next(oid for oid, (c, _t) in objs.items() if c.startswith(b"\xd9"))  # the REF'd context string
    pos = first_obj + sum(len(stored[o][1]) for o in sorted(objs) if o < notes)
    flipped[pos + 5] ^= 0x20
    g.add(
        "checkpoint-file-damaged-object",
        "The checkpoint file with one bit flipped inside the stored object that holds memory.context: "
        "the whole-file checksum fails, and reading the object fails its hash check.",
        "checkpoint-file",
        bytes(flipped),
        expect_error="CorruptError",
    )
    g.add("checkpoint-file-truncated", "The checkpoint file without its last byte.", "checkpoint-file", cfile[:-1], expect_error="CorruptError")
    if VERSION >= 2:
        v2_damage_vectors(g, pack, pack_id, cfile, first_obj)
    return g


def v2_damage_vectors(g: Group, pack: bytes, pack_id: bytes, cfile: bytes, first_obj: int) -> None:
    """Damage that only version 2's checks find: a bit a zstd decoder ignores, a reserved
    header byte, a version field flipped."""
    # The first compressed object of the pack; its frame header descriptor (the byte after
    # the 4-byte magic) has an "unused" bit (0x10) that RFC 8878 tells decoders to ignore,
    # so the object still decodes to its content and passes its SHA-256 check.
    offset = 12
    tlen = struct.unpack_from(">I", pack, len(pack) - 4)[0]
    _v, trailer = framing.decode_record(pack[len(pack) - 4 - tlen : len(pack) - 4], framing.KIND_PACK_TRAILER, "pack")
    for _typ, slen, _rlen, codec, _check in trailer["objects"]:
        if codec == framing.CODEC_ZSTD:
            break
        offset += slen
    damaged = bytearray(pack)
    assert damaged[offset : offset + 4] == b"\x28\xb5\x2f\xfd"
    damaged[offset + 4] ^= 0x10
    g.add(
        "pack-ignored-bit-flipped",
        "The pack with the 'unused' bit of one object's zstd frame header flipped: the object still decodes to its "
        "content (its id holds), but its stored bytes no longer match the XXH3-64 in the trailer.",
        "pack",
        bytes(damaged),
        expect_error="CorruptError",
    )
    mlen = struct.unpack_from(">I", cfile, 12)[0]
    assert first_obj == 16 + mlen
    gap = bytearray(cfile)
    t_len = struct.unpack_from(">I", cfile, len(cfile) - 36)[0]
    table_start = len(cfile) - 36 - t_len
    # one byte more between the manifest and the first object, offsets left as they are
    gap[first_obj:first_obj] = b"\x00"
    del gap[table_start + 1 :]
    gap += cfile[table_start:-32]
    body = bytes(gap)
    checksum = hashlib.sha256(body[:first_obj] + body[table_start + 1 :]).digest()
    g.add(
        "checkpoint-file-gap",
        "A version-2 checkpoint file with one byte between the manifest and the first object (checksum recomputed): "
        "objects must tile their region exactly, so that the per-object checks cover every byte the checksum leaves out.",
        "checkpoint-file",
        body + checksum,
        expect_error="CorruptError",
    )
    reserved = bytearray(pack)
    reserved[11] ^= 0x01
    g.add(
        "pack-reserved-byte-flipped",
        "The pack of vector `v2-pack` with one bit of its reserved header bytes (offset 11) flipped, read under the "
        "name `id` (that pack's): the id hashes the 12 header bytes as stored, reserved ones included, so it no longer "
        "matches the name. Every object and the trailer are intact.",
        "pack",
        bytes(reserved),
        id=pack_id.hex(),
        expect_error="CorruptError",
    )
    version = bytearray(cfile)
    version[8] ^= 0xD5
    g.add(
        "checkpoint-file-version-damaged",
        f"The checkpoint file with the high byte of its header version flipped ({VERSION} -> {VERSION ^ 0xD500}): its "
        "checksum holds under no layout this reader knows, so this is damage, not a file from a newer ckpt.",
        "checkpoint-file",
        bytes(version),
        expect_error="CorruptError",
    )


# -- output ----------------------------------------------------------------------------------
def build() -> dict[str, dict[str, Any]]:
    values = ev_vectors()
    ev_invalid_vectors(values)
    trees = tree_vectors()
    records, ck = record_vectors()
    files = file_vectors(ck)
    groups = [("values.json", values), ("trees.json", trees), ("records.json", records), ("files.json", files)]
    if VERSION >= 2:
        groups = groups[2:]
        for _f, g in groups:
            for v in g.vectors:
                v["name"] = f"v{VERSION}-{v['name']}"
    out = {}
    for fname, g in groups:
        out[fname] = {"format_version": VERSION, "title": g.title, "vectors": g.vectors}
    return out


def render(doc: dict[str, Any]) -> str:
    """JSON with one vector field per line; values that fit are kept on one line."""
    return _pretty(doc, 0) + "\n"


def _pretty(v: Any, level: int) -> str:
    flat = json.dumps(v, ensure_ascii=False, allow_nan=False)
    if len(flat) <= 100 or level >= 3 or not isinstance(v, (dict, list)) or not v:
        return flat
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(v, list):
        return "[\n" + ",\n".join(inner + _pretty(x, level + 1) for x in v) + "\n" + pad + "]"
    body = ",\n".join(f"{inner}{json.dumps(k, ensure_ascii=False)}: {_pretty(x, level + 1)}" for k, x in v.items())
    return "{\n" + body + "\n" + pad + "}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="store_true", help="overwrite existing vector files (never for released versions)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is missing or differs")
    ap.add_argument("--version", type=int, default=1, choices=(1, 2), help="format version (default 1)")
    ap.add_argument("--out", type=Path, default=None, help="output directory (default formats/vectors/v<VERSION>)")
    args = ap.parse_args(argv)
    global VERSION
    VERSION = args.version
    args.out = args.out or OUT_DIR.parent / f"v{VERSION}"
    docs = build()
    status = 0
    args.out.mkdir(parents=True, exist_ok=True)
    for fname, doc in docs.items():
        path = args.out / fname
        text = render(doc)
        exists = path.exists()
        same = exists and path.read_text(encoding="utf-8") == text
        if args.check:
            if not same:
                print(f"{path}: {'differs from' if exists else 'missing, unlike'} what this ckpt generates", file=sys.stderr)
                status = 1
            continue
        if exists and not args.force:
            note = "unchanged" if same else "DIFFERS from what this ckpt generates; left as is (vectors never change)"
            print(f"{path}: exists, {note}")
            continue
        path.write_text(text, encoding="utf-8")
        print(f"{path}: written ({len(doc['vectors'])} vectors)")
    return status


if __name__ == "__main__":
    sys.exit(main())


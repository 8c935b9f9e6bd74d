"""The format test vectors (formats/vectors/v*/*.json) read as formats/v1.md says.

Every vector is checked against the library's readers: encoded values with the
Decoder over an in-memory object source made of the object vectors, records with
decode_record (and Manifest.decode), packs with their table, checkpoint files with
CheckpointFile. Invalid vectors must raise exactly the error class they name.
Canonical values must re-encode to the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from ckptcli import errors
from ckptcli.api import Checkpoint
from ckptcli.errors import CorruptError
from ckptcli.format import framing, limits
from ckptcli.format.jsonview import to_json
from ckptcli.format.manifest import Manifest
from ckptcli.format.values import EXT_BYTES, EXT_LIST, EXT_MAP, EXT_STR, Budget, Decoder, Encoder, parse_tree_node
from ckptcli.format.walk import walk_checkpoint
from ckptcli.store.single import CheckpointFile
from ckptcli.store.verify import read_pack, read_pack_table
from tests.strategies import DictSink

VECTOR_ROOT = Path(__file__).resolve().parent.parent / "formats" / "vectors"
TREE_KINDS = {"LIST": EXT_LIST, "MAP": EXT_MAP, "BYTES": EXT_BYTES, "STR": EXT_STR}
OBJECT_KINDS = ("object", "tree-node", "data")


def _load() -> list[dict[str, Any]]:
    out = []
    for path in sorted(VECTOR_ROOT.glob("v*/*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["format_version"] == int(path.parent.name[1:]), path
        for v in doc["vectors"]:
            out.append({**v, "_file": f"{path.parent.name}/{path.name}"})
    return out


VECTORS = _load()


def _of(*kinds: str) -> list[Any]:
    return [pytest.param(v, id=v["name"]) for v in VECTORS if v["kind"] in kinds]


class VectorObjects:
    """An ObjectSource over the object vectors; a missing object is CorruptError, as in a store."""

    def __init__(self) -> None:
        self.objects = {bytes.fromhex(v["id"]): bytes.fromhex(v["hex"]) for v in VECTORS if v["kind"] in OBJECT_KINDS}

    def get(self, oid: bytes) -> bytes:
        try:
            return self.objects[oid]
        except KeyError:
            raise CorruptError(f"object {oid.hex()[:12]} is missing from the vectors") from None


SOURCE = VectorObjects()


@pytest.fixture(autouse=True)
def _reader_of_the_vectors_version(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vectors in vectors/vN/ say what a reader of version N does. A vector of v1
    that shows a version-2 header refused is checked against this code made to read
    only version 1; the current reader's refusal of a newer version is the same vector
    in vectors/v2/ (version 3)."""
    v = getattr(getattr(request.node, "callspec", None), "params", {}).get("v")
    if isinstance(v, dict):
        n = int(v["_file"].split("/")[0][1:])
        monkeypatch.setattr(limits, "READABLE_VERSIONS", frozenset(range(1, n + 1)))


def same(a: Any, b: Any) -> bool:
    """Equal JSON views, key order and int/float/bool distinctions included."""
    return json.dumps(a, allow_nan=False) == json.dumps(b, allow_nan=False)


def error_class(v: dict[str, Any]) -> type[errors.CkptError]:
    cls = getattr(errors, v["expect_error"])
    assert isinstance(cls, type) and issubclass(cls, errors.CkptError), v["expect_error"]
    return cls


def expect_error(v: dict[str, Any], fn: Any, *args: Any) -> errors.CkptError:
    """Run fn(*args); it must raise exactly the class the vector names."""
    cls = error_class(v)
    with pytest.raises(errors.CkptError) as info:
        fn(*args)
    assert type(info.value) is cls, f"{v['name']}: raised {type(info.value).__name__} ({info.value}), expected {cls.__name__}"
    return info.value


# -- the set of vectors ------------------------------------------------------------------
def test_vectors_are_present_and_named_once() -> None:
    names = [v["name"] for v in VECTORS]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    kinds = {v["kind"] for v in VECTORS}
    assert {"ev", "object", "tree-node", "data", "header", "record", "pack", "checkpoint-file"} <= kinds
    raised = {v["expect_error"] for v in VECTORS if "expect_error" in v}
    assert {"CorruptError", "UnsupportedVersionError", "LimitExceededError"} <= raised
    for v in VECTORS:
        assert v["description"] and isinstance(v["hex"], str), v["name"]
        if v["kind"] in ("ev", "object", "record", "pack", "checkpoint-file"):
            # exactly one expectation: what it decodes to, or the error it raises
            assert ("decoded" in v) != ("expect_error" in v), v["name"]


@pytest.mark.parametrize("v", _of(*OBJECT_KINDS))
def test_object_id_is_sha256_of_content(v: dict[str, Any]) -> None:
    assert hashlib.sha256(bytes.fromhex(v["hex"])).hexdigest() == v["id"]


# -- encoded values ------------------------------------------------------------------------
@pytest.mark.parametrize("v", _of("ev"))
def test_encoded_value(v: dict[str, Any]) -> None:
    data = bytes.fromhex(v["hex"])
    budget = Budget(**v["budget"]) if "budget" in v else Budget()
    decoder = Decoder(SOURCE, budget=budget, lazy_bytes=v.get("lazy_bytes", False))
    if "expect_error" in v:
        expect_error(v, decoder.decode, data, v["name"])
        return
    assert same(to_json(decoder.decode(data, v["name"])), v["decoded"])


@pytest.mark.parametrize("v", [p for p in _of("ev") if "expect_error" not in p.values[0]])
def test_encoded_value_reencodes(v: dict[str, Any]) -> None:
    data = bytes.fromhex(v["hex"])
    value = Decoder(SOURCE).decode(data)
    sink = DictSink()
    ev = Encoder(sink).encode(value)
    if v["encoding"] == "canonical":
        # Bytes fixed by the encoding rules alone: every writer produces exactly these.
        assert ev.hex() == v["hex"]
        assert not sink.objects
    else:
        # Shape depends on writer parameters (or is one a writer never makes): the value survives.
        assert v["encoding"] in ("writer", "non-canonical")
        assert same(to_json(Decoder(sink).decode(ev)), to_json(value))


@pytest.mark.parametrize("v", _of("object"))
def test_node_object(v: dict[str, Any]) -> None:
    content = bytes.fromhex(v["hex"])
    assert same(to_json(Decoder(SOURCE).decode(content, v["name"])), v["decoded"])


@pytest.mark.parametrize("v", _of("tree-node"))
def test_tree_node(v: dict[str, Any]) -> None:
    content, oid = bytes.fromhex(v["hex"]), bytes.fromhex(v["id"])
    kind = TREE_KINDS[v["tree"]]
    if "expect_error" in v:
        expect_error(v, parse_tree_node, content, kind, oid)
        return
    level, total, children = parse_tree_node(content, kind, oid)
    assert (level, total) == (v["level"], v["total"])
    if level > 0:
        assert [[n, c.hex() if isinstance(c, bytes) else {"embedded": {"level": c[1], "total": c[2]}}] for n, c in children] == v[
            "children"
        ]


# -- headers and records ---------------------------------------------------------------------
@pytest.mark.parametrize("v", _of("header"))
def test_header(v: dict[str, Any]) -> None:
    data = bytes.fromhex(v["hex"])
    kind = v["file_kind"].encode("ascii")
    outer = kind == framing.KIND_FILE  # a file the user names, not one inside a store
    if "expect_error" in v:
        expect_error(v, lambda *a: framing.check_header(*a, outer=outer), data, kind, v["name"])
        return
    assert len(data) == framing.HEADER_SIZE
    assert framing.check_header(data, kind, v["name"], outer=outer) == v["version"]


@pytest.mark.parametrize("v", _of("record"))
def test_record(v: dict[str, Any]) -> None:
    data = bytes.fromhex(v["hex"])
    kind = v["record_kind"].encode("ascii")
    if "expect_error" in v:
        read = Manifest.decode if kind == framing.KIND_MANIFEST else (lambda d, w: framing.decode_record(d, kind, w))
        expect_error(v, read, data, v["name"])
        return
    version, body = framing.decode_record(data, kind, v["name"])
    assert version == v["version"]
    assert data[10] == v["codec"]
    assert same(to_json(body), v["decoded"])
    if kind == framing.KIND_MANIFEST:
        Manifest.decode(data, v["name"])
    if "checkpoint_id" in v:
        assert hashlib.sha256(data).hexdigest() == v["checkpoint_id"]
    if "id" in v:
        assert hashlib.sha256(data).hexdigest() == v["id"]


# -- packs and checkpoint files ----------------------------------------------------------------
def _read_named_pack(data: bytes, where: str, name: bytes) -> None:
    """Read a pack as verify does under its file name: every object, then the id."""
    table = read_pack(data, where, name)
    if table.errors:
        raise CorruptError(next(iter(table.errors.values())))
    pack_id = hashlib.sha256(data).digest() if table.version == 1 else table.pack_id()
    if pack_id != name:
        raise CorruptError(f"{where}: content does not match its name")


@pytest.mark.parametrize("v", _of("pack"))
def test_pack(v: dict[str, Any]) -> None:
    data = bytes.fromhex(v["hex"])
    if "expect_error" in v:
        if "id" in v:  # damage only the name finds: the pack is read under that name
            read_pack_table(data, v["name"])
            expect_error(v, _read_named_pack, data, v["name"], bytes.fromhex(v["id"]))
        else:
            expect_error(v, read_pack_table, data, v["name"])
        return
    table = read_pack(data, v["name"])
    pack_id = hashlib.sha256(data).digest() if table.version == 1 else table.pack_id()
    assert pack_id is not None and pack_id.hex() == v["id"]
    rows = read_pack_table(data, v["name"])
    assert same(to_json({"entries": rows}), v["decoded"])
    for oid, _typ, offset, stored_len, raw_len, codec in rows:
        raw = framing.decompress(codec, data[offset : offset + stored_len], raw_len, limits.MAX_OBJECT_SIZE, v["name"])
        assert hashlib.sha256(raw).digest() == oid


def _read_checkpoint_file(path: Path) -> tuple[CheckpointFile, dict[str, Any], Any]:
    """Open, walk every object, decode every section and the state; the file stays open."""
    f = CheckpointFile(path)
    try:
        ck = Checkpoint(f, f.id)
        walk_checkpoint(f, ck.manifest)
        sections = {n: to_json(ck.section(n, lazy_bytes=n == "blobs")) for n in ck.section_names()}
        return f, sections, to_json(ck.state())
    except BaseException:
        f.close()
        raise


@pytest.mark.parametrize("v", _of("checkpoint-file"))
def test_checkpoint_file(v: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "vector.ckpt"
    path.write_bytes(bytes.fromhex(v["hex"]))
    if "expect_error" in v:
        expect_error(v, _read_checkpoint_file, path)
        try:
            damaged = CheckpointFile(path)
        except errors.CkptError:
            return
        try:
            assert damaged.check_whole_file() is not None  # the trailing checksum finds it too
        finally:
            damaged.close()
        return
    f, sections, state = _read_checkpoint_file(path)
    try:
        assert f.check_whole_file() is None
        assert f.id.hex() == v["id"] == v["decoded"]["id"]
        assert same(sections, v["decoded"]["sections"])
        assert same(state, v["decoded"]["state"])
    finally:
        f.close()

"""Issue 12 (integrity): what `verify --read-data` and `import` must refuse.

- A checkpoint file whose BYTES node declares a size its data object does not have is
  refused by file verify (as store verify refuses it) and by import, before anything
  lands in the store.
- Every byte of a version-2 pack header is covered: a flip in its reserved bytes makes
  the pack's id differ from its name.
- A version field damaged by a flip is reported as damage, not as "upgrade ckpt"; a
  record genuinely written by a newer ckpt still says "upgrade".
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import msgpack
import pytest

import ckptcli
from ckptcli.api import export_checkpoint, import_checkpoint, open_checkpoint, take, verify
from ckptcli.errors import CorruptError, UnsupportedVersionError
from ckptcli.format import framing
from ckptcli.format.manifest import Manifest, Subject
from ckptcli.format.values import EXT_BYTES, OBJ_DATA, OBJ_NODE
from ckptcli.store import verify as verify_module
from ckptcli.store.repository import Store
from ckptcli.store.single import CheckpointFile


def _packb(v: object) -> bytes:
    return msgpack.packb(v, use_bin_type=True)  # type: ignore[no-any-return]


def _export_anyway(store: Store, cid: str, path: Path) -> None:
    """The file a writer with the same bug would make: export refuses the checkpoint (as
    verify, import and copy do), so its structure check is made to find nothing here."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(verify_module, "structure_problems", lambda *_a: ({}, set()))
        export_checkpoint(open_checkpoint(cid, store), path)


def _lying_bytes_node(store: Store) -> str:
    """A checkpoint whose memory is a BYTES tree of one data object of 100 bytes that
    its node declares to hold 50 (everything else consistent: hashes, total)."""
    data = b"x" * 100
    data_id = hashlib.sha256(data).digest()
    node = _packb([EXT_BYTES, 1, 50, [[50, data_id]]])
    node_id = hashlib.sha256(node).digest()
    txn = store.transaction()
    txn.put(data_id, data, OBJ_DATA)
    txn.put(node_id, node, OBJ_NODE)
    txn.commit()
    manifest = Manifest(
        subject=Subject.parse("agent:lying"),
        sections={"memory": _packb(msgpack.ExtType(EXT_BYTES, node_id))},
        layout={"kind": "document", "format": "json"},
        producer={"name": "integrity-test"},
    )
    return store.write_manifest(manifest).hex()


def test_store_verify_refuses_a_bytes_node_that_lies_about_a_size(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / "store")
    cid = _lying_bytes_node(store)
    rep = verify(store, read_data=True)
    assert [p.kind for p in rep.problems] == ["object"]
    assert "holds 100 bytes, its tree node says 50" in rep.problems[0].message
    assert rep.problems[0].checkpoints == [cid]


def test_file_verify_and_import_refuse_a_bytes_node_that_lies_about_a_size(tmp_path: Path) -> None:
    src = ckptcli.init_store(tmp_path / "src")
    cid = _lying_bytes_node(src)
    path = tmp_path / "lying.ckpt"
    _export_anyway(src, cid, path)
    f = CheckpointFile(path)
    try:
        for read_data in (False, True):
            rep = verify(f, read_data=read_data)
            assert [p.kind for p in rep.problems] == ["object"], (read_data, rep.problems)
            assert "holds 100 bytes, its tree node says 50" in rep.problems[0].message
            assert rep.problems[0].checkpoints == [cid]
    finally:
        f.close()
    dst = ckptcli.init_store(tmp_path / "dst")
    before = sorted(p.relative_to(dst.backend.root) for p in Path(dst.backend.root).rglob("*") if p.is_file())  # type: ignore[attr-defined]
    with pytest.raises(CorruptError, match="holds 100 bytes, its tree node says 50"):
        import_checkpoint(dst, path)
    after = sorted(p.relative_to(dst.backend.root) for p in Path(dst.backend.root).rglob("*") if p.is_file())  # type: ignore[attr-defined]
    assert after == before, "a refused import left files in the store"
    assert verify(dst, read_data=True).ok


def _v2_pack(tmp_path: Path) -> tuple[Store, Path]:
    store = ckptcli.init_store(tmp_path / "store")
    take(store, {"memory": {"a": "hello " * 40}}, subject="agent:a")
    (pack,) = [p for p in (tmp_path / "store" / "packs").rglob("*") if p.is_file()]
    assert pack.read_bytes()[8:10] == b"\x00\x02"
    return store, pack


@pytest.mark.parametrize("offset", [10, 11])
def test_v2_pack_reserved_header_bytes_are_covered(tmp_path: Path, offset: int) -> None:
    store, pack = _v2_pack(tmp_path)
    data = bytearray(pack.read_bytes())
    data[offset] ^= 0x01
    pack.write_bytes(bytes(data))
    rep = verify(store, read_data=True)
    names = [(p.kind, p.name) for p in rep.problems]
    assert ("pack", f"packs/{pack.parent.name}/{pack.name}") in names, rep.problems


def _damaged_version(data: bytes, offset: int = 8) -> bytes:
    out = bytearray(data)
    out[offset] ^= 0xD5  # 2 -> 54530: what one flipped byte makes of a version
    return bytes(out)


def test_record_with_a_flipped_version_is_damage_not_a_newer_format() -> None:
    good = framing.encode_record(framing.KIND_REF, {"target": b"\x07" * 32})
    with pytest.raises(CorruptError, match=r"declares format version 54530.*checksum") as exc:
        framing.decode_record(_damaged_version(good), framing.KIND_REF, "refs/tags/t")
    assert "upgrade ckpt" not in exc.value.message
    # the same version written on purpose (checksum intact) is a newer format
    newer = framing.encode_record(framing.KIND_REF, {"target": b"\x07" * 32}, version=3)
    with pytest.raises(UnsupportedVersionError, match="written in format version 3"):
        framing.decode_record(newer, framing.KIND_REF, "refs/tags/t")


def test_checkpoint_file_with_a_flipped_version_is_damage(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / "store")
    cid = take(store, {"memory": {"a": 1}}, subject="agent:a").hex
    path = tmp_path / "a.ckpt"
    export_checkpoint(open_checkpoint(cid, store), path)
    good = path.read_bytes()
    path.write_bytes(_damaged_version(good))
    with pytest.raises(CorruptError, match="declares format version 54530") as exc:
        CheckpointFile(path)
    assert str(path) in exc.value.message
    # a file whose checksum covers its (newer) version is from a newer ckpt
    newer = bytearray(good)
    struct.pack_into(">H", newer, 8, 3)
    mlen = struct.unpack_from(">I", newer, 12)[0]
    tlen = struct.unpack_from(">I", newer, len(newer) - 36)[0]
    table_start = len(newer) - 36 - tlen
    newer[-32:] = hashlib.sha256(bytes(newer[: 16 + mlen]) + bytes(newer[table_start:-32])).digest()
    path.write_bytes(bytes(newer))
    with pytest.raises(UnsupportedVersionError, match="written in format version 3"):
        CheckpointFile(path)


def test_pack_with_a_flipped_version_is_named_as_damaged(tmp_path: Path) -> None:
    store, pack = _v2_pack(tmp_path)
    pack.write_bytes(_damaged_version(pack.read_bytes()))
    rep = verify(store, read_data=True)
    (p,) = [p for p in rep.problems if p.kind == "pack"]
    assert p.name == f"packs/{pack.parent.name}/{pack.name}"
    assert "declares format version 54530" in p.message and "damaged" in p.message
    assert "upgrade ckpt" not in p.message


def test_cli_verify_and_import_of_a_lying_file(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    src = ckptcli.init_store(tmp_path / "src")
    cid = _lying_bytes_node(src)
    path = tmp_path / "lying.ckpt"
    _export_anyway(src, cid, path)
    r = cli("verify", "--read-data", path)
    assert r.code == 5 and "holds 100 bytes, its tree node says 50" in r.out + r.err
    ckptcli.init_store(tmp_path / "dst")
    r = cli("import", path, "--store", tmp_path / "dst")
    assert r.code == 5, r
    (line,) = r.err.strip().splitlines()
    assert line.startswith("ckpt: error: ") and str(path) in line and "its tree node says 50" in line
    assert "Traceback" not in r.err

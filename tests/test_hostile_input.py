"""Hostile input: truncated files, wrong magic, a future format version, absurd declared
sizes, decompression bombs, very deep nesting, reference bombs and paths such as
`../../x` or `/etc/x` inside a checkpoint each give one clear error line and the
documented exit code, and nothing is written outside the target (nor into a store
that refused an import).

Every case runs the real CLI in a subprocess. Hostile checkpoint files are made from a
real `ckpt export` by taking it apart and putting it back together byte by byte
(tests/helpers_faults.py, from the layouts in ckptcli/store/single.py and
ckptcli/format/framing.py), recomputing record and file checksums after tampering so
that the deeper check is what trips. A control test shows that the untampered rebuild
is accepted by every command, so each hostile variant differs from a good file in the
one way it names. Hostile stores are made with the library's own transaction, encoder
and manifest (as ckptcli.api.take does), because `ckpt take` refuses such input.

Exit codes are those of ckptcli.errors.ExitCode as errors.py, docs/exit-codes.md and
formats/v1.md ("Errors", "Limits", "Checkpoint files") document them: damaged, truncated
or malformed -> CORRUPT (5), including file-header and trailer lengths that do not fit
the file; not a ckpt file or a newer format -> UNSUPPORTED_VERSION (6); a declared or
decoded size, depth or count beyond a limit of ckptcli/format/limits.py ->
LIMIT_EXCEEDED (7); a path escaping the restore target -> UNSAFE_PATH (8).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zstandard

from ckptcli.api import open_checkpoint
from ckptcli.errors import ExitCode, LimitExceededError
from ckptcli.format.manifest import Manifest, Subject
from ckptcli.format.values import OBJ_NODE, Encoded, Encoder
from ckptcli.store.repository import Store, Transaction
from tests.helpers_faults import (
    CODEC_ZSTD,
    HEADER,
    TRAILER,
    U32,
    Cmd,
    StoredObject,
    build_checkpoint_file,
    describe,
    file_layout,
    first_reference,
    make_record,
    packb,
    parse_checkpoint_file,
    parse_record,
    refresh_checksum,
    run_cli,
    run_parallel,
    sha256,
    tree_snapshot,
    zstd_rle_frame,
    zstd_stream_bomb,
)

CORRUPT = ExitCode.CORRUPT
UNSUPPORTED = ExitCode.UNSUPPORTED_VERSION
LIMIT = ExitCode.LIMIT_EXCEEDED
UNSAFE = ExitCode.UNSAFE_PATH
#: Address-space cap for commands fed decompression and reference bombs: a ckpt process
#: needs well under 256 MiB; a bounded decoder never needs more than its limits allow.
MEM_LIMIT = 512 * 1024 * 1024
EXT_REF = 2

# -- the error contract -------------------------------------------------------------------------------


def assert_one_error(r: subprocess.CompletedProcess[bytes], code: ExitCode, what: str, *, report_ok: bool = False) -> None:
    """Exit `code`; stderr exactly one line `ckpt: error: ...`; nothing on stdout
    (for `verify`, only its report lines)."""
    err = r.stderr.decode("utf-8", errors="replace")
    assert r.returncode == code, f"{what}: expected exit {int(code)} ({code.name}), got {r.returncode}\n{describe(r)}"
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt: error: "), f"{what}: stderr is not one `ckpt: error:` line:\n{err}"
    assert "Traceback" not in err
    out = r.stdout.decode("utf-8", errors="replace")
    if report_ok:
        bad = [ln for ln in out.splitlines() if not ln.startswith(("damaged ", "note: ", "checked "))]
        assert not bad, f"{what}: unexpected output: {bad[:5]}"
    else:
        assert out == "", f"{what}: printed on stdout:\n{out[:500]}"


def store_snapshot(store: Path) -> dict[str, Any]:
    snap = tree_snapshot(store, dir_mtimes=False, skip=("locks", "tmp"))
    leftovers = sorted(os.listdir(store / "tmp")) if (store / "tmp").is_dir() else []
    return {"files": snap, "tmp": leftovers}


# -- a real checkpoint to start from -----------------------------------------------------------------


@dataclass
class Base:
    root: Path
    store: Path  # holds the base checkpoint
    import_store: Path  # an empty store that hostile imports must leave untouched
    cid: str
    doc: dict[str, Any]
    data: bytes  # `ckpt export` of the base checkpoint

    def write(self, name: str, data: bytes) -> Path:
        p = self.root / "files" / name
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(data)
        return p


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    root = tmp_path_factory.mktemp("hostile")
    rng = random.Random(99)
    doc = {
        "memory": {
            "goal": "be attacked",
            "facts": [f"fact {i}" for i in range(300)],
            "scratch": "".join(rng.choice("abcdefghij ") for _ in range(90_000)),
            "nested": {"a": {"b": {"c": [1, 2.5, None, True, "x" * 300]}}},
        },
        "plan": [{"step": i, "done": i < 3} for i in range(40)],
        "events": [{"seq": i, "kind": "tick"} for i in range(100)],
    }
    (root / "doc.json").write_text(json.dumps(doc))
    ws = root / "ws"
    ws.mkdir()
    (ws / "data.bin").write_bytes(rng.randbytes(300_000))
    (ws / "note.txt").write_text("hello\n")
    for p in (ws / "data.bin", ws / "note.txt", ws):  # fixed mtimes: the same objects, in the same order, every run
        os.utime(p, ns=(1_700_000_000 * 10**9, 1_700_000_000 * 10**9))
    store, import_store = root / "store", root / "import-store"
    for s in (store, import_store):
        assert run_cli("init", s).returncode == 0
    r = run_cli("take", root / "doc.json", "--subject", "agent:base", "--blob", f"ws={ws}", "--store", store)
    assert r.returncode == 0, describe(r)
    cid = r.stdout.decode().strip()
    r = run_cli("export", cid, "-o", root / "base.ckpt", "--store", store)
    assert r.returncode == 0, describe(r)
    return Base(root, store, import_store, cid, doc, (root / "base.ckpt").read_bytes())


def file_commands(base: Base, path: Path) -> dict[str, Cmd]:
    return {
        "show": Cmd(["show", path]),
        "cat": Cmd(["cat", path]),
        "restore": Cmd(["restore", path]),
        "verify": Cmd(["verify", "--read-data", path]),
        "import": Cmd(["import", path, "--store", base.import_store]),
    }


def check_file(
    base: Base, data: bytes, code: ExitCode, what: str, *, mem_limit: int | None = None, env: dict[str, str] | None = None
) -> None:
    """Every read command (and import) on the file `data` fails with `code`, one line each;
    the import store is left exactly as it was."""
    path = base.write(f"{hashlib.sha256(what.encode()).hexdigest()[:16]}.ckpt", data)
    before = store_snapshot(base.import_store)
    cmds = file_commands(base, path)
    for c in cmds.values():
        c.mem_limit = mem_limit
        c.env = env
        c.timeout = 60
    t0 = time.monotonic()
    results = dict(zip(cmds, run_parallel(list(cmds.values())), strict=True))
    elapsed = time.monotonic() - t0
    failures = []
    for name, r in results.items():
        try:
            assert_one_error(r, code, f"{what}: ckpt {name}", report_ok=name == "verify")
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, "\n\n".join(failures)
    assert store_snapshot(base.import_store) == before, f"{what}: a failed import changed the store"
    assert elapsed < 60


# -- the untampered rebuild: the helpers write files ckpt accepts ---------------------------------------


def test_rebuilt_file_is_accepted(base: Base) -> None:
    """Taking the exported file apart and putting it back gives the same bytes, which
    every command accepts."""
    parts = parse_checkpoint_file(base.data)
    rebuilt = build_checkpoint_file(parts.manifest, parts.objects)
    assert rebuilt == base.data
    path = base.write("rebuilt.ckpt", rebuilt)
    other = base.root / "rebuilt-import-store"
    assert run_cli("init", other).returncode == 0
    show, cat, restore, verify, imp = run_parallel(
        [
            Cmd(["show", path]),
            Cmd(["cat", path]),
            Cmd(["restore", path]),
            Cmd(["verify", "--read-data", path]),
            Cmd(["import", path, "--store", other]),
        ]
    )
    for r in (show, cat, restore, verify, imp):
        assert r.returncode == 0, describe(r)
    assert json.loads(restore.stdout) == base.doc
    assert imp.stdout.decode().strip() == base.cid


# -- truncation -----------------------------------------------------------------------------------------

TRUNCATIONS = [
    "empty",
    "inside the magic",
    "inside the header",
    "header only",
    "inside the manifest",
    "inside the objects",
    "inside the object table",
    "last byte missing",
]


def truncation_offset(data: bytes, where: str) -> int:
    lay = file_layout(data)
    return {
        "empty": 0,
        "inside the magic": 5,
        "inside the header": 10,
        "header only": HEADER.size,
        "inside the manifest": (lay.manifest_start + lay.objects_start) // 2,
        "inside the objects": (lay.objects_start + lay.table_start) // 2,
        "inside the object table": (lay.table_start + lay.trailer_start) // 2,
        "last byte missing": lay.size - 1,
    }[where]


def misleading(data: bytes, t: int) -> bool:
    """Whether the file cut at `t` ends with 4 bytes that, read as the object table's
    length, name a region inside it (test_truncation_is_not_misreported_as_a_foreign_file)."""
    lay = file_layout(data)
    if t < lay.objects_start + TRAILER:
        return False
    tlen = int.from_bytes(data[t - TRAILER : t - TRAILER + 4], "big")
    return tlen <= t - TRAILER - lay.objects_start and data[t - TRAILER - tlen : t - TRAILER - tlen + 4] != b"\x89CKP"


@pytest.mark.parametrize("where", TRUNCATIONS)
def test_truncated_file(base: Base, where: str) -> None:
    t = truncation_offset(base.data, where)
    while misleading(base.data, t):  # one offset in thousands; that case has its own test
        t -= 1
    check_file(base, base.data[:t], CORRUPT, f"truncated: {where}")


def _cut_objects(data: bytes) -> bytes:
    """The object region loses its last 100 bytes; table and trailer stay (checksum fixed)."""
    lay = file_layout(data)
    return refresh_checksum(data[: lay.table_start - 100] + data[lay.table_start :])


def _cut_table(data: bytes) -> bytes:
    """The object table record loses its last 10 bytes; its declared length says so."""
    lay = file_layout(data)
    table = data[lay.table_start : lay.trailer_start - 10]
    return refresh_checksum(data[: lay.table_start] + table + U32.pack(len(table)) + b"\0" * 32)


def _cut_manifest(data: bytes) -> bytes:
    """The manifest record loses its last 10 bytes; the header's manifest length says so."""
    parts = parse_checkpoint_file(data)
    return build_checkpoint_file(parts.manifest[:-10], parts.objects)


@pytest.mark.parametrize("cut", [_cut_objects, _cut_table, _cut_manifest], ids=["objects", "table", "manifest"])
def test_truncated_region_with_intact_trailer(base: Base, cut: Callable[[bytes], bytes]) -> None:
    check_file(base, cut(base.data), CORRUPT, f"truncated region: {cut.__name__}")


@pytest.fixture(scope="module")
def misleading_truncations(base: Base) -> list[int]:
    """Truncation offsets where the 4 bytes that become the `table_len` of the cut file
    happen to name a region inside it, so a reader that trusts them finds no table there
    (about one offset in 2,000 in a file of compressed data)."""
    lay = file_layout(base.data)
    found = [t for t in range(lay.objects_start + TRAILER + 64, lay.table_start) if misleading(base.data, t)]
    assert len(found) >= 2, "the base file should offer such offsets"
    return [found[0], found[-1]]


def test_truncation_is_not_misreported_as_a_foreign_file(base: Base, misleading_truncations: list[int]) -> None:
    for t in misleading_truncations:
        check_file(base, base.data[:t], CORRUPT, f"truncated at {t}")


# -- not a ckpt file, a newer format ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda d: b"PK\x03\x04" + d[4:], id="zip-magic"),
        pytest.param(lambda d: b"\x1f\x8b\x08\x00" + bytes(200), id="gzip"),
        pytest.param(lambda d: b"this is not a checkpoint\n" * 40, id="text"),
    ],
)
def test_wrong_magic(base: Base, make: Callable[[bytes], bytes]) -> None:
    check_file(base, make(base.data), UNSUPPORTED, "wrong magic")


def test_ckpt_file_of_another_kind(base: Base) -> None:
    """A store's manifest file passed where a checkpoint file is expected: a ckpt file,
    but not a checkpoint file -> CORRUPT ('expected a ckpt checkpoint file, found a manifest')."""
    manifest = (base.store / "manifests" / base.cid).read_bytes()
    check_file(base, manifest, CORRUPT, "a manifest record as a checkpoint file")


def test_future_version_in_file_header(base: Base) -> None:
    data = refresh_checksum(base.data[:8] + (99).to_bytes(2, "big") + base.data[10:])
    check_file(base, data, UNSUPPORTED, "file header version 99")


def _manifest_with_version(manifest: bytes, version: int) -> bytes:
    body = parse_record(manifest).value()
    body["format"] = version
    return make_record(b"MANI", packb(body), version=version, compress=True)


def test_future_version_of_embedded_manifest(base: Base) -> None:
    parts = parse_checkpoint_file(base.data)
    data = build_checkpoint_file(_manifest_with_version(parts.manifest, 99), parts.objects)
    check_file(base, data, UNSUPPORTED, "embedded manifest version 99")


def test_future_version_manifest_in_store(base: Base, tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert run_cli("init", store).returncode == 0
    data = _manifest_with_version((base.store / "manifests" / base.cid).read_bytes(), 99)
    cid = sha256(data).hex()
    (store / "manifests" / cid).write_bytes(data)
    for args in (["show", cid], ["show", cid, "--section", "memory"], ["cat", cid], ["restore", cid]):
        assert_one_error(run_cli(*args, "--store", store), UNSUPPORTED, f"ckpt {' '.join(args)} (manifest version 99)")


# -- absurd declared sizes ------------------------------------------------------------------------------


def _header_manifest_len(data: bytes) -> bytes:
    return refresh_checksum(data[: HEADER.size] + U32.pack(2**31) + data[HEADER.size + 4 :])


def _trailer_table_len(data: bytes) -> bytes:
    return refresh_checksum(data[:-TRAILER] + U32.pack(2**31) + data[-32:])


def test_declared_lengths_beyond_the_file(base: Base) -> None:
    """Lengths in the file header and trailer that point past the end of the file: the
    code documents these ('does not fit in a file of N bytes; the file is truncated or
    damaged') as CORRUPT."""
    check_file(base, _header_manifest_len(base.data), CORRUPT, "manifest length 2**31")
    check_file(base, _trailer_table_len(base.data), CORRUPT, "table length 2**31")


def test_record_declares_huge_raw_len(base: Base) -> None:
    """The embedded manifest record declares a decompressed body of 2**31 bytes, over
    MAX_RECORD_SIZE: refused before anything is allocated, LIMIT_EXCEEDED."""
    parts = parse_checkpoint_file(base.data)
    rec = parse_record(parts.manifest)
    manifest = make_record(b"MANI", rec.body(), version=rec.version, raw_len=2**31, codec=rec.codec, stored=rec.stored)
    check_file(base, build_checkpoint_file(manifest, parts.objects), LIMIT, "manifest record raw_len 2**31")


def test_object_declares_huge_raw_len(base: Base) -> None:
    parts = parse_checkpoint_file(base.data)
    _code, oid = first_reference(parse_record(parts.manifest).value()["sections"]["memory"])

    def hook(rows: list[list[Any]]) -> list[list[Any]]:
        for row in rows:
            if row[0] == oid:
                row[4] = 2**31
        return rows

    check_file(base, build_checkpoint_file(parts.manifest, parts.objects, rows_hook=hook), LIMIT, "object raw_len 2**31")


def test_declared_count_beyond_the_limit(base: Base, tmp_path: Path) -> None:
    """An array declaring 2**31 items: in a file's object table, and as a section of a
    checkpoint in a store."""
    lay = file_layout(base.data)
    table = make_record(b"PTAB", b"\x81\xa7entries\xdd\x80\x00\x00\x00")  # {"entries": array32(2**31)}
    data = refresh_checksum(base.data[: lay.table_start] + table + U32.pack(len(table)) + b"\0" * 32)
    store = tmp_path / "store"
    assert run_cli("init", store).returncode == 0
    cid = craft_checkpoint(store, lambda txn, enc: {"memory": b"\xdd\x80\x00\x00\x00"})
    failures = []
    for args in (["show", cid, "--section", "memory"], ["restore", cid], ["cat", cid]):
        try:
            assert_one_error(run_cli(*args, "--store", store), LIMIT, f"ckpt {args[0]} (section declaring 2**31 items)")
        except AssertionError as exc:
            failures.append(str(exc))
    try:
        check_file(base, data, LIMIT, "object table declaring 2**31 entries")
    except AssertionError as exc:
        failures.append(str(exc))
    assert not failures, "\n\n".join(failures)


# -- decompression bombs --------------------------------------------------------------------------------

#: zstd frames that produce far more than `raw_len`, the declared size of what they replace
BOMBS: dict[str, Callable[[int], bytes]] = {
    # no content size in the frame header: 64 MiB of zeros in a few KB
    "no-size-64MiB": lambda raw_len: zstd_stream_bomb(64 * 1024 * 1024),
    # the frame header records its true content size, 1 GiB (32 KB of RLE blocks)
    "true-size-1GiB": lambda raw_len: zstd_rle_frame(1 << 30),
    # the frame header claims 1 TiB (and holds one 128 KiB block)
    "claims-1TiB": lambda raw_len: zstd_rle_frame(1 << 40, actual=128 * 1024),
    # the frame header claims exactly raw_len, and its blocks produce 1 GiB
    "claims-raw_len-makes-1GiB": lambda raw_len: zstd_rle_frame(raw_len, actual=1 << 30),
}


@pytest.mark.parametrize(
    ("where", "bomb"), [("object", b) for b in BOMBS] + [("manifest-record", b) for b in BOMBS if b != "no-size-64MiB"]
)
def test_decompression_bomb_in_file(base: Base, where: str, bomb: str) -> None:
    """The memory section's root object (or the manifest record itself) is replaced by a
    zstd frame that expands far beyond its declared raw_len (checksums recomputed): the
    reader refuses it (CORRUPT) without producing more than raw_len, under a 512 MiB
    address-space cap and in bounded time (docs/design.md: "zstd output is capped at
    the declared size")."""
    parts = parse_checkpoint_file(base.data)
    if where == "object":
        _code, oid = first_reference(parse_record(parts.manifest).value()["sections"]["memory"])
        victim = parts.obj(oid)
        objects = [o for o in parts.objects if o.oid != oid]
        objects.append(StoredObject(oid, victim.typ, CODEC_ZSTD, BOMBS[bomb](victim.raw_len), victim.raw_len))
        data = build_checkpoint_file(parts.manifest, objects)
    else:
        rec = parse_record(parts.manifest)
        body = rec.body()
        manifest = make_record(b"MANI", body, version=rec.version, stored=BOMBS[bomb](len(body)), raw_len=len(body))
        data = build_checkpoint_file(manifest, parts.objects)
    check_file(base, data, CORRUPT, f"decompression bomb ({bomb}) in the {where}", mem_limit=MEM_LIMIT)


def test_zstd_frames_without_content_size_are_accepted(base: Base, tmp_path: Path) -> None:
    """The other side of the bomb tests: every compressed object and the manifest record
    re-stored as zstd frames that do not record their content size (valid RFC 8878, what a
    streaming writer makes) and decode to exactly raw_len. Every command accepts them."""
    parts = parse_checkpoint_file(base.data)

    def stream(raw: bytes) -> bytes:
        co = zstandard.ZstdCompressor(level=3).compressobj()
        frame = co.compress(raw) + co.flush()
        assert zstandard.frame_content_size(frame) == -1
        return frame

    objects = [
        StoredObject(o.oid, o.typ, CODEC_ZSTD, stream(o.content()), o.raw_len) if o.codec == CODEC_ZSTD else o for o in parts.objects
    ]
    assert any(o.codec == CODEC_ZSTD for o in parts.objects)
    rec = parse_record(parts.manifest)
    body = rec.body()
    manifest = make_record(b"MANI", body, version=rec.version, stored=stream(body), raw_len=len(body))
    path = base.write("no-content-size.ckpt", build_checkpoint_file(manifest, objects))
    other = tmp_path / "store"
    assert run_cli("init", other).returncode == 0
    cmds = [
        Cmd(["show", path]),
        Cmd(["cat", path]),
        Cmd(["restore", path]),
        Cmd(["verify", "--read-data", path]),
        Cmd(["import", path, "--store", other]),
    ]
    results = run_parallel(cmds)
    bad = [f"ckpt {c.args[0]}:\n{describe(r)}" for c, r in zip(cmds, results, strict=True) if r.returncode != 0]
    assert not bad, "\n\n".join(bad)
    assert json.loads(results[2].stdout) == base.doc


@pytest.mark.parametrize("bomb", ["true-size-1GiB", "claims-raw_len-makes-1GiB"])
def test_decompression_bomb_in_store(tmp_path: Path, bomb: str) -> None:
    """The same in a store's pack: a node stored as a bomb frame, with its true id and raw_len."""
    store = tmp_path / "store"
    assert run_cli("init", store).returncode == 0
    content = packb(["the real content of this node"] * 20)

    def build(txn: Transaction, enc: Encoder) -> dict[str, bytes]:
        oid = sha256(content)
        txn.put_stored(oid, OBJ_NODE, CODEC_ZSTD, BOMBS[bomb](len(content)), len(content))
        return {"memory": packb(msgpack.ExtType(EXT_REF, oid))}

    cid = craft_checkpoint(store, build)
    cmds = [
        Cmd([*args, "--store", store], mem_limit=MEM_LIMIT, timeout=60)
        for args in (["show", cid], ["cat", cid], ["restore", cid], ["verify", "--read-data"])
    ]
    for c, r in zip(cmds, run_parallel(cmds), strict=True):
        assert_one_error(r, CORRUPT, f"ckpt {c.args[0]} ({bomb} in a pack)", report_ok=c.args[0] == "verify")


# -- deep nesting ---------------------------------------------------------------------------------------

DEPTH = 100_000


def _deep_json_list() -> bytes:
    return b"[" * DEPTH + b"]" * DEPTH


def _deep_json_map() -> bytes:
    return b'{"a":' * DEPTH + b"1" + b"}" * DEPTH


def _deep_msgpack() -> bytes:
    return b"\x91" * DEPTH + b"\xc0"


def _moderately_deep_json() -> bytes:
    # parses with Python's json (under the recursion limit), beyond MAX_DEPTH (256)
    return b'{"memory": ' + b"[" * 600 + b"]" * 600 + b"}"


@pytest.mark.parametrize(
    ("make", "fmt"),
    [(_deep_json_list, "json"), (_deep_json_map, "json"), (_deep_msgpack, "msgpack"), (_moderately_deep_json, "json")],
    ids=["json-lists", "json-maps", "msgpack", "json-600"],
)
@pytest.mark.parametrize("via", ["file", "stdin"])
def test_deeply_nested_state_document(tmp_path: Path, make: Callable[[], bytes], fmt: str, via: str) -> None:
    store = tmp_path / "store"
    assert run_cli("init", store).returncode == 0
    before = store_snapshot(store)
    data = make()
    if via == "file":
        doc = tmp_path / f"deep.{fmt}"
        doc.write_bytes(data)
        r = run_cli("take", doc, "--store", store, "--subject", "agent:deep")
    else:
        r = run_cli("take", "-", "--format", fmt, "--store", store, "--subject", "agent:deep", input=data)
    assert_one_error(r, LIMIT, f"take of a document nested {DEPTH} deep ({fmt}, {via})")
    assert store_snapshot(store) == before, "a refused take changed the store"


# -- crafted checkpoints (the library's own transaction, encoder and manifest) ------------------------------


def craft_checkpoint(store_path: Path, build: Callable[[Transaction, Encoder], dict[str, bytes]], subject: str = "agent:hostile") -> str:
    """Write a checkpoint whose sections `build` encodes (as ckptcli.api.take does, minus its checks)."""
    store = Store.open(store_path)
    try:
        txn = store.transaction()
        enc = Encoder(txn, cdc=store.config.cdc)
        sections = build(txn, enc)
        txn.commit()
        manifest = Manifest(
            subject=Subject.parse(subject),
            sections=sections,
            layout={"kind": "document", "format": "json"},
            producer={"name": "hostile-test"},
        )
        return store.write_manifest(manifest).hex()
    finally:
        store.close()


def _ref_chain(txn: Transaction, depth: int, container: str) -> bytes:
    """A value nested `depth` levels deep in which every level is its own node object."""
    ev = packb("bottom")
    for _ in range(depth):
        oid = sha256(ev)
        txn.put(oid, ev, OBJ_NODE)
        ref = msgpack.ExtType(EXT_REF, oid)
        ev = packb([ref]) if container == "list" else packb({"down": ref})
    return ev


@pytest.fixture(scope="module")
def deep_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    store = tmp_path_factory.mktemp("deep") / "store"
    assert run_cli("init", store).returncode == 0
    ids = {}
    for container in ("list", "map"):

        def build(txn: Transaction, enc: Encoder, container: str = container) -> dict[str, bytes]:
            return {"memory": _ref_chain(txn, 5_000, container)}

        ids[container] = craft_checkpoint(store, build)
    return store, ids


@pytest.mark.parametrize("container", ["list", "map"])
def test_nesting_across_references(deep_store: tuple[Path, dict[str, str]], container: str) -> None:
    """5,000 levels, each level a separate REF object: every reader stops at MAX_DEPTH."""
    store, ids = deep_store
    cid = ids[container]
    exported = store.parent / f"deep-{container}.ckpt"
    r = run_cli("export", cid, "-o", exported, "--store", store)
    assert r.returncode == 0, describe(r)
    cmds = [Cmd([*args, "--store", store]) for args in (["show", cid, "--section", "memory"], ["restore", cid], ["cat", cid])]
    cmds.append(Cmd(["restore", exported]))
    for c, r in zip(cmds, run_parallel(cmds), strict=True):
        assert_one_error(r, LIMIT, f"ckpt {' '.join(map(str, c.args[:2]))} ({container} nested 5,000 deep across references)")


@pytest.mark.parametrize("container", ["list", "map"])
def test_nesting_across_references_library(deep_store: tuple[Path, dict[str, str]], container: str) -> None:
    """Through the library too (inside pytest's deep stack, under the default recursion
    limit): LimitExceededError, not RecursionError."""
    store_path, ids = deep_store
    store = Store.open(store_path)
    try:
        with pytest.raises(LimitExceededError):
            open_checkpoint(ids[container], store).section("memory")
    finally:
        store.close()


# -- reference bomb ------------------------------------------------------------------------------------


def _reference_bomb(txn: Transaction, enc: Encoder) -> dict[str, bytes]:
    """A list naming one 60 KB string 100 times, three levels deep: 60 GB once decoded."""
    ev = enc.encode("x" * 60_000)
    for _ in range(3):
        ev = enc.encode([Encoded(ev)] * 100)
    return {"memory": ev}


def test_reference_bomb(tmp_path: Path) -> None:
    """A list naming one 60 KB string 100 times, at three levels: 60 GB once decoded, in
    a store of a few objects. With CKPT_MAX_DECODED_BYTES=10_000_000 every reader stops
    quickly with LIMIT_EXCEEDED, in bounded memory."""
    store = tmp_path / "store"
    assert run_cli("init", store).returncode == 0

    cid = craft_checkpoint(store, _reference_bomb)
    exported = tmp_path / "bomb.ckpt"
    r = run_cli("export", cid, "-o", exported, "--store", store)
    assert r.returncode == 0, describe(r)
    assert exported.stat().st_size < 1_000_000
    env = {"CKPT_MAX_DECODED_BYTES": "10000000"}
    cmds = [
        Cmd([*a, "--store", store], env=env, mem_limit=MEM_LIMIT, timeout=60)
        for a in (["restore", cid], ["show", cid, "--section", "memory"], ["cat", cid])
    ]
    cmds.append(Cmd(["restore", exported], env=env, mem_limit=MEM_LIMIT, timeout=60))
    t0 = time.monotonic()
    results = run_parallel(cmds)
    elapsed = time.monotonic() - t0
    for c, r in zip(cmds, results, strict=True):
        assert_one_error(r, LIMIT, f"ckpt {c.args[0]} of a reference bomb")
    assert elapsed < 30, f"the reference bomb took {elapsed:.1f}s to refuse"


def test_reference_bomb_with_the_default_budget(tmp_path: Path) -> None:
    """The same reference bomb, with the default decode budget, in a 512 MiB process:
    still LIMIT_EXCEEDED with one line, not an internal error."""
    store = tmp_path / "store"
    assert run_cli("init", store).returncode == 0
    cid = craft_checkpoint(store, _reference_bomb)
    assert_one_error(run_cli("restore", cid, "--store", store, mem_limit=MEM_LIMIT, timeout=120), LIMIT, "ckpt restore of a reference bomb")


# -- unsafe paths -------------------------------------------------------------------------------------------


def _file(data: bytes = b"pwned\n") -> dict[str, Any]:
    return {"type": "file", "size": len(data), "mode": 0o644, "mtime_ns": 0, "data": data}


def _dir(entries: dict[str, Any]) -> dict[str, Any]:
    return {"type": "dir", "mode": 0o755, "mtime_ns": 0, "entries": entries}


def _link(target: str) -> dict[str, Any]:
    return {"type": "symlink", "target": target}


UNSAFE_BLOBS: dict[str, dict[str, Any]] = {
    "dotdot-x": {"../../x": _file()},
    "absolute": {"/etc/x": _file()},
    "inner-dotdot": {"a/../../x": _file()},
    "dotdot": {"..": _file()},
    "nested-dotdot": {"sub": _dir({"fine.txt": _file(), "../../x": _file()})},
    "symlink-to-etc-passwd": {"passwd": _link("/etc/passwd")},
    "symlink-up": {"outside": _link("../../outside")},
    "nested-symlink-up": {"sub": _dir({"up": _link("../../outside")})},
    "symlink-through-symlink": {"here": _link("."), "outside": _link("here/../outside")},
}


@pytest.fixture(scope="module")
def unsafe_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("unsafe")
    store = root / "store"
    assert run_cli("init", store).returncode == 0
    ids = {}
    for name, bad in UNSAFE_BLOBS.items():
        # a harmless file and directory first: validation must come before the first write
        blobs = {"good.txt": _file(b"good\n"), "gooddir": _dir({"inner.txt": _file(b"inner\n")}), **bad}

        def build(txn: Transaction, enc: Encoder, blobs: dict[str, Any] = blobs) -> dict[str, bytes]:
            return {"memory": enc.encode({"x": 1}), "blobs": enc.encode(blobs)}

        ids[name] = craft_checkpoint(store, build)
        r = run_cli("export", ids[name], "-o", root / f"{name}.ckpt", "--store", store)
        assert r.returncode == 0, describe(r)
    return store, ids


@pytest.mark.parametrize(
    "case",
    [n for n in UNSAFE_BLOBS],
)
def test_unsafe_paths_in_blobs(unsafe_store: tuple[Path, dict[str, str]], tmp_path: Path, case: str) -> None:
    """restore --blobs refuses the whole checkpoint (UNSAFE_PATH) before writing anything:
    nothing appears outside the target, and nothing inside it either."""
    store, ids = unsafe_store
    sandbox = tmp_path / "sandbox"
    deep = sandbox / "a" / "b"
    (sandbox / "cwd").mkdir(parents=True)
    deep.mkdir(parents=True)
    (sandbox / "a" / "keep.txt").write_text("keep\n")
    existing = deep / "existing-target"
    existing.mkdir()
    etc_x = Path("/etc/x")
    etc_x_before = etc_x.exists() or etc_x.is_symlink()
    passwd_before = hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest() if Path("/etc/passwd").exists() else None
    before = tree_snapshot(sandbox)
    exported = store.parent / f"{case}.ckpt"
    runs = {
        "from the store, into a new target": Cmd(
            ["restore", ids[case], "--store", store, "--blobs", deep / "new-target"], cwd=sandbox / "cwd"
        ),
        "from the exported file, into an existing empty target given relative, --overwrite": Cmd(
            ["restore", exported, "--blobs", os.path.relpath(existing, sandbox / "cwd"), "--overwrite"], cwd=sandbox / "cwd"
        ),
    }
    results = dict(zip(runs, run_parallel(list(runs.values())), strict=True))
    after = tree_snapshot(sandbox)
    failures = []
    for what, r in results.items():
        try:
            assert_one_error(r, UNSAFE, f"{case}: restore ({what})")
        except AssertionError as exc:
            failures.append(str(exc))
    changed = {k: (before.get(k), after.get(k)) for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert not changed, f"{case}: restore changed the sandbox: {changed}"
    assert (etc_x.exists() or etc_x.is_symlink()) == etc_x_before, "/etc/x appeared"
    if passwd_before is not None:
        assert hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest() == passwd_before
    assert not failures, "\n\n".join(failures)

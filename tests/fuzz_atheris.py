"""A coverage-guided fuzz target (atheris / libFuzzer) over the same decoders as
tests/test_fuzz_decoders.py: the checkpoint file reader, the pack reader, the record and
manifest decoders and the value Decoder. Any exception but a CkptError is a crash.

The first byte of an input picks the decoder; the rest is the bytes it is fed. The seed
corpus is every file of fixtures/ (each prefixed with the byte of its decoder) and the
encoded values of the fixture stores. Run by tests/test_fuzz_decoders.py (slow) as

    python tests/fuzz_atheris.py CORPUS_DIR -runs=N

or by hand, for as long as you like, without -runs.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["ckptcli"]):
    from ckptcli.api import verify
    from ckptcli.errors import CkptError
    from ckptcli.format import framing
    from ckptcli.format.manifest import Manifest
    from ckptcli.format.values import Budget, Decoder
    from ckptcli.store.repository import Store
    from ckptcli.store.single import CheckpointFile
    from ckptcli.store.verify import read_pack

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RECORDS = [
    framing.KIND_CONFIG,
    framing.KIND_INDEX,
    framing.KIND_REF,
    framing.KIND_PACK_TRAILER,
    framing.KIND_PACK_TABLE,
    framing.KIND_CACHE,
]
# decoder bytes
FILE, PACK, MANIFEST, VALUE = 0, 1, 2, 3
RECORD = 4  # 4 + index into RECORDS


def _objects() -> tuple[dict[bytes, bytes], list[bytes]]:
    objects: dict[bytes, bytes] = {}
    evs: list[bytes] = []
    for version in ("v1", "v2"):
        store = Store.open(FIXTURES / version / "store")
        try:
            for oid in store.index():
                objects[oid] = store.get(oid)
            for cid in store.manifest_ids():
                evs.extend(store.manifest(cid).sections.values())
        finally:
            store.close()
    return objects, evs


OBJECTS, EVS = _objects()


class Source:
    def get(self, oid: bytes) -> bytes:
        try:
            return OBJECTS[oid]
        except KeyError:
            from ckptcli.errors import CorruptError

            raise CorruptError(f"object {oid.hex()[:12]} is missing") from None


SCRATCH = Path(tempfile.mkdtemp(prefix="ckpt-atheris-")) / "input.ckpt"


def one_input(data: bytes) -> None:
    if not data:
        return
    which, body = data[0], data[1:]
    try:
        if which % 16 == FILE:
            SCRATCH.write_bytes(body)
            f = CheckpointFile(SCRATCH)
            try:
                verify(f, read_data=True)
                dec = Decoder(f, budget=Budget(max_bytes=32 << 20, max_items=200_000))
                for ev in f.manifest().sections.values():
                    with contextlib.suppress(CkptError):
                        dec.decode(ev)
            finally:
                f.close()
        elif which % 16 == PACK:
            read_pack(body, "pack", b"\0" * 32).pack_id()
        elif which % 16 == MANIFEST:
            Manifest.decode(body, "manifest")
        elif which % 16 == VALUE:
            Decoder(Source(), budget=Budget(max_bytes=32 << 20, max_items=200_000)).decode(body)
        else:
            framing.decode_record(body, RECORDS[(which % 16 - RECORD) % len(RECORDS)], "record")
    except CkptError:
        pass


def write_seeds(corpus: Path) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    n = 0

    def seed(which: int, data: bytes) -> None:
        nonlocal n
        (corpus / f"seed-{n:04d}").write_bytes(bytes([which]) + data)
        n += 1

    for p in sorted(FIXTURES.rglob("*")):
        rel = p.relative_to(FIXTURES).parts
        if not p.is_file():
            continue
        if p.suffix == ".ckpt":
            seed(FILE, p.read_bytes())
        elif len(rel) > 2 and rel[1] == "store":
            kind = {"packs": PACK, "manifests": MANIFEST, "config": RECORD, "index": RECORD + 1, "refs": RECORD + 2}.get(rel[2])
            if kind is not None:
                seed(kind, p.read_bytes())
    for ev in EVS:
        seed(VALUE, ev)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    if args:
        write_seeds(Path(args[0]))
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

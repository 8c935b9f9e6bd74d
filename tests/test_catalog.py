"""The catalog (cache/catalog) is only a cache: ls gives the same answer with it, without
it, with a damaged one, and after checkpoints are added or removed."""

from __future__ import annotations

from pathlib import Path

import ckptcli
from ckptcli.api import list_checkpoints, take
from ckptcli.store.catalog import CATALOG_PATH


def _ids(store) -> list[str]:  # type: ignore[no-untyped-def]
    return [cid.hex() for cid, _ in list_checkpoints(store)]


def test_catalog_follows_the_manifests(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / "s")
    made = [take(store, {"memory": i}, subject="agent:a", labels={"i": str(i)}).hex for i in range(5)]
    assert _ids(store) == made[::-1]
    assert (tmp_path / "s" / CATALOG_PATH).is_file()
    made.append(take(store, {"memory": 5}, subject="agent:a").hex)  # added after the catalog was written
    assert _ids(ckptcli.open_store(tmp_path / "s")) == made[::-1]
    (tmp_path / "s" / "manifests" / made[0]).unlink()  # as prune will
    assert _ids(ckptcli.open_store(tmp_path / "s")) == made[1:][::-1]
    listed = dict(list_checkpoints(ckptcli.open_store(tmp_path / "s")))
    assert listed[bytes.fromhex(made[1])].labels == {"i": "1"}


def test_damaged_or_foreign_catalog_is_rebuilt(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / "s")
    made = [take(store, {"memory": i}, subject="agent:a").hex for i in range(3)]
    cat = tmp_path / "s" / CATALOG_PATH
    assert _ids(store) == made[::-1]
    for junk in (b"", b"not a catalog", cat.read_bytes()[:-1], cat.read_bytes()[:40] + b"\x00" + cat.read_bytes()[41:]):
        cat.write_bytes(junk)
        assert _ids(ckptcli.open_store(tmp_path / "s")) == made[::-1]
    # a catalog that claims a checkpoint that is not there is not believed
    cat.write_bytes((tmp_path / "s" / CATALOG_PATH).read_bytes())
    assert _ids(ckptcli.open_store(tmp_path / "s")) == made[::-1]

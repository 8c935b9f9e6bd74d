"""`ls` of one subject reads that subject's rows alone while the store's manifests are
unchanged and settled, and sees every change (takes, prunes) made since
(ckptcli.store.catalog.subject_rows)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.listing import ListFilter, list_checkpoints
from ckptcli.store import catalog, layout
from ckptcli.store.prune import Policy, prune
from ckptcli.store.repository import Store


@pytest.fixture(autouse=True)
def _settled_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # a directory counts as settled as soon as it changed (the default waits 3 s); each
    # test sleeps past the file system's clock tick after a change
    monkeypatch.setattr(Store, "INDEX_DIR_SETTLED_NS", 0, raising=False)


def _tick() -> None:
    time.sleep(0.05)


def _ids(st: Store, subject: str) -> list[str]:
    return [cid.hex() for cid, _s in list_checkpoints(st, ListFilter(subject=subject))]


def _reads(monkeypatch: pytest.MonkeyPatch, st: Store) -> list[str]:
    """What `st` lists under manifests/ and reads of the whole catalog from now on."""
    seen: list[str] = []
    real_names, real_list, real_read = st.backend.list_names, st.backend.list, st.backend.read

    def names(directory: str) -> list[str]:
        seen.append(f"list {directory}")
        return real_names(directory)

    def listing(prefix: str) -> list[str]:
        seen.append(f"list {prefix}")
        return real_list(prefix)

    def read(path: str) -> bytes:
        if path == catalog.CATALOG_PATH or path.startswith(layout.MANIFESTS):
            seen.append(f"read {path}")
        return real_read(path)

    monkeypatch.setattr(st.backend, "list_names", names)
    monkeypatch.setattr(st.backend, "list", listing)
    monkeypatch.setattr(st.backend, "read", read)
    return seen


def _fill(path: Path) -> tuple[Store, dict[str, list[str]]]:
    st = ckptcli.init_store(path)
    made: dict[str, list[str]] = {"agent:a": [], "agent:b": []}
    for i in range(12):
        subject = "agent:a" if i % 3 == 0 else "agent:b"
        made[subject].append(ckptcli.take(st, {"step": i}, subject=subject).hex)
    return st, made


def test_ls_of_one_subject_in_a_settled_store_reads_only_its_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _st, made = _fill(tmp_path / "s")
    _tick()
    first = Store.open(tmp_path / "s")
    assert _ids(first, "agent:a") == made["agent:a"][::-1]  # newest first
    again = Store.open(tmp_path / "s")
    seen = _reads(monkeypatch, again)
    assert _ids(again, "agent:a") == made["agent:a"][::-1]
    assert seen == [], seen  # no listing of the manifests, no read of the whole catalog
    assert _ids(again, "agent:b") == made["agent:b"][::-1]  # another subject: read once, then its own file


def test_ls_of_one_subject_sees_takes_and_prunes_made_since(tmp_path: Path) -> None:
    st, made = _fill(tmp_path / "s")
    _tick()
    reader = Store.open(tmp_path / "s")
    assert _ids(reader, "agent:a") == made["agent:a"][::-1]
    new = ckptcli.take(st, {"step": 99}, subject="agent:a").hex
    ckptcli.take(st, {"step": 100}, subject="agent:b")
    _tick()
    assert _ids(reader, "agent:a") == [new, *made["agent:a"][::-1]]
    _tick()
    prune(Store.open(tmp_path / "s"), Policy(keep_last=1), subjects=["agent:a"])
    _tick()
    assert _ids(reader, "agent:a") == [new]
    assert len(_ids(reader, "agent:b")) == len(made["agent:b"]) + 1


@pytest.mark.parametrize("damage", ["garbage", "another subject's", "empty"])
def test_a_damaged_subject_file_is_read_around(tmp_path: Path, damage: str) -> None:
    _st, made = _fill(tmp_path / "s")
    _tick()
    st = Store.open(tmp_path / "s")
    assert _ids(st, "agent:a") and _ids(st, "agent:b")
    path = tmp_path / "s" / catalog._subject_path(catalog.Subject.parse("agent:a"))
    other = tmp_path / "s" / catalog._subject_path(catalog.Subject.parse("agent:b"))
    data: Any = {"garbage": b"\x00not a record", "another subject's": other.read_bytes(), "empty": b""}[damage]
    path.write_bytes(data)
    _tick()
    assert _ids(Store.open(tmp_path / "s"), "agent:a") == made["agent:a"][::-1]


def test_a_catalog_bigger_than_a_record_may_be_is_kept_in_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one record holds at most MAX_RECORD_SIZE (64 MiB: about 700,000 rows); a catalog
    # written whole past it was refused on every read, so every `ls` read every manifest
    from ckptcli.format import limits

    _st, made = _fill(tmp_path / "s")
    monkeypatch.setattr(limits, "MAX_RECORD_SIZE", 1200)  # a small record cap: 12 rows are past it
    monkeypatch.setattr(catalog, "PART_ROWS", 4, raising=False)
    assert len(catalog.rows(Store.open(tmp_path / "s"))) == 12
    again = Store.open(tmp_path / "s")
    seen = _reads(monkeypatch, again)
    assert len(catalog.rows(again)) == 12
    assert not [r for r in seen if r.startswith("read manifests")], seen  # the catalog answered, no manifest read
    assert _ids(again, "agent:a") == made["agent:a"][::-1]
    # a part of another catalog (a writer raced this one) is not believed: rebuilt, same answer
    parts = tmp_path / "s" / catalog.PARTS_DIR
    (parts / "1").write_bytes((parts / "0").read_bytes())
    assert sorted(catalog.rows(Store.open(tmp_path / "s"))) == sorted(bytes.fromhex(c) for c in made["agent:a"] + made["agent:b"])

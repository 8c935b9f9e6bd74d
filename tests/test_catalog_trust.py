"""Nothing under cache/ changes what `ckpt ls` shows: a cached row stands for a manifest
file only while that file is there under the row's id and is the file the row was read
from (its inode, size, mtime and ctime), and `ls` and `ls -S` always agree
(ckptcli.store.catalog; docs/design.md, "The catalog's trust model")."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.errors import CkptError
from ckptcli.format import framing
from ckptcli.listing import ListFilter, list_checkpoints
from ckptcli.store import catalog, layout
from ckptcli.store.repository import Store
from tests.conftest import run_ckpt


def _truth(path: Path, subject: str | None = None) -> list[str]:
    """The checkpoints the manifests themselves hold (no cache read), newest first."""
    st = Store.open(path)
    found = []
    for cid in st.manifest_ids():
        try:
            m = st.manifest(cid)
        except CkptError:
            continue  # damaged: left out, as ls does
        if subject is None or str(m.subject) == subject:
            found.append((m.created_ns, cid))
    return [cid.hex() for _t, cid in sorted(found, reverse=True)]


def _ls(path: Path, subject: str | None = None) -> list[str]:
    return [cid.hex() for cid, _s in list_checkpoints(Store.open(path), ListFilter(subject=subject))]


def _flip_in_place(path: Path, at: int = 20) -> None:
    """Change one byte of a file without replacing it: same inode, same directory entry."""
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)
        fh.seek(at)
        fh.write(bytes([b[0] ^ 1]))


def _write_in_place(path: Path, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.write(data)
        fh.truncate()


def _ls_json(store: Path, *args: str) -> list[str]:
    r = run_ckpt("ls", "--store", store, "--json", *args)
    assert r.returncode == 0, r.stderr
    return [row["id"] for row in json.loads(r.stdout)]


def test_ls_of_a_subject_shows_a_manifest_repaired_in_place(tmp_path: Path) -> None:
    # the subject's listing file was trusted while manifests/ was settled and unchanged;
    # a manifest rewritten in place does not change the directory, so the checkpoint
    # left out while it was damaged stayed hidden from `ls -S` (plain `ls` showed it)
    s = tmp_path / "s"
    assert run_ckpt("init", s).returncode == 0
    doc = tmp_path / "d.json"
    made = []
    for i, subject in enumerate(["agent:bot", "agent:bot", "agent:other"]):
        doc.write_text(json.dumps({"step": i}))
        r = run_ckpt("take", doc, "--store", s, "-S", subject, "--json")
        assert r.returncode == 0, r.stderr
        made.append(json.loads(r.stdout)["id"])
    manifest = s / layout.MANIFESTS / made[0]
    good = manifest.read_bytes()
    _flip_in_place(manifest)
    time.sleep(Store.INDEX_DIR_SETTLED_NS / 1e9 + 0.3)  # the store settles: ls -S may use its shortcut
    r = run_ckpt("ls", "--store", s, "-S", "agent:bot", "--json")
    assert r.returncode == 0 and [row["id"] for row in json.loads(r.stdout)] == [made[1]]
    assert b"is left out" in r.stderr  # the damaged one, said so
    assert _ls_json(s, "-S", "agent:bot") == [made[1]]  # now from the subject's file
    _write_in_place(manifest, good)  # repaired in place: same name, same inode, same directory
    assert _ls_json(s, "-S", "agent:bot") == [made[1], made[0]]
    assert [c for c in _ls_json(s) if c != made[2]] == [made[1], made[0]]


@pytest.fixture
def settled_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # files and directories count as settled as soon as they changed (the default waits
    # 3 s); each test sleeps past the file system's clock tick after a change
    monkeypatch.setattr(Store, "INDEX_DIR_SETTLED_NS", 0)


def _tick() -> None:
    time.sleep(0.05)


def _fill(path: Path) -> dict[str, list[str]]:
    st = ckptcli.init_store(path)
    made: dict[str, list[str]] = {"agent:a": [], "agent:b": []}
    for i in range(6):
        subject = "agent:a" if i % 2 == 0 else "agent:b"
        made[subject].append(ckptcli.take(st, {"step": i}, subject=subject, message=f"m{i}").hex)
    _tick()
    return made


def _agree(path: Path) -> None:
    for subject in (None, "agent:a", "agent:b"):
        assert _ls(path, subject) == _truth(path, subject), subject


@pytest.mark.usefixtures("settled_at_once")
def test_a_manifest_changed_in_place_after_the_catalog_was_written_is_read_again(tmp_path: Path) -> None:
    # plain ls believed the catalog's row for a manifest damaged in place; ls -S did too
    s = tmp_path / "s"
    made = _fill(s)
    _agree(s)  # the catalog and the subjects' files are written
    _tick()
    _flip_in_place(s / layout.MANIFESTS / made["agent:a"][1])
    _tick()
    _agree(s)
    assert made["agent:a"][1] not in _ls(s) and made["agent:a"][1] not in _ls(s, "agent:a")


def _edit_record(path: Path, edit: Any) -> None:
    """Rewrite a cache record with `edit` applied to its body and a fresh checksum: what a
    forger (or a careless tool) could do; whatever fields the catalog's version has."""
    version, body = framing.decode_record(path.read_bytes(), framing.KIND_CACHE, str(path))
    edit(body)
    path.write_bytes(framing.encode_record(framing.KIND_CACHE, body, version))


@pytest.mark.usefixtures("settled_at_once")
def test_a_catalog_not_read_from_these_manifest_files_is_not_believed(tmp_path: Path) -> None:
    # a copy of the store (cp -a, a backup restored) keeps the catalog, but its rows were
    # read from other files: edited there, they changed what ls of the copy printed
    made = _fill(tmp_path / "a")
    _agree(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # copy2: same names and mtimes, other inodes
    s = tmp_path / "b"

    def forge(body: dict[str, Any]) -> None:
        for row in body["entries"]:
            if row[0].hex() == made["agent:a"][0]:
                row[1], row[2] = "agent", "b"  # moved to another subject: hidden from ls -S agent:a
        body["entries"].append([b"\x07" * 32, "agent", "a", [], 1, {}, "no manifest", body["entries"][0][7]])
        if "stamps" in body:  # this catalog's version has them: "not known" for the forged row
            body["stamps"] += bytes(32)

    _edit_record(s / catalog.CATALOG_PATH, forge)
    _tick()
    _agree(s)
    assert (b"\x07" * 32).hex() not in _ls(s, "agent:a")


@pytest.mark.usefixtures("settled_at_once")
def test_a_forged_subject_file_neither_adds_nor_hides_rows(tmp_path: Path) -> None:
    s = tmp_path / "s"
    made = _fill(s)
    _agree(s)
    path = s / catalog._subject_path(catalog.Subject.parse("agent:a"))
    assert path.is_file()

    def forge(body: dict[str, Any]) -> None:
        real = body["entries"].pop()  # hidden
        fake = list(real)
        fake[0] = b"\x07" * 32  # a row no manifest backs
        fake[6] = "no manifest"
        body["entries"].append(fake)

    _edit_record(path, forge)
    _tick()
    assert _ls(s, "agent:a") == made["agent:a"][::-1]
    _agree(s)

"""ckptcli.cli._common, the one place the CLI opens a store or a checkpoint file: the lock
each mode holds (seen from another open file description, as another process would see
it), and where "is this a file or a reference?" is decided, on a real store and a real
exported file."""

from __future__ import annotations

from pathlib import Path

import pytest

import ckptcli
from ckptcli.cli._common import is_path, open_checkpoint, open_source, opened_store
from ckptcli.errors import NotFoundError
from ckptcli.store.single import CheckpointFile


@pytest.fixture
def made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, bytes]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CKPT_STORE", raising=False)
    st = ckptcli.init_store(tmp_path / "s")
    cid = ckptcli.take(st, {"memory": {"goal": "triage"}}, subject="agent:bot").id
    ckptcli.export_checkpoint(ckptcli.open_checkpoint("agent:bot", st), tmp_path / "bot.ckpt")
    return tmp_path / "s", cid


def test_each_mode_holds_its_lock_for_the_block_only(made: tuple[Path, bytes]) -> None:
    path, _ = made
    seen = {}
    for lock in ("none", "shared", "refs"):
        with opened_store(path, lock) as st:  # type: ignore[arg-type]
            seen[lock] = (st.backend.lock_state("store")[0], st.backend.lock_state("refs")[0])
        assert (st.backend.lock_state("store")[0], st.backend.lock_state("refs")[0]) == ("free", "free")
    assert seen == {"none": ("free", "free"), "shared": ("shared", "free"), "refs": ("shared", "exclusive")}


def test_file_or_reference_is_decided_in_one_place(made: tuple[Path, bytes], tmp_path: Path) -> None:
    path, cid = made
    (tmp_path / "bot").write_text("a file named like a tag is not a checkpoint file")
    source, got = open_source("bot.ckpt", path)
    assert isinstance(source, CheckpointFile) and got == cid
    source, got = open_source("agent:bot", path)
    assert not isinstance(source, CheckpointFile) and got == cid
    source, got = open_source(None, path)
    assert not isinstance(source, CheckpointFile) and got is None
    source, got = open_source(str(path), None, directory=True)  # `ckpt tui STORE`
    assert source.location == str(path) and got is None
    with pytest.raises(NotFoundError, match=r"missing\.ckpt does not exist"):
        open_source("missing.ckpt", path)
    # unresolved (`ckpt verify`): the file unread, a reference left to the caller
    source, got = open_source("bot.ckpt", path, resolve=False)
    assert isinstance(source, CheckpointFile) and got is None
    # a path is never a reference, resolved or not (verify took it for one: "no ckpt store")
    with pytest.raises(NotFoundError, match=r"missing\.ckpt does not exist"):
        open_source("missing.ckpt", path, resolve=False)
    with pytest.raises(NotFoundError, match=r"not-here does not exist"):
        open_source("./not-here", path, resolve=False)
    assert open_checkpoint("bot.ckpt", None).id == open_checkpoint("latest", path).id == cid
    # `ckpt compat`'s sources: paths are directories, anything with a "/", .ckpt names
    assert [is_path(a) for a in ("bot.ckpt", "missing.ckpt", "s", "./bot", "bot", "agent:bot")] == [True, True, True, True, False, False]

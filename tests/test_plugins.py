"""Entry points: ckpt's own are found even where the installed metadata predates a group,
and a package whose entry point cannot be imported is one line, not a crash."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api, plugins
from ckptcli.errors import InvalidInputError
from ckptcli.store.layout import journal_dir
from ckptcli.store.verify import verify_store

REPO = Path(__file__).resolve().parent.parent


def test_the_builtin_table_is_what_pyproject_registers() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    assert {group: declared[group] for group in plugins.BUILTIN} == plugins.BUILTIN


def _installed_only(found: list[importlib.metadata.EntryPoint], monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the installed metadata hold exactly `found` for ckpt's groups."""
    real = importlib.metadata.entry_points

    def fake(**kw: Any) -> Any:
        if kw.get("group") in plugins.GROUPS:
            return [ep for ep in found if ep.group == kw["group"]]
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", fake)


def _store_with_a_bad_journal(tmp_path: Path) -> Any:
    store = api.init_store(tmp_path / ".ckpt")
    jdir = journal_dir(tmp_path / ".ckpt")
    jdir.mkdir()
    (jdir / "threads").symlink_to(tmp_path)  # not a journal directory: verify must say so
    return store


def test_verify_checks_the_langgraph_journals_when_the_metadata_predates_the_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store_with_a_bad_journal(tmp_path)
    _installed_only([], monkeypatch)  # an editable install made before `ckptcli.beside_store` existed
    assert [(p.kind, Path(p.name).name) for p in verify_store(store, None, read_data=False).problems] == [("journal", "threads")]
    assert plugins.names(plugins.EXPIRY) == ["langgraph"]


def test_an_installed_entry_point_of_the_same_name_replaces_the_builtin(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = importlib.metadata.EntryPoint("langgraph", "json:dumps", plugins.BESIDE_STORE)
    _installed_only([mine], monkeypatch)
    import json

    assert plugins.load(plugins.BESIDE_STORE) == [("langgraph", json.dumps)]


def test_a_broken_entry_point_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store_with_a_bad_journal(tmp_path)
    broken = importlib.metadata.EntryPoint("thirdparty", "ckpt_no_such_module_here:check", plugins.BESIDE_STORE)
    _installed_only([broken], monkeypatch)
    with pytest.raises(InvalidInputError) as caught:
        verify_store(store, None, read_data=False)
    assert "'thirdparty' (ckpt_no_such_module_here:check) of the group ckptcli.beside_store failed: ModuleNotFoundError" in str(
        caught.value
    )
    assert "reinstall or remove the package" in (caught.value.hint or "")

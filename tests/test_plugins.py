"""Entry points: ckpt's own are found even where the installed metadata predates a group,
and a package whose entry point cannot be imported is one line, not a crash."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
import tomllib
import zipfile
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


def _installed_only(found: list[plugins.Entry], monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the installed metadata hold exactly `found` for ckpt's groups."""
    real = plugins._installed

    def fake(group: str) -> list[tuple[str, str]]:
        if group in plugins.GROUPS:
            return [(ep.name, ep.value) for ep in found if ep.group == group]
        return real(group)

    monkeypatch.setattr(plugins, "_installed", fake)


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
    mine = plugins.Entry("langgraph", "json:dumps", plugins.BESIDE_STORE)
    _installed_only([mine], monkeypatch)
    import json

    assert plugins.load(plugins.BESIDE_STORE) == [("langgraph", json.dumps)]


def test_a_broken_entry_point_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store_with_a_bad_journal(tmp_path)
    broken = plugins.Entry("thirdparty", "ckpt_no_such_module_here:check", plugins.BESIDE_STORE)
    _installed_only([broken], monkeypatch)
    with pytest.raises(InvalidInputError) as caught:
        verify_store(store, None, read_data=False)
    assert "'thirdparty' (ckpt_no_such_module_here:check) of the group ckptcli.beside_store failed: ModuleNotFoundError" in str(
        caught.value
    )
    assert "reinstall or remove the package" in (caught.value.hint or "")


# -- reading the installed metadata without importing importlib.metadata ------------------
def _as_importlib_finds(group: str) -> list[tuple[str, str]]:
    return sorted((ep.name, ep.value) for ep in importlib.metadata.entry_points(group=group))


@pytest.mark.parametrize("group", [*plugins.GROUPS, "console_scripts", "pytest11"])
def test_the_installed_entry_points_are_what_importlib_metadata_finds(group: str) -> None:
    assert plugins._plain_path() is not None  # the test environment is a plain virtualenv: the direct reader runs
    assert sorted(plugins._installed(group)) == _as_importlib_finds(group)


def _dist(where: Path, dirname: str, text: str) -> None:
    (where / dirname).mkdir(parents=True)
    (where / dirname / "entry_points.txt").write_text(text)


def test_the_first_distribution_of_a_name_on_sys_path_wins_as_in_importlib_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = "ckpt.test.precedence"
    _dist(tmp_path / "a", "My_Plugin-1.0.dist-info", f"# a comment\n[{group}]\nfirst = json:dumps\n# another\n\n[other]\nx = y\n")
    _dist(tmp_path / "b", "my.plugin-2.0.dist-info", f"[{group}]\nsecond = json:loads\n")  # the same name, normalised: hidden
    _dist(tmp_path / "b", "Other-3.0.egg-info", f"[{group}]\nthird = os.path:join [extra]\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "a"), str(tmp_path / "b"), *sys.path])
    assert sorted(plugins._installed(group)) == _as_importlib_finds(group) == [("first", "json:dumps"), ("third", "os.path:join [extra]")]
    assert [ep.load() for ep in plugins.entries(group)] == [json.dumps, os.path.join]


def test_a_zip_on_sys_path_is_read_by_importlib_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    group = "ckpt.test.zipped"
    archive = tmp_path / "plugin.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped_plugin-1.0.dist-info/entry_points.txt", f"[{group}]\nzipped = json:dumps\n")
        z.writestr("zipped_plugin-1.0.dist-info/METADATA", "Name: zipped-plugin\nVersion: 1.0\n")
    monkeypatch.setattr(sys, "path", [str(archive), *sys.path])
    assert plugins._plain_path() is None
    assert plugins._installed(group) == [("zipped", "json:dumps")]


def test_a_malformed_value_is_one_line_naming_the_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed_only([plugins.Entry("odd", "not a value!", plugins.BESIDE_STORE)], monkeypatch)
    with pytest.raises(InvalidInputError, match=re.escape("'odd' (not a value!) of the group ckptcli.beside_store failed")):
        plugins.load(plugins.BESIDE_STORE)


def test_a_fifo_or_a_huge_entry_points_file_neither_hangs_nor_fills_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fifo_dist-1.0.dist-info").mkdir()
    os.mkfifo(tmp_path / "fifo_dist-1.0.dist-info" / "entry_points.txt")  # opening it to read would block
    (tmp_path / "zero_dist-1.0.dist-info").mkdir()
    (tmp_path / "zero_dist-1.0.dist-info" / "entry_points.txt").symlink_to("/dev/zero")  # endless
    _dist(tmp_path, "good_dist-1.0.dist-info", "[ckpt.test.planted]\nok = json:dumps\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert plugins._installed("ckpt.test.planted") == [("ok", "json:dumps")]

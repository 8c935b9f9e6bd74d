"""Every command has help with examples and exit statuses, and is documented; the
generated references are current; the README gives the two commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptcli.cli import docgen
from ckptcli.errors import EXIT_CODE_MEANINGS

REPO = Path(__file__).resolve().parent.parent
HELPS = docgen.command_help()
COMMANDS = [name for name in HELPS if name]


def test_every_verb_is_there() -> None:
    for verb in ("init", "take", "ls", "show", "cat", "restore", "verify", "export", "import"):
        assert verb in COMMANDS


@pytest.mark.parametrize("name", COMMANDS)
def test_command_help_has_examples_and_exit_status(name: str) -> None:
    text = HELPS[name]
    assert "Examples:" in text, f"ckpt {name} --help has no examples"
    assert "Exit status:" in text, f"ckpt {name} --help does not end with its exit statuses"
    assert text.rstrip().endswith("the full table is in docs/exit-codes.md."), name
    assert f"ckpt {name}" in text


@pytest.mark.parametrize("name", COMMANDS)
def test_command_documented_in_cli_reference(name: str) -> None:
    assert f"## ckpt {name}\n" in (REPO / "docs" / "cli.md").read_text()


def test_generated_references_are_current() -> None:
    assert (REPO / "docs" / "cli.md").read_text() == docgen.cli_md(), "run: python -m ckptcli.cli.docgen"
    assert (REPO / "docs" / "exit-codes.md").read_text() == docgen.exit_codes_md(), "run: python -m ckptcli.cli.docgen"


def test_exit_code_table_is_complete() -> None:
    text = (REPO / "docs" / "exit-codes.md").read_text()
    for code, meaning in EXIT_CODE_MEANINGS.items():
        assert f"| {int(code)} | `{code.name}` | {meaning} |" in text


def test_readme_gives_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert "bash scripts/demo" in readme and "bash scripts/test" in readme
    assert "bash scripts/test" in (REPO / ".ci" / "run").read_text()


def test_docs_pages_exist() -> None:
    for page in ("getting-started.md", "cli.md", "exit-codes.md", "design.md"):
        assert (REPO / "docs" / page).is_file(), page


def test_install_lines_name_this_version_and_no_unpublished_package() -> None:
    """`pip install ckptcli` worked nowhere (the package is not on an index): the docs
    install from a clone or from a wheel built from one, named for this version."""
    import re

    import ckptcli

    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text()
        assert not re.search(r"pip install +'?ckptcli\b", text), page.name
        for version in re.findall(r"ckptcli-([0-9][^-/]*)-py3-none-any\.whl", text):
            assert version == ckptcli.__version__, (page.name, version)

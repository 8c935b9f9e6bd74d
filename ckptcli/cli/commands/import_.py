"""ckpt import: copy a checkpoint file into the store, or import a foreign format with an
adapter's importer (`ckpt import KIND SOURCE [options]`, ckptcli/adapters/registry.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click.core import Context
from typer._click.formatting import HelpFormatter
from typer.core import TyperCommand

from ckptcli.cli._adapter_flags import flag_usage, parse
from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import BarProgress, emit_json, exit_status, out
from ckptcli.errors import CkptError, ExitCode, StoreIOError, UsageError


class _ImportCommand(TyperCommand):
    """`ckpt import --help` ends with the installed importers and their options."""

    def format_epilog(self, ctx: Context, formatter: HelpFormatter) -> None:
        rows = _importer_help()
        if rows:
            with formatter.section("Installed importers (ckpt import KIND SOURCE)"):
                formatter.write_dl(rows)
        super().format_epilog(ctx, formatter)


def _importer_help() -> list[tuple[str, str]]:
    """(term, text) rows of the installed importers and their options, for --help."""
    from ckptcli.adapters import registry

    rows: list[tuple[str, str]] = []
    for fmt, (owner, imp) in sorted(registry.importers().items()):
        try:
            registry.check_importer(owner, imp)
        except CkptError:
            continue  # `ckpt import OWNER:FMT` and `ckpt doctor` say why
        via = "" if owner == fmt else f" (adapter {owner})"
        rows.append((f"{fmt} SOURCE", f"{imp.summary}{via}. SOURCE: {imp.source}."))
        for o in imp.options:
            rows.append((f"  {flag_usage(o)}", o.help))
    return rows


@app.command(
    "import",
    cls=_ImportCommand,
    context_settings={"ignore_unknown_options": True},
    epilog=exit_status(
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.NO_STORE,
        ExitCode.CORRUPT,
        ExitCode.UNSUPPORTED_VERSION,
        ExitCode.LIMIT_EXCEEDED,
        ExitCode.CONFLICT,
        ExitCode.IO_ERROR,
    ),
)
def import_(
    source: Annotated[
        list[str],
        typer.Argument(
            metavar="FILE | KIND SOURCE [OPTIONS]",
            help="A checkpoint file made by `ckpt export` (`-`: read from stdin); or an importer's KIND (e.g. `langgraph`), "
            "its SOURCE and its options.",
            show_default=False,
        ),
    ],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Import a checkpoint file into the store (checked whole before anything is kept),
    or a foreign format with an installed adapter's importer.

    `ckpt import KIND SOURCE` runs the importer KIND (a format name, or ADAPTER:FORMAT)
    of an installed adapter (entry-point group ckptcli.adapters, docs/adapters.md); its
    options follow SOURCE and are listed below. An unknown KIND exits 2, naming the
    installed importers.

    `ckpt import langgraph DB` reads a SqliteSaver database (read-only) and writes each
    of its checkpoints as the LangGraph saver of ckpt would have (docs/langgraph.md):
    one checkpoint per LangGraph checkpoint, subject agent:THREAD, with its parent
    link, metadata and pending writes, values stored exactly as LangGraph serialized
    them. Checkpoints the store has already are skipped, so importing again adds only
    what is new. A file that is not SQLite (or is damaged) exits 5; a SQLite database
    that is not a SqliteSaver one exits 4.

    --json prints {"id"} for a file; what the importer reports for KIND SOURCE
    ({"threads", "checkpoints", "already_present", "writes"} for a LangGraph database).

    Examples:

      ckpt import agent.ckpt

      ckpt import agent.ckpt --store /srv/ckpt --json

      ckpt export latest -o - | ssh host ckpt import -     (FILE - is stdin)

      ckpt import langgraph checkpoints.sqlite

      ckpt import langgraph checkpoints.sqlite --thread support-42 && ckpt ls
    """
    from ckptcli import api

    first = source[0]
    if not first:  # Path("") is the current directory: never what was meant
        raise UsageError("the file to import is empty", hint="give a checkpoint file, or KIND SOURCE")
    stdin = source == ["-"]
    if stdin or (len(source) == 1 and not first.startswith("-") and (Path(first).is_file() or not _is_kind(first))):
        if not stdin:
            api.refuse_url(first, "the checkpoint file to import")
        st = open_store(store)
        cid = _import_stdin(st) if stdin else api.import_checkpoint(st, first, progress=BarProgress())
        if as_json:
            emit_json({"id": cid.hex()})
        else:
            out().print(cid.hex(), markup=False)
        return
    if first.startswith("-"):
        raise UsageError(f"unexpected option {first!r} before the file", hint="ckpt import FILE, or ckpt import KIND SOURCE [OPTIONS]")
    from ckptcli.adapters import registry

    owner, imp = registry.find_importer(first)
    src, options = parse(f"ckpt import {first}", imp.options, "SOURCE", imp.source, source[1:])
    if imp.source_is_path:
        if not src:
            raise UsageError(f"ckpt import {first}: SOURCE is empty", hint=f"give {imp.source}")
        api.refuse_url(src, f"{imp.source} to import")
    st = open_store(store)
    # the importer's own code: its failure (an exception, sys.exit()) is one line naming it
    result = registry.call(owner, f"the importer {imp.name!r}: run()", imp.run, st, src, options, BarProgress())
    if as_json:
        emit_json(result)
    else:
        out().print(registry.call(owner, f"the importer {imp.name!r}: describe()", imp.describe, result, st.location), markup=False)


def _import_stdin(st: Any) -> bytes:
    """`ckpt import -`: the checkpoint file on stdin, copied to a temporary file first (the
    file is checked whole before anything is kept, and read where its index says), which
    is removed after; errors name stdin, not the temporary file."""
    import shutil
    import sys
    import tempfile

    from ckptcli import api

    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # closed: the system refuses the read (not a usage error)
        raise StoreIOError("stdin is closed: no checkpoint file to read from it", hint="pipe one in: ckpt export -o - | ckpt import -")
    if sys.stdin.isatty():
        raise UsageError(
            "`ckpt import -` reads a checkpoint file from stdin, which is a terminal",
            hint="pipe one in: ckpt export latest -o - | ckpt import -",
        )
    with tempfile.NamedTemporaryFile(prefix="ckpt-import-", suffix=".ckpt") as tmp:
        try:
            shutil.copyfileobj(stream, tmp, 1024 * 1024)
            tmp.flush()
        except OSError as exc:
            raise StoreIOError(
                f"cannot copy stdin to a temporary file in {tempfile.gettempdir()}: {exc.strerror or exc}",
                hint="free space there, or set TMPDIR to a directory with room for the checkpoint file",
            ) from None
        try:
            return api.import_checkpoint(st, tmp.name, progress=BarProgress())
        except CkptError as exc:
            exc.message = exc.message.replace(tmp.name, "stdin")
            raise


def _is_kind(word: str) -> bool:
    """Whether `word` names an installed importer (only the adapters needed are imported)."""
    from ckptcli.adapters import registry

    try:
        registry.find_importer(word)
    except CkptError:
        return False
    return True

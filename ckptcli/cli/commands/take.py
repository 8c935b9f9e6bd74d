"""ckpt take: store a state document (and files) as a new checkpoint."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import BarProgress, emit_json, exit_status, human_size, quiet, safe
from ckptcli.errors import ExitCode, InvalidInputError, NotFoundError, StoreIOError

if TYPE_CHECKING:
    from ckptcli.api import TakeResult


@app.command(
    epilog=exit_status(
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.CORRUPT,
        ExitCode.LIMIT_EXCEEDED,
        ExitCode.UNSAFE_PATH,
        ExitCode.CONFLICT,
        ExitCode.LOCKED,
        ExitCode.NO_STORE,
        ExitCode.IO_ERROR,
    )
)
def take(
    document: Annotated[
        str | None, typer.Argument(help="State document (JSON or msgpack) path, or - for stdin.", show_default=False)
    ] = None,
    subject: Annotated[
        str, typer.Option("--subject", "-S", help="What this is a checkpoint of, as KIND:NAME (agent, workflow, process).")
    ] = "agent:default",
    label: Annotated[list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE label; repeatable.", show_default=False)] = None,
    parent: Annotated[
        list[str] | None,
        typer.Option("--parent", help="Parent checkpoint; repeatable (default: the subject's latest).", show_default=False),
    ] = None,
    root: Annotated[bool, typer.Option("--root", help="Take a checkpoint with no parent.")] = False,
    message: Annotated[str, typer.Option("--message", "-m", help="A note stored with the checkpoint.")] = "",
    blob: Annotated[
        list[str] | None, typer.Option("--blob", help="NAME=PATH: a file or directory to store; repeatable.", show_default=False)
    ] = None,
    branch: Annotated[
        str | None,
        typer.Option(
            "--branch", "-b", help="Take on this branch: its head is the parent, and it moves to the new checkpoint.", show_default=False
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="Document format: auto, json or msgpack.")] = "auto",
    schema_version: Annotated[
        str | None, typer.Option("--schema-version", help="Version of the subject's own state schema.", show_default=False)
    ] = None,
    force_read: Annotated[
        bool,
        typer.Option(
            "--force-read",
            help=(
                "Read every blob file, even those unchanged since the parent (same size, mtime, ctime, inode), "
                "and hash every chunk with SHA-256, not through the digest cache."
            ),
        ),
    ] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Take a checkpoint.

    A document whose top-level keys are among memory, plan, tools, events and ext
    is split into those sections (ext holds {namespace: value}); any other document
    is stored whole as the memory section. Restore gives back the same document.

    The subject's latest moves to the new checkpoint, unless another take of the subject
    committed a newer one meanwhile (latest never moves back; this one is kept and a note
    says so, --json has "latest_moved": false), or `ckpt reset` moved it
    to another checkpoint while this take ran: then latest stays where the reset put
    it and the take exits 11, naming its checkpoint (kept in the store, unreferenced:
    `ckpt reset` to it, or take again).

    Examples:

      ckpt take state.json --subject agent:support-bot --label run=42

      cat state.msgpack | ckpt take - --subject workflow:etl -m "before step 7"

      ckpt take state.json --blob workspace=./work --blob model=./model.bin
    """
    from ckptcli import api

    blobs = _blobs(blob or [])
    if document is None and not blobs:
        raise InvalidInputError("no state document", hint="give a path, - for stdin, or at least one --blob")
    _check_names(subject, label, blobs, branch)  # before reading a possibly large document
    state, doc_format = _read_state(document, fmt)
    problem = None
    if isinstance(state, dict) and "events" in state:  # the replay check needs the history modules; most takes do not
        from ckptcli.history.stateat import replay_problem

        problem = replay_problem(state)
    st = open_store(store)
    result = api.take(
        st,
        state,
        subject=subject,
        labels=label,
        parents=[] if root else parent or None,
        message=message,
        blobs=blobs,
        branch=branch,
        schema_version=int(schema_version) if schema_version and schema_version.isdigit() else schema_version,
        doc_format=doc_format,
        force_read=force_read,
        progress=BarProgress(),
    )
    _report(result, problem, as_json)


def _blobs(items: list[str]) -> dict[str, Path]:
    """--blob NAME=PATH, each NAME once."""
    blobs: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InvalidInputError(
                f"--blob {item!r} is not NAME=PATH", hint="give a name and a file or directory, e.g. --blob work=./work"
            )
        if name in blobs:
            # the last would silently win and the first be left out of the checkpoint
            # bad input like the other wrong --blob forms (exit 4), not a usage error
            raise InvalidInputError(f"--blob {name}= is given twice ({blobs[name]} and {path})", hint="give each blob its own NAME")
        blobs[name] = Path(path)
    return blobs


def _check_names(subject: str, label: list[str] | None, blobs: dict[str, Path], branch: str | None) -> None:
    from ckptcli import api
    from ckptcli.format.manifest import Subject, check_name, check_ref_name

    Subject.parse(subject)
    api.parse_labels(label)
    for name, path in blobs.items():
        check_name(name, "blob name")
        api.refuse_url(path, f"--blob {name}=")
    if branch is not None:
        check_ref_name(branch, "branch name")


def _read_state(document: str | None, fmt: str) -> tuple[Any, str]:
    """The state document and its format: a file, stdin (-), or none (blobs only: {})."""
    from ckptcli import api

    if document is None:
        return {}, "json"
    api.refuse_url(document, "the state document")
    if document == "-":
        try:
            return api.read_document(sys.stdin.buffer, fmt, "stdin")
        except OSError as exc:
            raise StoreIOError(f"cannot read the state document from stdin: {exc}") from None
    try:
        with open(document, "rb") as fh:
            return api.read_document(fh, fmt, document)
    except FileNotFoundError:
        raise NotFoundError(f"state document {document} does not exist") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{document} is a directory", hint="use --blob NAME=DIR to store a directory") from None
    except OSError as exc:
        raise StoreIOError(f"cannot read {document}: {exc.strerror}") from None


def _report(result: TakeResult, problem: str | None, as_json: bool) -> None:
    """The new checkpoint's id on stdout (or --json); its summary and warnings on stderr."""
    if problem is not None:
        sys.stderr.write(f"ckpt: warning: its events section will not replay (ckpt replay, fork, tui --timeline refuse it): {problem}\n")
    for changed in result.capture.changed:
        sys.stderr.write(
            f"ckpt: warning: {safe(changed, backslash=False)}; take it again when it is quiet to be sure of a consistent copy\n"
        )
    if as_json:
        emit_json(
            {
                "id": result.hex,
                "subject": str(result.manifest.subject),
                "parents": [p.hex() for p in result.manifest.parents],
                "new_objects": result.new_objects,
                "new_bytes": result.new_bytes,
                "latest_moved": result.latest_moved,
            }
        )
        return
    sys.stdout.write(result.hex + "\n")  # plain: a console (rich, ~16 ms to import) for one id is not worth it
    reused = f", {result.capture.reused_files} unchanged files not read" if result.capture.reused_files else ""
    if not quiet():
        sys.stderr.write(
            f"took {result.hex[:12]} ({result.manifest.subject}): {result.new_objects} new objects, "
            f"{human_size(result.new_bytes)} added{reused}\n"
        )
    for skipped in result.capture.skipped:
        sys.stderr.write(f"ckpt: warning: skipped {safe(skipped, backslash=False)}\n")
    if not result.latest_moved:
        sys.stderr.write(
            f"ckpt: note: latest of {result.manifest.subject} stays at a newer checkpoint another take made meanwhile; "
            f"{result.hex[:12]} is kept beside it (ckpt ls, ckpt reset)\n"
        )

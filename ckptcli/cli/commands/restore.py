"""ckpt restore: the state document, and blobs into a directory or back in place."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, cast

import typer

from ckptcli.cli._common import open_checkpoint
from ckptcli.cli._indoubt import calls_in_doubt, in_doubt_json, in_doubt_lines
from ckptcli.cli.app import JsonOpt, RefArg, StoreOpt, app, output_path
from ckptcli.cli.output import BarProgress, Counted, emit_json, exit_status, human_size, out, quiet, safe, write_output
from ckptcli.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from ckptcli.api import Checkpoint


@app.command(
    epilog=exit_status(
        ExitCode.USAGE,
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.NO_STORE,
        ExitCode.CORRUPT,
        ExitCode.UNSUPPORTED_VERSION,
        ExitCode.LIMIT_EXCEEDED,
        ExitCode.UNSAFE_PATH,
        ExitCode.CONFLICT,
        ExitCode.IO_ERROR,
    )
)
def restore(
    ref: RefArg,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            parser=output_path,
            metavar="<path>",
            help="Write the state document here; - for stdout (the default).",
            show_default=False,
        ),
    ] = None,
    blobs_dir: Annotated[
        Path | None,
        typer.Option(
            "--blobs",
            "-B",
            parser=blobs_path,
            metavar="DIR",
            help="Restore blobs into this directory (created if missing), each under its name.",
            show_default=False,
        ),
    ] = None,
    in_place: Annotated[
        bool, typer.Option("--in-place", help="Restore each blob to the path it was taken from, replacing what is there.")
    ] = False,
    blob: Annotated[
        list[str] | None, typer.Option("--blob", help="Only this blob; repeatable (with --blobs or --in-place).", show_default=False)
    ] = None,
    include: Annotated[
        list[str] | None,
        typer.Option(
            "--include",
            "-i",
            metavar="GLOB",
            help="Only paths matching GLOB (NAME/sub/file; a GLOB without / matches any name on the way); repeatable.",
            show_default=False,
        ),
    ] = None,
    delete: Annotated[
        bool,
        typer.Option("--delete", help="Also remove files under the target that are not in the checkpoint (with --blobs or --in-place)."),
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="List what would be written and deleted; change nothing.")] = False,
    fmt: Annotated[
        str | None, typer.Option("--format", help="json or msgpack (default: the format it was taken in).", show_default=False)
    ] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Replace files and links that already exist in the blobs directory (kept aside until the restore succeeded).",
        ),
    ] = False,
    keep_special_modes: Annotated[
        bool, typer.Option("--keep-special-modes", help="Restore set-uid, set-gid and sticky bits too (dropped by default).")
    ] = False,
    no_state: Annotated[bool, typer.Option("--no-state", help="Do not write the state document.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Restore blobs even when they declare more bytes than the target's file system has free.")
    ] = False,
    durable: Annotated[
        bool,
        typer.Option(
            "--durable",
            help="Return only once the restored blobs are on disk (one syncfs of the target's file system; by default they may "
            "still be in the page cache, as after tar or restic restore).",
        ),
    ] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Restore a checkpoint: its state document, and its blobs into a directory or back
    where they were taken from.

    --blobs DIR writes each blob as DIR/NAME. --in-place writes each blob back to the
    path it was taken from (recorded by `ckpt take`; `ckpt ls-files` shows it),
    replacing what is there; with --delete, files under it that are not in the
    checkpoint are removed too, so `ckpt restore REF --in-place --delete` rolls a
    workspace back. Run it with --dry-run first to see what it would write and delete.
    --delete when what is restored holds no files (a checkpoint taken without --blob,
    blobs of empty directories only, or --blob and --include choosing only those) is
    refused (exit 4), nothing written or deleted: it would only empty the directories
    it names.
    --include limits all of this to matching paths; one that matches no path of the
    checkpoint is an error (exit 3, nothing written), as a typo would be.

    Nothing inside a checkpoint can write outside its target: names such as ../x or
    /etc/x and escaping symlinks are refused before anything is written, and so is a
    name that already exists there (unless --overwrite or --in-place), and blobs larger
    than the free space there (unless --force). Files are written under new random
    names and renamed into place; links and files planted in the target are never
    followed (--delete removes a link, never what it points to), and the store read
    from is never written nor deleted. If writing fails, what the restore wrote is
    removed again and what it replaced or deleted is put back. Set-uid, set-gid and
    sticky bits are dropped unless --keep-special-modes.

    Durability: when restore returns, every file it wrote is complete and in place for
    any process to read, but by default the data may still be in the page cache (as
    after tar -x or restic restore): a power cut or kernel crash soon after can lose
    some of it. --durable returns only once it is on disk (one syncfs of the target's
    file system, else an fsync of each file and directory written), and only then
    drops what --overwrite or --delete replaced.

    Calls in doubt at the checkpoint (a tool call, a workflow step, an activity recorded
    without its result: it may or may not have happened) are named on stderr, each with
    its call id, tool, arguments (summarized, secrets redacted) and idempotency key or "no
    idempotency key"; --json adds "in_doubt": [{"call_id", "tool", "args", "key",
    "started", "seq", "index"}] (absent when there are none). Reconcile them (retry with
    the same key, query, or compensate) before resuming (docs/workflows.md).

    --format json writes strict JSON, which has no byte strings, NaN or infinities: a
    state holding one (taken as msgpack, or through the library) is refused (exit 4);
    --format msgpack keeps it, and `ckpt cat` shows it in the JSON view ({"$bytes":
    base64}, {"$float": "inf"}). A document taken as JSON comes back as it was taken,
    NaN and Infinity included, as Python's json module writes and reads them.

    The state document is streamed from the store (memory stays small whatever its
    size) and appears only once complete; one that decodes to more than
    CKPT_MAX_DECODED_BYTES (default 4 GiB) is refused before anything is written. -o
    writes it under a new random name beside the destination, renamed into place; a
    FIFO or device (/dev/stdout, /dev/null) is written through, never replaced. With
    --blobs or --in-place, -o FILE is written whole (under its temporary name) before any
    blob is, and put in place once they all are: a state or an -o that cannot be written
    fails the restore before it changes any file, and a blob restore that fails leaves
    FILE as it was. An -o that is, holds or lies below a path the blobs restore is refused
    (exit 2); a FIFO or a device is written before the blobs; stdout, and an -o in a
    directory the blob restore makes, after them, the state read through first.

    Examples:

      ckpt restore latest > state.json

      ckpt restore 3f2a9c -o state.json --blobs ./restored

      ckpt restore latest --no-state --in-place --delete --dry-run

      ckpt restore latest --no-state --blobs out --include 'src/*.py' --json

      ckpt restore latest --no-state --in-place --durable   # on disk before it returns

      ckpt restore exported.ckpt --format msgpack -o state.msgpack
    """
    from ckptcli import api

    _check_options(blobs_dir, in_place, blob, include, delete, dry_run, durable)
    to_stdout = not no_state and (output is None or str(output) == "-")
    if as_json and to_stdout and not dry_run:
        raise UsageError(
            "--json prints its report on stdout, where the state document would go",
            hint="write the document with -o FILE, or pass --no-state",
        )
    from ckptcli.store.single import CheckpointFile

    ck = open_checkpoint(ref, store)
    if isinstance(ck.source, CheckpointFile) and ck.source.version == 1:
        # (version 2: checked as it was opened) a version-1 checksum covers the objects
        # too, which a restore reads anyway: held to it before anything is written, as verify is
        ck.source.check_checksum(objects=True)
    if output is not None and not no_state and not to_stdout:  # before anything is written
        api.refuse_output_into_source(ck, output, "the state document")
    result: dict[str, object] = {"id": ck.hex, "dry_run": dry_run, "state": None, "blobs": None}
    doubt = calls_in_doubt(ck)
    doc_fmt = fmt or ("msgpack" if ck.manifest.layout.get("format") == "msgpack" else "json")
    counted: list[Counted] = []

    def write_state(fh: IO[bytes]) -> None:
        counted.append(Counted(fh))
        ck.write_state(cast("IO[bytes]", counted[-1]), doc_fmt)

    blob_mode = blobs_dir is not None or in_place
    state_wanted = not no_state and not dry_run
    after = not blob_mode  # the state written after the blobs (or alone)
    with contextlib.ExitStack() as stack:
        staged: Path | None = None
        if blob_mode and state_wanted:
            # one that cannot be written must fail the restore before it changes a file; and
            # what the blob restore refuses (an unsafe path, a conflict) is refused before
            # the state is written anywhere: a dry run of it first
            plan = _plan_blobs(ck, blobs_dir, in_place, blob, include, overwrite, force, delete)
            if to_stdout:
                # stdout after the blobs, as before: a reader that stops early (`| head`)
                # ends the command quietly, and must not do so before the blobs are restored
                with open(os.devnull, "wb") as sink:
                    ck.write_state(sink, doc_fmt)  # read through first
                after = True
            elif _streamed(output):
                # a FIFO, a device: written first (a stream cannot be taken back)
                write_output(output, write_state)
            else:
                assert output is not None  # (not to stdout)
                _refuse_output_among_blobs(output, plan)
                if _made_by_blobs(output, blobs_dir, plan):  # its directory is made by the blob restore
                    with open(os.devnull, "wb") as sink:
                        ck.write_state(sink, doc_fmt)  # read through first
                    after = True
                else:  # written whole under a temporary name now, put in place after the blobs
                    from ckptcli.store.backend import staged_file

                    staged = stack.enter_context(staged_file(output, write_state))
        if blob_mode:
            result["blobs"] = _restore_blobs(
                ck,
                blobs_dir,
                in_place,
                as_json,
                names=blob or None,
                overwrite=overwrite,
                keep_special_modes=keep_special_modes,
                force=force,
                delete=delete,
                include=include or None,
                dry_run=dry_run,
                durable=durable,
                protect=[staged] if staged is not None else None,
            )
        if state_wanted and after:
            write_output(None if to_stdout else output, write_state)
    if not no_state and not dry_run:
        result["state"] = {"path": "-" if to_stdout else str(output), "bytes": counted[-1].bytes if counted else 0}
    if as_json:
        emit_json({**result, **in_doubt_json(doubt)} if doubt else result)
    elif doubt:
        sys.stderr.write("".join(f"{line}\n" for line in in_doubt_lines(doubt, ck.hex)))


def _streamed(output: Path | None) -> bool:
    """Whether -o is written through rather than replaced: one of this process's
    descriptors (/dev/stdout...), a FIFO, a device (write_file_atomic)."""
    from ckptcli.store.backend import descriptor_named

    if output is None:
        return False
    if descriptor_named(output) is not None:
        return True
    try:
        mode = os.stat(output).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _plan_blobs(
    ck: Checkpoint,
    blobs_dir: Path | None,
    in_place: bool,
    names: list[str] | None,
    include: list[str] | None,
    overwrite: bool,
    force: bool,
    delete: bool,
) -> tuple[list[Path], list[Path]]:
    """The real paths the blob restore would write (files and links) and delete (a dry
    run of it: what it refuses is refused now, before anything is written)."""
    from ckptcli.blobs import RestoreReport

    report = RestoreReport()
    ck.restore_blobs(
        blobs_dir,
        names=names or None,
        overwrite=overwrite,
        force=force,
        report=report,
        in_place=in_place,
        delete=delete,
        include=include or None,
        dry_run=True,
    )

    def real(shown: str) -> Path:
        return Path(os.path.realpath(shown if shown.startswith("/") or blobs_dir is None else blobs_dir / shown))

    return [real(p) for p in report.written], [real(p) for p in report.deleted]


def _refuse_output_among_blobs(output: Path, plan: tuple[list[Path], list[Path]]) -> None:
    """-o must not be, lie below or hold a file the blob restore writes, nor lie below
    what it deletes: the state and the blobs would overwrite each other (the state was
    renamed over the blob's file, exit 0, or failed after the blobs). Raises UsageError."""
    out = Path(os.path.realpath(output))
    written, deleted = plan
    clash = next((w for w in written if w == out or w in out.parents or out in w.parents), None)
    clash = clash or next((d for d in deleted if d in out.parents), None)
    if clash is not None:
        raise UsageError(
            f"-o {output} is where the blob restore writes or removes {clash}: the state and the blobs would overwrite each other",
            hint="give -o a path outside what the blobs restore, or restore the state and the blobs apart (--no-state)",
        )


def _made_by_blobs(output: Path, blobs_dir: Path | None, plan: tuple[list[Path], list[Path]]) -> bool:
    """Whether -o's directory does not exist yet and is one the blob restore makes (the
    --blobs directory or one above it, or one a restored file lies in): the state is then
    written after the blobs, into it (a restore --blobs /srv/x/restored -o /srv/x/state.json)."""
    parent = Path(os.path.realpath(output)).parent
    if parent.is_dir():
        return False
    if blobs_dir is not None:
        made = Path(os.path.realpath(blobs_dir))
        if parent == made or parent in made.parents:
            return True
    return any(parent in w.parents for w in plan[0])


def blobs_path(text: str) -> Path:
    """The parser of --blobs: an empty path is refused (Path("") is ".", and the blobs
    would land in the current directory, which nobody named)."""
    if not text:
        raise typer.BadParameter("the directory is empty: give a directory, e.g. --blobs ./restored")
    return Path(text)


def _check_options(
    blobs_dir: Path | None,
    in_place: bool,
    blob: list[str] | None,
    include: list[str] | None,
    delete: bool,
    dry_run: bool,
    durable: bool = False,
) -> None:
    """The blob options need a place for the blobs, and one only."""
    if blobs_dir is None and not in_place:
        for given, name in ((blob, "--blob"), (include, "--include"), (delete, "--delete"), (dry_run, "--dry-run"), (durable, "--durable")):
            if given:
                raise UsageError(f"{name} needs --blobs DIR or --in-place", hint="say where the blobs go (did you mean --blobs?)")
    if blobs_dir is not None and in_place:
        raise UsageError("--blobs and --in-place exclude each other", hint="give one")


def _restore_blobs(
    ck: Checkpoint,
    blobs_dir: Path | None,
    in_place: bool,
    as_json: bool,
    *,
    names: list[str] | None,
    overwrite: bool,
    keep_special_modes: bool,
    force: bool,
    delete: bool,
    include: list[str] | None,
    dry_run: bool,
    durable: bool = False,
    protect: list[Path] | None = None,
) -> dict[str, object]:
    """Restore the blobs (or, with dry_run, list what that would write and delete) and say so
    on stderr; returns the report of --json."""
    from ckptcli.blobs import RestoreReport

    report = RestoreReport()
    n = ck.restore_blobs(
        blobs_dir,
        names=names,
        overwrite=overwrite,
        keep_special_modes=keep_special_modes,
        force=force,
        report=report,
        progress=BarProgress(),
        in_place=in_place,
        delete=delete,
        include=include,
        dry_run=dry_run,
        durable=durable,
        protect=protect,
    )
    where = "in place" if in_place else f"into {blobs_dir}"
    # (decoded again only when nothing was written: a tree of empty files, or none at all)
    if "blobs" not in ck.manifest.sections or (n == 0 and not report.written and not ck.blobs()):  # (--delete: refused above)
        sys.stderr.write(f"note: checkpoint {ck.hex[:12]} holds no files (it was taken without --blob): nothing was restored {where}\n")
        return {"target": None if in_place else str(blobs_dir), "in_place": in_place, **report.to_dict()}
    if dry_run:
        if not as_json:
            c = out()
            for path in report.written:
                c.print(f"would write {safe(path)}", markup=False, highlight=False)
            for path in report.deleted:
                c.print(f"would delete {safe(path)}", markup=False, highlight=False)
        sys.stderr.write(
            f"would restore {human_size(n)} of blobs {where}: {len(report.written)} files and links ({report.replaced} replacing existing "
            f"ones), {len(report.deleted)} deleted\n"
        )
    else:
        deleted = f", deleted {len(report.deleted)}" if delete else ""
        if not quiet():
            sys.stderr.write(f"restored {human_size(n)} of blobs {where}{deleted}\n")
        if report.special_dropped:
            sys.stderr.write(
                f"dropped set-uid/set-gid/sticky bits from {report.special_dropped} files; pass --keep-special-modes to keep them\n"
            )
    return {"target": None if in_place else str(blobs_dir), "in_place": in_place, **report.to_dict()}

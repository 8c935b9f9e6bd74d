"""The `ckpt` command: the Typer app, shared options, and the error boundary.

Each verb lives in ckptcli/cli/commands/<verb>.py and registers itself on `app`.
Commands parse options, open what they read or write through ckptcli.cli._common (a
store or a checkpoint file, with its lock), call the library, and render; nothing more.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ckptcli import __version__, notices
from ckptcli.cli.boot import start
from ckptcli.errors import CkptError, ExitCode

if TYPE_CHECKING:
    from ckptcli.cli.boot import Loaded

HELP = """ckpt takes, inspects, verifies and moves checkpoints of long-running agents,
workflows and processes.

A store is a directory of immutable, content-addressed objects (`.ckpt/`, found as
git finds `.git`). Every read command also accepts a single checkpoint file made
by `ckpt export`.

Examples:

  ckpt init

  echo '{"memory": {"goal": "triage"}}' | ckpt take - --subject agent:bot

  ckpt ls

  ckpt show latest --section memory

  ckpt verify --read-data
"""

app = typer.Typer(
    name="ckpt",
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)

COMMANDS = (
    "init",
    "take",
    "ls",
    "show",
    "cat",
    "diff",
    "restore",
    "verify",
    "export",
    "import_",
    "capture",
    "copy",
    "tag",
    "branch",
    "refs",
    "reflog",
    "reset",
    "compat",
    "prune",
    "repair",
    "migrate",
    "replay",
    "fork",
    "log",
    "bisect",
    "tui",
    "doctor",
    "stats",
    "advise",
    "unlock",
    "ls_files",
    "dump",
    "completion",
    "run",
    "checkpoint",
    "halt",
    "workflow",
    "help",
)

# The global options: accepted before the verb (`ckpt --store X ls`, as restic's -r and
# git's -C) and after it (`ckpt ls --store X`). Before the verb they land here, through
# the app callback; each command's own --store and --json default to them (a value
# given after the verb wins), and --quiet and --no-color are added to every command
# (shared_options). Reset at the start of every run.
GLOBALS: dict[str, Any] = {}
GLOBAL_VALUED = ("--store", "-s")
GLOBAL_FLAGS = ("--json", "--no-color", "--quiet", "-q")


def _store_default(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    # before the verb beats the environment (CKPT_STORE); after the verb beats both
    given = GLOBALS.get("store")
    source = ctx.get_parameter_source(param.name) if param.name else None
    if given is not None and (value is None or source is None or source.name != "COMMANDLINE"):
        return str(given)
    return value


def _json_default(value: bool) -> bool:
    return value or bool(GLOBALS.get("json"))


StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        "-s",
        envvar="CKPT_STORE",
        callback=_store_default,
        help="Store directory or URL (s3://bucket/prefix, gs://, az://, memory://NAME; default: nearest .ckpt/ above cwd, "
        "or the store cwd is in). Also accepted before the command.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", callback=_json_default, help="Print machine-readable JSON on stdout.")]

# The options and arguments several commands take, declared once (their help alike in
# every command's --help and in docs/cli.md).
REF_HELP = "Checkpoint: id or prefix, tag, branch, KIND:NAME, latest, REF~N, or a .ckpt file."
RefArg = Annotated[str, typer.Argument(help=REF_HELP)]
SnapshotOpt = Annotated[
    bool,
    typer.Option("--snapshot", help="Read the stored sections of a recorded checkpoint (the state before its tail), not the state at it."),
]
ReducersOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--reducers",
        metavar="MODULE:NAME",
        help="Reducers for custom event kinds: a mapping of kind -> function; repeatable.",
        show_default=False,
    ),
]
# the tolerant comparison (ckptcli.history.tolerant) of `ckpt diff` and `ckpt replay --check`: `tolerance_of`
IgnoreOrderOpt = Annotated[bool, typer.Option("--ignore-order", help="Tolerant: compare lists as multisets (order is noise).")]
SignificantDigitsOpt = Annotated[
    int | None,
    typer.Option(
        "--significant-digits",
        metavar="N",
        help="Tolerant: floats that round to the same N digits after the point are equal (integers are compared exactly).",
        show_default=False,
    ),
]
ToleranceOpt = Annotated[
    float | None,
    typer.Option(
        "--tolerance",
        metavar="EPS",
        help="Tolerant: two integers or two floats that differ by at most EPS are equal (absolute, whatever their size; 0 is exact).",
        show_default=False,
    ),
]
ExcludePathOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude-path",
        metavar="REGEX",
        help="Tolerant: ignore what differs at a JSON Pointer matching REGEX (e.g. '/ts$'); repeatable.",
        show_default=False,
    ),
]


def output_path(text: str) -> Path:
    """The parser of -o/--output: an empty path is refused (Path("") would be ".", the
    current directory, and the error would speak of a directory nobody named)."""
    if not text:
        raise typer.BadParameter("the path is empty: give a file name, or - for stdout")
    return Path(text)


def tolerance_of(ignore_order: bool, significant_digits: int | None, tolerance: float | None, exclude: list[str] | None) -> Any:
    """The tolerant options as a ckptcli.history.tolerant.Tolerance, checked, or None when none
    was given (the exact comparison alone: deepdiff is not imported)."""
    if not (ignore_order or significant_digits is not None or tolerance is not None or exclude):
        return None
    from ckptcli.history.tolerant import Tolerance

    tol = Tolerance(ignore_order, significant_digits, tolerance, tuple(exclude or ()))
    tol.check()
    return tol


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"ckpt {__version__}\n")
        raise typer.Exit()


def _set_quiet(value: bool) -> None:
    if value:
        from ckptcli.cli import output

        output.set_quiet(True)


def _set_no_color(value: bool) -> None:
    if value:
        from ckptcli.cli import output

        output.set_no_color(True)


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
    store: Annotated[
        str | None,
        typer.Option(
            "--store", "-s", metavar="PATH|URL", help="Store directory or URL for the command (as its own --store).", show_default=False
        ),
    ] = None,
    store_option: Annotated[
        list[str] | None,
        typer.Option(
            "--store-option",
            metavar="KEY=VALUE",
            help="An option of the store's backend (endpoint, region, allow_http, ...), repeatable; "
            "beside CKPT_STORE_OPTIONS, and winning over it. Before the command.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON from the command (as its own --json).")] = False,
    no_color: Annotated[bool, typer.Option("--no-color", callback=_set_no_color, help="No colours or styles (as NO_COLOR=1).")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", callback=_set_quiet, help="No progress bars or notices; warnings and errors still print.")
    ] = False,
) -> None:
    """ckpt: checkpoints for long-running agents, workflows and processes."""
    GLOBALS["store"] = store
    GLOBALS["json"] = as_json
    if store_option:
        from ckptcli.store import backends

        backends.set_cli_options(store_option)


def shared_options(group: Any) -> Any:
    """Give every command of `group` the options every command takes after its verb:
    -q/--quiet and --no-color (the commands declare --store and --json themselves)."""
    from typer.core import TyperOption

    for cmd in group.commands.values():
        taken = {o for p in cmd.params for o in p.opts}
        if "--quiet" not in taken:
            cmd.params.append(
                TyperOption(
                    param_decls=["--quiet", "-q"] if "-q" not in taken else ["--quiet"],
                    is_flag=True,
                    expose_value=False,
                    callback=lambda _ctx, _p, v: _set_quiet(v),
                    help="No progress bars or notices; warnings and errors still print.",
                )
            )
        if "--no-color" not in taken:
            cmd.params.append(
                TyperOption(
                    param_decls=["--no-color"],
                    is_flag=True,
                    expose_value=False,
                    callback=lambda _ctx, _p, v: _set_no_color(v),
                    help="No colours or styles (as NO_COLOR=1).",
                )
            )
    return group


def build_command() -> Any:
    """The click command of the app, with the shared options (see shared_options)."""
    return shared_options(typer.main.get_command(app))


def _verb(args: list[str]) -> str | None:
    """The command module args name (after any global options), or None."""
    i = 0
    while i < len(args):
        a = args[i]
        if a in GLOBAL_VALUED:
            i += 2
        elif a.startswith("--store=") or a in GLOBAL_FLAGS:
            i += 1
        elif a.startswith("-"):
            return None
        else:
            return "import_" if a == "import" else a
    return None


def _register(argv: list[str] | None = None) -> None:
    """Import the command modules (each registers itself). When argv names one command
    and asks for no top-level help, only that one is imported: start-up is paid per verb."""
    wanted: tuple[str, ...] = COMMANDS
    verb = _verb(argv) if argv else None
    if verb in COMMANDS and verb != "help":
        wanted = (verb,)
    for name in wanted:
        importlib.import_module(f"ckptcli.cli.commands.{name}")


def load(argv: list[str]) -> Loaded:
    """Import the commands argv needs (ckptcli.cli.boot calls this with Ctrl-C held back)."""
    _register(argv)
    return interrupted, lambda: run(final=True)


def fail(exc: CkptError) -> int:
    from ckptcli.cli.output import err, safe

    # a line that cannot be written (`2>/dev/full`) is dropped (Diagnostics): the code still says it
    err().print(f"ckpt: error: {safe(exc, backslash=False)}", markup=False, highlight=False)
    return int(exc.exit_code)


def usage_error(exc: Any, args: list[str]) -> int:
    """A bad option or argument: one line and exit 2, as every other error (click's own
    report is four lines: usage, a hint, a blank, the error)."""
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else ""
    if not path or path == "ckpt":
        verb = _verb(args)
        path = f"ckpt {'import' if verb == 'import_' else verb}" if verb in COMMANDS and type(exc).__name__ != "NoSuchCommand" else "ckpt"
    message = exc.format_message().rstrip(".")
    message = message[:1].lower() + message[1:]
    sys.stderr.write(f"ckpt: error: {message}; see `{path} --help`\n")
    return int(ExitCode.USAGE)


class ProgramStatus(Exception):  # noqa: N818 - a status passed on, not a fault
    """Raised by a command whose exit status is its program's (`ckpt run`): returned as it
    is, with no line of ckpt's own; a 130 there is the program's (a SIGINT ckpt forwarded,
    after its final checkpoint), not a Ctrl-C that interrupted ckpt."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def interrupted() -> int:
    # a take or prune interrupted before its commit point leaves the store as it was;
    # the temporary files it made are removed by its cleanup, or by the next command
    if _TERMINATED:
        sys.stderr.write("ckpt: stopped by SIGTERM; nothing was committed by the interrupted step\n")
        return int(ExitCode.TERMINATED)
    sys.stderr.write("ckpt: interrupted; nothing was committed by the interrupted step\n")
    return int(ExitCode.INTERRUPTED)


_TERMINATED: list[int] = []  # a SIGTERM came: the run unwinds as from Ctrl-C, and exits 143


def _on_sigterm(signum: int, _frame: object) -> None:
    """SIGTERM (`timeout`, systemd, Kubernetes) unwinds the command as Ctrl-C does, so its
    locks are released and its temporary files removed: a lock object on object storage
    left behind would hold off every other host for 30 minutes."""
    if not _TERMINATED:
        _TERMINATED.append(signum)
        raise KeyboardInterrupt


def _catch_sigterm(final: bool = False) -> Callable[[], None]:
    """Install the SIGTERM handler for this run where SIGTERM has its default action (not
    where the caller ignores or handles it); returns what puts the old one back, or, when
    the process ends with the run (`final`), ignores SIGTERM: the command is over and its
    report printed, and the default action would end it with no line and no exit code."""
    import signal
    import threading

    _TERMINATED.clear()
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None
    signal.signal(signal.SIGTERM, _on_sigterm)

    def restore() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN if final else signal.SIG_DFL)

    return restore


def _release_pending(before: set[tuple[int, str]]) -> None:
    """Remove the lock objects this run wrote and still has: an interrupt can land between
    a lock object's create request and the code that would release it (the caller's own
    locks, held from before the run, stay)."""
    locks = sys.modules.get("ckptcli.store.objlocks")
    if locks is not None:
        locks.release_pending(keep=before)


def warn(message: str) -> None:
    """A library warning (ckptcli.notices): one line on stderr."""
    from ckptcli.cli.output import safe

    sys.stderr.write(f"ckpt: warning: {safe(message, backslash=False)}\n")
    sys.stderr.flush()


def run(argv: list[str] | None = None, *, final: bool = False) -> int:
    """Entry point: runs the app and turns every failure into one line and an exit code.
    final: the process exits with the run (the console script), so a SIGTERM after it is
    ignored rather than given its default action back."""
    # the CLI's handlers for the run; the caller's come back at its end (a caller that runs
    # the CLI in-process keeps its own, and stores it opens later do not print)
    handlers = (notices.handler(), notices.info_handler())
    notices.set_handler(warn)
    from ckptcli.cli.output import notice

    notices.set_info_handler(notice)
    args = argv if argv is not None else sys.argv[1:]
    stderr = sys.stderr
    sys.stderr = Diagnostics(stderr)  # type: ignore[assignment]  # a line that cannot be written fails nothing
    import shlex

    from ckptcli.store import command  # not reflog: `ckpt --help` has no store to open

    command.set_command(shlex.join(["ckpt", *_for_records(args)]))  # what each ref move and lock records (until the run ends)
    restore = _catch_sigterm(final)
    locks = sys.modules.get("ckptcli.store.objlocks")
    before = locks.pending_locks() if locks is not None else set()
    try:
        try:
            return _run(args)
        except KeyboardInterrupt:  # one that landed while a failure was being reported
            return interrupted()
    finally:
        _release_pending(before)
        restore()
        sys.stderr = stderr
        command.set_command(None)
        notices.set_handler(handlers[0])
        notices.set_info_handler(handlers[1])


def _for_records(args: list[str]) -> list[str]:
    """The command line as records keep it: a program's command line after `--` (`ckpt
    run`) with its secrets redacted by the rules its checkpoints are stored with."""
    if "--" not in args:
        return args
    cut = args.index("--") + 1
    from ckptcli._util.redact import redact_argv

    return [*args[:cut], *redact_argv(args[cut:])]


def _one_store(args: list[str]) -> None:
    """Refuse --store given twice with two stores on the same side of the verb (click
    would take the last one silently, and the command would read or write another store
    than the one meant). The same store twice is fine, and so is one before the verb and
    another after it: the one after the verb wins, as documented (GLOBALS)."""
    sides: tuple[list[str], list[str]] = ([], [])  # before the verb, after it
    side = 0
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            break
        if a in GLOBAL_VALUED and i + 1 < len(args):
            sides[side].append(args[i + 1])
            i += 1
        elif a.startswith("--store="):
            sides[side].append(a.partition("=")[2])
        elif not a.startswith("-"):
            side = 1  # the verb (or, after it, an argument)
        i += 1
    for given in sides:
        if len({os.path.abspath(g) if g else g for g in given}) > 1:
            from ckptcli.errors import UsageError

            raise UsageError(f"--store is given {len(given)} times ({', '.join(repr(g) for g in given)})", hint="give one store")


def _store_option_pairs(args: list[str]) -> None:
    """Check every `--store-option` pair before click reads the command line: a pair
    without '=' (`--store-option secret_access_key SECRET`) would make click take the next
    word, likely the secret value, for the verb and echo it (`no such command`)."""
    pairs: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":  # the global options, before the verb
        a = args[i]
        if a == "--store-option" and i + 1 < len(args):
            pairs.append(args[i + 1])
        elif a.startswith("--store-option="):
            pairs.append(a.partition("=")[2])
        i += 2 if a in (*GLOBAL_VALUED, "--store-option") else 1
    if pairs:
        from ckptcli.store.backends import parse_store_options

        parse_store_options(pairs, None)  # InvalidInputError naming the pair by its position, never its text


#: errors of a write to stdout that are the place it goes, not ckpt: a full disk or quota,
#: a file grown past its limit, a failing device, a closed descriptor
_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF})


class ClosedStdout(io.TextIOBase):
    """stdout when ckpt was started with descriptor 1 closed: writing fails (EBADF), as
    writing to a closed file does; a command that prints nothing runs as usual."""

    def write(self, s: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed")

    def isatty(self) -> bool:
        return False

    @property
    def buffer(self) -> io.RawIOBase:
        """The bytes side (`export -o -`, `cat`, `restore` to stdout): closed as well."""
        return _ClosedBytes()


class _ClosedBytes(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        raise OSError(errno.EBADF, "stdout is closed")

    def flush(self) -> None:
        pass


class Diagnostics:
    """stderr while a command runs: where its notes, warnings, progress bars and error
    line go, and nothing else (the output of every command is on stdout). A write that
    fails (`2>/dev/full`, descriptor 2 closed, a reader of stderr gone) is dropped: a
    command whose work is done and whose output is written does not fail because a line
    about it could not be shown, and a failing one keeps its own exit code (docs/exit-codes.md).
    Everything but writing is the wrapped stream's (isatty, fileno, encoding)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream  # None: ckpt was started with descriptor 2 closed

    def write(self, s: str) -> int:
        with contextlib.suppress(OSError, ValueError):
            if self._stream is not None:
                self._stream.write(s)
        return len(s)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self._stream is not None:
                self._stream.flush()

    def isatty(self) -> bool:
        return self._stream is not None and bool(self._stream.isatty())

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def output_failed(exc: OSError) -> int:
    """The command's output could not be written to stdout: one line, exit 12."""
    reason = exc.strerror or str(exc)
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"ckpt: error: cannot write the output to stdout: {reason}; send it to a file or a pipe that can take it\n")
        sys.stderr.flush()
    return int(ExitCode.IO_ERROR)


def _stdout_closed(streams: tuple[Any, Any]) -> int:
    """Stdout was closed early (`ckpt log | head`): not an error worth a message; exit 0,
    as `git log | head` does (docs/exit-codes.md). What is still buffered goes nowhere."""
    sys.stdout, sys.stderr = streams
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


def _run(args: list[str]) -> int:
    try:
        from typer._click import exceptions as ce  # newer typer vendors its own click
    except ImportError:  # pragma: no cover - typer that uses the click package
        from click import exceptions as ce  # type: ignore[no-redef]
    no_args_help = getattr(ce, "NoArgsIsHelpError", ())
    from ckptcli.cli import output

    GLOBALS.clear()
    if (backends := sys.modules.get("ckptcli.store.backends")) is not None:  # not imported by `ckpt --help`
        backends.set_cli_options([])
    output.reset()
    if sys.stdout is None:  # started with descriptor 1 closed (`ckpt ls >&-`): a write fails, as to a closed file
        sys.stdout = ClosedStdout()
    streams = (sys.stdout, sys.stderr)  # typer wraps them when stdout is closed early
    try:
        _one_store(args)
        _store_option_pairs(args)
        _register(args)
        command = build_command()
        if os.environ.get("_CKPT_COMPLETE"):  # a shell asks for completions (ckpt completion)
            from typer._completion_classes import completion_init

            completion_init()
        rv = command.main(args=args, prog_name="ckpt", standalone_mode=False)
        if rv == ExitCode.INTERRUPTED:
            # typer's main turns a KeyboardInterrupt into Exit(130) and, outside
            # standalone mode, returns that code: no command returns 130 otherwise
            return interrupted()
        return rv if isinstance(rv, int) else 0
    except CkptError as exc:
        if _debug() and exc.__cause__ is not None:
            import traceback  # the user's code failed (a migration, an adapter): show where

            sys.stderr.write("".join(traceback.format_exception(exc.__cause__)))
        return fail(exc)
    except ProgramStatus as exc:
        return exc.status
    except no_args_help as exc:
        exc.show()
        return 0
    except ce.UsageError as exc:
        return usage_error(exc, args)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        return interrupted()
    except BrokenPipeError:
        return _stdout_closed(streams)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # a path given that no file system holds, wherever it was first used
            where = f"{exc.filename}: " if exc.filename is not None else ""
            sys.stderr.write(f"ckpt: error: {where}a file name is too long; give names of at most 255 bytes (a path of at most 4096)\n")
            return int(ExitCode.INVALID_INPUT)
        if exc.filename is not None or exc.errno not in _OUTPUT_ERRNOS:  # not a failed write of the output: a bug
            return _internal(exc)
        # a write to stdout (a full disk, a closed descriptor): every file ckpt writes
        # itself reports its errors with its name (StoreIOError, output_error)
        return output_failed(exc)
    except SystemExit as exc:
        # typer's main turns an EPIPE into sys.exit(1), and rich's console does too (each
        # after an OSError): a closed pipe ends every command alike, quietly with 0
        if isinstance(exc.__context__, OSError) and exc.__context__.errno == errno.EPIPE:
            return _stdout_closed(streams)
        raise
    except RecursionError:
        sys.stderr.write("ckpt: error: input nests too deeply to process\n")
        return int(ExitCode.LIMIT_EXCEEDED)
    except MemoryError:
        sys.stderr.write("ckpt: error: out of memory; the input is too large or hostile (see CKPT_MAX_HELD_BYTES)\n")
        return int(ExitCode.LIMIT_EXCEEDED)
    except Exception as exc:  # noqa: BLE001 - every failure ends in one line (after its traceback with CKPT_DEBUG)
        return _internal(exc)


def _debug() -> bool:
    """CKPT_DEBUG set to anything but empty, 0, false, no or off (as NO_COLOR's cousins read)."""
    return os.environ.get("CKPT_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")


def _internal(exc: Exception) -> int:
    """A failure ckpt did not expect (a bug): one line, exit 70; CKPT_DEBUG=1 prints its
    traceback first (still exit 70, as documented: raised out of the run, Python's own
    handler ended the process with 1)."""
    if _debug():
        import traceback

        sys.stderr.write("".join(traceback.format_exception(exc)))
        sys.stderr.write(f"ckpt: internal error: {type(exc).__name__}: {exc} (please report it with the traceback above)\n")
    else:
        sys.stderr.write(f"ckpt: internal error: {type(exc).__name__}: {exc} (set CKPT_DEBUG=1 for the traceback, and please report it)\n")
    return int(ExitCode.INTERNAL)


def entry() -> None:
    """The console script of ckpt 0.2 and older (`ckptcli.cli.app:entry`), kept for
    environments installed then: as `ckptcli.cli.entry`, over this module."""
    start(load)


if __name__ == "__main__":
    # `python -m ckptcli.cli.app`: run the imported module, whose app the commands register on
    importlib.import_module("ckptcli.cli.app").entry()

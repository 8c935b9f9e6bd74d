"""The `ckpt` command: the Typer app, shared options, and the error boundary.

Each verb lives in ckptcli/cli/commands/<verb>.py and registers itself on `app`.
Commands parse options, call the library (ckptcli.api), and render; nothing more.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ckptcli import __version__, notices
from ckptcli.errors import CkptError, ExitCode

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

COMMANDS = ("init", "take", "ls", "show", "cat", "diff", "restore", "verify", "export", "import_", "tag", "branch", "refs", "compat", "prune", "repair", "migrate", "replay", "fork", "log", "bisect", "tui", "doctor")

StoreOpt = Annotated[
    Path | None,
    typer.Option("--store", "-s", envvar="CKPT_STORE", help="Store directory (default: nearest .ckpt/ above cwd, or the store cwd is in).", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"ckpt {__version__}\n")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """ckpt: checkpoints for long-running agents, workflows and processes."""


def open_store(path: Path | None) -> Any:
    from ckptcli.api import open_store as _open

    return _open(path)


def _register(argv: list[str] | None = None) -> None:
    """Import the command modules (each registers itself). When argv names one command
    and asks for no top-level help, only that one is imported: start-up is paid per verb."""
    wanted: tuple[str, ...] = COMMANDS
    if argv:
        first = next((a for a in argv if not a.startswith("-")), None)
        module = "import_" if first == "import" else first
        if module in COMMANDS and argv[0] == first:
            wanted = (module,)
    for name in wanted:
        importlib.import_module(f"ckptcli.cli.commands.{name}")


def fail(exc: CkptError) -> int:
    from ckptcli.cli.output import err

    err().print(f"ckpt: error: {exc}", markup=False, highlight=False)
    return int(exc.exit_code)


def interrupted() -> int:
    # a take or prune interrupted before its commit point leaves the store as it was;
    # the temporary files it made are removed by its cleanup, or by the next command
    sys.stderr.write("ckpt: interrupted; nothing was committed by the interrupted step\n")
    return int(ExitCode.INTERRUPTED)


def warn(message: str) -> None:
    """A library warning (ckptcli.notices): one line on stderr."""
    sys.stderr.write(f"ckpt: warning: {message}\n")
    sys.stderr.flush()


def run(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns every failure into one line and an exit code."""
    notices.set_handler(warn)
    try:
        from typer._click import exceptions as ce  # newer typer vendors its own click
    except ImportError:  # pragma: no cover - typer that uses the click package
        from click import exceptions as ce  # type: ignore[no-redef]
    no_args_help = getattr(ce, "NoArgsIsHelpError", ())

    args = argv if argv is not None else sys.argv[1:]
    try:
        _register(args)
        command = typer.main.get_command(app)
        rv = command.main(args=args, prog_name="ckpt", standalone_mode=False)
        if rv == ExitCode.INTERRUPTED:
            # typer's main turns a KeyboardInterrupt into Exit(130) and, outside
            # standalone mode, returns that code: no command returns 130 otherwise
            return interrupted()
        return rv if isinstance(rv, int) else 0
    except CkptError as exc:
        if os.environ.get("CKPT_DEBUG") and exc.__cause__ is not None:
            import traceback  # the user's code failed (a migration, an adapter): show where

            sys.stderr.write("".join(traceback.format_exception(exc.__cause__)))
        return fail(exc)
    except no_args_help as exc:
        exc.show()
        return 0
    except ce.UsageError as exc:
        exc.show()
        return int(ExitCode.USAGE)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        return interrupted()
    except BrokenPipeError:
        # stdout closed early (e.g. `ckpt cat | head`): not an error worth a message
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except RecursionError:
        sys.stderr.write("ckpt: error: input nests too deeply to process\n")
        return int(ExitCode.LIMIT_EXCEEDED)
    except MemoryError:
        sys.stderr.write("ckpt: error: out of memory; the input is too large or hostile (see CKPT_MAX_HELD_BYTES)\n")
        return int(ExitCode.LIMIT_EXCEEDED)
    except Exception as exc:
        if os.environ.get("CKPT_DEBUG"):
            raise
        sys.stderr.write(f"ckpt: internal error: {type(exc).__name__}: {exc} (set CKPT_DEBUG=1 for the traceback, and please report it)\n")
        return int(ExitCode.INTERNAL)


def entry() -> None:
    """The console script of ckpt 0.2 and older (`ckptcli.cli.app:entry`), kept for
    environments installed then: it is `ckptcli.cli.entry`."""
    from ckptcli.cli import entry as _entry

    _entry()


if __name__ == "__main__":
    # `python -m ckptcli.cli.app`: run the imported module, whose app the commands register on
    from ckptcli.cli import entry

    entry()

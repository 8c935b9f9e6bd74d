"""Start `ckpt` with Ctrl-C held back while the CLI loads.

A Ctrl-C must end ckpt with one line and exit 130, never a traceback, even while the
interpreter is still loading the CLI. Python's own handler raises KeyboardInterrupt
wherever the signal lands, including inside the import machinery, where it cannot
always be caught; so while the CLI loads, SIGINT only sets a flag, checked once
everything is imported. This module imports nothing but `signal` and `sys`; the
loader it is given imports the rest (ckptcli.cli.entry, and the console script of
ckpt 0.2, ckptcli.cli.app.entry).
"""

from __future__ import annotations

import signal
import sys

TYPE_CHECKING = False  # typing is not imported at run time: this runs before the handler
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeAlias

    #: What a loader returns once the CLI is imported: (interrupted, run), each giving the exit code.
    Loaded: TypeAlias = tuple[Callable[[], int], Callable[[], int]]

__all__ = ["start"]

_INTERRUPTED = 130  # ExitCode.INTERRUPTED (ckptcli.errors is not imported yet)


#: options of ckpt itself (before the command) that take a value: `_command` skips it
_VALUED = frozenset(("-s", "--store", "--store-option"))


def _command(argv: list[str]) -> str | None:
    """The command word of a ckpt command line (`run` in `ckpt -s S run ...`), or None."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUED:
            skip = True
        elif arg == "--":
            return None
        elif not arg.startswith("-"):
            return arg
    return None


def start(load: Callable[[list[str]], Loaded]) -> None:
    """Load the CLI for sys.argv with `load`, then run it; never returns.

    For `ckpt run`, SIGUSR1 (a request for a checkpoint, docs/processes.md) is held
    back (blocked) from here until the supervisor's handler is in place, which lets it
    through (ckptcli.adapters.process.supervisor): sent while the CLI loads, it would
    otherwise end ckpt without a word before the program even starts."""
    if _command(sys.argv[1:]) == "run" and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    pending: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, _frame: pending.append(signum))
    except ValueError:  # not the main thread (an embedding): leave signals alone
        previous = None
    try:
        interrupted, run = load(sys.argv[1:])
    except KeyboardInterrupt:  # the signal came before our handler was in place
        sys.stderr.write("ckpt: interrupted\n")
        sys.exit(_INTERRUPTED)
    if previous is not None:
        signal.signal(signal.SIGINT, previous)
    if pending:
        sys.exit(interrupted())
    code = run()
    if previous is not None:
        # the command is over: a Ctrl-C now, while the interpreter shuts down (joining
        # threads, flushing), would only print "Exception ignored" or kill the process
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _own_process():
        _exit(code)
    sys.exit(code)


def _own_process() -> bool:
    """Whether this process is the `ckpt` command itself (the console script, or `python
    -m ckptcli`), whose end nothing else waits for; a program that calls `entry()` itself
    gets SystemExit, as from sys.exit, and its own code after it runs."""
    import os

    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "ckptcli.__main__":
        return True
    path = getattr(main, "__file__", None)
    return isinstance(path, str) and os.path.basename(path).split(".")[0] in ("ckpt", "ckpt-script")


def _exit(code: int) -> None:
    """End the process as the interpreter's exit does, in its order, but without tearing
    down every module and object after: first wait for the threads that are not daemons
    (and run threading's exit calls: thread pools finish their work), then the atexit
    calls, then flush stdout and stderr. The teardown that is skipped frees memory the
    kernel frees anyway and took ~20 ms at the end of every command, a sixth of a `ckpt
    ls`. Every file ckpt writes is closed (and synced where it must be) before the command
    returns, so nothing waits for that teardown."""
    import atexit
    import os
    import threading

    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx calls first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:
            pass  # a reader that closed the pipe ends a command quietly (cli.app._stdout_closed)
        except (OSError, ValueError) as exc:
            # the output still buffered cannot be written (a full disk): said, not lost silently
            app = sys.modules.get("ckptcli.cli.app")
            if stream is sys.stdout and isinstance(exc, OSError) and app is not None:
                failed = app.output_failed(exc)
                code = code or failed
    os._exit(code)

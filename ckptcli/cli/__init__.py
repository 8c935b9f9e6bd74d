"""The `ckpt` command line. `entry` is the console script.

A Ctrl-C must end ckpt with one line and exit 130, never a traceback, even while the
interpreter is still loading the CLI. Python's own handler raises
KeyboardInterrupt wherever the signal lands, including inside the import machinery,
where it cannot always be caught; so while the CLI loads, SIGINT only sets a flag,
checked once everything is imported. This package and `ckptcli/__init__.py` import
nothing but `signal` and `sys` before the handler is in place.
"""

from __future__ import annotations

import signal
import sys

_INTERRUPTED = 130  # ExitCode.INTERRUPTED (ckptcli.errors is not imported yet)


def entry() -> None:
    """Run `ckpt` with sys.argv; never returns."""
    pending: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, _frame: pending.append(signum))
    except ValueError:  # not the main thread (an embedding): leave signals alone
        previous = None
    try:
        from ckptcli.cli.app import _register, interrupted, run

        _register(sys.argv[1:])  # the command modules too; run() finds them imported
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
    sys.exit(code)

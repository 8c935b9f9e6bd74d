"""The `ckpt` command line. `entry` is the console script.

A Ctrl-C must end ckpt with one line and exit 130, never a traceback, even while the
interpreter is still loading the CLI: ckptcli.cli.boot holds it back while the CLI
loads. This package and `ckptcli/__init__.py` import nothing but `sys` (and `signal`,
with ckptcli.cli.boot) before the handler is in place.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not imported at run time (see above)
if TYPE_CHECKING:
    from ckptcli.cli.boot import Loaded

_INTERRUPTED = 130  # ExitCode.INTERRUPTED (ckptcli.errors is not imported yet)


def _load(argv: list[str]) -> Loaded:
    from ckptcli.cli.app import load

    return load(argv)


def entry() -> None:
    """Run `ckpt` with sys.argv; never returns."""
    try:
        from ckptcli.cli.boot import start  # signal and sys only
    except KeyboardInterrupt:  # the signal came before the handler was in place
        sys.stderr.write("ckpt: interrupted\n")
        sys.exit(_INTERRUPTED)
    start(_load)

"""Rendering for the CLI: consoles that respect NO_COLOR, JSON, sizes, progress bars,
and the exit-status epilog every command's help ends with."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from ckptcli._util.units import human_size as human_size  # the commands' sizes
from ckptcli.errors import EXIT_CODE_MEANINGS, ExitCode, StoreIOError

if TYPE_CHECKING:
    from rich.console import Console


def exit_status(*codes: ExitCode) -> str:
    """The 'Exit status' epilog: the codes a command uses, from the one table."""
    chosen = [ExitCode.OK, *codes, ExitCode.USAGE, ExitCode.INTERNAL]
    seen: list[ExitCode] = []
    for c in chosen:
        if c not in seen:
            seen.append(c)
    lines = [f"{int(c):>3}  {EXIT_CODE_MEANINGS[c]}" for c in sorted(seen)]
    # "\b" stops click from re-wrapping the table into one paragraph
    return "Exit status:\n\n\b\n" + "\n".join(lines) + "\n\nOther codes mean failure; the full table is in docs/exit-codes.md."


_flags = {"quiet": False, "no_color": False}  # -q/--quiet and --no-color of this run


def set_quiet(value: bool) -> None:
    _flags["quiet"] = value


def quiet() -> bool:
    """-q/--quiet: no progress bars or notices (warnings and errors still print)."""
    return _flags["quiet"]


def set_no_color(value: bool) -> None:
    global _out, _err
    _flags["no_color"] = value
    _out = _err = None  # made again, without colour


def reset() -> None:
    """Forget the flags and consoles of a previous run (ckpt runs in-process in tests)."""
    global _out, _err
    _flags.update(quiet=False, no_color=False)
    _out = _err = None


def notice(message: str) -> None:
    """An informational line on stderr (`ckpt: ...`), unless --quiet."""
    if not quiet():
        sys.stderr.write(f"ckpt: {safe(message, backslash=False)}\n")
        sys.stderr.flush()


def _no_color() -> bool:
    return bool(os.environ.get("NO_COLOR")) or _flags["no_color"]


_out: Console | None = None
_err: Console | None = None


def out() -> Console:
    global _out
    if _out is None:
        from rich.console import Console

        # NO_COLOR: no escape codes at all (rich's no_color would still emit bold)
        # emoji=False: a subject named `agent:smile:` is printed as it is, not as a glyph
        _out = Console(no_color=_no_color(), color_system=None if _no_color() else "auto", highlight=False, soft_wrap=True, emoji=False)
    return _out


def err() -> Console:
    global _err
    if _err is None:
        from rich.console import Console

        _err = Console(
            stderr=True, no_color=_no_color(), color_system=None if _no_color() else "auto", highlight=False, soft_wrap=True, emoji=False
        )
    return _err


def emit_json(value: Any) -> None:
    # indented for a person at a terminal; compact (and several times faster to write,
    # json's C encoder does not indent) when a program reads it
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(value, indent=indent, ensure_ascii=False, allow_nan=False) + "\n")


def emit_spooled(write: Callable[[IO[bytes]], None], whole: str | None = None) -> None:
    """Copy to stdout what `write` produces, once all of it is produced (held in memory up
    to 32 MiB, then in a temporary file): a command that fails half-way leaves stdout
    empty, and a streamed document costs no more memory when it goes to stdout.

    `whole` names output that is of use only whole (a checkpoint file): when the reader
    goes away before it has all of it, that is an error (StoreIOError, exit 12), not the
    quiet end of `ckpt log | head`."""
    import shutil
    import tempfile

    with tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024) as tmp:
        write(cast("IO[bytes]", tmp))
        total = tmp.tell()
        tmp.seek(0)
        try:
            shutil.copyfileobj(tmp, sys.stdout.buffer, 1024 * 1024)
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            if whole is None:
                raise
            # what is still buffered goes nowhere when the interpreter flushes at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            with contextlib.suppress(OSError, ValueError):
                os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            raise StoreIOError(
                f"the reader of stdout went away before the end of {whole} ({total:,} bytes): what it got is incomplete",
                hint="nothing was changed; run it again into a reader that takes all of it, or write a file with -o FILE",
            ) from None


class BarProgress:
    """A rich progress bar on stderr, shown only when stderr is a terminal."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = (sys.stderr.isatty() and not quiet()) if enabled is None else enabled
        self._bar: Any = None
        self._task: Any = None

    def start(self, label: str, total: int | None) -> None:
        if not self.enabled:
            return
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self.finish()
        self._bar = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(), console=err(), transient=True
        )
        self._bar.start()
        self._task = self._bar.add_task(label, total=total)

    def advance(self, amount: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, amount)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


# Characters a terminal acts on rather than shows: C0 controls (newline, ESC...), DEL, C1
# controls, the Unicode line and paragraph separators and the bidirectional controls
# (U+202E turns `gpj.exe` around). Names, messages, labels and refs come from whoever
# made the checkpoint: printed raw, a name with a newline forges a line of output and
# ESC[1A ESC[2K erases the one above (docs/security.md).
_UNSAFE = (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_ESCAPES = {c: _NAMED.get(chr(c), f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _UNSAFE}
_WITH_BACKSLASH = {**_ESCAPES, ord("\\"): "\\\\"}


def safe(text: object, *, backslash: bool = True) -> str:
    """`text` as a terminal should show it: each control character (C0, DEL, C1, the line
    separators, the bidi controls) written as an escape, `\\n`, `\\x1b`, `\\u202e`, as
    `ls -b` and git's quoted paths do, and a backslash as `\\\\` so that the escapes
    are unambiguous (`backslash=False`: left as it is, for whole messages that quote names
    with repr()). Every human (not --json) output of a name, message, label or ref goes
    through this; print it with markup off (rich would read `[red]` as a style)."""
    s = str(text)
    if s.isprintable() and (not backslash or "\\" not in s):
        return s  # the common case, fast
    return s.translate(_WITH_BACKSLASH if backslash else _ESCAPES)


_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in _UNSAFE if c >= 0x7F}  # json.dumps escapes C0 itself


def json_text(value: Any) -> str:
    """`value` as JSON for a person at a terminal: non-ASCII kept, and the controls that
    json.dumps leaves raw with ensure_ascii=False (DEL, C1, the separators, bidi) written
    as \\u escapes (the same JSON value)."""
    return json.dumps(value, ensure_ascii=False).translate(_JSON_ESCAPES)


def short(hexid: str) -> str:
    return hexid[:12]


class Counted:
    """A binary file that counts what is written through it."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.bytes = 0

    def write(self, data: Any) -> int:
        n = self.fh.write(data)
        self.bytes += len(data)
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fh, name)


def write_output(output: Path | None, write: Any, whole: str | None = None) -> int:
    """Write through `write(fh)` to `output` (None or `-`: stdout, once complete, `whole`
    as emit_spooled takes it; otherwise write_file_atomic); returns the bytes written."""
    counted: list[Counted] = []

    def counting(fh: IO[bytes]) -> None:
        c = Counted(fh)
        counted.append(c)
        write(cast("IO[bytes]", c))

    if output is None or str(output) == "-":
        emit_spooled(counting, whole)
    else:
        from ckptcli.store.backend import write_file_atomic

        write_file_atomic(output, counting)
    return counted[-1].bytes if counted else 0


@contextlib.contextmanager
def user_output_to_stderr() -> Iterator[None]:
    """While the user's own code runs (a --check module imported and called): what it
    writes to stdout goes to stderr, so that the command's own output (--json) is
    nothing but its own. At the file-descriptor level, so that `os.write(1, ...)` and a C
    library's writes are moved too (as the Temporal --check child does); put back after."""
    saved_stream = sys.stdout
    with contextlib.suppress(Exception):
        saved_stream.flush()
    saved_fd: int | None = None
    try:
        saved_fd = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # fd 1 or 2 closed: nothing to move, or nowhere to move it to
        if saved_fd is not None:
            os.close(saved_fd)
            saved_fd = None
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        sys.stdout = saved_stream
        if saved_fd is not None:
            with contextlib.suppress(OSError):
                os.dup2(saved_fd, 1)
            os.close(saved_fd)

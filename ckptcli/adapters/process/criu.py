"""CRIU (Checkpoint/Restore In Userspace): dump a whole running process, its memory included,
into an image directory, and restore it from one (docs/process-capture.md, "CRIU").

`criu_status()` runs `criu check` and says whether CRIU can work here and, when it cannot,
why, in one line taken from CRIU's own output (on a kernel whose vDSO CRIU does not know:
"vdso: Unexpected rt vDSO area bounds"). `dump_args` and `restore_args` build the command
lines; `dump` and `restore` run them.

Invariants: every run of criu is bounded in time (a timeout, then the process is killed)
and in what is read of its output (a capped file, never a pipe read whole); a failure is
one CriuError line with the reason from criu's output or log, never a traceback. `dump`
writes only into the image directory it is given, which must be new or empty."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ckptcli.errors import CkptError, InvalidInputError

__all__ = [
    "CHECK_TIMEOUT",
    "CriuError",
    "CriuResult",
    "criu_status",
    "dump",
    "dump_args",
    "find_criu",
    "restore",
    "restore_args",
]

#: seconds `criu check` may take (it forks helpers and probes the kernel: usually well under 1 s)
CHECK_TIMEOUT = 20.0
#: seconds a dump or restore may take by default
RUN_TIMEOUT = 300.0
#: bytes of criu's output (and of its log) that are read back
OUTPUT_CAP = 64 << 10

_ERROR_LINE = re.compile(r"^\s*(?:\(\s*[\d.]+\)\s*)?Error\s*\([^)]*\):\s*(.*)$")


class CriuError(CkptError):
    """criu is not installed, `criu check` fails, or a dump or restore failed (exit code 1,
    FAILURE); the message carries CRIU's own reason."""


@dataclass(frozen=True)
class CriuResult:
    """A finished dump or restore: the image directory, the command run, and the restored
    process's PID (restore only)."""

    images_dir: Path
    argv: list[str]
    pid: int | None = None


def find_criu() -> str | None:
    """The path of the `criu` program on PATH, or None."""
    return shutil.which("criu")


def _run(argv: Sequence[str], timeout: float, cwd: str | None = None) -> tuple[int | None, str]:
    """Run `argv` with its stdout and stderr going to one temporary file; returns (exit code,
    or None when it timed out and was killed; the head and tail of what it printed, at most
    OUTPUT_CAP bytes in all). The child runs in its own process group, killed whole on timeout."""
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True
            )
        except OSError as exc:
            raise CriuError(f"cannot run {argv[0]}: {exc.strerror}", hint="is criu installed and executable?") from None
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        return code, _head_tail(out)


def _head_tail(fh: IO[bytes]) -> str:
    """At most OUTPUT_CAP bytes of an open file: all of it, or its head and tail with a
    marker between (a program that prints megabytes costs no more memory than this)."""
    size = fh.seek(0, os.SEEK_END)
    fh.seek(0)
    if size <= OUTPUT_CAP:
        data = fh.read()
    else:
        half = OUTPUT_CAP // 2
        head = fh.read(half)
        fh.seek(size - half)
        data = head + f"\n[... {size - 2 * half} bytes left out ...]\n".encode() + fh.read(half)
    return data.decode("utf-8", "replace")


def _read_log(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            return _head_tail(fh)
    except OSError:
        return ""


def reason_of(output: str) -> str:
    """The one line of CRIU's output that says why it failed: its first "Error (file:line):"
    line that is not only a helper's exit status, else its last non-empty line."""
    errors = []
    for line in output.splitlines():
        m = _ERROR_LINE.match(line)
        if m and m.group(1).strip():
            errors.append(m.group(1).strip())
    specific = [e for e in errors if not re.match(r"^exited, status=\d+$", e)]
    if specific:
        return specific[0]
    if errors:
        return errors[0]
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def criu_status(timeout: float = CHECK_TIMEOUT) -> tuple[bool, str]:
    """Whether CRIU can dump and restore processes here, and why not.

    Runs `criu check` (bounded by `timeout` seconds and OUTPUT_CAP bytes of output).

    Args:
        timeout: seconds before `criu check` is killed.
    Returns:
        (True, "criu check passed (VERSION)") or (False, the reason): criu not installed,
        `criu check` failed (with CRIU's first error line, e.g. the vDSO one), or did not
        finish in time.
    """
    criu = find_criu()
    if criu is None:
        return False, "criu is not installed (no `criu` on PATH)"
    code, output = _run([criu, "check"], timeout)
    if code is None:
        return False, f"`criu check` did not finish in {timeout:g} s (killed)"
    if code != 0:
        return False, f"`criu check` fails (exit {code}): {reason_of(output)}"
    version = _version(criu, timeout)
    return True, f"criu check passed{f' ({version})' if version else ''}"


def _version(criu: str, timeout: float) -> str:
    try:
        code, output = _run([criu, "--version"], timeout)
    except CriuError:
        return ""
    m = re.search(r"Version:\s*(\S+)", output)
    return f"criu {m.group(1)}" if code == 0 and m else ""


def dump_args(
    pid: int,
    images_dir: str | os.PathLike[str],
    *,
    criu: str = "criu",
    leave_running: bool = True,
    shell_job: bool = True,
    tcp_established: bool = False,
    file_locks: bool = False,
    log_file: str = "dump.log",
    extra: Sequence[str] = (),
) -> list[str]:
    """The `criu dump` command line for process `pid` (and its children) into `images_dir`.

    Args:
        leave_running: the process goes on after the dump (`--leave-running`); else CRIU
            kills it once the images are written.
        shell_job: allow a process that shares ckpt's session or terminal (`--shell-job`).
        tcp_established: dump established TCP connections (`--tcp-established`).
        file_locks: dump file locks (`--file-locks`).
        log_file: CRIU's log, written inside `images_dir`.
        extra: further criu options, appended as they are.
    Returns:
        The argv list.
    """
    argv = [criu, "dump", "-t", str(int(pid)), "-D", os.fspath(images_dir), "-o", log_file, "-v4"]
    if shell_job:
        argv.append("--shell-job")
    if leave_running:
        argv.append("--leave-running")
    if tcp_established:
        argv.append("--tcp-established")
    if file_locks:
        argv.append("--file-locks")
    return argv + list(extra)


def restore_args(
    images_dir: str | os.PathLike[str],
    *,
    criu: str = "criu",
    detach: bool = True,
    shell_job: bool = True,
    tcp_established: bool = False,
    file_locks: bool = False,
    pidfile: str = "restore.pid",
    log_file: str = "restore.log",
    extra: Sequence[str] = (),
) -> list[str]:
    """The `criu restore` command line for the images in `images_dir`.

    Args:
        detach: CRIU exits once the process runs again (`-d`), leaving it as a child of init.
        shell_job, tcp_established, file_locks: as given to the dump.
        pidfile: where CRIU writes the restored root process's PID (restore gives the
            absolute path of restore.pid inside `images_dir`).
        log_file: CRIU's log, written inside `images_dir`.
        extra: further criu options, appended as they are.
    Returns:
        The argv list.
    """
    argv = [criu, "restore", "-D", os.fspath(images_dir), "-o", log_file, "-v4", "--pidfile", pidfile]
    if detach:
        argv.append("-d")
    if shell_job:
        argv.append("--shell-job")
    if tcp_established:
        argv.append("--tcp-established")
    if file_locks:
        argv.append("--file-locks")
    return argv + list(extra)


def _criu_or_fail() -> str:
    criu = find_criu()
    if criu is None:
        raise CriuError(
            "criu is not installed (no `criu` on PATH)", hint="install it (e.g. apt-get install criu), or capture without --criu"
        )
    return criu


def _check_images_dir(images_dir: Path, *, empty: bool) -> None:
    if images_dir.is_symlink():
        raise InvalidInputError(f"the CRIU image directory {images_dir} is a symbolic link", hint="give a real directory")
    if empty:
        if images_dir.exists() and (not images_dir.is_dir() or any(images_dir.iterdir())):
            raise InvalidInputError(
                f"the CRIU image directory {images_dir} is not empty", hint="give a new or empty directory; dump writes nothing else"
            )
    elif not images_dir.is_dir():
        raise InvalidInputError(f"no CRIU image directory at {images_dir}", hint="give the directory a dump wrote (restore its blob first)")


def dump(
    pid: int,
    images_dir: str | os.PathLike[str],
    *,
    leave_running: bool = True,
    timeout: float = RUN_TIMEOUT,
    **options: object,
) -> CriuResult:
    """Dump process `pid` with `criu dump` into `images_dir` (created, mode 0700, if missing).

    Args:
        pid: a process check_pid accepts (gone, kernel thread, another user's, ckpt's
            own: refused before criu runs).
        images_dir: a new or empty directory; CRIU writes the images and dump.log there.
        leave_running: see dump_args (default: the process goes on).
        timeout: seconds before criu is killed.
        options: passed to dump_args (shell_job, tcp_established, file_locks, extra).
    Returns:
        CriuResult(images_dir, argv).
    Raises:
        The errors of procfs.check_pid; InvalidInputError for an image directory that is
        not empty or is a symlink; CriuError when criu is missing, fails (with the reason
        from its log) or does not finish in `timeout`. The images are about as large
        as the process's memory.
    """
    from ckptcli.adapters.process.procfs import check_pid

    n, _ = check_pid(pid)
    criu = _criu_or_fail()
    where = Path(images_dir)
    _check_images_dir(where, empty=True)
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    argv = dump_args(n, where, criu=criu, leave_running=leave_running, **options)  # type: ignore[arg-type]
    code, output = _run(argv, timeout)
    if code is None:
        raise CriuError(f"criu dump of process {n} did not finish in {timeout:g} s (killed)", hint=f"its log is {where / 'dump.log'}")
    if code != 0:
        log = _read_log(where / "dump.log")
        raise CriuError(
            f"criu dump of process {n} failed (exit {code}): {reason_of(log + chr(10) + output)}",
            hint=f"see {where / 'dump.log'}; `criu check` says whether CRIU works here",
        )
    return CriuResult(where, argv)


def restore(images_dir: str | os.PathLike[str], *, timeout: float = RUN_TIMEOUT, **options: object) -> CriuResult:
    """Restore the process dumped in `images_dir` with `criu restore -d`.

    Args:
        images_dir: a directory dump wrote (for a checkpoint: its `criu` blob restored).
        timeout: seconds before criu is killed.
        options: passed to restore_args (shell_job, tcp_established, file_locks, extra).
    Returns:
        CriuResult with the restored process's PID (from CRIU's pidfile).
    Raises:
        InvalidInputError when `images_dir` is not a directory; CriuError when criu is
        missing, fails (with the reason from its log) or does not finish in `timeout`.
    """
    criu = _criu_or_fail()
    where = Path(images_dir)
    _check_images_dir(where, empty=False)
    for leftover in ("restore.pid", "restore.log"):
        (where / leftover).unlink(missing_ok=True)
    argv = restore_args(where, criu=criu, pidfile=str((where / "restore.pid").absolute()), **options)  # type: ignore[arg-type]
    code, output = _run(argv, timeout)
    if code is None:
        raise CriuError(f"criu restore from {where} did not finish in {timeout:g} s (killed)", hint=f"its log is {where / 'restore.log'}")
    if code != 0:
        log = _read_log(where / "restore.log")
        raise CriuError(
            f"criu restore from {where} failed (exit {code}): {reason_of(log + chr(10) + output)}",
            hint=f"see {where / 'restore.log'}; `criu check` says whether CRIU works here",
        )
    pid: int | None = None
    try:
        text = (where / "restore.pid").read_text()[:32].strip()
        pid = int(text) if text.isdigit() else None
    except OSError:
        pid = None
    if pid is None:
        raise CriuError(f"criu restore from {where} succeeded but wrote no PID to restore.pid", hint=f"see {where / 'restore.log'}")
    return CriuResult(where, argv, pid)

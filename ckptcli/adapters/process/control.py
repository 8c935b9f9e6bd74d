"""The supervisor's side of the cooperative protocol (the program's side: ckptcli.process;
the protocol: docs/processes.md "The protocol").

The supervisor makes a socketpair per start of the program and passes one end as
`CKPT_CONTROL_FD`. A program that cooperates says `hello 1`; for a checkpoint the
supervisor sends `checkpoint ID` (and, with `--on-signal SIG`, that signal too), waits up
to the timeout for `ready ID`, takes the copy, and sends `resume ID HEX` (or `resume ID
failed`). A program that never said hello is not asked (unless a signal is configured: it
may answer from a shell, `echo ready ID >&$CKPT_CONTROL_FD`); one that does not answer in
time is frozen instead.

Reads are bounded: at most MAX_LINE bytes a line, READ_BYTES a read, MAX_LINES lines
between two requests. A program that writes garbage (a line too long, not ASCII, an
unknown word) or floods the socket is said once, in one line, and is not read again until
it starts anew: its checkpoints fall back to the freeze, and the supervisor's memory
never grows with what it writes.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import time
from collections.abc import Callable

from ckptcli.process import ENV_CONTROL_FD, MAX_LINE

__all__ = ["ENV_CONTROL_FD", "MAX_LINES", "READ_BYTES", "Channel"]

#: bytes read from the socket at a time
READ_BYTES = 4096
#: lines a program may send between two checkpoint requests before it counts as a flood
MAX_LINES = 64
_WORDS = ("hello", "ready")


class Channel:
    """The supervisor's end of one start's control socket. `child_fd` is the program's end
    (to pass in `pass_fds`, then `close_child_end`)."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self._sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.setblocking(False)
        self.child_fd = child.detach()
        os.set_inheritable(self.child_fd, True)
        self._log = log
        self._buf = b""
        self._lines = 0
        self.hello = False
        #: why the program's lines are no longer read (None: they are)
        self.broken: str | None = None
        #: whether the program closed its end (it may be exiting: a SIGKILL closes it before the exit shows)
        self.closed = False
        self._ready: set[str] = set()

    def close_child_end(self) -> None:
        """Close the program's end in the supervisor (once: the number may be reused after)."""
        if self.child_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.child_fd)
            self.child_fd = -1

    def close(self) -> None:
        self.close_child_end()
        self._sock.close()

    def fileno(self) -> int:
        return self._sock.fileno()

    @property
    def readable(self) -> bool:
        """Whether the supervisor still reads this socket (select on it)."""
        return self.broken is None and self._sock.fileno() >= 0

    def pump(self) -> None:
        """Read what is waiting (one bounded read) and act on its complete lines."""
        if not self.readable:
            return
        try:
            data = self._sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # reset: the program closed its end (or died) with our lines unread
        if not data:
            self.broken = "closed by the program"  # not an error: it stopped cooperating, or is exiting
            self.closed = True
            return
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        if len(self._buf) >= MAX_LINE:
            self._break(f"a line longer than {MAX_LINE} bytes")
            return
        for raw in lines:
            self._lines += 1
            if self._lines > MAX_LINES:
                self._break(f"more than {MAX_LINES} lines between two checkpoint requests (a flood)")
                return
            if not self._line(raw):
                return

    def _line(self, raw: bytes) -> bool:
        if len(raw) >= MAX_LINE:
            self._break(f"a line longer than {MAX_LINE} bytes")
            return False
        try:
            text = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            self._break("bytes that are not ASCII")
            return False
        word, _, rest = text.partition(" ")
        if word not in _WORDS or not rest or not rest.replace("-", "").isalnum():
            self._break(f"an unknown line {text[:40]!r}")
            return False
        if word == "hello":
            self.hello = True
        else:
            self._ready.add(rest)
            if len(self._ready) > MAX_LINES:
                self._break("too many ready lines")
                return False
        return True

    def _break(self, why: str) -> None:
        self.broken = why
        self._buf = b""
        self._ready.clear()
        self._log(f"the program wrote {why} on its control socket ({ENV_CONTROL_FD}); it is not read again, checkpoints freeze it")

    def request(self, rid: str, timeout: float, alive: Callable[[], bool], sig: int | None = None, pid: int | None = None) -> bool:
        """Ask for checkpoint `rid` (sending `sig` to `pid` too, when given) and wait up to
        `timeout` seconds for `ready rid`; True when the program said it, False on timeout,
        a broken protocol, or a program that exited."""
        self._lines = 0
        self._ready.clear()
        if not self.readable:
            return False
        try:
            self._sock.sendall(f"checkpoint {rid}\n".encode("ascii"))
        except (BlockingIOError, OSError):
            return False
        if sig is not None and pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while rid not in self._ready:
            left = deadline - time.monotonic()
            if left <= 0 or not self.readable or not alive():
                return False
            ready, _, _ = select.select([self._sock], [], [], min(left, 0.05))
            if ready:
                self.pump()
        self._ready.discard(rid)
        return True

    def resume(self, rid: str, result: str) -> None:
        """Say `resume rid result` (result: a checkpoint's hex or "failed"); a program that
        no longer reads is not waited for."""
        with contextlib.suppress(OSError):
            self._sock.send(f"resume {rid} {result}\n".encode("ascii"))


def parse_signal(text: str) -> int:
    """A signal given as USR1, SIGUSR1 or its number. Raises ValueError."""
    raw = text.strip().upper()
    if raw.isdigit():
        return int(signal.Signals(int(raw)))
    name = raw if raw.startswith("SIG") else f"SIG{raw}"
    return int(signal.Signals[name])

"""The program's side of `ckpt run`'s cooperative checkpoints (docs/processes.md).

A program supervised by `ckpt run` finds one end of a socket in `CKPT_CONTROL_FD` and,
when it was started from a checkpoint, that checkpoint's id in `CKPT_RESTORED`. This
module speaks the protocol in a few lines, as SCR's Need_checkpoint / Start_output /
Complete_output do::

    import ckptcli.process

    ctl = ckptcli.process.connect()       # a no-op Control when not under `ckpt run`
    state = load(ctl.restored)            # the checkpoint it resumes from, or None
    while work_left():
        step(state)
        if ctl.need_checkpoint():         # the supervisor asked; cheap, never blocks
            with ctl.checkpoint():        # quiesce: finish writing the state files here
                flush(state)              # on leaving the block: "ready", then wait for "resume"

The protocol is lines of ASCII on the socket, at most 256 bytes each:

- program -> supervisor: `hello 1` (sent by `connect`: the program cooperates),
  `ready ID` (its files are consistent and it writes nothing until resumed);
- supervisor -> program: `checkpoint ID` (please quiesce), `resume ID HEX` or
  `resume ID failed` (the copy is taken, or failed; go on).

Only the standard library is used (this module sits in the lowest layer of ckptcli and
imports nothing else of it), so a program may also copy it.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
from collections.abc import Iterator

__all__ = ["ENV_CONTROL_FD", "ENV_RESTORED", "MAX_LINE", "Control", "connect"]

#: the environment variable naming the control socket's file descriptor
ENV_CONTROL_FD = "CKPT_CONTROL_FD"
#: the environment variable holding the hex id of the checkpoint the program was restored from
ENV_RESTORED = "CKPT_RESTORED"
#: longest line either side sends, newline included; a longer one is a protocol error
MAX_LINE = 256


class Control:
    """The program's end of the control socket (or nothing, outside `ckpt run`)."""

    def __init__(self, sock: socket.socket | None, restored: str | None) -> None:
        self._sock = sock
        self._buf = b""
        self._pending: str | None = None  # the id of a checkpoint request not answered yet
        #: the hex id of the checkpoint this run was restored from (CKPT_RESTORED), or None: a cold start
        self.restored = restored
        #: the id of the checkpoint the last `checkpoint()` block was taken as (None: failed or none yet)
        self.last: str | None = None

    @property
    def active(self) -> bool:
        """Whether a supervisor is at the other end."""
        return self._sock is not None

    def need_checkpoint(self) -> bool:
        """Whether the supervisor asks for a checkpoint now (reads what is waiting on the
        socket, never blocks). Returns False outside `ckpt run`."""
        if self._pending is None:
            self._read(0.0)
        return self._pending is not None

    @contextlib.contextmanager
    def checkpoint(self) -> Iterator[None]:
        """Inside the block the program brings its state files to a consistent state; on
        leaving it, says `ready` and waits until the supervisor has taken the copy
        (`resume`). Without a pending request (or outside `ckpt run`) the block just runs.
        An exception inside the block is raised as usual, and nothing is said: the
        supervisor's timeout then falls back to freezing the program."""
        yield
        wanted = self._pending
        if wanted is None or self._sock is None:
            return
        self._pending = None
        self._send(f"ready {wanted}")
        while self._sock is not None:
            for line in self._lines(None):
                word, _, rest = line.partition(" ")
                rid, _, result = rest.partition(" ")
                if word == "resume" and rid == wanted:
                    self.last = None if result in ("", "failed") else result
                    return
                if word == "checkpoint":
                    self._pending = rid

    def close(self) -> None:
        """Close the socket (the supervisor then stops asking and freezes instead)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # -- the wire ----------------------------------------------------------------------
    def _send(self, line: str) -> None:
        if self._sock is None:
            return
        try:
            self._sock.sendall(line.encode("ascii") + b"\n")
        except OSError:
            self.close()

    def _read(self, timeout: float | None) -> None:
        for line in self._lines(timeout):
            word, _, rest = line.partition(" ")
            if word == "checkpoint" and rest:
                self._pending = rest.split(" ")[0]

    def _lines(self, timeout: float | None) -> list[str]:
        """The complete lines waiting (waiting up to `timeout` for some; None: until one comes)."""
        sock = self._sock
        if sock is None:
            return []
        ready, _, _ = select.select([sock], [], [], timeout)
        if not ready:
            return []
        try:
            data = sock.recv(4096)
        except OSError:
            data = b""
        if not data:  # the supervisor is gone
            self.close()
            return []
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        if len(self._buf) > MAX_LINE:
            self._buf = b""
        return [raw.decode("ascii", "replace").strip() for raw in lines if len(raw) < MAX_LINE]


def connect() -> Control:
    """The control socket `ckpt run` passed (CKPT_CONTROL_FD), announced with `hello 1`;
    a Control that does nothing when the program runs without `ckpt run`."""
    restored = os.environ.get(ENV_RESTORED) or None
    raw = os.environ.get(ENV_CONTROL_FD, "")
    if not raw.isdigit():
        return Control(None, restored)
    try:
        sock = socket.socket(fileno=int(raw))
    except OSError:
        return Control(None, restored)
    ctl = Control(sock, restored)
    ctl._send("hello 1")
    return ctl

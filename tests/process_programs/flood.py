"""A hostile program for `ckpt run`: it says hello on its control socket, then floods it.

Usage: flood.py MODE STATE, MODE one of
  lines    valid-looking `hello 1` lines, without end
  garbage  bytes that are not the protocol (not ASCII), without end
  long     one line that never ends
It writes STATE once (so there is something to checkpoint), then writes to the socket until
the write blocks (the supervisor stopped reading) and stays blocked there.
"""

from __future__ import annotations

import os
import sys

mode, state = sys.argv[1], sys.argv[2]
with open(state, "w") as f:
    f.write("flood\n")
fd = int(os.environ["CKPT_CONTROL_FD"])
os.write(fd, b"hello 1\n")
chunk = {"lines": b"hello 1\n" * 512, "garbage": bytes(range(128, 256)) * 32 + b"\n", "long": b"x" * 4096}[mode]
while True:
    os.write(fd, chunk)

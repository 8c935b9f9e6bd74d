"""A deterministic simulation that keeps its state in one file, written IN PLACE, in pieces,
many times a second: the program `ckpt run` supervises in tests/test_process_run.py.

The state file (SLOTS x PIECES pieces behind a header):

    header  (32 bytes)  magic "SIMSTAT1", generation u64, active slot u32, flags u32, crc32 u32, pad
    slot 0  PIECES pieces of PIECE bytes
    slot 1  PIECES pieces of PIECE bytes
    piece   generation u64, step u64, index u32, crc32 u32, value u64, then the value's bytes repeated

A step computes the next values, writes every piece of the INACTIVE slot (one pwrite each,
with a new generation), then rewrites the 32-byte header to point at that slot. At every
instant the file is crash-consistent: the header names a slot whose pieces all carry its
generation (a SIGKILL can only interrupt the inactive slot or the header's single small
pwrite). A copy READ OVER TIME can tear: it reads the header (generation g, slot A), and
while it reads slot A the program finishes g+1 in slot B and starts g+2 in slot A, so the
copy holds pieces of g and of g+2: `validate` sees pieces whose generation is not the
header's and calls the copy torn. A frozen program (or one that has quiesced) writes
nothing while it is copied, so its copy never tears.

Usage: sim.py STATE OUT LOG [--steps N] [--pace S] [--cooperate|--ignore-requests]
              [--poison-at STEP | --poison-when TRIGGER] [--marker PATH]

On start it appends to LOG `start pid=P restored=ID step=S t=NS` (ID: CKPT_RESTORED or
none; S: the step its state file holds, 0 for a new one), or `torn REASON` (and exits 3)
when its state file does not validate, or `poisoned` (and exits 1) when it starts from a
poisoned state. At the end it writes `steps=N digest=HEX` to OUT and exits 0.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import time
import zlib

MAGIC = b"SIMSTAT1"
PIECES = 32
PIECE = 4096
HEADER = 32
_HEAD = struct.Struct("<8sQII")  # magic, generation, slot, flags (+ crc32, pad)
_PIECE_HEAD = struct.Struct("<QQIIQ")  # generation, step, index, crc32, value
FLAG_POISON = 1
MASK = (1 << 64) - 1


def initial() -> list[int]:
    return [(i * 0x9E3779B97F4A7C15 + 1) & MASK for i in range(PIECES)]


def advance(values: list[int], step: int) -> list[int]:
    return [(values[i] * 6364136223846793005 + values[(i + 1) % PIECES] + step) & MASK for i in range(PIECES)]


def digest(values: list[int], step: int) -> str:
    return hashlib.sha256(struct.pack(f"<Q{PIECES}Q", step, *values)).hexdigest()


def _piece(gen: int, step: int, index: int, value: int) -> bytes:
    body = struct.pack("<Q", value) * ((PIECE - _PIECE_HEAD.size) // 8)
    crc = zlib.crc32(struct.pack("<QQIQ", gen, step, index, value) + body)
    return _PIECE_HEAD.pack(gen, step, index, crc, value) + body


def _header(gen: int, slot: int, flags: int) -> bytes:
    head = _HEAD.pack(MAGIC, gen, slot, flags)
    return head + struct.pack("<I", zlib.crc32(head)) + b"\0" * (HEADER - _HEAD.size - 4)


def slot_offset(slot: int, index: int) -> int:
    return HEADER + (slot * PIECES + index) * PIECE


def validate(data: bytes) -> tuple[int, list[int], int]:
    """(step, values, flags) of a state file's bytes. Raises ValueError saying why it is torn."""
    if len(data) < slot_offset(2, 0):
        raise ValueError(f"short file ({len(data)} bytes)")
    magic, gen, slot, flags = _HEAD.unpack_from(data, 0)
    (crc,) = struct.unpack_from("<I", data, _HEAD.size)
    if magic != MAGIC or crc != zlib.crc32(data[: _HEAD.size]) or slot not in (0, 1):
        raise ValueError("bad header")
    values, step = [], None
    for i in range(PIECES):
        off = slot_offset(slot, i)
        pgen, pstep, index, pcrc, value = _PIECE_HEAD.unpack_from(data, off)
        body = data[off + _PIECE_HEAD.size : off + PIECE]
        if pgen != gen or index != i or pcrc != zlib.crc32(struct.pack("<QQIQ", pgen, pstep, index, value) + body):
            raise ValueError(f"piece {i} of slot {slot} has generation {pgen}, the header {gen}")
        if step is not None and pstep != step:
            raise ValueError(f"piece {i} has step {pstep}, piece 0 {step}")
        step = pstep
        values.append(value)
    return int(step or 0), values, flags


class StateFile:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.gen = 0
        self.slot = 0

    def load(self) -> tuple[int, list[int], int] | None:
        size = os.fstat(self.fd).st_size
        if size == 0:
            return None
        data = os.pread(self.fd, size, 0)
        step, values, flags = validate(data)
        _m, self.gen, self.slot, _f = _HEAD.unpack_from(data, 0)
        return step, values, flags

    def write(self, step: int, values: list[int], flags: int) -> None:
        gen, slot = self.gen + 1, 1 - self.slot
        for i, value in enumerate(values):  # in place, piece by piece
            os.pwrite(self.fd, _piece(gen, step, i, value), slot_offset(slot, i))
        os.pwrite(self.fd, _header(gen, slot, flags), 0)
        self.gen, self.slot = gen, slot


def main(argv: list[str]) -> int:
    state_path, out_path, log_path = argv[:3]
    opts = argv[3:]

    def opt(name: str, default: str) -> str:
        return opts[opts.index(name) + 1] if name in opts else default

    steps, pace = int(opt("--steps", "1000")), float(opt("--pace", "0.002"))
    poison_at, marker = int(opt("--poison-at", "0")), opt("--marker", "")
    trigger = opt("--poison-when", "")  # poison at the first step once this file exists
    ctl = None
    if "--cooperate" in opts or "--ignore-requests" in opts:
        import ckptcli.process

        ctl = ckptcli.process.connect()
    restored = os.environ.get("CKPT_RESTORED") or "none"
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sf = StateFile(state_path)
    try:
        loaded = sf.load()
    except ValueError as exc:
        os.write(log, f"torn {exc}\n".encode())
        return 3
    step, values, flags = loaded if loaded is not None else (0, initial(), 0)
    os.write(log, f"start pid={os.getpid()} restored={restored} step={step} t={time.time_ns()}\n".encode())
    if flags & FLAG_POISON:
        os.write(log, b"poisoned\n")
        return 1
    cooperate = "--cooperate" in opts
    while step < steps:
        step += 1
        values = advance(values, step)
        due = (poison_at and step == poison_at) or (trigger and os.path.exists(trigger))
        if due and marker and not os.path.exists(marker):
            flags |= FLAG_POISON
            open(marker, "w").close()
        sf.write(step, values, flags)
        if cooperate and ctl is not None and ctl.need_checkpoint():
            with ctl.checkpoint():
                pass  # the state file is complete after every step: nothing to flush
        if pace:
            time.sleep(pace)
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"steps={step} digest={digest(values, step)}\n")
    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

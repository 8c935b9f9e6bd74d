"""Shared helpers for the benchmarks: deterministic data, store sizes, statistics, tables.

Everything here is deterministic for a given seed: step k of a 4,000-step run is the
same message and tool-call record as step k of a 1,000-step run, so the two runs share
their first 1,000 states exactly and the peers in one run see the very same data.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# -- data ----------------------------------------------------------------------------

#: Words the pseudo-text is made of: common English plus the jargon an agent's
#: conversation about code and tickets is full of. Drawn uniformly, so the text
#: compresses about as well as real chat text does in 500-byte pieces (a little).
_WORD_TEXT = """
the of and to in is that it for on with as was be by this are or from at an have not
but they which one you were all we when there can been has more if will would their what
so about out up into than them only other new some could time these two may then do first
any my now such like our over man me even most made after also did many before must through
back years where much your way well down should because each just those people how too
little state good very make world still own see men work long get here between both life
being under never day same another know while last might us great old year off come since
against go came right used take three agent tool call result error retry request response
user assistant message context memory plan step task goal search query file path line
function class module test build deploy config value key index cache store checkpoint
restore branch commit merge review ticket customer order invoice refund account password
email address payment status pending done failed timeout limit budget token model prompt
summary report table column row schema migration version release patch fix bug issue
"""
_WORDS = tuple(_WORD_TEXT.split())

_ROLES = ("user", "assistant", "assistant", "tool")
_TOOLS = ("search_docs", "read_file", "run_tests", "http_get", "sql_query", "send_email", "write_file")

#: Target sizes, in bytes of compact JSON (msgpack is a little smaller).
MESSAGE_CONTENT_CHARS = 450
TOOL_RESULT_CHARS = 60

#: Fixed start of the simulated timeline (2025-01-01T00:00:00Z), so timestamps are reproducible.
EPOCH = 1_735_689_600.0


def _text(rng: random.Random, chars: int) -> str:
    """Pseudo-random words, sentence-cased, at least `chars` characters long."""
    out: list[str] = []
    n = 0
    start = True
    while n < chars:
        w = rng.choice(_WORDS)
        if start:
            w = w.capitalize()
            start = False
        r = rng.random()
        if r < 0.08:
            w += "."
            start = True
        elif r < 0.12:
            w += ","
        elif r < 0.14:
            w = f"{w}-{rng.randrange(10, 9999)}"
        out.append(w)
        n += len(w) + 1
    text = " ".join(out)
    return text if text.endswith(".") else text.rstrip(",") + "."


def make_message(rng: random.Random, step: int) -> dict[str, Any]:
    """One chat message, about 500 bytes serialized: {"role", "content", "id"}."""
    return {
        "role": _ROLES[step % len(_ROLES)],
        "content": _text(rng, MESSAGE_CONTENT_CHARS),
        "id": f"msg-{step:06d}-{rng.getrandbits(32):08x}",
    }


def make_tool_record(rng: random.Random, step: int) -> dict[str, Any]:
    """One tool-call record, about 250-300 bytes serialized."""
    name = rng.choice(_TOOLS)
    started = EPOCH + step * 7.0 + rng.random()
    ended = started + 0.05 + rng.random() * 2.0
    call_id = f"call_{rng.getrandbits(64):016x}"
    args = {"query": " ".join(rng.choice(_WORDS) for _ in range(4)), "limit": rng.randrange(1, 50)}
    return {
        "id": call_id,
        "name": name,
        "args": args,
        "result": _text(rng, TOOL_RESULT_CHARS),
        "status": "ok",
        "started": round(started, 6),
        "ended": round(ended, 6),
        "idempotency_key": hashlib.sha256(f"{call_id}:{name}".encode()).hexdigest()[:32],
    }


def iter_steps(n: int, seed: int = 1) -> Iterator[tuple[int, dict[str, Any], dict[str, Any]]]:
    """(step, message, tool record) for steps 1..n; a prefix of a longer run is identical."""
    rng = random.Random(seed)
    for step in range(1, n + 1):
        yield step, make_message(rng, step), make_tool_record(rng, step)


def json_size(value: Any) -> int:
    """Bytes of compact UTF-8 JSON: how big a value "is" for the targets."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def data_profile(n: int = 200, seed: int = 1) -> dict[str, float]:
    """Median serialized sizes (JSON and msgpack) of the generated records."""
    import msgpack

    msg_json, msg_mp, tool_json, tool_mp = [], [], [], []
    for _step, msg, tool in iter_steps(n, seed):
        msg_json.append(json_size(msg))
        msg_mp.append(len(msgpack.packb(msg)))
        tool_json.append(json_size(tool))
        tool_mp.append(len(msgpack.packb(tool)))
    return {
        "message_json_bytes": median(msg_json),
        "message_msgpack_bytes": median(msg_mp),
        "tool_json_bytes": median(tool_json),
        "tool_msgpack_bytes": median(tool_mp),
    }


# -- sizes ---------------------------------------------------------------------------


@dataclass
class DirSize:
    """Bytes under a directory.

    apparent: sum of st_size of regular files (what `du --apparent-size -b` says for files);
        this is the headline figure, it does not depend on the file system.
    allocated: st_blocks * 512 of every file and directory, the directory itself included
        (what `du -B1` says); on a 4 KiB-block file system every small file costs 4 KiB.
    """

    apparent: int = 0
    allocated: int = 0
    files: int = 0
    dirs: int = 0
    #: apparent bytes and file counts per top-level entry (packs, index, manifests, ...)
    parts: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"apparent": self.apparent, "allocated": self.allocated, "files": self.files, "dirs": self.dirs, "parts": self.parts}


def _lstat(path: str) -> os.stat_result | None:
    """lstat, or None when the file went away meanwhile (a temporary file of a live writer)."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def dir_size(root: str | os.PathLike[str]) -> DirSize:
    """Measure everything under `root`; nothing is excluded (empty dirs count as dirs).
    A file or directory that vanishes while it is walked (a writer's temporary file) is
    not counted."""
    root = Path(root)
    out = DirSize()
    st = os.lstat(root)
    out.allocated += st.st_blocks * 512
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        top_dir = rel.split(os.sep, 1)[0] if rel != "." else None
        for d in dirnames:
            dst = _lstat(os.path.join(dirpath, d))
            if dst is None:
                continue
            out.allocated += dst.st_blocks * 512
            out.dirs += 1
        for f in filenames:
            fst = _lstat(os.path.join(dirpath, f))
            if fst is None:
                continue
            st = fst
            out.allocated += st.st_blocks * 512
            if not stat.S_ISREG(st.st_mode):
                continue
            out.apparent += st.st_size
            out.files += 1
            part = out.parts.setdefault(top_dir or f, {"bytes": 0, "files": 0})
            part["bytes"] += st.st_size
            part["files"] += 1
    return out


# -- statistics ----------------------------------------------------------------------


def workdir(path: str | os.PathLike[str] | None) -> Path | None:
    """The directory a benchmark's --workdir (or --dir) names, made with its parents when
    it does not exist yet (it was a traceback from tempfile); None (no option: a new
    temporary directory) stays None."""
    if path is None:
        return None
    made = Path(path)
    made.mkdir(parents=True, exist_ok=True)
    return made


def median(xs: Sequence[float]) -> float:
    if not xs:
        return math.nan
    s = sorted(xs)
    mid = len(s) // 2
    return float(s[mid]) if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


def percentile(xs: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100): a value that was actually observed."""
    if not xs:
        return math.nan
    s = sorted(xs)
    k = max(1, math.ceil(p / 100.0 * len(s)))
    return float(s[k - 1])


def ratio(a: float, b: float) -> float:
    return a / b if b else math.inf


# -- formatting ----------------------------------------------------------------------


def fmt_bytes(n: float) -> str:
    """1234567 -> '1.18 MiB (1,234,567 B)'-style short form: '1.18 MiB'."""
    if n != n:  # NaN
        return "-"
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def fmt_ms(seconds: float) -> str:
    if seconds != seconds:
        return "-"
    return f"{seconds * 1000:.2f} ms"


def fmt_ratio(x: float, digits: int = 4) -> str:
    if x != x:
        return "-"
    return f"{x:.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """Plain-text columns; `align` is one char per column, 'l' or 'r' (default: first l, rest r)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    align = align or "l" + "r" * (len(headers) - 1)

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align, strict=True)).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def versions(*dists: str) -> dict[str, str]:
    """What a benchmark ran on: Python, the platform, the CPUs and SQLite, and the
    installed version of each distribution named ("not installed" when missing)."""
    import platform
    import sqlite3
    from importlib import metadata

    out = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": str(os.cpu_count()),
        "sqlite": sqlite3.sqlite_version,
    }
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out

"""`ckpt log --path` on a long recorded history, against the loop of `ckpt diff` calls a
user would otherwise write.

A recorder takes N checkpoints (default 1,000) of an agent whose memory holds a few
hundred keys and a growing message list; each tail sets a counter, appends a message and
updates a note; one checkpoint's tail, two thirds of the way, also sets
/memory/some/key. The question is "which checkpoint changed /memory/some/key?".

    python -m bench.log                  # 1,000 checkpoints
    python -m bench.log --checkpoints 200 --sample 20 --json out.json

Two ways are timed, each as real `ckpt` subprocesses:

- one `ckpt log SUBJECT --path /memory/some/key --json` (the target: under 2 s, and it
  must name the planted checkpoint);
- the shell loop `for i in 1..N-1: ckpt diff SUBJECT~i SUBJECT~(i-1) --path ... --json`:
  only --sample of its N-1 calls are run (spread over the history), and their mean time
  is multiplied by N-1. That figure is an EXTRAPOLATION, labelled so.

The ratio printed is the extrapolated loop time over the log time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_S = 2.0


def build(root: Path, n: int, plant: int) -> list[str]:
    import ckptcli
    from ckptcli.history.recorder import Recorder

    store = ckptcli.init_store(root / ".ckpt")
    memory: dict[str, Any] = {f"pref{i:03}": {"value": i, "note": "x" * 40} for i in range(300)}
    memory["some"] = {"key": "ok"}
    memory["messages"] = []
    rec = Recorder.open(store, "agent:bench", root / "bench.journal", state={"memory": memory, "plan": [], "tools": []})
    ids = [rec.base]
    for i in range(1, n):
        rec.append("memory.set", path=["counter"], value=i)
        rec.append("message.append", message={"role": "user", "content": f"message {i} " + "y" * 200})
        rec.append("memory.set", path=[f"pref{i % 300:03}", "value"], value=i)
        if i == plant:
            rec.append("memory.set", path=["some", "key"], value="BAD")
        ids.append(rec.checkpoint(message=f"step {i}").hex)
    rec.close()
    return ids


def ckpt(root: Path, *args: str) -> tuple[float, str]:
    exe = Path(sys.executable).with_name("ckpt")
    cmd = [
        str(exe) if exe.exists() else sys.executable,
        *([] if exe.exists() else ["-m", "ckptcli"]),
        *args,
        "--store",
        str(root / ".ckpt"),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, "NO_COLOR": "1"})
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {proc.stderr.strip()}")
    return dt, proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.log", description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", type=int, default=1000, help="checkpoints in the history (default 1,000)")
    ap.add_argument("--sample", type=int, default=30, help="ckpt diff calls actually run, to extrapolate the loop (default 30)")
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    args = ap.parse_args()
    n = args.checkpoints
    plant = n * 2 // 3
    root = Path(tempfile.mkdtemp(prefix="ckpt-bench-log."))
    try:
        t0 = time.perf_counter()
        ids = build(root, n, plant)
        built = time.perf_counter() - t0
        ptr = "/memory/some/key"
        ckpt(root, "log", "agent:bench", "-n", "1")  # warm the page cache and the catalog
        log_s, out = ckpt(root, "log", "agent:bench", "--path", ptr, "--json")
        found = [e["id"] for e in json.loads(out)]
        correct = found[:1] == [ids[plant]]
        step = max(1, (n - 1) // args.sample)
        picks = list(range(1, n, step))[: args.sample]
        times = []
        changed_in_sample = 0
        for i in picks:
            dt, out = ckpt(root, "diff", f"agent:bench~{i}", f"agent:bench~{i - 1}", "--path", ptr, "--json")
            times.append(dt)
            changed_in_sample += not json.loads(out)["same"]
        per_call = sum(times) / len(times)
        loop_s = per_call * (n - 1)
        ratio = loop_s / log_s
        print(f"history: {n:,} checkpoints, built in {built:.1f} s; planted change at checkpoint {plant} ({ids[plant][:12]})")
        print(
            f"ckpt log --path {ptr}:  {log_s:.3f} s  -> {len(found)} checkpoints ({'the planted one first' if correct else 'WRONG'})  "
            f"target < {TARGET_S} s: {'ok' if log_s < TARGET_S and correct else 'MISSED'}"
        )
        print(
            f"ckpt diff loop:          {len(times)} of {n - 1:,} calls run, {per_call * 1000:.0f} ms each; "
            f"EXTRAPOLATED to {n - 1:,} calls: {loop_s:.1f} s"
        )
        print(f"ratio (extrapolated loop / log): {ratio:.0f}x")
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "checkpoints": n,
                        "log_seconds": log_s,
                        "log_correct": correct,
                        "diff_calls_run": len(times),
                        "diff_seconds_per_call": per_call,
                        "diff_loop_seconds_extrapolated": loop_s,
                        "ratio": ratio,
                        "target_seconds": TARGET_S,
                    },
                    indent=2,
                )
            )
        return 0 if correct and log_s < TARGET_S else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

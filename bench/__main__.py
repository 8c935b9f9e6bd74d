"""Every core benchmark in one run, with one table of ratios and targets at the end.

    python -m bench [--quick] [--runs 3] [--json PATH] [--history] [--langgraph]

Runs, in order: start-up and `ckpt ls` on 10,000 checkpoints (bench.startup); the
512 MiB big-state pairs against restic, tar | zstd and sha256sum (bench.bigstate);
peak memory of a 2 GiB take and restore, ckpt and restic; and, with --history, the
1,000-step agent history against LangGraph's SqliteSaver (bench.history, ~4 minutes);
with --langgraph, CkptSaver against SqliteSaver and DeltaChannel (bench.langgraph, ~2 minutes).
Each part prints its own table; the summary at the end gathers every target.
`--quick` shrinks everything (128 MiB, 512 MiB for memory, 2,000 checkpoints, 1 run)
to check that the harness works; its figures are not the ones the targets are for.

Set-up: `bash bench/setup` (restic and zstd from the system packages, the bench extra).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import bigstate, startup
from bench.common import table, verdict

MEMORY_TARGET_KIB = 300 * 1024


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one run: checks the harness, not the targets")
    ap.add_argument("--runs", type=int, default=3, help="runs of each big-state pair (default 3)")
    ap.add_argument("--history", action="store_true", help="also run bench.history (about 4 minutes)")
    ap.add_argument("--langgraph", action="store_true", help="also run bench.langgraph (about 2 minutes)")
    ap.add_argument("--json", type=Path, help="write every figure to this file")
    ap.add_argument("--workdir", type=Path, help="where the big-state data goes (needs ~5x 512 MiB free)")
    args = ap.parse_args()
    mib, mem_mib, checkpoints, runs = (128, 512, 2000, 1) if args.quick else (512, 2048, 10_000, args.runs)
    t0 = time.perf_counter()
    bigstate.check_tools()
    out: dict[str, Any] = {"machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version(), "commit": _commit()}}

    out["startup"] = st = startup.measure(checkpoints, 15 if not args.quick else 5)
    startup.report(st)
    print()
    out["bigstate"] = big = bigstate.measure(mib, runs, args.workdir)
    bigstate.report(big)
    print()
    out["memory"] = mem = bigstate.measure_memory(mem_mib, args.workdir)
    print(
        table(
            ["peak RSS", f"{mem_mib} MiB state", "time"],
            [[k, f"{v / 1024:.0f} MiB", f"{mem['seconds'][k]:.2f} s"] for k, v in mem["peak_rss_kib"].items()],
        )
    )
    summary: list[list[str]] = []
    for name, target in st["targets_s"].items():
        got = st["medians_s"][name]
        summary.append([f"{name} (median)", f"{got * 1000:.0f} ms", f"<= {target * 1000:.0f} ms", verdict(got <= target)])
    for name, value, target in big["checks"]:
        if target is not None:
            summary.append([name, f"{value:.3f}", f"<= {target}", verdict(value <= target)])
    for name in ("ckpt take", "ckpt restore", "ckpt take, incremental"):
        kib = mem["peak_rss_kib"][name]
        summary.append([f"peak RSS, {name} of {mem_mib} MiB", f"{kib / 1024:.0f} MiB", "<= 300 MiB", verdict(kib <= MEMORY_TARGET_KIB)])
    if args.history:
        print()
        subprocess.run([sys.executable, "-m", "bench.history"], check=True)
    if args.langgraph:
        print()
        subprocess.run([sys.executable, "-m", "bench.langgraph"], check=True)
    print(
        f"\nsummary{' (--quick: sizes too small for the targets)' if args.quick else ''}; {time.perf_counter() - t0:.0f} s in all, "
        f"commit {out['machine']['commit']}\n"
    )
    print(table(["check", "value", "target", "result"], summary))
    if args.json:
        big_json = {**big, "checks": {n: v for n, v, _ in big["checks"]}}
        args.json.write_text(json.dumps({**out, "bigstate": big_json}, indent=2))
    return 0


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())

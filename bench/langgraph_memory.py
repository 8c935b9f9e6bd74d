"""The memory a LangGraph checkpointer holds for a server's many conversations.

A long-running LangGraph service serves many threads; most of them are finished or idle.
This runs the real 1-node chat graph of bench/langgraph.py for --threads conversations
of --steps ~500-byte messages each, on each saver in a fresh process, and measures what
the saver (and the graph) hold afterwards: Python's traced memory (tracemalloc, after a
full collection; the process's RSS would mostly show tracemalloc's own bookkeeping).
Side by side, in the same run:

- CkptSaver with its default `resident_threads=64` (threads used least recently are read
  back from the store when used again);
- CkptSaver keeping every thread (`resident_threads` larger than --threads);
- InMemorySaver (LangGraph's; holds everything by design);
- SqliteSaver (LangGraph's; holds nothing: every read goes to SQLite).

    python -m bench.langgraph_memory                        # 300 threads x 40 steps, ~3 minutes
    python -m bench.langgraph_memory --threads 100 --steps 20   # a quick look

Prints the memory per checkpoint over a baseline of the same saver after one thread, so
the imports and caches every process has do not count. For ckpt this averages the 64
resident threads (held whole) with the others (held as a small record per checkpoint):
the more threads, the closer it gets to the second, which the column "in the second
half" shows (the growth from --threads/2 conversations to --threads).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import fmt_bytes, table

SAVERS = ("ckpt", "ckpt-all-resident", "memory", "sqlite")


def _inner(kind: str, threads: int, steps: int, workdir: str) -> dict[str, Any]:
    """Runs in a child process: the conversations on one saver, then the measurement."""
    import gc
    import sqlite3
    import tracemalloc

    from bench.langgraph import build_graph

    tracemalloc.start()
    if kind.startswith("ckpt"):
        from ckptcli.adapters.langgraph.saver import CkptSaver

        saver: Any = CkptSaver.open(Path(workdir) / ".ckpt", **({"resident_threads": threads + 1} if kind == "ckpt-all-resident" else {}))
    elif kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        saver = InMemorySaver()
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(sqlite3.connect(str(Path(workdir) / "checkpoints.sqlite"), check_same_thread=False))
        saver.setup()
    graph = build_graph(steps, 1, False).compile(checkpointer=saver)
    points: dict[int, int] = {}
    for t in range(threads):
        cfg = {"configurable": {"thread_id": f"conversation-{t}"}, "recursion_limit": steps * 3 + 10}
        graph.invoke({"messages": []}, cfg, durability="sync")
        if t + 1 in (1, threads // 2, threads):
            if hasattr(saver, "flush"):
                saver.flush()  # commit (and, for ckpt, drop what is not resident) before measuring
            gc.collect()
            points[t + 1] = tracemalloc.get_traced_memory()[0]
    checkpoints = sum(1 for _ in saver.list({"configurable": {"thread_id": "conversation-0"}}))
    if hasattr(saver, "close"):
        saver.close()
    return {
        "traced_after_1": points[1],
        "traced_after_half": points[threads // 2],
        "traced_after_all": points[threads],
        "checkpoints_per_thread": checkpoints,
    }


def measure(kind: str, threads: int, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-mem-") as d:
        code = f"import json; from bench.langgraph_memory import _inner; print(json.dumps(_inner({kind!r}, {threads}, {steps}, {d!r})))"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent
        )
    r: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    total = (threads - 1) * r["checkpoints_per_thread"]
    r["bytes_per_checkpoint"] = (r["traced_after_all"] - r["traced_after_1"]) / max(1, total)
    second_half = (threads - threads // 2) * r["checkpoints_per_thread"]
    r["bytes_per_checkpoint_second_half"] = (r["traced_after_all"] - r["traced_after_half"]) / max(1, second_half)
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.langgraph_memory", description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=300, help="conversations (default 300)")
    ap.add_argument("--steps", type=int, default=40, help="messages per conversation (default 40)")
    ap.add_argument("--json", type=Path, help="write every figure to this file")
    args = ap.parse_args(argv)
    if args.threads < 2 or args.steps < 1:
        ap.error("--threads must be >= 2 and --steps >= 1")
    results = {}
    for kind in SAVERS:
        print(f"[bench.langgraph_memory] {kind}: {args.threads} threads x {args.steps} steps", file=sys.stderr, flush=True)
        results[kind] = measure(kind, args.threads, args.steps)
    base = results["ckpt"]["bytes_per_checkpoint"]
    rows = [
        [
            kind,
            fmt_bytes(r["traced_after_all"]),
            f"{r['bytes_per_checkpoint'] / 1024:,.2f} KiB",
            f"{r['bytes_per_checkpoint_second_half'] / 1024:,.2f} KiB",
            f"{r['bytes_per_checkpoint'] / base:.2f}" if base > 0 else "-",
        ]
        for kind, r in results.items()
    ]
    cps = results["ckpt"]["checkpoints_per_thread"]
    print(f"LangGraph checkpointers' memory: {args.threads} conversations x {args.steps} messages ({cps} checkpoints each)\n")
    print(table(["saver", "traced after all", "per checkpoint", "in the second half", "vs ckpt"], rows))
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "steps": args.steps, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""CkptSaver on a loopback S3 server against SqliteSaver on local disk: the 1,000-step agent history.

    python -m bench.langgraph_s3 [--steps 1000] [--json PATH]

Starts moto's S3 server (ThreadedMotoServer on 127.0.0.1, in a child process) and runs
bench.langgraph's graph (a conversation in which one node appends one ~500-byte chat
message per step, durability="sync": the puts run in the graph's own thread, so the time
is the saver's alone) once on each saver:

- CkptSaver.open("s3://BUCKET/agents") with its defaults: each put is journaled on this
  host's disk (the journal directory, in a temporary XDG_STATE_HOME) before it returns,
  and the commit thread commits to S3 in the background, batched every commit interval;
- SqliteSaver on a database file on local disk, its defaults.

Measured: put p50 / p99 / max as the graph sees it, the run's wall time, how long
CkptSaver's close takes (the last commit), the commits' requests (the S3 server's log of
requests is not read: the count is of the saver's own commits), and that a fresh
CkptSaver opened on the bucket reads the whole history back. Target: CkptSaver put p50
<= 1 ms with the commits batched in the background. The S3 server is a Python process
on this host: its latency is not a real region's, which the puts do not wait for.
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
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import percentile, table, verdict
from bench.langgraph import THREAD, _timed, build_graph, open_saver
from bench.objstore import _SERVER, CREDENTIALS

TARGET_PUT_P50_S = 0.001


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _run_graph(saver: Any, steps: int, seed: int) -> tuple[list[float], float]:
    graph = build_graph(steps, seed, delta=False).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": THREAD}, "recursion_limit": steps + 10}
    t0 = time.perf_counter()
    graph.invoke({"messages": []}, cfg, durability="sync")
    return list(saver.put_times), time.perf_counter() - t0


def _puts(times: list[float]) -> dict[str, float]:
    return {"p50_s": percentile(times, 50), "p99_s": percentile(times, 99), "max_s": max(times), "mean_s": sum(times) / len(times)}


class _Counting:
    """Counts the saver's commits (the committer's `commit_locked` calls that had work)."""

    def __init__(self, saver: Any) -> None:
        self.commits = 0
        original = saver._committer.commit_locked

        def counted() -> None:
            if saver._queue:
                self.commits += 1
            original()

        saver._committer.commit_locked = counted


def run_ckpt(url: str, steps: int, seed: int) -> dict[str, Any]:
    from ckptcli.adapters.langgraph.saver import CkptSaver

    saver = _timed(CkptSaver).open(url)
    saver.put_times = []
    counting = _Counting(saver)
    times, wall = _run_graph(saver, steps, seed)
    t0 = time.perf_counter()
    saver.close()
    close_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with CkptSaver.open(url) as again:  # read back from S3 (the journal is gone: everything was committed)
        n = len(list(again.list({"configurable": {"thread_id": THREAD}})))
    reread_s = time.perf_counter() - t0
    return {
        "saver": "ckpt on S3",
        "put": _puts(times),
        "puts": len(times),
        "wall_s": wall,
        "close_s": close_s,
        "commits": counting.commits,
        "backlog_waits": saver.backlog_waits,
        "commit_interval_s": saver.commit_interval,
        "checkpoints_read_back": n,
        "read_back_s": reread_s,
    }


def run_sqlite(workdir: Path, steps: int, seed: int) -> dict[str, Any]:
    saver, close, settings = open_saver("sqlite", workdir)
    times, wall = _run_graph(saver, steps, seed)
    close()
    return {"saver": "SqliteSaver, local disk", "put": _puts(times), "puts": len(times), "wall_s": wall, "settings": settings}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.langgraph_s3", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--steps", type=int, default=1000, help="messages in the conversation (default 1000)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the generated messages (default 1)")
    ap.add_argument("--json", type=Path, metavar="PATH", help="also write every figure here")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-lg-s3-"))
    os.environ.update(CREDENTIALS)
    os.environ.update({"XDG_STATE_HOME": str(work / "state"), "CKPT_CACHE_DIR": str(work / "cache"), "AWS_ALLOW_HTTP": "true"})
    server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        endpoint = f"http://127.0.0.1:{int(server.stdout.readline())}"
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bench-langgraph", method="PUT"), timeout=30).read()
        log(f"{args.steps} steps; moto on {endpoint}")
        ck = run_ckpt("s3://bench-langgraph/agents", args.steps, args.seed)
        sq = run_sqlite(work, args.steps, args.seed)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.steps}-step agent history: CkptSaver on a loopback S3 server (moto) vs SqliteSaver on local disk\n")
    rows = [
        [
            r["saver"],
            f"{r['put']['p50_s'] * 1e3:.3f} ms",
            f"{r['put']['p99_s'] * 1e3:.3f} ms",
            f"{r['put']['max_s'] * 1e3:.1f} ms",
            f"{r['wall_s']:.2f} s",
        ]
        for r in (ck, sq)
    ]
    print(table(["saver", "put p50", "put p99", "put max", "run"], rows))
    print(
        f"\nckpt: {ck['commits']} commits to S3 in the background (commit interval {ck['commit_interval_s']} s), "
        f"{ck['backlog_waits']} puts waited for the committer, close {ck['close_s'] * 1e3:.0f} ms; "
        f"a fresh saver read {ck['checkpoints_read_back']} checkpoints back in {ck['read_back_s']:.2f} s"
    )
    ok = ck["put"]["p50_s"] <= TARGET_PUT_P50_S
    print()
    print(
        table(
            ["check", "value", "target", "result"], [["ckpt put p50 on S3", f"{ck['put']['p50_s'] * 1e3:.3f} ms", "<= 1 ms", verdict(ok)]]
        )
    )
    if args.json:
        args.json.write_text(json.dumps({"steps": args.steps, "ckpt": ck, "sqlite": sq}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

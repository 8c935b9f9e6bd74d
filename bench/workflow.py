"""What a durable step (ckptcli.workflow) costs over calling the function bare.

    python -m bench.workflow [--steps 2000] [--runs 5] [--dir DIR]

A workflow of STEPS steps, each a call of a small function (a dict in, a dict out), is run
durably on a local store with the journal's fsync policy "batch" (the default,
`workflow.default_durability()`: a step's call is written before it runs, its result
written and fsynced, with the call, when it returns), "always" and "never",
and the same calls are made bare in a loop. The time is taken inside the workflow
function, from before the first step to after the last (opening the recorder, its first
checkpoint and the last one are once per workflow, not per step, and left out). Also:
"call synced too", fsync batch with the recorder's own `Durability()`: the call is synced
before the step runs as well, two fsyncs per step; and a re-run that returns the STEPS
recorded results (the process died after the last step).
Each figure is the median of RUNS runs; the overhead is the durable time per step minus
the bare time per step. The first line gives this disk's append + fsync of a small record,
which a step under the default pays once (its result) and "call synced too" twice.
Target: <= 1 ms per step with fsync batch.

A measurement, not a test: the figures depend on the machine and, for fsync, its disk.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import ckptcli
from bench.common import workdir as made
from ckptcli import workflow
from ckptcli.history.recorder import Durability

TARGET_MS = 1.0
#: where the stores are made (--dir; default: the system's temporary directory)
DIR: list[str | None] = [None]


class _Stop(BaseException):
    """The process dying after the last step (nothing records it)."""


def work(i: int, order: dict[str, Any]) -> dict[str, Any]:
    return {"i": i, "order": order["id"], "cents": order["cents"] + i}


def _bare(steps: int) -> float:
    order = {"id": "A-1042", "cents": 1299}
    start = time.perf_counter()
    for i in range(steps):
        work(i, order)
    return (time.perf_counter() - start) / steps


def _durable(steps: int, fsync: str, rerun: bool = False, sync_calls: bool = False) -> float:
    took: list[float] = []

    def flow(ctx: workflow.Context, n: int) -> int:
        order = {"id": "A-1042", "cents": 1299}
        start = time.perf_counter()
        for i in range(n):
            ctx.step("work", work, i, order)
        took.append(time.perf_counter() - start)
        if not took[1:] and rerun:
            raise _Stop
        return n

    with tempfile.TemporaryDirectory(dir=DIR[0]) as d:
        store = ckptcli.init_store(Path(d) / "store")
        dflt = workflow.default_durability()
        durability = Durability(fsync=fsync) if sync_calls else Durability(fsync=fsync, flush_on=dflt.flush_on, write_on=dflt.write_on)
        if rerun:
            with contextlib.suppress(_Stop):
                workflow.run(store, "bench", flow, steps, durability=durability)
        workflow.run(store, "bench", flow, steps, durability=durability)
    return took[-1] / steps


def _fsync(times: int = 200) -> float:
    """Seconds one append of a small record and its fsync take on this disk (what the
    journal does per written event under fsync "batch")."""
    with tempfile.TemporaryDirectory(dir=DIR[0]) as d:
        fd = os.open(Path(d) / "f", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            start = time.perf_counter()
            for _ in range(times):
                os.write(fd, b"x" * 120)
                os.fsync(fd)
            return (time.perf_counter() - start) / times
        finally:
            os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.workflow", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", help="make the stores in this directory (e.g. /dev/shm: the cost without the disk's)")
    args = ap.parse_args()
    DIR[0] = str(made(args.dir)) if args.dir else None
    n, runs = args.steps, args.runs
    bare = statistics.median(_bare(n) for _ in range(runs))
    rows = [
        ("durable step, fsync batch (default)", "batch", False, False),
        ("durable step, fsync batch, call synced too", "batch", False, True),
        ("durable step, fsync always", "always", False, False),
        ("durable step, fsync never", "never", False, False),
        ("re-run: a recorded step returned", "batch", True, False),
    ]
    sync = statistics.median(_fsync() for _ in range(runs))
    print(f"{n} steps, median of {runs} runs; bare call: {bare * 1e6:.2f} µs per step; this disk's append + fsync: {sync * 1e3:.3f} ms")
    print(f"{'case':<40} {'per step':>11} {'overhead':>11} {'ratio':>9}")
    verdict = ""
    for label, fsync, rerun, one_write in rows:
        per = statistics.median(_durable(n, fsync, rerun, one_write) for _ in range(runs))
        over = per - bare
        print(f"{label:<40} {per * 1e3:>8.3f} ms {over * 1e3:>8.3f} ms {per / bare:>8.0f}x")
        if fsync == "batch" and not rerun and not one_write:
            verdict = f"target: <= {TARGET_MS:.1f} ms per step with fsync batch: {'met' if over * 1e3 <= TARGET_MS else 'NOT met'}"
    print(verdict)


if __name__ == "__main__":
    main()

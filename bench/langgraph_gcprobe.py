"""Where the slowest turns of bench.langgraph_production go: the garbage collector, the
commit thread, or the calls themselves.

Runs bench.langgraph_production's workload (one saver per fresh process, alternating,
--runs times) with `gc.callbacks` timing every collection, and reports per saver the
medians over the runs of: turn p99, turn p99 net of the collections that fell into the
turns, collections per generation, the full (generation 2) collections' total and
longest time, tracked objects at the end, and the CPU time of ckpt's commit thread.
With --async it runs bench.langgraph_async's 50 conversations instead and reports the
loop lag with the same collection counts.

    python -m bench.langgraph_gcprobe --runs 5
    python -m bench.langgraph_gcprobe --async --runs 5
    python -m bench.langgraph_gcprobe --variant old=ckpt@/path/to/old/checkout --variant new=ckpt --variant sqlite

A variant is NAME=SAVER[@CHECKOUT][,ENV=VALUE...]: SAVER is ckpt or sqlite (async-sqlite
with --async); CHECKOUT a source tree whose ckptcli is imported instead of this one's (two
builds interleaved, as bench/compare.py does); ENV=VALUE pairs are set in its processes.
GCPROBE_FREEZE=1 in a variant's environment runs `gc.collect(); gc.freeze()` once the
graph is compiled (what CkptSaver's `gc_freeze` does at its first put, for a saver without
it), GCPROBE_FREEZE=open before the saver is opened; GCPROBE_CKPT_OPTIONS='{"gc_freeze":
false}' opens CkptSaver with those options. tracked_end counts what a full collection walks
at the end, frozen_end what it skips (gc.freeze). With --async: ticks (how many the
ticker got in: fewer, longer turns of the loop), tick_loop_cpu_p99 (the loop thread's own
CPU time within a tick: its own work, where the rest of a late tick is waiting for the
interpreter or a core), executor_queue_p50 (jobs waiting for the loop's default executor,
where LangGraph runs synchronous nodes and CkptSaver its calls), backlog_waits (puts that
waited for ckpt's committer) and manifests (files the commits wrote).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import median, percentile, table

ROOT = Path(__file__).resolve().parent.parent


class GcClock:
    """Every collection's generation, start and end (perf_counter seconds)."""

    def __init__(self) -> None:
        import gc

        self.events: list[tuple[int, float, float]] = []
        self.collected: list[int] = []  # what each full collection freed
        self.cpu: list[float] = []  # each full collection's CPU time (of the thread it ran on)
        self._t0 = self._c0 = 0.0
        self._gen = 0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0, self._gen, self._c0 = time.perf_counter(), info["generation"], time.thread_time()
        else:
            self.events.append((self._gen, self._t0, time.perf_counter()))
            if self._gen == 2:
                self.collected.append(info["collected"])
                self.cpu.append(time.thread_time() - self._c0)

    def within(self, a: float, b: float, gen: int = 2) -> float:
        return sum(min(e, b) - max(s, a) for g, s, e in self.events if g >= gen and e > a and s < b)


def _thread_cpu(native_id: int) -> float:
    import os

    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_sync(kind: str, workdir: str, steps: int) -> dict[str, Any]:
    import gc
    import os

    from langgraph.types import Command

    from bench.langgraph_production import THREAD, _open, _timed, build_graph, human

    if os.environ.get("GCPROBE_FREEZE") == "open":
        gc.collect()
        gc.freeze()
    opts = json.loads(os.environ.get("GCPROBE_CKPT_OPTIONS", "{}"))
    if kind == "ckpt" and opts:  # CkptSaver's options, for a variant (module docstring)
        from ckptcli.adapters.langgraph.saver import CkptSaver

        saver = CkptSaver.open(Path(workdir) / ".ckpt", **opts)
        close = saver.close
    else:
        saver, close = _open(kind, Path(workdir))
    graph = build_graph().compile(checkpointer=saver)
    if os.environ.get("GCPROBE_FREEZE") == "1":  # what the process's own gc.freeze() after loading would do (a variant)
        gc.collect()
        gc.freeze()
    clock = GcClock()
    puts = _timed(saver)
    cfg = {"configurable": {"thread_id": THREAD}}
    calls: list[tuple[float, float]] = []
    k = 0
    cpu0 = time.process_time()
    while len(puts) < steps:
        k += 1
        t0 = time.perf_counter()
        out = graph.invoke(human(k), cfg, durability="sync")
        calls.append((t0, time.perf_counter()))
        while "__interrupt__" in out:
            t0 = time.perf_counter()
            out = graph.invoke(Command(resume="yes"), cfg, durability="sync")
            calls.append((t0, time.perf_counter()))
    cpu = time.process_time() - cpu0
    commit_cpu = _thread_cpu(saver._thread.native_id) if kind == "ckpt" else 0.0
    tracked = len(gc.get_objects())  # the objects a full collection walks (the frozen ones are not listed)
    frozen = gc.get_freeze_count()
    close()
    turns = [b - a for a, b in calls]
    net = [b - a - clock.within(a, b) for a, b in calls]
    full = [e - s for g, s, e in clock.events if g == 2]
    top = bool(os.environ.get("GCPROBE_TOP"))  # list the slowest calls too
    slow = sorted(range(len(turns)), key=lambda i: turns[i])[-max(1, len(turns) // 100) - (6 if top else 0) :]
    return {
        "turn_p50": percentile(turns, 50), "turn_p99": percentile(turns, 99), "net_p99": percentile(net, 99),
        "gc_in_slowest": sum(clock.within(*calls[i]) for i in slow) / max(1e-9, sum(turns[i] for i in slow)),
        "gen0": sum(1 for g, *_ in clock.events if g == 0), "gen1": sum(1 for g, *_ in clock.events if g == 1),
        "gen2": len(full), "gen2_total": sum(full), "gen2_cpu": sum(clock.cpu), "gen2_max": max(full, default=0.0),
        "top": [[i, round(turns[i] * 1000, 1), round(clock.within(*calls[i]) * 1000, 1)] for i in reversed(slow)] if top else [],
        "tracked_end": tracked, "frozen_end": frozen, "gen2_collected": sum(clock.collected), "cpu": cpu, "commit_cpu": commit_cpu,
        "put_p99": percentile(puts, 99),
    }  # fmt: skip


_ASYNC = r"""
import asyncio, json, sys, time, gc
sys.path.insert(0, {root!r})
from bench.langgraph_gcprobe import GcClock, _thread_cpu
if {build!r}:
    sys.path.insert(0, {build!r})
from typing import Annotated, TypedDict
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
saver_name, workdir, threads, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
class S(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
def turn(state):
    k = len(state["messages"])
    text = " ".join(f"word{{(k * 7 + i) % 97}}" for i in range(80))
    cls = HumanMessage if k % 2 == 0 else AIMessage
    return {{"messages": [cls(content=text, id=f"m-{{k}}")]}}
def route(state):
    return "turn" if len(state["messages"]) < steps else END
b = StateGraph(S)
b.add_node("turn", turn)
b.add_edge(START, "turn")
b.add_conditional_edges("turn", route, ["turn", END])
async def main():
    if saver_name == "ckpt":
        from ckptcli.adapters.langgraph.saver import CkptSaver
        import os
        saver = CkptSaver.open(workdir + "/store", **json.loads(os.environ.get("GCPROBE_CKPT_OPTIONS", "{{}}")))
    else:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        cm = AsyncSqliteSaver.from_conn_string(workdir + "/db.sqlite")
        saver = await cm.__aenter__()
    graph = b.compile(checkpointer=saver)
    clock = GcClock()
    lags, loop_cpu, queued, done = [], [], [], False
    async def ticker():
        while not done:
            t, c = time.perf_counter(), time.thread_time()
            await asyncio.sleep(0.001)
            e = time.perf_counter()
            lags.append((e - t - 0.001, clock.within(t, e, 0)))
            loop_cpu.append(time.thread_time() - c)  # the loop's own work within the tick (the rest: waiting)
            ex = asyncio.get_running_loop()._default_executor
            queued.append(ex._work_queue.qsize() if ex is not None else 0)  # jobs waiting for the default executor
    tick = asyncio.create_task(ticker())
    t0 = time.perf_counter()
    await asyncio.gather(*(graph.ainvoke({{"messages": []}}, {{"configurable": {{"thread_id": f"t{{i}}"}}, "recursion_limit": steps * 3}})
                           for i in range(threads)))
    wall = time.perf_counter() - t0
    done = True
    await tick
    commit_cpu = _thread_cpu(saver._thread.native_id) if saver_name == "ckpt" else 0.0
    waits = saver.backlog_waits if saver_name == "ckpt" else 0
    if saver_name == "ckpt":
        saver.close()
    else:
        await cm.__aexit__(None, None, None)
    ev = clock.events
    import os
    manifests = len(os.listdir(workdir + "/store/manifests")) if saver_name == "ckpt" else 0
    print(json.dumps({{"lags": [l for l, _ in lags], "gc": [g for _, g in lags], "wall": wall, "commit_cpu": commit_cpu,
                      "loop_cpu": loop_cpu, "queued": queued, "backlog_waits": waits, "manifests": manifests,
                      "gen": [sum(1 for g, *_ in ev if g == i) for i in range(3)],
                      "gen2_total": sum(e - s for g, s, e in ev if g == 2)}}))
asyncio.run(main())
"""


def child_async(kind: str, threads: int, steps: int, build: str = "", env: dict[str, str] | None = None) -> dict[str, Any]:
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix=f"bench-gcprobe-{kind}-") as work:
        out = subprocess.run(
            [sys.executable, "-c", _ASYNC.format(root=str(ROOT), build=build), kind, work, str(threads), str(steps)],
            capture_output=True, text=True, check=True, cwd=ROOT, env={**os.environ, **(env or {})},
        )  # fmt: skip
    d: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    lags, gcs = d["lags"], d["gc"]
    top = sorted(range(len(lags)), key=lambda i: lags[i])[-max(1, len(lags) // 100) :]
    return {
        "p50": median(lags), "p99": percentile(lags, 99), "max": max(lags), "wall": d["wall"],
        "gc_in_top1pct": sum(gcs[i] for i in top) / max(1e-9, sum(lags[i] for i in top)),
        "gen0": d["gen"][0], "gen1": d["gen"][1], "gen2": d["gen"][2], "gen2_total": d["gen2_total"], "commit_cpu": d["commit_cpu"],
        "ticks": len(lags), "tick_loop_cpu_p99": percentile(d["loop_cpu"], 99),
        "executor_queue_p50": median(d["queued"]), "backlog_waits": d["backlog_waits"], "manifests": d["manifests"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m bench.langgraph_gcprobe", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--async", dest="async_", action="store_true")
    ap.add_argument("--variant", action="append", default=[], help="NAME=SAVER[@CHECKOUT][,ENV=VALUE...] (module docstring)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    import os

    variants: dict[str, tuple[str, str, dict[str, str]]] = {}
    for spec in args.variant or (["ckpt", "async-sqlite"] if args.async_ else ["ckpt", "sqlite"]):
        name, _, rest = spec.partition("=") if "=" in spec.split(",")[0] else ("", "", spec)
        head, *envs = rest.split(",", 1)[0], *([rest.split(",", 1)[1]] if "," in rest else [])
        saver, _, build = head.partition("@")
        variants[name or saver] = (saver, build, dict(e.split("=", 1) for e in envs))  # one ENV=VALUE (a value may hold commas)
    kinds = tuple(variants)
    per: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for i in range(args.runs):
        for kind in kinds:
            saver, build, env = variants[kind]
            print(f"[gcprobe] run {i + 1}/{args.runs}: {kind}", file=sys.stderr, flush=True)
            if args.async_:
                per[kind].append(child_async(saver, 50, 40, build, env))
            else:
                with tempfile.TemporaryDirectory(prefix=f"bench-gcprobe-{kind}-") as d:
                    code = (
                        "import json, sys; import bench.langgraph_gcprobe, bench.langgraph_production; "
                        f"sys.path.insert(0, {build!r}) if {build!r} else None; from bench.langgraph_gcprobe import child_sync; "
                        f"print(json.dumps(child_sync({saver!r}, {d!r}, {args.steps})))"
                    )
                    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})
                    if out.returncode:
                        sys.stderr.write(out.stderr)
                        return 1
                    per[kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
    keys = list(per[kinds[0]][0])
    rows = [[k, *(f"{median([r[k] for r in per[kind]]):.4g}" for kind in kinds)] for k in keys if k != "top"]
    for kind in kinds:
        for r in per[kind]:
            if r.get("top"):
                print(f"{kind} slowest calls (index, ms, ms of full collections in it): {r['top']}")
    print(table(["figure (median)", *kinds], rows))
    for kind in kinds:
        for k in ("turn_p99", "p99"):
            if k in per[kind][0]:
                print(f"{kind} {k} per run: " + ", ".join(f"{r[k] * 1000:.1f}" for r in per[kind]) + " ms")
    if args.json:
        args.json.write_text(json.dumps(per, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

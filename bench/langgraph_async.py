"""How much a LangGraph checkpointer stalls the event loop of an async server.

An async LangGraph service runs many conversations on one event loop with `ainvoke`;
every `aput`, `aput_writes` and `aget_tuple` the graph awaits runs on that loop unless
the saver hands it to a thread. This runs --threads conversations of --steps ~500-byte
messages at once (the chat graph of bench/langgraph.py), on each saver in a fresh
process, while a ticker coroutine asks to wake every millisecond and records how late
it wakes: the loop lag every other request of the server would see.

Side by side, in the same run:

- CkptSaver (its async methods run on worker threads);
- AsyncSqliteSaver (LangGraph's; aiosqlite runs SQLite on a thread).

    python -m bench.langgraph_async                          # 50 conversations x 40 steps
    python -m bench.langgraph_async --threads 10 --steps 10  # a quick look

Prints the lag's median, p99 and maximum, and the wall time of the whole run, with the
ratio of ckpt to AsyncSqliteSaver (the target: p99 at most 2x).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import fmt_ratio, median, percentile, table, versions

SAVERS = ("ckpt", "async-sqlite")

_CHILD = r"""
import asyncio, json, sys, time
from typing import Annotated, Any, TypedDict
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

saver_name, workdir, threads, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

class S(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]

def turn(state):
    k = len(state["messages"])
    text = " ".join(f"word{(k * 7 + i) % 97}" for i in range(80))
    cls = HumanMessage if k % 2 == 0 else AIMessage
    return {"messages": [cls(content=text, id=f"m-{k}")]}

def route(state):
    return "turn" if len(state["messages"]) < steps else END

b = StateGraph(S)
b.add_node("turn", turn)
b.add_edge(START, "turn")
b.add_conditional_edges("turn", route, ["turn", END])

async def main():
    if saver_name == "ckpt":
        from ckptcli.adapters.langgraph.saver import CkptSaver
        saver = CkptSaver.open(workdir + "/store")
        closer = saver.close
    else:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        cm = AsyncSqliteSaver.from_conn_string(workdir + "/db.sqlite")
        saver = await cm.__aenter__()
        closer = None
    graph = b.compile(checkpointer=saver)
    lags, done = [], False

    async def ticker():
        while not done:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t - 0.001)

    tick = asyncio.create_task(ticker())
    t0 = time.perf_counter()
    await asyncio.gather(*(graph.ainvoke({"messages": []}, {"configurable": {"thread_id": f"t{i}"}, "recursion_limit": steps * 3})
                           for i in range(threads)))
    wall = time.perf_counter() - t0
    done = True
    await tick
    if closer is not None:
        closer()
    else:
        await cm.__aexit__(None, None, None)
    print(json.dumps({"lags": lags, "wall": wall}))

asyncio.run(main())
"""


def run(saver: str, threads: int, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-lg-async-{saver}-") as work:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, saver, work, str(threads), str(steps)], capture_output=True, text=True, check=True
        )
    data: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.langgraph_async", description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=50, help="conversations at once (default 50)")
    ap.add_argument("--steps", type=int, default=40, help="messages per conversation (default 40)")
    ap.add_argument("--runs", type=int, default=3, help="runs per saver, alternating (default 3); figures are medians over runs")
    ap.add_argument("--json", type=Path, help="write every figure to this file")
    args = ap.parse_args(argv)
    print(f"versions: {versions('ckptcli', 'langgraph', 'langgraph-checkpoint-sqlite', 'aiosqlite')}", flush=True)
    per: dict[str, list[dict[str, float]]] = {s: [] for s in SAVERS}
    for _ in range(args.runs):
        for s in SAVERS:
            r = run(s, args.threads, args.steps)
            lags = r["lags"]
            per[s].append({"p50": median(lags), "p99": percentile(lags, 99), "max": max(lags), "wall": r["wall"]})
    res = {s: {k: median([x[k] for x in per[s]]) for k in ("p50", "p99", "max", "wall")} for s in SAVERS}
    rows = [[s, *(f"{res[s][k] * 1000:.1f} ms" for k in ("p50", "p99", "max")), f"{res[s]['wall']:.2f} s"] for s in SAVERS]
    rows.append(
        ["ckpt / AsyncSqliteSaver", *(fmt_ratio(res["ckpt"][k] / res["async-sqlite"][k], 2) for k in ("p50", "p99", "max", "wall"))]
    )
    print(f"\nevent-loop lag, {args.threads} conversations x {args.steps} steps at once, medians of {args.runs} runs")
    print(table(["saver", "lag p50", "lag p99", "lag max", "wall"], rows))
    ok = res["ckpt"]["p99"] <= 2 * res["async-sqlite"]["p99"]
    print(f"\ntarget: ckpt's lag p99 <= 2x AsyncSqliteSaver's: {'pass' if ok else 'MISS'}")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "results": res, "runs": per}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

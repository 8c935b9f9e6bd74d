"""CkptSaver under a production-like load, side by side with SqliteSaver and AsyncSqliteSaver.

The workload is one long thread of a ReAct-like agent graph: a human message starts each
turn, a model node answers or asks for a tool call, an approval node stops the graph with
`interrupt()` until the turn is resumed with ``Command(resume=...)``, a tool node answers,
and on some turns a review subgraph stops once more with an interrupt of its own. Every
message is ~500 bytes (`bench.common.make_message`), kept with `add_messages`. 240 turns
make 1,000 steps (checkpoints put); `--steps` scales the turns with it.

Each saver runs in a fresh process of its own (so its RSS is its own), in the same run:

- CkptSaver with its defaults, and SqliteSaver (LangGraph's), on the thread above:
  put p50/p99/max (durability="sync": the puts run in the graph's thread, so their time is
  the saver's), turn p99 (one `invoke` or resume call), RSS growth at the end of the run
  (VmRSS after the run minus VmRSS after the imports and the compile, from
  /proc/self/status) and the peak (VmHWM minus the same baseline), `close()`, the store's
  bytes once closed (SQLite: its WAL folded in);
- a new process then opens the store and reads the thread's whole history with its
  values (`graph.get_state_history`), and another one its first `graph.get_state`; both
  times count opening the saver (not the imports);
- CkptSaver and AsyncSqliteSaver with 50 concurrent `ainvoke` conversations: the
  event-loop lag a ticker coroutine sees (the method of bench/langgraph_async.py).

    python -m bench.langgraph_production                 # 1,000 steps, 3 runs (~4 minutes)
    python -m bench.langgraph_production --quick         # 200 steps, 1 run: a quick look
    python -m bench.langgraph_production --json out.json --strict
    python -m bench.langgraph_production --async-only --runs 5   # the async row alone (~2 minutes)

Figures are medians over --runs (each run alternates the savers). The targets, printed
pass/miss: put p99 and turn p99 at most SqliteSaver's, RSS growth at most 64 MiB,
history after reopen at most 1.0x SqliteSaver's, the async lag p99 at most 2x
AsyncSqliteSaver's, store bytes at most 0.02x SqliteSaver's. `--strict` exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from bench import langgraph_async
from bench.common import dir_size, fmt_bytes, fmt_ms, make_message, median, percentile, ratio, table, versions

SAVERS = ("ckpt", "sqlite")
THREAD = "production"
STEPS_PER_TURN = 1000 / 240
MIB = 1024 * 1024
TARGETS = {"put_p99": 1.0, "turn_p99": 1.0, "rss_growth": 64 * MIB, "history": 1.0, "async_lag_p99": 2.0, "bytes": 0.02}
ROOT = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    print(f"[bench.langgraph_production] {msg}", file=sys.stderr, flush=True)


# -- the graph ------------------------------------------------------------------------
def build_graph() -> Any:
    """The agent graph (not compiled). Each turn's plan follows from its index k (the
    number of human messages so far): on two turns in seven the model asks for a tool call
    that needs an approval (an interrupt), on the others it answers at once; every twelfth
    turn the review subgraph stops for an approval of its own (another interrupt)."""
    import random

    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.types import interrupt

    state_t = TypedDict("state_t", {"messages": Annotated[list[AnyMessage], add_messages], "reviewed": int})  # type: ignore[misc]  # noqa: UP013 - annotations as objects
    review_t = TypedDict("review_t", {"messages": Annotated[list[AnyMessage], add_messages], "reviewed": int})  # type: ignore[misc]  # noqa: UP013

    def turn_of(state: dict[str, Any]) -> int:
        return sum(1 for m in state["messages"] if isinstance(m, HumanMessage))

    def text(state: dict[str, Any], salt: int) -> tuple[str, str]:
        n = len(state["messages"])
        m = make_message(random.Random(n * 31 + salt), n)
        return m["content"], m["id"]

    def model(state: dict[str, Any]) -> dict[str, Any]:
        k = turn_of(state)
        last = state["messages"][-1]
        content, mid = text(state, 1)
        if isinstance(last, HumanMessage) and k % 7 in (1, 4):
            call = {"name": "lookup", "args": {"q": content[:40]}, "id": f"call-{mid}", "type": "tool_call"}
            return {"messages": [AIMessage(content=content, tool_calls=[call], id=mid)]}
        return {"messages": [AIMessage(content=content, id=mid)]}

    def route_model(state: dict[str, Any]) -> str:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return "approve"
        return "review" if turn_of(state) % 12 == 0 else END

    def approve(state: dict[str, Any]) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        answer = interrupt({"question": f"run {call['name']}?", "args": call["args"]})
        return {"reviewed": state.get("reviewed", 0) + (1 if answer == "yes" else 0)}

    def tools(state: dict[str, Any]) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        content, mid = text(state, 2)
        return {"messages": [ToolMessage(content=content, tool_call_id=call["id"], name=call["name"], id=mid)]}

    def check(state: dict[str, Any]) -> dict[str, Any]:
        answer = interrupt({"question": "publish this answer?"})
        return {"reviewed": state.get("reviewed", 0) + (1 if answer == "yes" else 0)}

    rb: Any = StateGraph(review_t)
    rb.add_node("check", check)
    rb.add_edge(START, "check")
    rb.add_edge("check", END)

    b: Any = StateGraph(state_t)
    b.add_node("model", model)
    b.add_node("approve", approve)
    b.add_node("tools", tools)
    b.add_node("review", rb.compile())
    b.add_edge(START, "model")
    b.add_conditional_edges("model", route_model, ["approve", "review", END])
    b.add_edge("approve", "tools")
    b.add_edge("tools", "model")
    b.add_edge("review", END)
    return b


def human(k: int) -> dict[str, Any]:
    import random

    from langchain_core.messages import HumanMessage

    m = make_message(random.Random(k), k)
    return {"messages": [HumanMessage(content=m["content"], id=f"human-{k}")]}


def _status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in bytes."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0]) * 1024
    return out


# -- one saver, in a child process ----------------------------------------------------------
def _timed(saver: Any) -> list[float]:
    """Time every put of `saver` (an instance attribute: the class stays LangGraph's)."""
    times: list[float] = []
    put = saver.put

    def timed_put(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return put(*args, **kwargs)
        finally:
            times.append(time.perf_counter() - t0)

    saver.put = timed_put
    return times


def _open(kind: str, workdir: Path) -> tuple[Any, Any]:
    """(saver, close) of a saver on the store in `workdir`."""
    if kind == "ckpt":
        from ckptcli.adapters.langgraph.saver import CkptSaver

        saver = CkptSaver.open(workdir / ".ckpt")
        return saver, saver.close
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(workdir / "checkpoints.sqlite"), check_same_thread=False)
    sq = SqliteSaver(conn)
    sq.setup()

    def close() -> None:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()

    return sq, close


def child_run(kind: str, workdir: str, steps: int) -> dict[str, Any]:
    """The workload on one saver; the figures of the run."""
    from langgraph.types import Command

    work = Path(workdir)
    saver, close = _open(kind, work)
    graph = build_graph().compile(checkpointer=saver)
    base = _status()
    puts = _timed(saver)
    cfg = {"configurable": {"thread_id": THREAD}}
    turns: list[float] = []
    interrupts = 0
    k = 0
    while len(puts) < steps:
        k += 1
        t0 = time.perf_counter()
        out = graph.invoke(human(k), cfg, durability="sync")
        turns.append(time.perf_counter() - t0)
        while "__interrupt__" in out:
            interrupts += 1
            t0 = time.perf_counter()
            out = graph.invoke(Command(resume="yes"), cfg, durability="sync")
            turns.append(time.perf_counter() - t0)
    after = _status()
    uncommitted = len(getattr(saver, "_open", ()))
    t0 = time.perf_counter()
    close()
    closed = time.perf_counter() - t0
    size = dir_size(work)
    return {
        "steps": len(puts), "turns": k, "calls": len(turns), "interrupts": interrupts,
        "put_p50": percentile(puts, 50), "put_p99": percentile(puts, 99), "put_max": max(puts),
        "turn_p50": percentile(turns, 50), "turn_p99": percentile(turns, 99), "turn_max": max(turns),
        "rss_growth": after["VmRSS"] - base["VmRSS"], "peak_growth": after["VmHWM"] - base["VmRSS"],
        "rss_end": after["VmRSS"], "uncommitted_at_end": uncommitted, "close_s": closed, "bytes": size.apparent,
        "messages": len(out["messages"]),
    }  # fmt: skip


def child_reopen(kind: str, workdir: str, what: str) -> dict[str, Any]:
    """A new process: open the store, then the whole history (`what` = "history") or the
    first get_state ("state"); the time counts the opening."""
    if kind == "ckpt":
        import ckptcli.adapters.langgraph.saver  # noqa: F401 - the imports are not the saver's time
    else:
        import langgraph.checkpoint.sqlite  # noqa: F401
    builder = build_graph()
    t0 = time.perf_counter()
    saver, close = _open(kind, Path(workdir))
    graph = builder.compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": THREAD}}
    if what == "history":
        n = msgs = 0
        for snap in graph.get_state_history(cfg):
            n += 1
            msgs += len(snap.values.get("messages", ()))
        out = {"s": time.perf_counter() - t0, "snapshots": n, "messages": msgs}
    else:
        snap = graph.get_state(cfg)
        out = {"s": time.perf_counter() - t0, "messages": len(snap.values["messages"])}
    close()
    return out


def _in_child(call: str) -> dict[str, Any]:
    code = f"import json; from bench.langgraph_production import child_run, child_reopen; print(json.dumps({call}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"bench.langgraph_production: a child process failed ({call})")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run_saver(kind: str, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"ckpt-bench-prod-{kind}-") as d:
        r = _in_child(f"child_run({kind!r}, {d!r}, {steps})")
        h = _in_child(f"child_reopen({kind!r}, {d!r}, 'history')")
        s = _in_child(f"child_reopen({kind!r}, {d!r}, 'state')")
    r["history_s"], r["history_snapshots"], r["first_state_s"] = h["s"], h["snapshots"], s["s"]
    r["same_after_reopen"] = s["messages"] == r["messages"]
    return r


# -- the report ----------------------------------------------------------------------------------
def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Medians over the runs of every numeric figure."""
    out: dict[str, dict[str, float]] = {}
    for kind, rs in runs.items():
        keys = [k for k, v in rs[0].items() if isinstance(v, int | float) and not isinstance(v, bool)]
        out[kind] = {k: median([r[k] for r in rs]) for k in keys}
    return out


def checks(res: dict[str, dict[str, float]]) -> list[tuple[str, str, str, bool]]:
    """(check, value, target, ok) of every target (only the async one with --async-only)."""
    rows: list[tuple[str, str, str, bool]] = []
    if "ckpt" in res:
        rows = _sync_checks(res)
    if "ckpt-async" in res:
        v = ratio(res["ckpt-async"]["p99"], res["async-sqlite"]["p99"])
        rows.append(
            ("async loop-lag p99 vs AsyncSqliteSaver", f"{v:.2f}x", f"<= {TARGETS['async_lag_p99']}x", v <= TARGETS["async_lag_p99"])
        )
    return rows


def _sync_checks(res: dict[str, dict[str, float]]) -> list[tuple[str, str, str, bool]]:
    ck, sq = res["ckpt"], res["sqlite"]
    out = [
        ("put p99 vs SqliteSaver", ratio(ck["put_p99"], sq["put_p99"]), TARGETS["put_p99"]),
        ("turn p99 vs SqliteSaver", ratio(ck["turn_p99"], sq["turn_p99"]), TARGETS["turn_p99"]),
        ("history after reopen vs SqliteSaver", ratio(ck["history_s"], sq["history_s"]), TARGETS["history"]),
        ("store bytes vs SqliteSaver", ratio(ck["bytes"], sq["bytes"]), TARGETS["bytes"]),
    ]
    rows = [(name, f"{v:.3f}x", f"<= {t}x", v <= t) for name, v, t in out]
    rows.insert(
        2,
        (
            "RSS growth at the end of the run",
            fmt_bytes(ck["rss_growth"]),
            f"<= {fmt_bytes(TARGETS['rss_growth'])}",
            ck["rss_growth"] <= TARGETS["rss_growth"],
        ),
    )
    return rows


def render(res: dict[str, dict[str, float]], args: argparse.Namespace) -> str:
    lines = [] if "ckpt" in res else [f"the async row alone, medians of {args.runs} run(s)"]
    if "ckpt" in res:
        lines += _render_sync(res, args)
    if "ckpt-async" in res:
        a, s = res["ckpt-async"], res["async-sqlite"]
        lines += ["", f"event-loop lag, {args.async_threads} concurrent ainvoke conversations x {args.async_steps} steps"]
        arows = [
            [n, *(f"{x[k] * 1000:.1f} ms" for k in ("p50", "p99", "max")), f"{x['wall']:.2f} s"]
            for n, x in (("CkptSaver", a), ("AsyncSqliteSaver", s))
        ]
        arows.append(["ckpt / AsyncSqliteSaver", *(f"{ratio(a[k], s[k]):.2f}" for k in ("p50", "p99", "max", "wall"))])
        lines.append(table(["saver", "lag p50", "lag p99", "lag max", "wall"], arows))
        per_run = {k: ", ".join(f"{x['p99'] * 1000:.1f}" for x in v) for k, v in args.async_runs.items()}
        lines.append(f"lag p99 per run: ckpt {per_run['ckpt-async']} ms; AsyncSqliteSaver {per_run['async-sqlite']} ms")
    lines += ["", table(["target", "value", "target", "result"], [[n, v, t, "pass" if ok else "MISS"] for n, v, t, ok in checks(res)])]
    if "ckpt" in res:
        lines.append(f"\nckpt: {res['ckpt']['uncommitted_at_end']:.0f} checkpoints not committed at the end of the run (before close)")
    return "\n".join(lines)


def _render_sync(res: dict[str, dict[str, float]], args: argparse.Namespace) -> list[str]:
    ck = res["ckpt"]
    lines = [
        f"a {ck['steps']:.0f}-step thread of {ck['turns']:.0f} turns ({ck['calls']:.0f} invoke/resume calls, "
        f"{ck['interrupts']:.0f} interrupts), "
        f"medians of {args.runs} run(s)",
        "",
    ]
    rows = []
    for kind, name in (("ckpt", "CkptSaver"), ("sqlite", "SqliteSaver")):
        x = res[kind]
        rows.append([
            name, fmt_ms(x["put_p50"]), fmt_ms(x["put_p99"]), fmt_ms(x["put_max"]), fmt_ms(x["turn_p99"]), fmt_bytes(x["rss_growth"]),
            fmt_bytes(x["peak_growth"]), fmt_ms(x["close_s"]), fmt_ms(x["history_s"]), fmt_ms(x["first_state_s"]), fmt_bytes(x["bytes"]),
        ])  # fmt: skip
    rows.append([
        "ckpt / SqliteSaver",
        *(
            f"{ratio(ck[k], res['sqlite'][k]):.2f}"
            for k in ("put_p50", "put_p99", "put_max", "turn_p99", "rss_growth", "peak_growth", "close_s", "history_s", "first_state_s")
        ),
        f"{ratio(ck['bytes'], res['sqlite']['bytes']):.4f}",
    ])  # fmt: skip
    heads = [
        "saver",
        "put p50",
        "put p99",
        "put max",
        "turn p99",
        "RSS growth",
        "peak growth",
        "close",
        "history reopen",
        "1st get_state",
        "store bytes",
    ]
    lines.append(table(heads, rows))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.langgraph_production", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1000, help="checkpoints put on the thread (default 1000, in 240 turns)")
    ap.add_argument("--runs", type=int, default=3, help="runs per saver, alternating (default 3); figures are medians")
    ap.add_argument("--quick", action="store_true", help="200 steps, 1 run, 10 async conversations of 10 steps: checks the harness")
    ap.add_argument("--no-async", action="store_true", help="skip the async row")
    ap.add_argument("--async-only", action="store_true", help="only the async row (the 50 conversations on each async saver)")
    ap.add_argument("--json", type=Path, metavar="PATH", help="also write every figure to this file")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args(argv)
    args.async_threads, args.async_steps = 50, 40
    if args.quick:
        args.steps, args.runs, args.async_threads, args.async_steps = 200, 1, 10, 10
    if args.steps < 10 or args.runs < 1:
        ap.error("--steps must be >= 10 and --runs >= 1")
    if args.async_only and args.no_async:
        ap.error("--async-only and --no-async exclude each other")
    info = versions("ckptcli", "langgraph", "langgraph-checkpoint-sqlite", "aiosqlite")
    log(f"versions: {info}")
    t_all = time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {} if args.async_only else {s: [] for s in SAVERS}
    for i in range(args.runs):
        for kind in () if args.async_only else SAVERS:
            log(f"run {i + 1}/{args.runs}: {kind}, {args.steps} steps")
            runs[kind].append(run_saver(kind, args.steps))
        if not args.no_async:
            for kind, name in (("ckpt", "ckpt-async"), ("async-sqlite", "async-sqlite")):
                log(f"run {i + 1}/{args.runs}: {name}, {args.async_threads} conversations")
                r = langgraph_async.run(kind, args.async_threads, args.async_steps)
                lags = r["lags"]
                runs.setdefault(name, []).append({"p50": median(lags), "p99": percentile(lags, 99), "max": max(lags), "wall": r["wall"]})
    res = summarize(runs)
    args.async_runs = {k: runs[k] for k in ("ckpt-async", "async-sqlite") if k in runs}
    print(render(res, args))
    print(f"\ntotal {time.perf_counter() - t_all:.0f} s; " + ", ".join(f"{k} {v}" for k, v in info.items()))
    ok = all(row[3] for row in checks(res))
    if args.json:
        args.json.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "versions": info, "results": res, "runs": runs}, indent=2)
            + "\n"
        )
        log(f"wrote {args.json}")
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())

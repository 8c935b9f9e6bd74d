"""ckpt as a LangGraph checkpointer, side by side with SqliteSaver and SqliteSaver + DeltaChannel.

The same real graph runs on each saver: a 1,000-step conversation in which one node
appends one ~500-byte chat message per step to a `messages` channel (plain
`add_messages`; for DeltaChannel, `DeltaChannel(_messages_delta_reducer)`, LangGraph's
own message reducer for it). Measured, for each saver, in the same run:

- store bytes after the run (ckpt: the store directory once the saver is closed;
  SqliteSaver: the database once its WAL is folded in);
- put latency, p50 and p99 over every `put` of the run (durability="sync": the puts run
  in the graph's own thread, so the time is the saver's alone), each saver with its
  defaults (ckpt: fsync="batch"; an info run gives ckpt with fsync="always");
- listing the whole thread (`list(saver.list(thread))`), median of --runs;
- `get_tuple` of the checkpoint in the middle of the history, values read, median of
  --runs (and `graph.get_state` of it, which for DeltaChannel replays the writes);
- after reopen (ckpt and SqliteSaver, the saver closed, each read in a fresh process
  that opens the store or database again): the first `graph.get_state`, listing the
  thread reading every checkpoint's values, and the whole `graph.get_state_history`.

    python -m bench.langgraph                      # 1,000 steps, ~5 minutes (--no-reopen: ~1)
    python -m bench.langgraph --steps 200 --runs 1 # a quick look
    python -m bench.langgraph --json results.json

Targets: ckpt stores at most 1% of SqliteSaver's bytes and at most half of
DeltaChannel's; put p50 at most 1 ms and p99 at most 5 ms; listing the thread at most
0.1 s; the whole history after reopen in at most SqliteSaver's time. See
bench/README.md and docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from bench.common import dir_size, fmt_bytes, fmt_ms, fmt_ratio, make_message, median, percentile, ratio, table, verdict, versions
from bench.common import workdir as made

THREAD = "bench"
TARGETS = {"ratio_sqlite": 0.01, "ratio_delta": 0.5, "put_p50_s": 0.001, "put_p99_s": 0.005, "list_s": 0.1, "reopen_history_ratio": 1.0}
REOPEN_READS = ("get_state", "list_values", "history")  # each in a fresh process, in this order
SAVERS = ("ckpt", "sqlite", "sqlite+delta")


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def build_graph(steps: int, seed: int, delta: bool) -> Any:
    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
    from langgraph.channels.delta import DeltaChannel
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import _messages_delta_reducer, add_messages

    # the functional form: the annotations are objects, not strings to resolve in this module
    plain = TypedDict("plain", {"messages": Annotated[list[AnyMessage], add_messages]})  # type: ignore[misc]  # noqa: UP013 - see above
    with_delta = TypedDict("with_delta", {"messages": Annotated[list[AnyMessage], DeltaChannel(_messages_delta_reducer)]})  # type: ignore[misc]  # noqa: UP013

    rng = random.Random(seed)

    def turn(state: dict[str, Any]) -> dict[str, Any]:
        k = len(state["messages"])
        m = make_message(rng, k)
        cls = HumanMessage if k % 2 == 0 else AIMessage
        return {"messages": [cls(content=m["content"], id=m["id"])]}

    def route(state: dict[str, Any]) -> str:
        return "turn" if len(state["messages"]) < steps else END

    b: Any = StateGraph(with_delta if delta else plain)
    b.add_node("turn", turn)
    b.add_edge(START, "turn")
    b.add_conditional_edges("turn", route, ["turn", END])
    return b


def _timed(cls: type) -> type:
    """A subclass of a saver class whose put records how long each call took."""

    class Timed(cls):  # type: ignore[valid-type, misc]
        put_times: list[float]

        def put(self, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return super().put(*args, **kwargs)
            finally:
                self.put_times.append(time.perf_counter() - t0)

    return Timed


def open_saver(kind: str, workdir: Path, fsync: str | None = None) -> tuple[Any, Callable[[], dict[str, Any]], dict[str, Any]]:
    """(saver, close-and-measure, settings)."""
    if kind == "ckpt":
        from ckptcli.adapters.langgraph.saver import CkptSaver

        store = workdir / kind / ".ckpt"
        saver = _timed(CkptSaver).open(store, **({"fsync": fsync} if fsync else {}))
        saver.put_times = []

        def close_ckpt() -> dict[str, Any]:
            before = dir_size(store)
            t0 = time.perf_counter()
            saver.close()
            closed = time.perf_counter() - t0
            size = dir_size(store)
            return {
                "bytes": size.apparent,
                "allocated": size.allocated,
                "parts": size.parts,
                "bytes_before_close": before.apparent,
                "close_s": closed,
            }

        return saver, close_ckpt, {"fsync": saver.fsync, "commit_interval_s": saver.commit_interval}
    from langgraph.checkpoint.sqlite import SqliteSaver

    (workdir / kind).mkdir(parents=True)
    db = workdir / kind / "checkpoints.sqlite"
    conn = sqlite3.connect(str(db), check_same_thread=False)
    saver = _timed(SqliteSaver)(conn)
    saver.put_times = []
    saver.setup()
    settings = {
        "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
        "synchronous": conn.execute("PRAGMA synchronous").fetchone()[0],
    }

    def close_sqlite() -> dict[str, Any]:
        before = dir_size(db.parent)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        size = dir_size(db.parent)
        return {"bytes": size.apparent, "allocated": size.allocated, "parts": size.parts, "bytes_before_close": before.apparent}

    return saver, close_sqlite, settings


def run(kind: str, steps: int, seed: int, runs: int, workdir: Path, durability: str = "sync", fsync: str | None = None) -> dict[str, Any]:
    saver, close, settings = open_saver(kind, workdir, fsync)
    graph = build_graph(steps, seed, delta=kind == "sqlite+delta").compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": THREAD}, "recursion_limit": steps + 10}
    t0 = time.perf_counter()
    final = graph.invoke({"messages": []}, cfg, durability=durability)
    wall = time.perf_counter() - t0
    puts = list(saver.put_times)
    out: dict[str, Any] = {"saver": kind, "steps": steps, "durability": durability, "settings": settings, "wall_s": wall, "puts": len(puts)}
    out["put"] = {"p50_s": percentile(puts, 50), "p99_s": percentile(puts, 99), "max_s": max(puts), "mean_s": sum(puts) / len(puts)}
    thread = {"configurable": {"thread_id": THREAD}}
    list_times, listed = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        listed = list(saver.list(thread))
        list_times.append(time.perf_counter() - t0)
    out["checkpoints"] = len(listed)
    out["list_s"] = median(list_times)
    mid = listed[len(listed) // 2].config
    get_times, get_state_times = [], []
    mid_messages: Any = None
    for _ in range(runs):
        t0 = time.perf_counter()
        tup = saver.get_tuple(mid)
        mid_messages = tup.checkpoint["channel_values"].get("messages")
        get_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        state = graph.get_state(mid)
        get_state_times.append(time.perf_counter() - t0)
    out["get_tuple_mid_s"] = median(get_times)
    out["get_state_mid_s"] = median(get_state_times)
    out["mid_state_messages"] = len(state.values["messages"])
    out["mid_tuple_messages"] = len(mid_messages) if isinstance(mid_messages, list) else None
    # what listing costs when every listed state is read as well (SqliteSaver decodes them all in list)
    t0 = time.perf_counter()
    for tup in saver.list(thread):
        tup.checkpoint["channel_values"].get("messages")
    out["list_and_read_values_s"] = time.perf_counter() - t0
    out["final_messages"] = [(type(m).__name__, m.id, m.content) for m in final["messages"]]
    out["mid_values"] = [(type(m).__name__, m.id, m.content) for m in state.values["messages"]]
    out.update(close())
    return out


def store_path(kind: str, workdir: Path) -> Path:
    return workdir / kind / (".ckpt" if kind == "ckpt" else "checkpoints.sqlite")


def reopened_read(kind: str, path: Path, what: str, steps: int, seed: int) -> dict[str, Any]:
    """One read of a closed saver's thread, in this process: open the store (database)
    again, then time `what` (REOPEN_READS)."""
    t0 = time.perf_counter()
    if kind == "ckpt":
        from ckptcli.adapters.langgraph.saver import CkptSaver

        saver: Any = CkptSaver(path)
        close = saver.close
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(str(path), check_same_thread=False)
        saver = SqliteSaver(conn)
        close = conn.close
    graph = build_graph(steps, seed, delta=False).compile(checkpointer=saver)
    opened = time.perf_counter() - t0
    thread = {"configurable": {"thread_id": THREAD}}
    t0 = time.perf_counter()
    if what == "get_state":
        items = len(graph.get_state(thread).values["messages"])
        checkpoints = 1
    elif what == "list_values":
        counts = [len(tup.checkpoint["channel_values"].get("messages", [])) for tup in saver.list(thread)]
        items, checkpoints = sum(counts), len(counts)
    else:
        counts = [len(snap.values.get("messages", [])) for snap in graph.get_state_history(thread)]
        items, checkpoints = sum(counts), len(counts)
    took = time.perf_counter() - t0
    close()
    return {"open_s": opened, "s": took, "items": items, "checkpoints": checkpoints}


def reopened(kind: str, workdir: Path, steps: int, seed: int) -> dict[str, Any]:
    """Every REOPEN_READS of a closed saver's thread, each in a fresh process."""
    out: dict[str, Any] = {}
    for what in REOPEN_READS:
        cmd = [
            sys.executable,
            "-m",
            "bench.langgraph",
            "--reopened",
            kind,
            str(store_path(kind, workdir)),
            what,
            "--steps",
            str(steps),
            "--seed",
            str(seed),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parent.parent)
        if done.returncode != 0:
            raise RuntimeError(f"reading {kind} after reopen failed: {done.stderr.strip()[-2000:]}")
        out[what] = json.loads(done.stdout)
        log(f"{kind} after reopen: {what} {out[what]['s']:.3f} s")
    return out


def render(res: dict[str, Any]) -> str:
    r = res["results"]
    ck, sq, de = r["ckpt"], r["sqlite"], r["sqlite+delta"]
    lines = [f"ckpt vs LangGraph savers: a {res['steps']}-step conversation graph, one ~500-byte message per step (seed {res['seed']})", ""]
    rows = []
    for name, x in (("ckpt (CkptSaver)", ck), ("SqliteSaver", sq), ("SqliteSaver + DeltaChannel", de)):
        rows.append([
            name, f"{x['checkpoints']:,}", f"{x['bytes']:,}", fmt_bytes(x["bytes"]), f"{x['bytes'] / res['steps']:,.0f}",
            fmt_ms(x["put"]["p50_s"]), fmt_ms(x["put"]["p99_s"]), f"{x['list_s']:.3f} s",
            fmt_ms(x["get_tuple_mid_s"]), fmt_ms(x["get_state_mid_s"]),
        ])  # fmt: skip
    headers = [
        "saver",
        "checkpoints",
        "store bytes",
        "",
        "bytes/step",
        "put p50",
        "put p99",
        "list thread",
        "get_tuple mid",
        "get_state mid",
    ]
    lines.append(table(headers, rows, align="lrrrrrrrrr"))
    lines.append("")
    c = res["checks"]
    crow = [
        [
            "ckpt / SqliteSaver bytes",
            fmt_ratio(c["ratio_sqlite"]),
            f"<= {TARGETS['ratio_sqlite']}",
            verdict(c["ratio_sqlite"] <= TARGETS["ratio_sqlite"]),
        ],
        [
            "ckpt / DeltaChannel bytes",
            fmt_ratio(c["ratio_delta"], 3),
            f"<= {TARGETS['ratio_delta']}",
            verdict(c["ratio_delta"] <= TARGETS["ratio_delta"]),
        ],
        ["ckpt put p50", fmt_ms(ck["put"]["p50_s"]), "<= 1 ms", verdict(ck["put"]["p50_s"] <= TARGETS["put_p50_s"])],
        ["ckpt put p99", fmt_ms(ck["put"]["p99_s"]), "<= 5 ms", verdict(ck["put"]["p99_s"] <= TARGETS["put_p99_s"])],
        ["ckpt list whole thread", f"{ck['list_s']:.3f} s", "<= 0.1 s", verdict(ck["list_s"] <= TARGETS["list_s"])],
        ["states equal across savers", "yes" if c["states_equal"] else "NO", "yes", verdict(c["states_equal"])],
    ]
    if "reopen_history_ratio" in c:
        x = c["reopen_history_ratio"]
        crow.insert(
            -1,
            [
                "history after reopen / SqliteSaver's",
                fmt_ratio(x, 2),
                f"<= {TARGETS['reopen_history_ratio']}",
                verdict(x <= TARGETS["reopen_history_ratio"]),
            ],
        )
    lines.append(table(["check", "value", "target", "result"], crow, align="lrrl"))
    lines.append("")
    lines.append(
        f"ckpt: fsync={ck['settings']['fsync']}, commit every {ck['settings']['commit_interval_s']} s; store by part: "
        + ", ".join(f"{k} {v['bytes']:,} B in {v['files']} files" for k, v in sorted(ck["parts"].items(), key=lambda kv: -kv[1]["bytes"]))
        + f"; {ck['bytes_before_close']:,} B before close (journal included), close {ck['close_s'] * 1000:.0f} ms"
    )
    lines.append(
        f"SqliteSaver: journal_mode={sq['settings']['journal_mode']} synchronous={sq['settings']['synchronous']}; "
        f"files before the WAL fold {sq['bytes_before_close']:,} B"
    )
    lines.append(
        "list and read every listed state: "
        + ", ".join(
            f"{n} {r[k]['list_and_read_values_s']:.2f} s"
            for n, k in (("ckpt", "ckpt"), ("SqliteSaver", "sqlite"), ("DeltaChannel", "sqlite+delta"))
        )
        + " (ckpt's list decodes a checkpoint's values when they are first read; SqliteSaver's decodes them all;"
        " DeltaChannel's checkpoints hold no messages, get_state replays the writes)"
    )
    if "reopened" in ck and "reopened" in sq:
        lines.append("")
        lines.append("after reopen: the saver closed, each read in a fresh process that opens the store again (open time not included)")
        rrows = []
        for what, name in (
            ("get_state", "first graph.get_state"),
            ("list_values", "list thread, every state read"),
            ("history", "graph.get_state_history, whole"),
        ):
            a, b = ck["reopened"][what], sq["reopened"][what]
            rrows.append(
                [name, f"{a['s']:.3f} s", f"{b['s']:.3f} s", fmt_ratio(ratio(a["s"], b["s"]), 2), f"{a['items']:,} / {b['items']:,}"]
            )
        lines.append(table(["read", "ckpt", "SqliteSaver", "ckpt / SqliteSaver", "messages read"], rrows, align="lrrrr"))
        lines.append(
            f"opening: ckpt {ck['reopened']['get_state']['open_s'] * 1000:.0f} ms, "
            f"SqliteSaver {sq['reopened']['get_state']['open_s'] * 1000:.0f} ms (the graph compiled too)"
        )
    lines.append(
        "put mean: "
        + ", ".join(
            f"{n} {fmt_ms(r[k]['put']['mean_s'])}"
            for n, k in (("ckpt", "ckpt"), ("SqliteSaver", "sqlite"), ("DeltaChannel", "sqlite+delta"))
        )
    )
    if "ckpt_always" in res:
        x = res["ckpt_always"]
        lines.append(
            f'ckpt with fsync="always" (each put synced before it returns, as SqliteSaver\'s synchronous=FULL): '
            f"put p50 {fmt_ms(x['put']['p50_s'])} p99 {fmt_ms(x['put']['p99_s'])} mean {fmt_ms(x['put']['mean_s'])}, {x['bytes']:,} B"
        )
    if "ckpt_async" in res:
        a, s = res["ckpt_async"], res["sqlite_async"]
        lines.append(
            'with LangGraph\'s default durability="async" (puts on a worker thread while the next step runs, '
            "so they wait for the GIL too): "
            f"ckpt put p50 {fmt_ms(a['put']['p50_s'])} p99 {fmt_ms(a['put']['p99_s'])}, "
            f"SqliteSaver p50 {fmt_ms(s['put']['p50_s'])} p99 {fmt_ms(s['put']['p99_s'])}"
        )
    lines.append(f"total wall time {res['total_wall_s']:.1f} s; " + ", ".join(f"{k} {v}" for k, v in res["versions"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.langgraph", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--steps", type=int, default=1000, help="messages in the conversation (default 1000)")
    ap.add_argument("--runs", type=int, default=3, help="repeats of the list and get_tuple timings (default 3; medians)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the generated messages (default 1)")
    ap.add_argument("--no-async", action="store_true", help="skip the info runs with LangGraph's default async durability")
    ap.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    ap.add_argument("--workdir", metavar="DIR", help="where the stores go (default: a new temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the stores after the run")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument(
        "--no-reopen", action="store_true", help="skip the reads after reopen (each in a fresh process; ~2 minutes at 1,000 steps)"
    )
    ap.add_argument(
        "--reopened", nargs=3, metavar=("KIND", "PATH", "READ"), help=argparse.SUPPRESS
    )  # one read after reopen (this is the fresh process)
    args = ap.parse_args(argv)
    if args.reopened:
        kind, path, what = args.reopened
        print(json.dumps(reopened_read(kind, Path(path), what, args.steps, args.seed)))
        return 0
    if args.steps < 10 or args.runs < 1:
        ap.error("--steps must be >= 10 and --runs >= 1")
    workdir = made(args.workdir) or Path(tempfile.mkdtemp(prefix="ckpt-bench-lg-"))
    log(f"stores in {workdir}")
    t_all = time.perf_counter()
    res: dict[str, Any] = {
        "benchmark": "langgraph",
        "steps": args.steps,
        "seed": args.seed,
        "versions": versions(
            "ckptcli", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "ormsgpack", "msgpack", "zstandard"
        ),
        "results": {},
    }
    try:
        for kind in SAVERS:
            log(f"{kind}: {args.steps} steps")
            res["results"][kind] = run(kind, args.steps, args.seed, args.runs, workdir)
            if kind != "sqlite+delta" and not args.no_reopen:
                res["results"][kind]["reopened"] = reopened(kind, workdir, args.steps, args.seed)
        log('ckpt with fsync="always" (info)')
        res["ckpt_always"] = run("ckpt", args.steps, args.seed, 1, workdir / "always", fsync="always")
        if not args.no_async:
            log("async durability (info): ckpt, SqliteSaver")
            res["ckpt_async"] = run("ckpt", args.steps, args.seed, 1, workdir / "async", durability="async")
            res["sqlite_async"] = run("sqlite", args.steps, args.seed, 1, workdir / "async", durability="async")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    res["total_wall_s"] = time.perf_counter() - t_all
    r = res["results"]
    ck = r["ckpt"]
    states_equal = all(r[k]["final_messages"] == ck["final_messages"] and r[k]["mid_values"] == ck["mid_values"] for k in SAVERS)
    res["checks"] = {
        "ratio_sqlite": ratio(ck["bytes"], r["sqlite"]["bytes"]),
        "ratio_delta": ratio(ck["bytes"], r["sqlite+delta"]["bytes"]),
        "states_equal": states_equal,
    }
    if "reopened" in ck:
        res["checks"]["reopen_history_ratio"] = ratio(ck["reopened"]["history"]["s"], r["sqlite"]["reopened"]["history"]["s"])
        res["checks"]["reopen_items_equal"] = all(ck["reopened"][w]["items"] == r["sqlite"]["reopened"][w]["items"] for w in REOPEN_READS)
        states_equal = states_equal and res["checks"]["reopen_items_equal"]
        res["checks"]["states_equal"] = states_equal
    ok = (
        res["checks"]["ratio_sqlite"] <= TARGETS["ratio_sqlite"]
        and res["checks"]["ratio_delta"] <= TARGETS["ratio_delta"]
        and ck["put"]["p50_s"] <= TARGETS["put_p50_s"]
        and ck["put"]["p99_s"] <= TARGETS["put_p99_s"]
        and ck["list_s"] <= TARGETS["list_s"]
        and states_equal
        and res["checks"].get("reopen_history_ratio", 0) <= TARGETS["reopen_history_ratio"]
    )
    res["checks"]["all_ok"] = ok
    for x in [*r.values(), res.get("ckpt_always", {}), res.get("ckpt_async", {}), res.get("sqlite_async", {})]:
        x.pop("final_messages", None)
        x.pop("mid_values", None)
    print(render(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, default=str) + "\n")
        log(f"wrote {args.json}")
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())

"""A long agent history: ckpt's incremental store against LangGraph's SqliteSaver.

Each step appends one ~500-byte message and one ~250-byte tool-call record to the
agent's state and takes a checkpoint of the whole state. After N steps we compare the
bytes each store holds for the same N states, and how ckpt's store grows from N to
the --grow size.

    python -m bench.history                       # 1,000 steps, growth to 4,000
    python -m bench.history --steps 200 --grow 800 --graph-steps 50 --json out.json

Targets: at 1,000 steps ckpt stores at most 1% of SqliteSaver's bytes,
and 4x the steps grows ckpt's store at most 4.5x (for other sizes: 1.125 x the step ratio).
See bench/README.md for what is measured and how to read it.
"""

from __future__ import annotations

import argparse
import json
import operator
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from bench.common import (
    data_profile,
    dir_size,
    fmt_bytes,
    fmt_ms,
    fmt_ratio,
    iter_steps,
    median,
    percentile,
    ratio,
    table,
    verdict,
    versions,
)
from bench.common import workdir as made
from ckptcli import api  # imported up front: the source digest in the report is of the code measured

SUBJECT = "agent:bench"
THREAD = "bench"
RATIO_TARGET = 0.01
GROWTH_SLACK = 1.125  # 4.5x for 4x the steps
CURVE_POINTS = 8  # store size is sampled this many times during a run


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _curve_steps(steps: int, extra: int = 0) -> set[int]:
    points = {max(1, round(steps * k / CURVE_POINTS)) for k in range(1, CURVE_POINTS + 1)}
    if 0 < extra <= steps:
        points.add(extra)
    return points


def _op_stats(times: list[float]) -> dict[str, float]:
    tail = times[-100:]
    return {
        "median_s": median(times),
        "p99_s": percentile(times, 99),
        "max_s": max(times) if times else float("nan"),
        "first100_median_s": median(times[:100]),
        "last100_median_s": median(tail),
        "sum_s": sum(times),
    }


def _progress(what: str, steps: int) -> Callable[[int], None]:
    marks = {max(1, steps * k // 10) for k in range(1, 11)}
    t0 = time.perf_counter()

    def tick(step: int) -> None:
        if step in marks:
            log(f"{what}: {step}/{steps} steps, {time.perf_counter() - t0:.1f} s")

    return tick


# -- ckpt ------------------------------------------------------------------------------


def run_ckpt(steps: int, seed: int, workdir: Path, sample_also: int = 0) -> dict[str, Any]:
    """Take `steps` checkpoints of a growing agent state into a fresh ckpt store."""
    store_dir = workdir / f"ckpt-{steps}"
    store = api.init_store(store_dir)
    state: dict[str, Any] = {"memory": {"messages": [], "step": 0}, "tools": []}
    messages: list[Any] = state["memory"]["messages"]
    tools: list[Any] = state["tools"]
    times: list[float] = []
    new_bytes: list[int] = []
    new_objects: list[int] = []
    curve: list[dict[str, int]] = []
    sample_at = _curve_steps(steps, sample_also)
    tick = _progress(f"ckpt {steps}", steps)
    wall0 = time.perf_counter()
    measuring = 0.0
    for step, msg, tool in iter_steps(steps, seed):
        messages.append(msg)
        tools.append(tool)
        state["memory"]["step"] = step
        t0 = time.perf_counter()
        res = api.take(store, state, subject=SUBJECT)
        times.append(time.perf_counter() - t0)
        new_bytes.append(res.new_bytes)
        new_objects.append(res.new_objects)
        if step in sample_at:
            m0 = time.perf_counter()
            curve.append({"step": step, "apparent": dir_size(store_dir).apparent})
            measuring += time.perf_counter() - m0
        tick(step)
    wall = time.perf_counter() - wall0 - measuring
    store.close()
    size = dir_size(store_dir)

    # Sanity: the newest checkpoint restores to exactly the state we took.
    t0 = time.perf_counter()
    reopened = api.open_store(store_dir)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    restored = api.open_checkpoint(SUBJECT, store=reopened).state()
    restore_s = time.perf_counter() - t0
    reopened.close()
    restored_ok = api.states_equal(restored, state)
    checkpoints = size.parts.get("manifests", {}).get("files", 0)
    return {
        "store": "ckpt",
        "steps": steps,
        "checkpoints": checkpoints,
        "size": size.to_dict(),
        "bytes": size.apparent,
        "allocated": size.allocated,
        "curve": curve,
        "take": _op_stats(times),
        "wall_s": wall,
        "new_stored_bytes_median": median(new_bytes),
        "new_objects_median": median(new_objects),
        "open_store_s": open_s,
        "restore_latest_s": restore_s,
        "restored_equal": restored_ok,
        "path": str(store_dir),
    }


# -- LangGraph SqliteSaver ----------------------------------------------------------------


def _open_saver(path: Path) -> tuple[Any, sqlite3.Connection]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(path), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    return saver, conn


def _db_logical_bytes(conn: sqlite3.Connection) -> int:
    """Bytes the database occupies once the WAL is folded in (page_count * page_size)."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int(pages) * int(page_size)


def _close_db(conn: sqlite3.Connection, db_dir: Path) -> dict[str, Any]:
    """Fold the WAL into the database, close, and measure: before and after."""
    before = dir_size(db_dir)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    after = dir_size(db_dir)
    return {"before_close": before.to_dict(), "after_close": after.to_dict(), "size": after}


def _blob_stats(db: Path) -> dict[str, Any]:
    """Per-checkpoint blob sizes in checkpoint order (ids are uuid6, monotonic), plus writes."""
    conn = sqlite3.connect(str(db))
    try:
        rows = conn.execute(
            "SELECT length(checkpoint), length(metadata), metadata FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id",
            (THREAD,),
        ).fetchall()
        writes = conn.execute("SELECT count(*), coalesce(sum(length(value)), 0) FROM writes").fetchone()
    finally:
        conn.close()
    per = []
    for ck_len, md_len, md in rows:
        step = json.loads(md).get("step") if md else None
        per.append({"step": step, "checkpoint": ck_len or 0, "metadata": md_len or 0})
    return {"checkpoints": per, "writes_rows": writes[0], "writes_bytes": writes[1]}


def run_sqlite(steps: int, seed: int, workdir: Path, sample_also: int = 0) -> dict[str, Any]:
    """Put the same `steps` states into SqliteSaver as checkpoints of one thread,
    built the way the Pregel loop builds them (base helpers, rising channel versions,
    each put chained to the config the previous put returned)."""
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    db_dir = workdir / "sqlite"
    db_dir.mkdir()
    db = db_dir / "checkpoints.sqlite"
    saver, conn = _open_saver(db)
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
    config: dict[str, Any] = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    messages: list[Any] = []
    tools: list[Any] = []
    channels = ("messages", "tools", "step")
    times: list[float] = []
    curve: list[dict[str, int]] = []
    sample_at = _curve_steps(steps, sample_also)
    tick = _progress(f"SqliteSaver {steps}", steps)
    wall0 = time.perf_counter()
    measuring = 0.0
    for step, msg, tool in iter_steps(steps, seed):
        messages.append(msg)
        tools.append(tool)
        t0 = time.perf_counter()
        versions = dict(checkpoint["channel_versions"])
        new_versions = {ch: saver.get_next_version(versions.get(ch), None) for ch in channels}
        versions.update(new_versions)
        nxt = dict(checkpoint)
        # Channel values are what BinaryOperatorAggregate(list, operator.add).checkpoint()
        # returns: the whole accumulated list, every time.
        nxt["channel_values"] = {"messages": messages, "tools": tools, "step": step}
        nxt["channel_versions"] = versions
        nxt["versions_seen"] = {"agent": {ch: versions[ch] for ch in channels}}
        checkpoint = create_checkpoint(nxt, None, step)  # type: ignore[arg-type]
        checkpoint["updated_channels"] = list(channels)
        meta = {"source": "loop", "step": step, "parents": {}}
        config = saver.put(config, checkpoint, meta, new_versions)
        times.append(time.perf_counter() - t0)
        if step in sample_at:
            m0 = time.perf_counter()
            curve.append({"step": step, "apparent": _db_logical_bytes(conn)})
            measuring += time.perf_counter() - m0
        tick(step)
    wall = time.perf_counter() - wall0 - measuring

    # Sanity: the newest checkpoint reads back as the state we put.
    t0 = time.perf_counter()
    latest = saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
    restore_s = time.perf_counter() - t0
    values = latest.checkpoint["channel_values"] if latest else {}
    restored_ok = values.get("messages") == messages and values.get("tools") == tools and values.get("step") == steps
    closed = _close_db(conn, db_dir)
    size = closed["size"]
    blobs = _blob_stats(db)
    return {
        "store": "SqliteSaver",
        "steps": steps,
        "checkpoints": len(blobs["checkpoints"]),
        "size": size.to_dict(),
        "size_before_close": closed["before_close"],
        "bytes": size.apparent,
        "allocated": size.allocated,
        "curve": curve,
        "put": _op_stats(times),
        "wall_s": wall,
        "checkpoint_blob_bytes": sum(c["checkpoint"] for c in blobs["checkpoints"]),
        "metadata_bytes": sum(c["metadata"] for c in blobs["checkpoints"]),
        "per_checkpoint_blob_bytes": [c["checkpoint"] for c in blobs["checkpoints"]],
        "writes_rows": blobs["writes_rows"],
        "writes_bytes": blobs["writes_bytes"],
        "journal_mode": journal,
        "synchronous": synchronous,
        "restore_latest_s": restore_s,
        "restored_equal": restored_ok,
        "path": str(db),
    }


class _GraphState(TypedDict):
    messages: Annotated[list[Any], operator.add]
    tools: Annotated[list[Any], operator.add]
    step: int


def run_graph(steps: int, seed: int, workdir: Path) -> dict[str, Any]:
    """Cross-check: a real StateGraph (one node appending to two operator.add list
    channels, looping on itself) checkpointed by SqliteSaver, `steps` supersteps."""
    from langgraph.graph import END, START, StateGraph

    data = {step: (msg, tool) for step, msg, tool in iter_steps(steps, seed)}

    def agent(state: _GraphState) -> dict[str, Any]:
        step = state["step"] + 1
        msg, tool = data[step]
        return {"messages": [msg], "tools": [tool], "step": step}

    def route(state: _GraphState) -> str:
        return "agent" if state["step"] < steps else END

    builder = StateGraph(_GraphState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["agent", END])
    db_dir = workdir / "sqlite-graph"
    db_dir.mkdir()
    db = db_dir / "checkpoints.sqlite"
    saver, conn = _open_saver(db)
    graph = builder.compile(checkpointer=saver)
    t0 = time.perf_counter()
    final = graph.invoke(
        {"messages": [], "tools": [], "step": 0},
        {"configurable": {"thread_id": THREAD}, "recursion_limit": steps + 10},
    )
    wall = time.perf_counter() - t0
    restored_ok = len(final["messages"]) == steps and final["messages"] == [data[s][0] for s in range(1, steps + 1)]
    size = _close_db(conn, db_dir)["size"]
    blobs = _blob_stats(db)
    return {
        "store": "SqliteSaver via StateGraph",
        "steps": steps,
        "checkpoints": len(blobs["checkpoints"]),
        "bytes": size.apparent,
        "allocated": size.allocated,
        "wall_s": wall,
        "checkpoint_blob_bytes": sum(c["checkpoint"] for c in blobs["checkpoints"]),
        "metadata_bytes": sum(c["metadata"] for c in blobs["checkpoints"]),
        "per_checkpoint": blobs["checkpoints"],
        "writes_rows": blobs["writes_rows"],
        "writes_bytes": blobs["writes_bytes"],
        "restored_equal": restored_ok,
    }


def graph_crosscheck(graph: dict[str, Any], direct: dict[str, Any]) -> dict[str, Any]:
    """Compare the graph's checkpoints of agent steps 1..k with the direct puts of states 1..k."""
    k = graph["steps"]
    graph_state_bytes = sum(c["checkpoint"] for c in graph["per_checkpoint"] if isinstance(c["step"], int) and 1 <= c["step"] <= k)
    direct_state_bytes = sum(direct["per_checkpoint_blob_bytes"][:k])
    direct_db_at_k = next((p["apparent"] for p in direct["curve"] if p["step"] == k), None)
    return {
        "steps": k,
        "graph_state_blob_bytes": graph_state_bytes,
        "direct_state_blob_bytes": direct_state_bytes,
        "state_blob_ratio": ratio(graph_state_bytes, direct_state_bytes),
        "graph_total_blob_bytes": graph["checkpoint_blob_bytes"] + graph["metadata_bytes"] + graph["writes_bytes"],
        "graph_db_bytes": graph["bytes"],
        "direct_db_bytes_at_k": direct_db_at_k,
    }


# -- report --------------------------------------------------------------------------------


def _source_state() -> dict[str, str]:
    """Which ckptcli source was measured: the commit, and a digest of uncommitted changes to it."""
    import hashlib
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        diff = subprocess.run(["git", "diff", "HEAD", "--", "ckptcli"], cwd=root, capture_output=True, check=True).stdout
        untracked = subprocess.run(
            ["git", "ls-files", "--others", "--exclude-standard", "--", "ckptcli"], cwd=root, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "ckptcli_changes": "unknown"}
    if not diff and not untracked:
        return {"commit": head, "ckptcli_changes": "none"}
    return {"commit": head, "ckptcli_changes": "uncommitted, diff sha256 " + hashlib.sha256(diff + untracked).hexdigest()[:12]}


def _b(n: int) -> str:
    return f"{n:,} ({fmt_bytes(n)})"


def render(res: dict[str, Any]) -> str:
    base, grow, sq, graph = res["ckpt"], res.get("ckpt_grow"), res["sqlite"], res.get("graph")
    lines = [
        f"ckpt vs LangGraph SqliteSaver: agent history, one ~{res['data']['message_json_bytes']:.0f}-byte message "
        f"+ one ~{res['data']['tool_json_bytes']:.0f}-byte tool record per step (JSON sizes), seed {res['seed']}",
        "",
    ]
    runs = [(f"ckpt {base['steps']}", base)]
    if grow:
        runs.append((f"ckpt {grow['steps']}", grow))
    runs.append((f"SqliteSaver {sq['steps']}", sq))
    if graph:
        runs.append((f"StateGraph+SqliteSaver {graph['steps']}", graph))
    rows = [
        [label, r["steps"], r["checkpoints"], _b(r["bytes"]), _b(r["allocated"]), f"{r['bytes'] / r['steps']:,.0f}"] for label, r in runs
    ]
    lines.append(table(["store", "steps", "checkpoints", "bytes (apparent)", "allocated (du)", "bytes/step"], rows))
    lines.append("")

    trows = [[f"ckpt take ({base['steps']})", *_trow(base["take"], base["wall_s"])]]
    if grow:
        trows.append([f"ckpt take ({grow['steps']})", *_trow(grow["take"], grow["wall_s"])])
    trows.append([f"SqliteSaver put ({sq['steps']})", *_trow(sq["put"], sq["wall_s"])])
    lines.append(table(["per checkpoint", "median", "p99", "median first 100", "median last 100", "run wall time"], trows))
    lines.append("")

    c = res["checks"]
    crow = [
        ["ckpt / SqliteSaver bytes", f"{base['steps']} steps", fmt_ratio(c["ratio"]), f"<= {RATIO_TARGET}", verdict(c["ratio_ok"])],
    ]
    if grow:
        crow.append(
            [
                "ckpt growth",
                f"{base['steps']} -> {grow['steps']}",
                f"{c['growth']:.3f}x",
                f"<= {c['growth_target']:.3g}x",
                verdict(c["growth_ok"]),
            ]
        )
    if "ratio_graph" in c:
        crow.append(["ckpt / StateGraph+SqliteSaver bytes", f"{base['steps']} steps", fmt_ratio(c["ratio_graph"]), "(info)", ""])
    crow.append(["ckpt / SqliteSaver allocated", f"{base['steps']} steps", fmt_ratio(c["ratio_allocated"]), "(info)", ""])
    crow.append(["ckpt take / SqliteSaver put", "median time", f"{c['time_ratio']:.2f}x", "(info)", ""])
    restored = f"ckpt {_yes(c['ckpt_restored'])}, SqliteSaver {_yes(c['sqlite_restored'])}"
    crow.append(["restored state == last state", "", restored, "yes", verdict(c["restored_ok"])])
    lines.append(table(["check", "at", "value", "target", "result"], crow, align="lllrl"))

    parts = base["size"]["parts"]
    lines.append("")
    lines.append(
        f"ckpt {base['steps']}-step store by part: "
        + ", ".join(f"{k} {v['bytes']:,} B in {v['files']} files" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]["bytes"]))
        + "; locks/ and tmp/ hold no bytes"
    )
    lines.append(
        f"ckpt per take: median {base['new_stored_bytes_median']:,.0f} B of new objects ({base['new_objects_median']:.0f} objects); "
        f"open the store and restore the newest checkpoint {(base['open_store_s'] + base['restore_latest_s']) * 1000:.0f} ms"
    )
    lines.append(
        f"SqliteSaver: journal_mode={sq['journal_mode']} synchronous={sq['synchronous']}; "
        f"checkpoint blobs {sq['checkpoint_blob_bytes']:,} B, "
        f"metadata {sq['metadata_bytes']:,} B; last state's blob {sq['per_checkpoint_blob_bytes'][-1]:,} B; "
        f"files before close {sq['size_before_close']['apparent']:,} B (db+wal+shm)"
    )
    if grow:
        lines.append("ckpt store size during the grow run: " + ", ".join(f"{p['step']}: {fmt_bytes(p['apparent'])}" for p in grow["curve"]))
    lines.append(
        "SqliteSaver size during its run (page_count x page_size): "
        + ", ".join(f"{p['step']}: {fmt_bytes(p['apparent'])}" for p in sq["curve"])
    )
    if graph:
        x = res["graph_check"]
        lines.append(
            f"cross-check, real StateGraph ({x['steps']} supersteps, {graph['checkpoints']} checkpoints, "
            f"{graph['writes_rows']} writes rows, {graph['wall_s']:.1f} s): "
            f"state blobs for steps 1..{x['steps']} {x['graph_state_blob_bytes']:,} B vs direct puts {x['direct_state_blob_bytes']:,} B "
            f"(ratio {x['state_blob_ratio']:.3f}); graph db {x['graph_db_bytes']:,} B vs direct db at step {x['steps']} "
            f"{_num(x['direct_db_bytes_at_k'])} B; graph restored {_yes(graph['restored_equal'])}"
        )
    lines.append(
        f"total wall time {res['total_wall_s']:.1f} s; " + ", ".join(f"{k} {v}" for k, v in res["versions"].items() if k != "platform")
    )
    lines.append(f"ckptcli source: commit {res['source']['commit']}, changes to ckptcli/: {res['source']['ckptcli_changes']}")
    return "\n".join(lines)


def _num(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def _trow(stats: dict[str, float], wall: float) -> list[str]:
    return [
        fmt_ms(stats["median_s"]),
        fmt_ms(stats["p99_s"]),
        fmt_ms(stats["first100_median_s"]),
        fmt_ms(stats["last100_median_s"]),
        f"{wall:.1f} s",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1000, help="steps of the compared history (default 1000)")
    ap.add_argument("--grow", type=int, default=4000, help="steps of the ckpt growth run (default 4000; 0 skips it)")
    ap.add_argument(
        "--graph-steps", type=int, default=None, help="supersteps of the real-StateGraph cross-check (default: --steps; 0 skips it)"
    )
    ap.add_argument("--seed", type=int, default=1, help="seed of the generated data (default 1)")
    ap.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    ap.add_argument("--workdir", metavar="DIR", help="where the stores go (default: a new temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the stores after the run")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args(argv)
    if args.graph_steps is None:
        args.graph_steps = args.steps
    if args.steps < 1 or args.grow < 0 or args.graph_steps < 0:
        ap.error("--steps must be >= 1, --grow and --graph-steps >= 0")
    if args.graph_steps > args.steps:
        ap.error("--graph-steps must not exceed --steps (it is compared with the direct puts)")

    if args.workdir:
        workdir = made(args.workdir)
        assert workdir is not None
        if any(workdir.iterdir()):
            ap.error(f"--workdir {workdir} is not empty")
    else:
        workdir = Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    log(f"stores in {workdir}")
    t_all = time.perf_counter()
    res: dict[str, Any] = {
        "benchmark": "history",
        "command": "python -m bench.history " + " ".join(sys.argv[1:] if argv is None else argv),
        "seed": args.seed,
        "source": _source_state(),
        "versions": versions(
            "ckptcli", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "ormsgpack", "msgpack", "zstandard"
        ),
        "data": data_profile(seed=args.seed),
    }
    try:
        log(f"SqliteSaver: {args.steps} direct puts")
        res["sqlite"] = run_sqlite(args.steps, args.seed, workdir, sample_also=args.graph_steps)
        if args.graph_steps:
            log(f"StateGraph + SqliteSaver: {args.graph_steps} supersteps")
            res["graph"] = run_graph(args.graph_steps, args.seed, workdir)
            res["graph_check"] = graph_crosscheck(res["graph"], res["sqlite"])
        log(f"ckpt: {args.steps} takes")
        res["ckpt"] = run_ckpt(args.steps, args.seed, workdir)
        if args.grow:
            log(f"ckpt: {args.grow} takes")
            res["ckpt_grow"] = run_ckpt(args.grow, args.seed, workdir, sample_also=args.steps)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    res["total_wall_s"] = time.perf_counter() - t_all

    base, sq, grow = res["ckpt"], res["sqlite"], res.get("ckpt_grow")
    checks: dict[str, Any] = {
        "ratio": ratio(base["bytes"], sq["bytes"]),
        "ratio_target": RATIO_TARGET,
        "ratio_allocated": ratio(base["allocated"], sq["allocated"]),
        "time_ratio": ratio(base["take"]["median_s"], sq["put"]["median_s"]),
        "ckpt_restored": base["restored_equal"] and (grow["restored_equal"] if grow else True),
        "sqlite_restored": sq["restored_equal"],
    }
    graph = res.get("graph")
    if graph and graph["steps"] == base["steps"]:
        checks["ratio_graph"] = ratio(base["bytes"], graph["bytes"])
    checks["ratio_ok"] = checks["ratio"] <= RATIO_TARGET
    checks["restored_ok"] = checks["ckpt_restored"] and checks["sqlite_restored"]
    if grow:
        checks["growth"] = ratio(grow["bytes"], base["bytes"])
        checks["growth_target"] = GROWTH_SLACK * grow["steps"] / base["steps"]
        checks["growth_ok"] = checks["growth"] <= checks["growth_target"]
    checks["all_ok"] = checks["ratio_ok"] and checks["restored_ok"] and checks.get("growth_ok", True)
    res["checks"] = checks

    print(render(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, default=str) + "\n")
        log(f"wrote {args.json}")
    return 1 if args.strict and not checks["all_ok"] else 0


if __name__ == "__main__":
    sys.exit(main())

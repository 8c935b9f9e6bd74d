"""LangGraph's long-term memory store: CkptStore vs InMemoryStore and SqliteStore.

Side by side, in the same process and run, on the same items (~250-byte values under
10 user namespaces):

- CkptStore with fsync="always" (the default: a put that returned survives a power cut)
  and with fsync="never" (it survives a killed process);
- SqliteStore (langgraph-checkpoint-sqlite; a file database, each put its own commit);
- InMemoryStore (LangGraph's; nothing is persisted: the floor).

    python -m bench.langgraph_store                  # 2,000 items, 3 runs
    python -m bench.langgraph_store --items 500 --runs 1

Each op is timed one call at a time: put (new items), get, search (a user's namespace,
a filter, limit 10), list_namespaces. Prints per-call medians and p99 over every call
of every run, and the ratios of ckpt (fsync="always") to SqliteStore and InMemoryStore.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import fmt_ratio, median, percentile, table, versions

STORES = ("ckpt", "ckpt-never", "sqlite", "in-memory")
OPS = ("put", "get", "search", "list_namespaces")


@contextmanager
def open_store(name: str, work: Path) -> Iterator[Any]:
    if name.startswith("ckpt"):
        from ckptcli.adapters.langgraph.store import CkptStore

        s = CkptStore.open(work / ".ckpt", fsync="never" if name == "ckpt-never" else "always")
        try:
            yield s
        finally:
            s.close()
    elif name == "sqlite":
        from langgraph.store.sqlite import SqliteStore

        with SqliteStore.from_conn_string(str(work / "store.sqlite")) as s:
            s.setup()
            yield s
    else:
        from langgraph.store.memory import InMemoryStore

        yield InMemoryStore()


def value(rng: random.Random, i: int) -> dict[str, Any]:
    words = " ".join(f"w{rng.randrange(500)}" for _ in range(30))
    return {"text": f"fact {i}: {words}", "kind": rng.choice(["pref", "fact", "event"]), "score": rng.random(), "i": i}


def timed(fn: Callable[[], Any], out: list[float]) -> Any:
    t = time.perf_counter()
    r = fn()
    out.append(time.perf_counter() - t)
    return r


def run(name: str, items: int, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    times: dict[str, list[float]] = {op: [] for op in OPS}
    with tempfile.TemporaryDirectory(prefix=f"bench-lgstore-{name}-") as work, open_store(name, Path(work)) as s:
        keys = [(("users", f"u{i % 10}", "memories"), f"k{i}") for i in range(items)]
        for i, (ns, key) in enumerate(keys):
            timed(lambda ns=ns, key=key, v=value(rng, i): s.put(ns, key, v), times["put"])
        for ns, key in rng.sample(keys, len(keys)):
            got = timed(lambda ns=ns, key=key: s.get(ns, key), times["get"])
            assert got is not None
        for q in range(max(50, items // 10)):
            ns = ("users", f"u{q % 10}", "memories")
            timed(lambda ns=ns: s.search(ns, filter={"kind": "pref", "score": {"$gt": 0.3}}, limit=10), times["search"])
        for _ in range(50):
            timed(lambda: s.list_namespaces(prefix=("users",), max_depth=2), times["list_namespaces"])
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.langgraph_store", description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=2000, help="items put per run (default 2,000)")
    ap.add_argument("--runs", type=int, default=3, help="runs per store, alternating (default 3)")
    ap.add_argument("--json", type=Path, help="write every figure to this file")
    args = ap.parse_args(argv)
    print(f"versions: {versions('ckptcli', 'langgraph', 'langgraph-checkpoint', 'langgraph-checkpoint-sqlite')}", flush=True)
    calls: dict[str, dict[str, list[float]]] = {s: {op: [] for op in OPS} for s in STORES}
    for r in range(args.runs):
        for s in STORES:
            for op, ts in run(s, args.items, seed=r).items():
                calls[s][op].extend(ts)
    res = {s: {op: {"p50": median(calls[s][op]), "p99": percentile(calls[s][op], 99)} for op in OPS} for s in STORES}
    rows = [[s, *(f"{res[s][op]['p50'] * 1e6:.0f} / {res[s][op]['p99'] * 1e6:.0f} us" for op in OPS)] for s in STORES]
    for peer in ("sqlite", "in-memory"):
        rows.append([f"ckpt / {peer} (p50)", *(fmt_ratio(res["ckpt"][op]["p50"] / res[peer][op]["p50"], 2) for op in OPS)])
    print(f"\nper call, p50 / p99, {args.items} items x {args.runs} runs")
    print(table(["store", *OPS], rows))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "results": res}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What deleting LangGraph threads costs as the store grows: `CkptSaver.delete_thread` in
stores of N threads, and a TTL sweep (`sweep_ttl`) of N expired threads beside N live ones.

    python -m bench.langgraph_delete                     # 100, 400 and 1,500 threads
    python -m bench.langgraph_delete --threads 200 --deletes 3

Each thread is a two-turn conversation (3 checkpoints). delete_thread is timed one call
at a time, `--deletes` calls per store (median and max), with a get_tuple of another
thread timed from a second Python thread meanwhile (max: how long a reader waited).
The sweep is timed once per store. A delete's cost should not grow with N (it reads
what it deletes; the objects are collected later); a sweep's should grow with N, not N².
The peer, in the same run: LangGraph's SqliteSaver.delete_thread on the same threads
(one DELETE per table; SQLite's indexes make it O(the thread's rows)); the ratio column
is ckpt's median over SqliteSaver's.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from typing import Any

from bench.common import median, table


def _store(n: int, clock: Any, ttl: dict[str, Any] | None = None) -> Any:
    from ckptcli.adapters.langgraph.saver import CkptSaver
    from tests.langgraph_graphs import chat_builder

    saver = CkptSaver.open(tempfile.mkdtemp(prefix="ckpt-bench-delete-"), clock=clock, ttl=ttl)
    graph = chat_builder(2).compile(checkpointer=saver)
    for i in range(n):
        graph.invoke({"messages": []}, {"configurable": {"thread_id": f"t{i}"}})
    return saver, graph


def sqlite_delete(n: int, deletes: int) -> float:
    """SqliteSaver's median delete_thread in a database of the same `n` threads."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    from tests.langgraph_graphs import chat_builder

    conn = sqlite3.connect(tempfile.mkdtemp(prefix="ckpt-bench-delete-sqlite-") + "/db.sqlite", check_same_thread=False)
    saver = SqliteSaver(conn)
    graph = chat_builder(2).compile(checkpointer=saver)
    for i in range(n + 1):
        graph.invoke({"messages": []}, {"configurable": {"thread_id": f"t{i}"}})
    took: list[float] = []
    for i in range(deletes):
        t = time.perf_counter()
        saver.delete_thread(f"t{i}")
        took.append(time.perf_counter() - t)
    conn.close()
    return median(took)


def bench_delete(n: int, deletes: int) -> list[Any]:
    peer = sqlite_delete(n, deletes)
    saver, _graph = _store(n + 1, time.time_ns)
    saver.flush()
    waits: list[float] = []
    stop = threading.Event()

    def reader() -> None:
        cfg = {"configurable": {"thread_id": f"t{n}"}}
        while not stop.is_set():
            t = time.perf_counter()
            saver.get_tuple(cfg)
            waits.append(time.perf_counter() - t)
            time.sleep(0.002)

    th = threading.Thread(target=reader)
    th.start()
    took: list[float] = []
    try:
        for i in range(deletes):
            t = time.perf_counter()
            saver.delete_thread(f"t{i}")
            took.append(time.perf_counter() - t)
    finally:
        stop.set()
        th.join()
        saver.close()
    return [
        f"delete_thread, {n:,} threads", f"{median(took) * 1000:.1f} ms", f"{max(took) * 1000:.1f} ms", f"{max(waits) * 1000:.0f} ms",
        f"{peer * 1000:.1f} ms", f"{median(took) / peer:.1f}x",
    ]  # fmt: skip


def bench_sweep(n: int) -> list[Any]:
    offset = [0]
    saver, graph = _store(n, lambda: time.time_ns() + offset[0], {"default_ttl": 60, "sweep_interval_minutes": 10**6, "sweep_limit": 10**6})
    offset[0] = 3 * 3600 * 10**9
    for i in range(n):
        graph.invoke({"messages": []}, {"configurable": {"thread_id": f"live{i}"}})
    saver.flush()
    try:
        t = time.perf_counter()
        swept = saver.sweep_ttl()
        took = time.perf_counter() - t
    finally:
        saver.close()
    assert len(swept) == n, (len(swept), n)
    return [f"sweep_ttl, {n:,} expired of {2 * n:,}", f"{took:.2f} s", "", "", "", ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.langgraph_delete", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--threads", type=int, nargs="+", default=[100, 400, 1500], help="store sizes (threads)")
    ap.add_argument("--deletes", type=int, default=5, help="delete_thread calls timed per store")
    args = ap.parse_args(argv)
    rows = [bench_delete(n, args.deletes) for n in args.threads]
    rows += [bench_sweep(n) for n in args.threads]
    print(table(["what", "median", "max", "reader's max wait", "SqliteSaver median", "ckpt / SqliteSaver"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

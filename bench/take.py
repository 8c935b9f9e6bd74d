"""The library take of a growing agent state: `ckptcli.take` at 1,000 and 4,000 steps, with
the take cache, without it, and (with --old) by another build of ckpt, in one run.

    python -m bench.take                                  # 1,000 and 4,000 steps, 50 takes each
    python -m bench.take --old /tmp/ckpt-main --dir /dev/shm
    python -m bench.take --steps 4000 --profile           # and a cProfile of the cached takes

The state is bench.history's: each step appends one ~500-byte message to
memory.messages and one ~300-byte tool record to tools. For each size a store is filled
first (--fill history: one checkpoint per step, as an agent's store holds them; --fill
one: a single checkpoint of the whole state), then copied once per build, so every build
starts from the same store. Each build runs in a process of its own (the other build's
ckptcli on PYTHONPATH for --old), takes the state once (not counted: a new process's
first take encodes everything, cache or not), then its share of --takes, each after
appending a step; the builds take turns (--rounds processes each, on fresh copies), and
the median, p90 and minimum of all their takes are reported, with the median CPU time of
a take (the process's user + system time, which other load on the machine moves less
than the wall time). The rows:

- `cached`: this build, `take(...)` (the take cache on, the default);
- `uncached`: this build, `take(..., cache=False)`: every item encoded and hashed;
- `old`: the build at --old, `take(...)` as it stands there.

Under the `cached` row, the least the take cache's exact check costs: each worker packs
the final state's two long lists with the cache's packer, objects hot in the CPU's caches
(a take meets them colder), and the median of the workers' medians is printed with what
is left of the take beside it.

--dir puts the stores there: on a disk every take also waits for its fsyncs (about five
files), on a tmpfs (/dev/shm) it does not, which is the library's own cost. A
measurement, not a test: the figures depend on the machine and on what else runs on it.
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
SUBJECT = "agent:bench"


def _state(steps: int) -> tuple[dict[str, Any], Any]:
    """The state after `steps` steps, and the iterator of the steps after it."""
    from bench.common import iter_steps

    it = iter_steps(10**9, 1)
    state: dict[str, Any] = {"memory": {"messages": [], "step": 0}, "tools": []}
    for _ in range(steps):
        _step(state, next(it))
    return state, it


def _step(state: dict[str, Any], step: tuple[int, dict[str, Any], dict[str, Any]]) -> None:
    n, msg, tool = step
    state["memory"]["messages"].append(msg)
    state["tools"].append(tool)
    state["memory"]["step"] = n


def worker(store_dir: Path, steps: int, takes: int, mode: str, profile: bool) -> dict[str, Any]:
    """In this process: open the store, take the `steps`-step state once, then `takes`
    times after one more step each; the times of those."""
    import ckptcli

    kwargs: dict[str, Any] = {"cache": False} if mode == "uncached" else {}
    store = ckptcli.open_store(store_dir)
    state, it = _state(steps)
    t0 = time.perf_counter()
    ckptcli.take(store, state, subject=SUBJECT, **kwargs)
    first = time.perf_counter() - t0
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
    times = []
    cpu = []
    for _ in range(takes):
        _step(state, next(it))
        t0 = time.perf_counter()
        c0 = time.process_time()
        if prof is not None:
            prof.enable()
        ckptcli.take(store, state, subject=SUBJECT, **kwargs)
        if prof is not None:
            prof.disable()
        cpu.append(time.process_time() - c0)
        times.append(time.perf_counter() - t0)
    if prof is not None:
        import pstats

        print(f"cProfile of {takes} takes at {steps} steps ({mode}), by cumulative time:", file=sys.stderr)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    store.close()
    return {"first_s": first, "times_s": times, "cpu_s": cpu, "ckptcli": ckptcli.__file__, "check_s": _check_alone(state)}


def _check_alone(state: dict[str, Any]) -> float | None:
    """Median seconds of what the take cache's exact check costs at least: packing the
    state's two long lists with its packer (msgpack, exact types), nothing else, with the
    objects hot in the CPU's caches (a take meets them colder). None for a build without
    the take cache."""
    try:
        from ckptcli.format.takecache import _packer
    except ImportError:
        return None
    packer = _packer()
    lists = [state["memory"]["messages"], state["tools"]]
    times = []
    for _ in range(21):
        t0 = time.perf_counter()
        for v in lists:
            packer.pack(v)
            packer.reset()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def fill(store_dir: Path, steps: int, how: str) -> float:
    """A store holding the `steps`-step history (one checkpoint a step, or one of the
    whole state), taken by this build with its cache; returns the seconds it took."""
    import ckptcli

    store = ckptcli.init_store(store_dir)
    t0 = time.perf_counter()
    if how == "one":
        ckptcli.take(store, _state(steps)[0], subject=SUBJECT)
    else:
        state, it = _state(0)
        for _ in range(steps):
            _step(state, next(it))
            ckptcli.take(store, state, subject=SUBJECT)
    store.close()
    return time.perf_counter() - t0


def _run_worker(build: Path, store_dir: Path, steps: int, takes: int, mode: str, profile: bool) -> dict[str, Any]:
    env = dict(os.environ)
    # the build's ckptcli first; this bench's own helpers (bench.common) after it
    env["PYTHONPATH"] = os.pathsep.join([str(build), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    argv = [sys.executable, str(HERE), "--worker", str(store_dir), "--steps", str(steps), "--takes", str(takes), "--mode", mode]
    if profile:
        argv.append("--profile")
    out = subprocess.run(argv, env=env, check=True, stdout=subprocess.PIPE, text=True, cwd=store_dir.parent)
    return dict(json.loads(out.stdout))


def _stats(times: list[float]) -> tuple[float, float, float]:
    s = sorted(times)
    return s[len(s) // 2], s[min(len(s) - 1, (len(s) * 9) // 10)], s[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.take", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--steps", default="1000,4000", help="sizes of the history, comma-separated (default 1000,4000)")
    ap.add_argument("--takes", type=int, default=50, help="takes measured per size and build (default 50)")
    ap.add_argument("--rounds", type=int, default=5, help="the builds take turns this many times, each a process (default 5)")
    ap.add_argument("--fill", choices=["history", "one"], default="history", help="what the store holds before (default history)")
    ap.add_argument("--old", type=Path, help="the root of another build of ckpt (a checkout) to run beside this one")
    ap.add_argument("--dir", type=Path, help="where the stores go (default: the system's temporary directory)")
    ap.add_argument("--no-uncached", action="store_true", help="leave out the row without the cache")
    ap.add_argument("--profile", action="store_true", help="then a cProfile of the cached takes at the largest size (a run of its own)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="cached", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(args.worker, int(args.steps), args.takes, args.mode, args.profile)))
        return 0
    sizes = [int(s) for s in str(args.steps).split(",")]
    builds: list[tuple[str, Path, str]] = [("cached", ROOT, "cached")]
    if not args.no_uncached:
        builds.append(("uncached", ROOT, "uncached"))
    if args.old is not None:
        builds.append(("old", args.old.resolve(), "cached"))
    results: dict[str, Any] = {"sizes": {}, "takes": args.takes, "fill": args.fill, "dir": str(args.dir or tempfile.gettempdir())}
    from bench.common import workdir as made  # here, not at the top: a --worker may run under another build's bench/

    with tempfile.TemporaryDirectory(prefix="ckpt-bench-take-", dir=made(args.dir)) as tmp:
        work = Path(tmp)
        for steps in sizes:
            base = work / f"base-{steps}"
            seconds = fill(base, steps, args.fill)
            print(f"[bench] {steps} steps: store filled ({args.fill}) in {seconds:.1f} s", file=sys.stderr, flush=True)
            rows = results["sizes"][str(steps)] = {}
            times: dict[str, list[float]] = {label: [] for label, _b, _m in builds}
            cpus: dict[str, list[float]] = {label: [] for label, _b, _m in builds}
            firsts: dict[str, list[float]] = {label: [] for label, _b, _m in builds}
            checks: list[float] = []
            per_round = -(-args.takes // args.rounds)
            for _round in range(args.rounds):  # the builds take turns, so each sees the same load
                for label, build, mode in builds:
                    store_dir = work / f"{label}-{steps}"
                    shutil.copytree(base, store_dir, symlinks=True)
                    got = _run_worker(build, store_dir, steps, per_round, mode, False)
                    shutil.rmtree(store_dir)
                    times[label] += got["times_s"]
                    cpus[label] += got["cpu_s"]
                    firsts[label].append(got["first_s"])
                    if label == "cached" and got.get("check_s") is not None:
                        checks.append(got["check_s"])
                    rows[label] = {"ckptcli": got["ckptcli"]}
            for label, _b, _m in builds:
                med, p90, low = _stats(times[label])
                rows[label].update(
                    median_s=med,
                    p90_s=p90,
                    min_s=low,
                    cpu_median_s=_stats(cpus[label])[0],
                    first_s=_stats(firsts[label])[0],
                    takes=len(times[label]),
                )
                print(f"[bench] {steps} steps, {label}: median {med * 1e3:.2f} ms ({rows[label]['ckptcli']})", file=sys.stderr, flush=True)
            if checks:
                rows["cached"]["check_alone_s"] = _stats(checks)[0]
            if args.profile and steps == max(sizes):  # a run of its own: cProfile slows what it watches
                store_dir = work / f"profile-{steps}"
                shutil.copytree(base, store_dir, symlinks=True)
                _run_worker(ROOT, store_dir, steps, args.takes, "cached", True)
                shutil.rmtree(store_dir)
            shutil.rmtree(base)
    print(
        f"library take of a growing agent state: {args.takes} takes a row in {args.rounds} rounds, one step before each;"
        f" store: {args.fill}, in {results['dir']}"
    )
    print(f"{'steps':>6}  {'build':<9} {'median':>9} {'p90':>9} {'min':>9} {'CPU median':>11} {'first take (median)':>20}")
    for steps, rows in results["sizes"].items():
        for label, r in rows.items():
            print(
                f"{steps:>6}  {label:<9} {r['median_s'] * 1e3:>6.2f} ms {r['p90_s'] * 1e3:>6.2f} ms {r['min_s'] * 1e3:>6.2f} ms"
                f" {r['cpu_median_s'] * 1e3:>8.2f} ms {r['first_s'] * 1e3:>17.1f} ms"
            )
        if "check_alone_s" in rows.get("cached", {}):
            c = rows["cached"]
            print(
                f"{'':>6}  of a cached take, the exact check alone (packing the long lists, hot caches) is at least"
                f" {c['check_alone_s'] * 1e3:.2f} ms; the rest at most {(c['median_s'] - c['check_alone_s']) * 1e3:.2f} ms"
            )
        if "old" in rows:
            c, o = rows["cached"], rows["old"]
            print(f"{'':>6}  cached/old: {c['median_s'] / o['median_s']:.3f} (CPU: {c['cpu_median_s'] / o['cpu_median_s']:.3f})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

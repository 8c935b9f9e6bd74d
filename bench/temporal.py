"""The Temporal adapter: import a 10,000-event history and replay it, against temporalio's
Replayer alone.

    python -m bench.temporal [--events 10000] [--runs 5] [--json PATH]

The history is made from a real one (fixtures/temporal/test_replayer_complete_history.json,
from temporalio/sdk-python) by repeating its activity pattern through temporalio's own
protobufs (ckptcli.adapters.temporal.synth): ~1,666 activities, each followed by a workflow
task. Measured in one process, `--runs` times each, medians:

- import: `ckpt import temporal` into a fresh store (ckptcli.adapters.temporal.importer:
  the file read twice, checked by temporalio's loader, folded, taken as checkpoints);
- re-import: the same file again (nothing new: the prefix check and a no-op);
- replay state: `ckpt replay` of the last checkpoint (the reducers over its tail);
- replay --check: the history read back from the store and replayed against the workflow
  code with temporalio's Replayer (what `ckpt replay --check` runs);
- Replayer alone: `WorkflowHistory.from_json` of the file and the same Replayer, which is
  the floor: the ratio `replay --check / Replayer alone` is what ckpt adds to it;
- one replay in a child / in process: the check runs each replay in a child process
  (check._replay: killable at --timeout, safe from os._exit); the same replay in this
  process (check._replay_here) shows what the child costs per history; the same two on
  the 11-event fixture (which the bench's workflow fails on after its first activity: a
  replay all the same) show that cost alone.

With `--memory`, instead: the peak memory (max RSS) of `ckpt import temporal` and of
`ckpt show --section ext:temporal` of the last checkpoint, each a child process measured
with getrusage, on histories of `--sizes` MB (default 25, 50, 100, 200) of two shapes:

- signals: the first workflow task, then WorkflowExecutionSignaled events with 400-byte
  json/plain inputs (about 825 bytes of history each: 121,000 signals in 100 MB);
- activities: activities whose results are 4 KiB json/plain strings, each followed by a
  workflow task (synth.synthesize; about 6.9 KiB of history each).

`ckpt ls` of the same store is the floor (ckpt's own memory). The target: peak RSS flat
in the history's size, and <= 200 MB at 100 MB.

    python -m bench.temporal --memory [--sizes 25,50,100,200]

With `--cpu`, instead: the CPU seconds (user + system, getrusage of the child) of `ckpt
import temporal` into a fresh store, each run a child process, of one history of
`--sizes` MB (the first; the activities shape, 24 KiB results, as the 100 MB test of
tests/test_temporal.py makes it) and of the `--events` history of the default run; with
`--trees A,B`, the same runs with each of those checkouts of ckpt on PYTHONPATH, one after
the other in each round (a noisy machine changes speed from minute to minute: alternate,
then compare medians):

    python -m bench.temporal --cpu --sizes 100 --runs 5 --trees /path/to/main,.

Needs the temporal extra (`pip install 'ckptcli[temporal]'`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.common import fmt_ms, median, table, versions

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "temporal" / "test_replayer_complete_history.json"

WORKFLOW = """
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow

REPEATS = {repeats}


@dataclass
class SayHelloParams:
    name: str
    should_wait: bool = False
    should_error: bool = False
    should_cause_nondeterminism: bool = False


@workflow.defn(name="SayHelloWorkflow")
class Loop:
    @workflow.run
    async def run(self, params: SayHelloParams) -> str:
        result = ""
        for _ in range(REPEATS):
            result = await workflow.execute_activity("say_hello", params.name, schedule_to_close_timeout=timedelta(seconds=60))
        return result
"""


def _timed(fn: Any, *args: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


#: a child process's peak RSS (KiB): the probe runs it and reports getrusage of its children
_PROBE = (
    "import resource, subprocess, sys; "
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); "
    "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.stderr.write(r.stderr.decode())"
)


def peak_rss_kib(*argv: str) -> int:
    """The max RSS (KiB) of `python -m ckptcli ARGV`, run in a fresh process (it must exit 0)."""
    import subprocess

    r = subprocess.run([sys.executable, "-c", _PROBE, sys.executable, "-m", "ckptcli", *argv], capture_output=True, text=True)
    code, kib = map(int, r.stdout.split())
    if code != 0:
        raise SystemExit(f"ckpt {' '.join(argv)}: exit {code}: {r.stderr.strip()[-500:]}")
    return kib


def make_history(kind: str, mb: int, path: Path) -> int:
    """A history of about `mb` MB of the shape `kind` (signals, activities) at `path`; its events."""
    from ckptcli.adapters.temporal.synth import synthesize, synthesize_signals

    if kind == "signals":
        return synthesize_signals(FIXTURE, mb * 1_000_000 // 825, path, payload_bytes=400)
    return synthesize(FIXTURE, mb * 1_000_000 // 7_050 * 6, path, result_bytes=4 << 10)


def memory(sizes: list[int], kinds: tuple[str, ...] = ("signals", "activities")) -> dict[str, Any]:
    """Peak RSS of the import and of `show` per history shape and size (see the docstring)."""
    import ckptcli

    rows, out = [], []
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for kind in kinds:
            for mb in sizes:
                path = tmp / f"{kind}.json"
                n = make_history(kind, mb, path)
                store = tmp / f"store-{kind}-{mb}"
                ckptcli.init_store(store)
                t = time.perf_counter()
                imp = peak_rss_kib("--store", str(store), "import", "temporal", str(path), "-q")
                secs = time.perf_counter() - t
                show = peak_rss_kib("--store", str(store), "show", f"workflow:{kind}", "--section", "ext:temporal")
                floor = peak_rss_kib("--store", str(store), "ls")
                size = path.stat().st_size
                path.unlink()
                row = {"kind": kind, "mb": size / 1e6, "events": n, "import_kib": imp, "show_kib": show, "ls_kib": floor, "import_s": secs}
                out.append(row)
                mib = [f"{v / 1024:.0f}" for v in (imp, show, floor)]
                rows.append([kind, f"{size / 1e6:.1f}", f"{n:,}", *mib, f"{secs:.0f}"])
                print(f"  {kind} {size / 1e6:.1f} MB: import {imp / 1024:.0f} MiB, show {show / 1024:.0f} MiB", file=sys.stderr)
                shutil.rmtree(store)
    print("Peak RSS (MiB) of ckpt import temporal and ckpt show, by history shape and size")
    print(table(["history", "MB", "events", "import", "show", "ckpt ls", "import s"], rows))
    return {"memory": out, "versions": versions("temporalio", "ijson")}


_CPU_PROBE = (
    "import resource, subprocess, sys; "
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); "
    "u = resource.getrusage(resource.RUSAGE_CHILDREN); print(r.returncode, u.ru_utime + u.ru_stime); sys.stderr.write(r.stderr.decode())"
)


def import_cpu_s(tree: str, store: Path, path: Path) -> float:
    """CPU seconds of `ckpt import temporal PATH` into a fresh `store`, ckpt taken from `tree`."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    env.pop("CKPT_STORE", None)
    shutil.rmtree(store, ignore_errors=True)
    # run in the tree: `python -m` puts the working directory first on sys.path
    subprocess.run([sys.executable, "-c", f"import ckptcli; ckptcli.init_store({str(store)!r})"], env=env, cwd=tree, check=True)
    argv = [sys.executable, "-m", "ckptcli", "--store", str(store), "import", "temporal", str(path), "-q"]
    r = subprocess.run([sys.executable, "-c", _CPU_PROBE, *argv], capture_output=True, text=True, env=env, cwd=tree)
    code, secs = r.stdout.split()
    if code != "0":
        raise SystemExit(f"{tree}: ckpt import temporal {path}: exit {code}: {r.stderr.strip()[-500:]}")
    return float(secs)


def cpu(mb: int, events: int, runs: int, trees: list[str]) -> dict[str, Any]:
    """Medians of import_cpu_s per history and tree, the trees alternated in each round."""
    from ckptcli.adapters.temporal.synth import synthesize

    out: dict[str, Any] = {"runs": runs, "histories": {}}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        histories = {f"{mb} MB (24 KiB results)": tmp / "big.json", f"{events} events": tmp / "wf.json"}
        # 185 events a MB: 18,500 for 100, the history of the 100 MB test (107.7 MB)
        n_big = synthesize(FIXTURE, mb * 185, histories[f"{mb} MB (24 KiB results)"], result_bytes=24 << 10)
        n_small = synthesize(FIXTURE, events, histories[f"{events} events"])
        rows = []
        for (name, path), n in zip(histories.items(), (n_big, n_small), strict=True):
            secs: dict[str, list[float]] = {t: [] for t in trees}
            for _ in range(runs):
                for t in trees:
                    secs[t].append(import_cpu_s(t, tmp / "store", path))
            size = path.stat().st_size
            for t in trees:
                med = median(secs[t])
                rows.append([name, f"{size / 1e6:.1f}", f"{n:,}", t, f"{med:.2f}", f"{size / 1e6 / med:.1f}"])
                out["histories"].setdefault(name, {"bytes": size, "events": n})[t] = {"median_cpu_s": med, "cpu_s": secs[t]}
    print(f"CPU seconds (user + system) of ckpt import temporal into a fresh store, medians of {runs}")
    print(table(["history", "MB", "events", "ckpt from", "CPU s", "MB per CPU s"], rows))
    out["versions"] = versions("temporalio", "ijson")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--memory", action="store_true", help="measure peak memory by history size instead")
    ap.add_argument("--cpu", action="store_true", help="measure the CPU seconds of imports instead (child processes)")
    ap.add_argument("--trees", default=".", help="checkouts of ckpt to alternate for --cpu, comma-separated")
    ap.add_argument("--sizes", default="25,50,100,200", help="history sizes for --memory, MB")
    ap.add_argument("--kinds", default="signals,activities", help="history shapes for --memory")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.cpu:
        res = cpu(int(args.sizes.split(",")[0]), args.events, args.runs, args.trees.split(","))
        if args.json:
            args.json.write_text(json.dumps(res, indent=2))
        return res
    if args.memory:
        res = memory([int(x) for x in args.sizes.split(",")], tuple(args.kinds.split(",")))
        if args.json:
            args.json.write_text(json.dumps(res, indent=2))
        return res

    from temporalio.client import WorkflowHistory
    from temporalio.worker import Replayer

    import ckptcli
    from ckptcli.adapters.temporal import check
    from ckptcli.adapters.temporal.importer import import_histories
    from ckptcli.adapters.temporal.synth import synthesize
    from ckptcli.history.replay import replay

    steps = (
        "import",
        "re-import",
        "replay state",
        "replay --check",
        "Replayer alone",
        "one replay in a child",
        "one replay in process",
        "11 events in a child",
        "11 events in process",
    )
    rows: dict[str, list[float]] = {k: [] for k in steps}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        path = tmp / "wf.json"
        n = synthesize(FIXTURE, args.events, path)
        size = path.stat().st_size
        repeats = (n - 5) // 6
        (tmp / "bench_loop.py").write_text(textwrap.dedent(WORKFLOW.format(repeats=repeats)))
        sys.path.insert(0, str(tmp))
        workflows = check.load_workflows(["bench_loop:Loop"])
        runtime = check._runtime()
        for r in range(args.runs):
            store = ckptcli.init_store(tmp / f"store{r}")
            secs, result = _timed(import_histories, store, str(path))
            assert result["events"] == n, result
            rows["import"].append(secs)
            secs, again = _timed(import_histories, store, str(path))
            assert again["events"] == 0
            rows["re-import"].append(secs)
            ck = ckptcli.open_checkpoint("workflow:wf", store)
            secs, state = _timed(replay, ck)
            assert state["ext"]["temporal"]["status"] == "completed"
            rows["replay state"].append(secs)
            secs, verdict = _timed(check.check_checkpoint, ckptcli.open_checkpoint("workflow:wf", store), ["bench_loop:Loop"])
            assert verdict.ok, verdict.to_dict()
            rows["replay --check"].append(secs)

            def alone() -> Any:
                history = WorkflowHistory.from_json("wf", path.read_text())
                return asyncio.run(Replayer(workflows=workflows, runtime=runtime).replay_workflow(history, raise_on_replay_failure=False))

            secs, res = _timed(alone)
            assert res.replay_failure is None
            rows["Replayer alone"].append(secs)
            events = json.loads(path.read_text())["events"]
            secs, failure = _timed(check._replay, workflows, events, "wf")
            assert failure is None
            rows["one replay in a child"].append(secs)
            secs, failure = _timed(check._replay_here, workflows, events, "wf")
            assert failure is None
            rows["one replay in process"].append(secs)
            small = json.loads(FIXTURE.read_text())["events"]  # the per-history cost, on a short history
            secs, failure = _timed(check._replay, workflows, small, "small")
            rows["11 events in a child"].append(secs)
            secs, failure = _timed(check._replay_here, workflows, small, "small")
            rows["11 events in process"].append(secs)
    med = {k: median(v) for k, v in rows.items()}
    floor = med["Replayer alone"]
    print(f"Temporal history of {n} events ({size} bytes), {args.runs} runs, medians")
    print(
        table(
            ["step", "median", "vs Replayer alone"],
            [[k, fmt_ms(v), f"{v / floor:.2f}x"] for k, v in med.items()],
        )
    )
    print(f"ratio replay --check / Replayer alone: {med['replay --check'] / floor:.2f}")
    print(f"the child process costs {fmt_ms(med['11 events in a child'] - med['11 events in process'])} per replay (11 events)")
    out = {"events": n, "runs": args.runs, "medians_s": med, "ratio_check_vs_replayer": med["replay --check"] / floor}
    out["versions"] = versions("temporalio", "ijson")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()

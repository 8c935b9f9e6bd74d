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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--memory", action="store_true", help="measure peak memory by history size instead")
    ap.add_argument("--sizes", default="25,50,100,200", help="history sizes for --memory, MB")
    ap.add_argument("--kinds", default="signals,activities", help="history shapes for --memory")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
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

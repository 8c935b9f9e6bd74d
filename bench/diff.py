"""ckpt diff against DeepDiff: two checkpoints of a 50,000-leaf state that differ in 10 leaves.

    python -m bench.diff [--runs 7] [--leaves 50000] [--json PATH]

Both are measured side by side in one run, alternately, `--runs` times:

- ckpt: `ckptcli.history.diff.diff_checkpoints` from cold, i.e. open the store, open both
  checkpoints by id and diff them (hash first: only the objects on the paths to the
  changed leaves are read and decoded);
- DeepDiff: `DeepDiff(state_a, state_b)` with its default options on the two states
  already decoded (their decoding, which DeepDiff needs first, is timed apart and not
  counted against it).

Before timing, both must report exactly the 10 changed leaves. The table gives medians
and the ratio DeepDiff / ckpt; the target is a ratio of at least 20.
Needs the bench extra (`bash bench/setup`, or `pip install deepdiff`).
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import fmt_ms, median, ratio, table, verdict, versions
from ckptcli import api
from ckptcli.history.diff import diff_checkpoints

RATIO_TARGET = 20.0
CHANGES = 10


def make_state(leaves: int) -> dict[str, Any]:
    """A state of `leaves` scalar leaves (a multiple of 10): 40% memory variables, 10% in
    a plan of 2-field steps, 40% in a tool-call log of 4-field records, 10% events."""
    unit = leaves // 10
    return {
        "memory": {"vars": {f"v{i:06d}": i * 7 for i in range(4 * unit)}},
        "plan": [{"step": i, "done": i < unit // 4} for i in range(unit // 2)],
        "tools": [{"id": f"call-{i:06d}", "name": "search", "status": "ok", "ms": i % 997} for i in range(unit)],
        "events": [i * 3 for i in range(unit)],
    }


def count_leaves(value: Any) -> int:
    if isinstance(value, dict):
        return sum(count_leaves(v) for v in value.values())
    if isinstance(value, list):
        return sum(count_leaves(v) for v in value)
    return 1


def change_ten(state: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The state with 10 leaves changed, spread over the sections; their JSON Pointers."""
    b = copy.deepcopy(state)
    n_vars, n_plan, n_tools, n_events = len(b["memory"]["vars"]), len(b["plan"]), len(b["tools"]), len(b["events"])
    paths = []
    for i in (17, n_vars // 5, n_vars // 2, n_vars - 2):
        b["memory"]["vars"][f"v{i:06d}"] = -1
        paths.append(f"/memory/vars/v{i:06d}")
    b["plan"][n_plan * 3 // 5]["done"] = True
    paths.append(f"/plan/{n_plan * 3 // 5}/done")
    for i in (0, n_tools // 2, n_tools - 1):
        b["tools"][i]["status"] = "failed"
        paths.append(f"/tools/{i}/status")
    for i in (100, n_events * 4 // 5):
        b["events"][i] = -5
        paths.append(f"/events/{i}")
    return b, paths


def ckpt_diff(store_dir: Path, a: str, b: str) -> Any:
    store = api.open_store(store_dir)
    try:
        return diff_checkpoints(api.open_checkpoint(a, store), api.open_checkpoint(b, store))
    finally:
        store.close()


def measure(leaves: int, runs: int, workdir: Path) -> dict[str, Any]:
    from deepdiff import DeepDiff

    state_a = make_state(leaves)
    state_b, paths = change_ten(state_a)
    store_dir = workdir / "store"
    store = api.init_store(store_dir)
    a = api.take(store, state_a, subject="agent:bench").hex
    b = api.take(store, state_b, subject="agent:bench").hex
    store.close()

    # both must find exactly the 10 changed leaves before their times mean anything
    result = ckpt_diff(store_dir, a, b)
    ckpt_paths = sorted(op["path"] for op in result.patch())
    t0 = time.perf_counter()
    opened = api.open_store(store_dir)
    decoded_a = api.open_checkpoint(a, opened).state()
    decoded_b = api.open_checkpoint(b, opened).state()
    decode_s = time.perf_counter() - t0
    opened.close()
    dd = DeepDiff(decoded_a, decoded_b)
    dd_count = sum(len(v) for v in dd.values())

    ckpt_times: list[float] = []
    dd_times: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        ckpt_diff(store_dir, a, b)
        ckpt_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        DeepDiff(decoded_a, decoded_b)
        dd_times.append(time.perf_counter() - t0)
    cli_s = _cli_time(store_dir, a, b)
    ck, dm = median(ckpt_times), median(dd_times)
    return {
        "leaves": count_leaves(state_a),
        "changed_leaves": len(paths),
        "runs": runs,
        "ckpt_reported": len(ckpt_paths),
        "ckpt_exact": ckpt_paths == sorted(paths),
        "deepdiff_reported": dd_count,
        "ckpt_median_s": ck,
        "deepdiff_median_s": dm,
        "ratio": ratio(dm, ck),
        "ckpt_s": ckpt_times,
        "deepdiff_s": dd_times,
        "decode_both_s": decode_s,
        "cli_diff_json_s": cli_s,
        "versions": versions("ckptcli", "deepdiff"),
    }


def _cli_time(store_dir: Path, a: str, b: str) -> float:
    """One `ckpt diff --json` as a real process (start-up included), for information."""
    cmd = [sys.executable, "-m", "ckptcli", "diff", a, b, "--store", str(store_dir), "--json"]
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def report(res: dict[str, Any]) -> None:
    print(
        f"ckpt diff vs DeepDiff: two checkpoints of a {res['leaves']:,}-leaf state differing in "
        f"{res['changed_leaves']} leaves, {res['runs']} runs each, alternating\n"
    )
    rows = [
        ["ckpt: open store + both checkpoints, diff", fmt_ms(res["ckpt_median_s"]), f"{res['ckpt_reported']} changes"],
        ["DeepDiff(state_a, state_b), decoded states", fmt_ms(res["deepdiff_median_s"]), f"{res['deepdiff_reported']} changes"],
        ["(info) decoding both states for DeepDiff", fmt_ms(res["decode_both_s"]), ""],
        ["(info) `ckpt diff --json`, a real process", fmt_ms(res["cli_diff_json_s"]), ""],
    ]
    print(table(["what", "median", "reported"], rows, align="lrr"))
    print()
    checks = [
        ["DeepDiff / ckpt time", f"{res['ratio']:.1f}x", f">= {RATIO_TARGET:.0f}x", verdict(res["ratio"] >= RATIO_TARGET)],
        ["ckpt reports exactly the changed leaves", "yes" if res["ckpt_exact"] else "NO", "yes", verdict(res["ckpt_exact"])],
    ]
    print(table(["check", "value", "target", "result"], checks, align="lrrl"))
    print("\n" + ", ".join(f"{k} {v}" for k, v in res["versions"].items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.diff", description=__doc__.splitlines()[0])
    ap.add_argument("--leaves", type=int, default=50_000, help="leaves of the state, a multiple of 10 (default 50000)")
    ap.add_argument("--runs", type=int, default=7, help="timed runs of each (default 7)")
    ap.add_argument("--json", type=Path, metavar="PATH", help="also write every figure to this JSON file")
    args = ap.parse_args(argv)
    if args.leaves < 1000 or args.leaves % 10 or args.runs < 1:
        ap.error("--leaves must be a multiple of 10, at least 1000; --runs at least 1")
    try:
        import deepdiff  # noqa: F401
    except ImportError:
        ap.error("DeepDiff is not installed: run `bash bench/setup` (or pip install deepdiff)")
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-diff-") as d:
        res = measure(args.leaves, args.runs, Path(d))
    report(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0 if res["ckpt_exact"] else 1


if __name__ == "__main__":
    sys.exit(main())

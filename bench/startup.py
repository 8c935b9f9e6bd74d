"""Start-up: `ckpt --help`, `ckpt --version`, and `ckpt ls` on a store of 10,000 checkpoints.

    python -m bench.startup [--checkpoints 10000] [--runs 15] [--json PATH]

Each command is run as a real process `--runs` times; the table gives medians and the
ratio to the interpreter's own start-up (`python -c pass`, measured in the same run),
which is the floor no Python CLI can go under. Targets: `--help` <= 150 ms,
`ls` on 10,000 checkpoints <= 400 ms.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import fmt_ms, median, table, verdict

VENV_BIN = Path(sys.executable).parent


def _time(cmd: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - t)
    return out


def build_store(path: Path, n: int) -> None:
    import ckptcli
    from ckptcli.api import take

    store = ckptcli.init_store(path)
    for i in range(n):
        take(
            store,
            {"memory": {"step": i, "note": f"step {i}"}},
            subject=f"agent:bot{i % 10}",
            labels={"run": str(i // 100)},
            message=f"step {i}",
        )
        if i % 2000 == 0:
            print(f"[bench] building store: {i}/{n}", file=sys.stderr, flush=True)


def measure(checkpoints: int, runs: int) -> dict[str, Any]:
    ckpt = str(VENV_BIN / "ckpt")
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-startup-"))
    try:
        store = work / "store"
        build_store(store, checkpoints)
        # first ls builds the catalog (cache/catalog); the timed runs read it, as every ls after the first does
        first = _time([ckpt, "ls", "--store", str(store)], 1)[0]
        cases = {
            "python -c pass (floor)": [sys.executable, "-c", "pass"],
            "ckpt --version": [ckpt, "--version"],
            "ckpt --help": [ckpt, "--help"],
            f"ckpt ls ({checkpoints} checkpoints)": [ckpt, "ls", "--store", str(store)],
            f"ckpt ls --json ({checkpoints})": [ckpt, "ls", "--json", "--store", str(store)],
            f"ckpt ls --limit 20 ({checkpoints})": [ckpt, "ls", "--limit", "20", "--store", str(store)],
        }
        results = {name: median(_time(cmd, runs)) for name, cmd in cases.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    targets = {"ckpt --help": 0.150, f"ckpt ls ({checkpoints} checkpoints)": 0.400}
    return {"runs": runs, "first_ls_s": first, "medians_s": results, "targets_s": targets}


def report(r: dict[str, Any]) -> None:
    results, targets = r["medians_s"], r["targets_s"]
    floor = results["python -c pass (floor)"]
    rows = []
    for name, med in results.items():
        target = targets.get(name)
        rows.append([name, fmt_ms(med), f"{med / floor:.1f}x", fmt_ms(target) if target else "", verdict(med <= target) if target else ""])
    print(f"start-up, median of {r['runs']} runs each; first ls (builds the catalog): {fmt_ms(r['first_ls_s'])}\n")
    print(table(["command", "median", "vs python floor", "target", "result"], rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    r = measure(args.checkpoints, args.runs)
    report(r)
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Two builds of ckpt on the same data, interleaved: did a change make it slower?

    python -m bench.compare OLD_CKPT NEW_CKPT [--mib 512] [--rounds 8] [--json PATH]

OLD_CKPT and NEW_CKPT are `ckpt` executables, each in its own virtualenv (for example
a fresh clone of the commit before a change, set up with `bash scripts/setup`, and one
of the commit after it). Each round gives both builds a fresh copy of the same state
(bench.bigstate's 512 MiB of files), in alternating order, and times: a full take into
a new store, an incremental take after the same in-place edits, `verify --read-data`,
a restore of the blobs, and the start-up cost of `ckpt verify` on an empty store and
of `ckpt ls`. It prints the median of each and NEW/OLD.

Sequential before/after runs of `python -m bench` on a shared machine differ by more
than most changes do (the peers' times move as much as ckpt's); interleaving the two
builds round by round puts both under the same load, so the ratio is what changed.
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

from bench.bigstate import edit_in_place, make_state
from bench.common import median, table

OPS = ("full take", "incr take", "verify --read-data", "restore", "start-up: verify, empty store", "start-up: ls")


def _timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"command failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr.decode(errors='replace')[-2000:]}")
    return elapsed


def one_round(ckpt: str, data: Path, work: Path) -> dict[str, float]:
    """Every timed operation of one build on a fresh copy of `data`."""
    copy, store, out, empty = work / "data", work / "store", work / "out", work / "empty"
    shutil.copytree(data, copy)
    for s in (store, empty):
        subprocess.run([ckpt, "init", str(s)], stdout=subprocess.DEVNULL, check=True)
    os.sync()  # the copy is dirty in the page cache: write it back before anything is timed
    take = [ckpt, "take", "--blob", f"state={copy}", "-S", "process:bench", "--store", str(store)]
    got = {"full take": _timed(take)}
    os.sync()
    edit_in_place([p for p in sorted(copy.iterdir()) if p.is_file()])
    os.sync()
    got["incr take"] = _timed(take)
    os.sync()
    got["verify --read-data"] = _timed([ckpt, "verify", "--read-data", "--store", str(store)])
    got["restore"] = _timed([ckpt, "restore", "latest", "--no-state", "--blobs", str(out), "--store", str(store)])
    got["start-up: verify, empty store"] = median([_timed([ckpt, "verify", "--store", str(empty)]) for _ in range(5)])
    got["start-up: ls"] = median([_timed([ckpt, "ls", "--store", str(store)]) for _ in range(5)])
    for p in (copy, store, out, empty):
        shutil.rmtree(p)
    os.sync()
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("old", help="the ckpt executable of the build before the change")
    ap.add_argument("new", help="the ckpt executable of the build after it")
    ap.add_argument("--mib", type=int, default=512, help="size of the generated state (default 512)")
    ap.add_argument("--rounds", type=int, default=8, help="rounds; each runs both builds once (default 8)")
    ap.add_argument("--json", type=Path, metavar="PATH", help="also write every time to this file")
    args = ap.parse_args(argv)
    for exe in (args.old, args.new):
        if not os.access(exe, os.X_OK):
            ap.error(f"{exe} is not an executable ckpt")
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-compare-"))
    times: dict[str, dict[str, list[float]]] = {side: {op: [] for op in OPS} for side in ("old", "new")}
    try:
        print(f"[bench] making {args.mib} MiB of state", file=sys.stderr, flush=True)
        data = work / "state"
        make_state(data, args.mib)
        for i in range(args.rounds):
            print(f"[bench] round {i + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for side in ("old", "new") if i % 2 == 0 else ("new", "old"):
                (work / side).mkdir(exist_ok=True)
                for op, t in one_round(getattr(args, side), data, work / side).items():
                    times[side][op].append(t)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for op in OPS:
        old, new = median(times["old"][op]), median(times["new"][op])
        rows.append([op, f"{old:.3f} s", f"{new:.3f} s", f"{new / old:.3f}"])
    print(f"\n{args.mib} MiB state, {args.rounds} interleaved rounds; medians\n  old: {args.old}\n  new: {args.new}\n")
    print(table(["operation", "old", "new", "new / old"], rows, align="lrrr"))
    if args.json:
        record = {"mib": args.mib, "rounds": args.rounds, "old": args.old, "new": args.new, "times": times}
        args.json.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""ckpt and restic on one loopback S3 server: take, restore and verify of the big state.

    python -m bench.s3 [--mib 512] [--runs 3] [--json PATH]

Starts moto's S3 server (ThreadedMotoServer on 127.0.0.1, in a child process), makes
one bucket per tool, generates bench.bigstate's mixed state (half random, half JSON
lines), then `--runs` rounds, the tools alternating which goes first:

- full take: `ckpt take --blob state=DIR` into `s3://BUCKET/store` against
  `restic -r s3:http://127.0.0.1:PORT/BUCKET backup DIR`, each into a fresh repository;
- restore: `ckpt restore latest --no-state --blobs OUT` against `restic restore latest`;
- verify: `ckpt verify --read-data` against `restic check --read-data`.

Both tools talk to the same server through their own S3 clients (obstore for ckpt,
minio-go for restic); the server is the same Python process for both, so the figures are
what each tool asks of an S3 server more than what a real one would take: compare the
ratios. Targets: full take <= 0.7x restic, restore <= 1.0x, verify <= 0.8x. Needs the
bench extra and restic (`bash bench/setup`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from bench.bigstate import RESTIC_ENV, Run, check_tools, make_state, run
from bench.common import median, table, verdict
from bench.objstore import _SERVER, CREDENTIALS

CKPT = str(Path(sys.executable).parent / "ckpt")
TARGETS = {"take": 0.7, "restore": 1.0, "verify": 0.8}


def _bucket(endpoint: str, name: str) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{name}", method="PUT"), timeout=30).read()


def one_round(endpoint: str, data: Path, work: Path, i: int) -> dict[str, Run]:
    """Every timed operation of both tools, on fresh buckets."""
    ck_bucket, re_bucket = f"ckpt-{i}", f"restic-{i}"
    _bucket(endpoint, ck_bucket)
    _bucket(endpoint, re_bucket)
    store, repo = f"s3://{ck_bucket}/store", f"s3:{endpoint}/{re_bucket}"
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint, **RESTIC_ENV}
    run([CKPT, "init", store], env=env)
    run(["restic", "--repo", repo, "--quiet", "init"], env=env)
    got: dict[str, Run] = {}
    pairs = [
        ("take", "ckpt", [CKPT, "take", "--blob", f"state={data}", "-S", "process:bench", "--store", store]),
        ("take", "restic", ["restic", "--repo", repo, "--quiet", "backup", str(data)]),
        ("restore", "ckpt", [CKPT, "restore", "latest", "--no-state", "--blobs", str(work / "out-ckpt"), "--store", store]),
        ("restore", "restic", ["restic", "--repo", repo, "--quiet", "restore", "latest", "--target", str(work / "out-restic")]),
        ("verify", "ckpt", [CKPT, "verify", "--read-data", "--store", store]),
        ("verify", "restic", ["restic", "--repo", repo, "--quiet", "check", "--read-data"]),
    ]
    for op in ("take", "restore", "verify"):
        mine = [p for p in pairs if p[0] == op]
        for _op, tool, argv in mine if i % 2 == 0 else mine[::-1]:
            got[f"{op}: {tool}"] = run(argv, env=env)
    for p in (work / "out-ckpt", work / "out-restic"):
        shutil.rmtree(p, ignore_errors=True)
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.s3", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--mib", type=int, default=512, help="size of the state (default 512)")
    ap.add_argument("--runs", type=int, default=3, help="rounds (default 3; medians)")
    ap.add_argument("--json", type=Path, metavar="PATH", help="also write every figure here")
    args = ap.parse_args(argv)
    check_tools()
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-s3-"))
    server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    runs: dict[str, list[Run]] = {}
    try:
        assert server.stdout is not None
        endpoint = f"http://127.0.0.1:{int(server.stdout.readline())}"
        print(f"[bench] making {args.mib} MiB of state; moto on {endpoint}", file=sys.stderr, flush=True)
        data = work / "state"
        make_state(data, args.mib)
        for i in range(args.runs):
            print(f"[bench] round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
            for name, r in one_round(endpoint, data, work, i).items():
                runs.setdefault(name, []).append(r)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    med = {name: median([r.seconds for r in rs]) for name, rs in runs.items()}
    rss = {name: max(r.max_rss_kib for r in rs) for name, rs in runs.items()}
    print(f"\n{args.mib} MiB state on a loopback S3 server (moto); {args.runs} rounds, medians\n")
    print(table(["operation", "median", "peak RSS"], [[n, f"{med[n]:.2f} s", f"{rss[n] // 1024} MiB"] for n in sorted(med)]))
    rows, checks = [], {}
    for op, target in TARGETS.items():
        r = med[f"{op}: ckpt"] / med[f"{op}: restic"]
        checks[op] = r
        rows.append([f"{op} / restic", f"{r:.3f}", f"<= {target}", verdict(r <= target)])
    print()
    print(table(["ratio (ckpt / restic)", "value", "target", "result"], rows))
    if args.json:
        record = {"mib": args.mib, "runs": args.runs, "medians_s": med, "peak_rss_kib": rss, "ratios": checks}
        args.json.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

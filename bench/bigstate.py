"""The big-state path: ckpt vs restic, tar | zstd and sha256sum on the same files, in one run.

    python -m bench.bigstate [--mib 512] [--runs 3] [--json PATH]

Data: --mib of mixed state in 8 files, half random bytes (incompressible), half JSON-lines
text (compressible). Then ~1% of the bytes are changed in place by 120 scattered edits
of ~45 KB across three of the files, for the incremental case.

Each row is a median over --runs runs, every run on a fresh repository/store (so ckpt's
full take starts with an empty digest cache, and the incremental take uses the pairs the
full take recorded, as restic's uses its parent snapshot); ckpt and
restic alternate which goes first, and dirty pages are written back (sync) before each
timed step, so neither pays for the other's or the copy's writeback. Peak RSS comes from
wait4() of each process. The page cache is warm for every tool alike.

Besides the pairs, in the same runs: the full take into a store made with
`ckpt init --chunker fastcdc` (the chunker of stores made before there was a choice)
and into a format-1 store, and `ckpt restore --durable` (one syncfs before it returns).

And on one core (`taskset -c 0`), where no tool gains from the other core: the full take,
`tar | zstd -3 -T1`, and the work the format itself asks of a take (`format_work`: cut
the files into the store's chunks, SHA-256 of each, zstd of each at ckpt's level, nothing
else). Their ratios say how much of the full take's distance to `tar | zstd` is work the
format requires (object ids are SHA-256 of each chunk) rather than ckpt's own overhead or
how it uses the cores: on two cores the take cannot beat `format work / tar | zstd` unless
it draws more from the second core than `zstd -T0` does.

Peers: restic and zstd from the system packages (`apt-get install restic zstd`; the
setup step of this benchmark), GNU tar and coreutils sha256sum.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import dir_size, fmt_bytes, median, table, verdict
from bench.common import workdir as made

VENV_BIN = Path(sys.executable).parent
CKPT = str(VENV_BIN / "ckpt")
ROOT = Path(__file__).resolve().parent.parent
RESTIC_ENV = {"RESTIC_PASSWORD": "bench-only-password", "RESTIC_PROGRESS_FPS": "0.0001"}


@dataclass
class Run:
    seconds: float
    max_rss_kib: int
    #: user + system CPU seconds of the process (and the children it waited for): what
    #: the work costs, which the load of a shared machine moves far less than wall time
    cpu_seconds: float = 0.0


def run(cmd: list[str] | str, *, env: dict[str, str] | None = None, shell: bool = False, cwd: Path | None = None) -> Run:
    """Run to completion; wall time and peak RSS of the process (its children included
    for a shell pipeline, via RUSAGE of the waited pid)."""
    full_env = {**os.environ, **(env or {})}
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=full_env, shell=shell, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(p.pid, 0)
    elapsed = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.stderr:
        p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"command failed ({os.waitstatus_to_exitcode(status)}): {cmd}\n{err[-2000:]}")
    return Run(elapsed, usage.ru_maxrss, usage.ru_utime + usage.ru_stime)


def format_work(data: Path) -> list[bytes]:
    """What the format asks of a full take of the files under `data`, and nothing else:
    cut each into a new store's chunks, SHA-256 of each chunk, zstd of each at ckpt's
    level (framing.compress: raw when zstd does not shrink it). One thread. Returns the
    chunk ids (the objects a take of the files stores their bytes in)."""
    import hashlib

    from ckptcli.format import chunker
    from ckptcli.format.framing import compress

    params = chunker.PARAMS[chunker.DEFAULT_CHUNKER]
    ids = []
    for path in sorted(data.iterdir()):
        for piece in chunker.chunk_bytes(path.read_bytes(), params, chunker.DEFAULT_CHUNKER):
            ids.append(hashlib.sha256(piece).digest())
            compress(piece)
    return ids


ONE_CORE = ["taskset", "-c", "0"]


# -- data -------------------------------------------------------------------------------
def make_state(root: Path, mib: int, seed: int = 7) -> list[Path]:
    rng = random.Random(seed)
    root.mkdir(parents=True)
    per_file = mib * 1024 * 1024 // 8
    words = [
        f"{w}{i}"
        for i, w in enumerate(
            ["alpha", "beta", "gamma", "delta", "order", "refund", "ticket", "agent", "tool", "call", "result", "status"] * 40
        )
    ]
    lines = []
    for i in range(50_000):
        rec = {
            "seq": i,
            "kind": rng.choice(["message", "tool.call", "tool.result", "plan.push", "memory.set"]),
            "text": " ".join(rng.choices(words, k=rng.randint(6, 30))),
            "score": round(rng.random(), 4),
        }
        lines.append(json.dumps(rec) + "\n")
    files = []
    for k in range(8):
        path = root / (f"tensor-{k}.bin" if k % 2 == 0 else f"events-{k}.jsonl")
        with open(path, "wb") as fh:
            if k % 2 == 0:
                remaining = per_file
                while remaining:
                    n = min(remaining, 8 << 20)
                    fh.write(rng.randbytes(n))
                    remaining -= n
            else:
                written = 0
                while written < per_file:
                    block = "".join(rng.choices(lines, k=4096)).encode()[: per_file - written]
                    fh.write(block)
                    written += len(block)
        files.append(path)
    return files


def edit_in_place(files: list[Path], edits: int = 120, size: int = 45_000, seed: int = 11) -> int:
    """~1% of the bytes, in place: `edits` scattered overwrites of `size` bytes in 3 files."""
    rng = random.Random(seed)
    targets = [files[0], files[1], files[4]]
    changed = 0
    for i in range(edits):
        path = targets[i % 3]
        length = path.stat().st_size
        off = rng.randrange(0, length - size)
        with open(path, "r+b") as fh:
            fh.seek(off)
            fh.write(rng.randbytes(size) if path.suffix == ".bin" else (b'{"edited": %d}\n' % i * (size // 16))[:size])
        changed += size
    return changed


# -- the tools -------------------------------------------------------------------------------
def ckpt_take(store: Path, data: Path, *extra: str) -> Run:
    return run([CKPT, "take", "--blob", f"state={data}", "-S", "process:bench", "--store", str(store), *extra])


def restic_backup(repo: Path, data: Path) -> Run:
    return run(["restic", "--repo", str(repo), "--quiet", "backup", str(data)], env=RESTIC_ENV)


def check_tools() -> None:
    for tool in ("restic", "zstd", "tar", "sha256sum", "taskset"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed: run `bash bench/setup` (apt-get install restic zstd)")


def measure(mib: int, runs: int, workdir: Path | None = None) -> dict[str, Any]:
    """The big-state pairs, `runs` times each on fresh stores and repositories."""
    check_tools()
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-big-", dir=made(workdir)))
    os.environ["CKPT_CACHE_DIR"] = str(work / "user-cache")  # ckpt's caches of the user (the digest cache): this run's own
    res: dict[str, list[Run]] = {}
    added: dict[str, list[int]] = {"ckpt": [], "restic": [], "ckpt cache": []}

    def rec(name: str, r: Run) -> None:
        res.setdefault(name, []).append(r)

    try:
        print(f"[bench] making {mib} MiB of state", file=sys.stderr, flush=True)
        data = work / "state"
        files = make_state(data, mib)
        total = sum(f.stat().st_size for f in files)
        for i in range(runs):
            print(f"[bench] big state: run {i + 1}/{runs}", file=sys.stderr, flush=True)
            # fresh copies of the unedited data for the incremental pair
            run_data = work / f"data-{i}"
            shutil.copytree(data, run_data)
            run_files = sorted(run_data.iterdir())
            store, repo = work / f"store-{i}", work / f"repo-{i}"
            store_v1 = work / f"store-v1-{i}"
            store_legacy = work / f"store-fastcdc-{i}"
            run([CKPT, "init", str(store)])
            run([CKPT, "init", "--format-version", "1", str(store_v1)])
            run([CKPT, "init", "--chunker", "fastcdc", str(store_legacy)])
            run(["restic", "--repo", str(repo), "--quiet", "init"], env=RESTIC_ENV)
            # the copy just made is dirty in the page cache: write it back first, so neither
            # tool's fsyncs wait behind it; and alternate which tool goes first
            os.sync()
            pair = [
                ("full: ckpt take", lambda s=store, d=run_data: ckpt_take(s, d)),
                ("full: restic backup", lambda r=repo, d=run_data: restic_backup(r, d)),
                ("full: ckpt take, format v1 store", lambda s=store_v1, d=run_data: ckpt_take(s, d)),
                ("full: ckpt take, fastcdc (old chunker) store", lambda s=store_legacy, d=run_data: ckpt_take(s, d)),
            ]
            for name, fn in pair if i % 2 == 0 else pair[::-1]:
                rec(name, fn())
                os.sync()
            verify = [
                ("format: verify --read-data, v2 store", lambda s=store: run([CKPT, "verify", "--read-data", "--store", str(s)])),
                ("format: verify --read-data, v1 store", lambda s=store_v1: run([CKPT, "verify", "--read-data", "--store", str(s)])),
            ]
            for name, fn in verify if i % 2 == 0 else verify[::-1]:
                rec(name, fn())
            shutil.rmtree(store_v1, ignore_errors=True)
            shutil.rmtree(store_legacy, ignore_errors=True)
            rec("full: tar | zstd -3 -T0", run(f"tar -cf - -C {run_data} . | zstd -3 -T0 -q -f -o {work}/state-{i}.tar.zst", shell=True))
            one = work / f"store-one-{i}"
            run([CKPT, "init", str(one)])
            os.sync()
            one_core = [
                (
                    "one core: ckpt take",
                    lambda s=one, d=run_data: run(
                        [*ONE_CORE, CKPT, "take", "--blob", f"state={d}", "-S", "process:bench", "--store", str(s)]
                    ),
                ),
                (
                    "one core: tar | zstd -3 -T1",
                    lambda d=run_data, o=work / f"one-{i}.tar.zst": run(
                        f"{' '.join(ONE_CORE)} sh -c 'tar -cf - -C {d} . | zstd -3 -T1 -q -f -o {o}'", shell=True
                    ),
                ),
                (
                    "one core: the format's work",
                    lambda d=run_data: run([*ONE_CORE, sys.executable, "-m", "bench.bigstate", "--format-work", str(d)], cwd=ROOT),
                ),
            ]
            for name, fn in one_core if i % 2 == 0 else one_core[::-1]:
                rec(name, fn())
                os.sync()
            shutil.rmtree(one, ignore_errors=True)
            (work / f"one-{i}.tar.zst").unlink(missing_ok=True)
            s0, r0 = _store_bytes(store), dir_size(repo).apparent
            c0 = _cache_bytes(store)
            edit_in_place([p for p in run_files if p.is_file()])
            os.sync()
            pair = [
                ("incr: ckpt take", lambda s=store, d=run_data: ckpt_take(s, d)),
                ("incr: restic backup", lambda r=repo, d=run_data: restic_backup(r, d)),
            ]
            for name, fn in pair if i % 2 == 0 else pair[::-1]:
                rec(name, fn())
                os.sync()
            added["ckpt"].append(_store_bytes(store) - s0)
            added["restic"].append(dir_size(repo).apparent - r0)
            added["ckpt cache"].append(_cache_bytes(store) - c0)
            rec("verify: ckpt verify --read-data", run([CKPT, "verify", "--read-data", "--store", str(store)]))
            rec("verify: restic check --read-data", run(["restic", "--repo", str(repo), "--quiet", "check", "--read-data"], env=RESTIC_ENV))
            rec("verify: sha256sum (the bytes once)", run(f"sha256sum {run_data}/* > /dev/null", shell=True))
            out_c, out_r = work / f"out-ckpt-{i}", work / f"out-restic-{i}"
            rec("restore: ckpt restore", run([CKPT, "restore", "latest", "--no-state", "--blobs", str(out_c), "--store", str(store)]))
            rec(
                "restore: restic restore",
                run(["restic", "--repo", str(repo), "--quiet", "restore", "latest", "--target", str(out_r)], env=RESTIC_ENV),
            )
            shutil.rmtree(out_c, ignore_errors=True)
            os.sync()
            rec(
                "restore: ckpt restore --durable",
                run([CKPT, "restore", "latest", "--no-state", "--durable", "--blobs", str(out_c), "--store", str(store)]),
            )
            for p in (run_data, store, repo, out_c, out_r, work / f"state-{i}.tar.zst"):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = {k: median([r.seconds for r in v]) for k, v in res.items()}
    rss = {k: max(r.max_rss_kib for r in v) for k, v in res.items()}
    cpu = {k: median([r.cpu_seconds for r in v]) for k, v in res.items()}
    checks = [
        ("full take / restic backup", med["full: ckpt take"] / med["full: restic backup"], 0.5),
        ("full take / tar|zstd", med["full: ckpt take"] / med["full: tar | zstd -3 -T0"], 1.3),
        # on one core, CPU seconds: what another process on that core takes moves the wall time
        ("one core, CPU: take / tar|zstd", cpu["one core: ckpt take"] / cpu["one core: tar | zstd -3 -T1"], None),
        ("one core, CPU: format's work / tar|zstd", cpu["one core: the format's work"] / cpu["one core: tar | zstd -3 -T1"], None),
        ("full take, format v2 / v1 store", med["full: ckpt take"] / med["full: ckpt take, format v1 store"], None),
        ("full take, fastcdc2020 / fastcdc store", med["full: ckpt take"] / med["full: ckpt take, fastcdc (old chunker) store"], None),
        ("incr take / restic backup (time)", med["incr: ckpt take"] / med["incr: restic backup"], 0.3),
        ("incr bytes added / restic's", median(added["ckpt"]) / max(median(added["restic"]), 1), 0.1),
        ("verify --read-data / restic check", med["verify: ckpt verify --read-data"] / med["verify: restic check --read-data"], 0.5),
        ("verify --read-data / sha256sum", med["verify: ckpt verify --read-data"] / med["verify: sha256sum (the bytes once)"], None),
        (
            "verify --read-data, format v2 / v1 store",
            med["format: verify --read-data, v2 store"] / med["format: verify --read-data, v1 store"],
            None,
        ),
        ("restore / restic restore", med["restore: ckpt restore"] / med["restore: restic restore"], 0.5),
        ("restore --durable / restic restore", med["restore: ckpt restore --durable"] / med["restore: restic restore"], None),
    ]
    return {
        "mib": mib,
        "runs": runs,
        "total_bytes": total,
        "medians_s": med,
        "cpu_s": cpu,
        "peak_rss_kib": rss,
        "added": added,
        "checks": checks,
    }


def report(r: dict[str, Any]) -> None:
    med, rss, total = r["medians_s"], r["peak_rss_kib"], r["total_bytes"]
    cpu = r.get("cpu_s", {})
    rows = [
        [k, f"{med[k]:.2f} s", f"{cpu.get(k, 0.0):.2f} s", f"{total / med[k] / 2**20:.0f} MiB/s", f"{rss[k] / 1024:.0f} MiB"] for k in med
    ]
    print(f"big state: {fmt_bytes(total)} in 8 files (half random, half JSON lines); median of {r['runs']} runs\n")
    print(table(["operation", "median", "CPU (user+sys)", "throughput", "peak RSS"], rows))
    print()
    print(
        table(
            ["ratio (ckpt / peer)", "value", "target", "result"],
            [[n, f"{v:.3f}", f"<= {t}" if t else "(info)", verdict(v <= t) if t else ""] for n, v, t in r["checks"]],
        )
    )
    added = r["added"]
    print(
        f"\nbytes added by the incremental take: ckpt {fmt_bytes(median(added['ckpt']))}, restic {fmt_bytes(median(added['restic']))}"
        f" (and ckpt's cache/ {fmt_bytes(median(added['ckpt cache']))}, restic's cache outside its repository not counted)"
    )


def _cache_bytes(store: Path) -> int:
    return dir_size(store).parts.get("cache", {}).get("bytes", 0)


def _store_bytes(store: Path) -> int:
    """The store's bytes but its cache/: the index snapshot there is a cache any process
    may delete or write again, as restic's cache is (kept outside its repository, so its
    growth is not in restic's figure either); it is printed beside."""
    return dir_size(store).apparent - _cache_bytes(store)


def measure_memory(mib: int, workdir: Path | None = None) -> dict[str, Any]:
    """Peak RSS of a full take, a restore and an incremental take of `mib` MiB, ckpt and
    restic (one run)."""
    check_tools()
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-mem-", dir=made(workdir)))
    os.environ["CKPT_CACHE_DIR"] = str(work / "user-cache")
    try:
        print(f"[bench] memory: making {mib} MiB of state", file=sys.stderr, flush=True)
        data = work / "state"
        files = make_state(data, mib)
        store, repo = work / "store", work / "repo"
        run([CKPT, "init", str(store)])
        run(["restic", "--repo", str(repo), "--quiet", "init"], env=RESTIC_ENV)
        os.sync()
        out: dict[str, Run] = {}
        out["ckpt take"] = ckpt_take(store, data)
        out["restic backup"] = restic_backup(repo, data)
        os.sync()
        out["ckpt restore"] = run([CKPT, "restore", "latest", "--no-state", "--blobs", str(work / "out-c"), "--store", str(store)])
        out["restic restore"] = run(
            ["restic", "--repo", str(repo), "--quiet", "restore", "latest", "--target", str(work / "out-r")], env=RESTIC_ENV
        )
        # and an incremental take, which reads the digest cache the full take left
        edit_in_place(sorted(files))
        os.sync()
        out["ckpt take, incremental"] = ckpt_take(store, data)
        out["restic backup, incremental"] = restic_backup(repo, data)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"mib": mib, "seconds": {k: v.seconds for k, v in out.items()}, "peak_rss_kib": {k: v.max_rss_kib for k, v in out.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--format-work", type=Path, help=argparse.SUPPRESS)  # one of the one-core rows, in a process of its own
    args = ap.parse_args()
    if args.format_work:
        format_work(args.format_work)
        return 0
    r = measure(args.mib, args.runs, args.workdir)
    report(r)
    if args.json:
        args.json.write_text(json.dumps({**r, "checks": {n: v for n, v, _ in r["checks"]}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

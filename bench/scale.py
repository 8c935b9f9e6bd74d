"""How ckpt's costs grow with the size of a store: synthetic stores of 10,000, 100,000 and
1,000,000 checkpoints, and per size: open + resolve a ref, `ls` of one subject, a take, prune,
verify (structure) and the resident memory of the in-memory object index per object.

    python -m bench.scale                                  # 10,000, 100,000 and 1,000,000
    python -m bench.scale --sizes 10000,100000             # a quicker run
    python -m bench.scale --workdir /var/tmp/ckpt-scale    # keep the built stores there

The stores are built through the library (`Encoder`, `Transaction`, `Manifest`,
`write_manifest`, the refs), with the store's files written without fsync (a build, not
a measurement), and kept under --workdir between runs (a file `built` says a store is
complete; delete the directory to build again). Each checkpoint is one step of one of
--subjects agents: a section holding the step, a ~200-byte note of its own and a ~1 KiB
context its agent shares with its other steps: one new object a step (the section, the
note inline in it) and one shared object an agent (the context), so a store of N
checkpoints holds N + --subjects objects. A batch of --batch checkpoints shares one pack
and one index file, as after a repack (a store whose every take left its own index file
is bench.take's).

Measured on a fresh `Store` each run (median of --runs):

- `open + resolve + manifest`: `Store.open`, `resolve` of a subject's latest, its manifest;
  `+ read root`: and its root object read, which needs the object index;
- `index load`: once from every index file (cache/index-snapshot deleted first), then
  (median) as the runs above found it: from the snapshot a store of more than 64 index
  files keeps, and the index files written since;
- `ls subject`: `list_checkpoints` of one of the --subjects agents (1% of the store at
  100 subjects; the catalog, cache/catalog, is built once while the store is built, as
  the first `ckpt ls` would), and of the subject the takes below made (--takes + 1
  checkpoints, whatever the store's size), once the manifests directory settled;
- `take (first)`: the first `ckptcli.take` of a new subject in a fresh `Store` (loads the index),
  on a copy of the store (above --prune-max, on the store itself);
  `take (next)`: the median of the following takes into the same `Store`;
- `prune --dry-run` keep-last 1 (a real prune rewrites the store: --real-prune does it,
  on the copy the takes went to); it reads every manifest, so it is left out above
  --prune-max checkpoints (default 100,000: minutes at 1,000,000);
- `verify`: structure of the takes' subject (`ckpt verify agent:probe`), and of every
  checkpoint with --full-verify;
- `index bytes/object`: tracemalloc's count of what loading the index left allocated,
  divided by its objects (the RSS growth is in the JSON: the allocator reuses freed
  memory, so it says little).

It prints a table and, when matplotlib is installed, plots every cost against the store's
size on log axes (docs/img/scale.png, or --png). A measurement, not a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.common import workdir as made

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
BUILD_VERSION = 1  # bump when the builder changes what it writes
PROBE = "agent:probe"  # the subject the takes go to: its history is short at every size


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _text(rng: random.Random, n: int) -> str:
    words = ["state", "tool", "call", "agent", "result", "plan", "step", "memory", "note", "value", "retry", "ok"]
    out: list[str] = []
    size = 0
    while size < n:
        w = rng.choice(words) + str(rng.randrange(1000))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def build(path: Path, n: int, subjects: int, batch: int) -> dict[str, Any]:
    """A store of `n` checkpoints at `path`, built through the library (no fsync)."""
    from ckptcli.document import split_document
    from ckptcli.format.encode import Encoder
    from ckptcli.format.manifest import Manifest, Subject
    from ckptcli.store import catalog
    from ckptcli.store.backend import LocalBackend
    from ckptcli.store.repository import Store

    class Unsynced(LocalBackend):
        """Writes files in place, unsynced: the builder's only shortcut."""

        def write_atomic(self, path: str, data: bytes) -> None:
            dest = self.root / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as fh:
                fh.write(data)

        def write_atomic_many(self, items: Any) -> None:
            for p, d in items:
                self.write_atomic(p, d)

    if path.exists():
        shutil.rmtree(path)
    Store.init(path).close()
    store = Store.open(path)
    store.backend = Unsynced(path)
    rng = random.Random(n)
    contexts = [_text(rng, 1024) for _ in range(subjects)]
    subj = [Subject("agent", f"s{k}") for k in range(subjects)]
    head: dict[int, bytes] = {}
    t0 = time.perf_counter()
    base_ns = time.time_ns() - n * 1_000_000_000  # one checkpoint a second, up to now
    for start in range(0, n, batch):
        txn = store.transaction()
        enc = Encoder(txn, cdc=store.config.cdc)
        pending = []
        for i in range(start, min(n, start + batch)):
            k = i % subjects
            state = {"memory": {"step": i, "note": f"{i} " + _text(rng, 200), "context": contexts[k]}}
            layout, sections = split_document(state)
            layout["format"] = "python"
            encoded = {name: enc.encode_root(value, where=name) for name, value in sections.items()}
            m = Manifest(
                subject=subj[k],
                sections=encoded,
                layout=layout,
                parents=[head[k]] if k in head else [],
                created_ns=base_ns + i * 1_000_000_000,
                producer={"name": "bench.scale"},
                labels={"run": str(i // 1000)},
                message=f"step {i}",
                format_version=store.version,
            )
            pending.append((k, m))
        txn.commit()
        for k, m in pending:
            head[k] = store.write_manifest(m)
        if start // batch % 100 == 0:
            done = min(n, start + batch)
            print(f"[bench] building {n}: {done} checkpoints ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    for k, cid in head.items():
        store.write_ref(store.latest_ref(subj[k]), cid, "take")
    catalog.rows(store)  # what the first `ckpt ls` leaves behind
    objects = len(store.index())
    store.close()
    info = {"version": BUILD_VERSION, "checkpoints": n, "subjects": subjects, "batch": batch, "objects": objects}
    info["build_s"] = time.perf_counter() - t0
    (path / "built").write_text(json.dumps(info))
    return info


def ensure(workdir: Path, n: int, subjects: int, batch: int) -> tuple[Path, dict[str, Any]]:
    path = workdir / f"store-{n}"
    marker = path / "built"
    if marker.exists():
        info = dict(json.loads(marker.read_text()))
        if (info.get("version"), info.get("subjects"), info.get("batch")) == (BUILD_VERSION, subjects, batch):
            return path, info
    return path, build(path, n, subjects, batch)


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def _timed(fn: Any, runs: int) -> float:
    times = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return _median(times)


def measure(
    path: Path, info: dict[str, Any], runs: int, takes: int, full_verify: bool, real_prune: bool, prune_max: int, ls_max: int
) -> dict[str, Any]:
    import ckptcli
    from ckptcli.format.ev import EXT_REF, unpack_ev, walk_references
    from ckptcli.listing import ListFilter, list_checkpoints
    from ckptcli.store.prune import Policy, prune
    from ckptcli.store.repository import Store
    from ckptcli.store.verify import verify_store

    subject = "agent:s7"
    out: dict[str, Any] = {"checkpoints": info["checkpoints"], "objects": info["objects"]}
    # the index read from every index file (no snapshot yet), once; a store of more than
    # 64 index files leaves cache/index-snapshot behind, which the runs below read
    snapshot = path / "cache" / "index-snapshot"
    snapshot.unlink(missing_ok=True)
    gc.collect()
    t0 = time.perf_counter()
    st = Store.open(path)
    st.index()
    out["index_load_files_s"] = time.perf_counter() - t0
    st.close()
    out["snapshot"] = snapshot.exists()

    def open_only() -> None:
        st = Store.open(path)
        st.manifest(st.resolve(subject))
        st.close()

    out["open_resolve_only_s"] = _timed(open_only, runs)

    def open_resolve() -> None:
        st = Store.open(path)
        cid = st.resolve(subject)
        m = st.manifest(cid)
        for name, ev in m.sections.items():
            for ref in walk_references(unpack_ev(ev, name)):
                if ref.code == EXT_REF:  # the section's root object: found through the index
                    st.get(ref.oid)
        st.close()

    out["open_resolve_s"] = _timed(open_resolve, runs)

    def ls_subject() -> None:
        st = Store.open(path)
        got = list_checkpoints(st, ListFilter(subject=subject))
        assert got
        st.close()

    if info["checkpoints"] <= ls_max:
        out["ls_subject_s"] = _timed(ls_subject, runs)

    # the index alone: its memory, traced, and the RSS it adds
    def load() -> None:
        st = Store.open(path)
        st.index()
        st.close()

    out["index_load_s"] = _timed(load, runs)
    gc.collect()
    st = Store.open(path)
    rss0 = _rss()
    tracemalloc.start()
    idx = st.index()
    traced, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.collect()
    out["index_rss_bytes"] = _rss() - rss0
    out["index_bytes_per_object"] = traced / max(1, len(idx))
    out["index_rss_per_object"] = out["index_rss_bytes"] / max(1, len(idx))
    del idx
    st.close()

    # takes go to a copy, so that the cached store stays as built; above --prune-max
    # (copying a million files takes minutes) to the store itself, which then holds a
    # few more checkpoints of one subject
    copy = info["checkpoints"] <= prune_max
    work = path.parent / f"{path.name}-take" if copy else path
    if copy:
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(path, work, ignore=shutil.ignore_patterns("built"))
    try:
        st = ckptcli.open_store(work)
        rng = random.Random(1)
        state = {"memory": {"step": -1, "note": _text(rng, 200), "context": _text(rng, 1024)}}
        t0 = time.perf_counter()
        ckptcli.take(st, state, subject=PROBE)
        out["take_first_s"] = time.perf_counter() - t0
        times = []
        for i in range(takes):
            state["memory"]["step"] = i
            state["memory"]["note"] = f"{i} " + _text(rng, 200)
            t0 = time.perf_counter()
            ckptcli.take(st, state, subject=PROBE)
            times.append(time.perf_counter() - t0)
        out["take_next_s"] = _median(times)
        st.close()

        # ls of the new subject: its few checkpoints among all the others, once the
        # manifests directory has settled (the first run reads the catalog, the others
        # the subject's own rows)
        def ls_probe() -> None:
            st = Store.open(work)
            got = list_checkpoints(st, ListFilter(subject=PROBE))
            assert len(got) >= takes + 1
            st.close()

        if info["checkpoints"] <= ls_max:
            time.sleep(Store.INDEX_DIR_SETTLED_NS / 1e9 + 0.5)
            out["ls_probe_s"] = _timed(ls_probe, runs)

        if info["checkpoints"] <= prune_max:
            st = Store.open(work)
            t0 = time.perf_counter()
            prune(st, Policy(keep_last=1), dry_run=not real_prune)
            out["prune_s"] = time.perf_counter() - t0
            out["prune_real"] = real_prune
            st.close()

        st = Store.open(work)
        t0 = time.perf_counter()
        verify_store(st, [PROBE], read_data=False)
        out["verify_subject_s"] = time.perf_counter() - t0
        st.close()
        if full_verify:
            st = Store.open(path)
            t0 = time.perf_counter()
            verify_store(st, None, read_data=False)
            out["verify_all_s"] = time.perf_counter() - t0
            st.close()
    finally:
        if copy:
            shutil.rmtree(work, ignore_errors=True)
    return out


ROWS = [
    ("open_resolve_only_s", "open + resolve + manifest", "ms"),
    ("open_resolve_s", "open + resolve + read root", "ms"),
    ("ls_subject_s", "ls of one subject (1% of the store)", "ms"),
    ("ls_probe_s", "ls of one subject (--takes + 1)", "ms"),
    ("take_first_s", "take, first in a Store", "ms"),
    ("take_next_s", "take, next (median)", "ms"),
    ("index_load_files_s", "index load, every index file", "ms"),
    ("index_load_s", "index load (snapshot if any)", "ms"),
    ("prune_s", "prune keep-last 1", "ms"),
    ("verify_subject_s", "verify (structure), one subject", "ms"),
    ("verify_all_s", "verify (structure), all", "ms"),
    ("index_bytes_per_object", "index bytes/object (traced)", "B"),
]


def report(results: list[dict[str, Any]]) -> str:
    head = f"{'':<34}" + "".join(f"{r['checkpoints']:>14,}" for r in results)
    lines = [head, f"{'objects':<34}" + "".join(f"{r['objects']:>14,}" for r in results)]
    for key, label, unit in ROWS:
        if not any(key in r for r in results):
            continue
        cells = []
        for r in results:
            v = r.get(key)
            if v is None:
                cells.append(f"{'-':>14}")
            elif unit == "ms":
                cells.append(f"{v * 1e3:>11.1f} ms")
            else:
                cells.append(f"{v:>12.1f} B")
        lines.append(f"{label:<34}" + "".join(cells))
    base = results[0]
    for key in ("ls_probe_s", "ls_subject_s", "take_next_s", "open_resolve_s"):
        ratios = ", ".join(f"{r[key] / base[key]:.2f}x at {r['checkpoints']:,}" for r in results[1:] if key in r and base.get(key))
        if ratios:
            lines.append(f"{key}: vs {base['checkpoints']:,}: {ratios}")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], png: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [r["checkpoints"] for r in results]
    for key, label, unit in ROWS:
        if unit != "ms" or not all(key in r for r in results):
            continue
        ax1.plot(xs, [r[key] * 1e3 for r in results], marker="o", label=label)
    ax1.set(xscale="log", yscale="log", xlabel="checkpoints in the store", ylabel="ms", title="cost per operation")
    ax1.legend(fontsize=7)
    for key, label, unit in ROWS:
        if unit == "B" and all(key in r for r in results):
            ax2.plot(xs, [r[key] for r in results], marker="o", label=label)
    ax2.axhline(64, color="grey", linestyle="--", linewidth=1, label="64 B target")
    ax2.set(xscale="log", xlabel="checkpoints in the store", ylabel="bytes per object", title="in-memory object index")
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000", help="checkpoints per store, comma-separated")
    ap.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "ckpt-bench-scale")
    ap.add_argument("--subjects", type=int, default=100, help="agents the checkpoints belong to (default 100)")
    ap.add_argument("--batch", type=int, default=1000, help="checkpoints per pack and index file (default 1000)")
    ap.add_argument("--runs", type=int, default=5, help="runs per measurement, the median is shown (default 5)")
    ap.add_argument("--takes", type=int, default=20, help="takes after the first (default 20)")
    ap.add_argument("--full-verify", action="store_true", help="also verify every checkpoint (slow at 1,000,000)")
    ap.add_argument("--real-prune", action="store_true", help="a real prune (on a copy) instead of --dry-run")
    ap.add_argument("--prune-max", type=int, default=100_000, help="no prune in stores larger than this (default 100,000)")
    ap.add_argument(
        "--ls-max",
        type=int,
        default=500_000,
        help="no ls of a 1%% subject in stores larger than this (default 500,000): their catalog is over the 64 MiB a record may hold,"
        " so it is refused and every manifest read",
    )
    ap.add_argument("--png", type=Path, default=ROOT / "docs" / "img" / "scale.png")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",")]
    made(args.workdir)
    results = []
    for n in sizes:
        path, info = ensure(args.workdir, n, args.subjects, args.batch)
        print(f"[bench] {n:,} checkpoints, {info['objects']:,} objects: measuring", file=sys.stderr, flush=True)
        results.append(measure(path, info, args.runs, args.takes, args.full_verify, args.real_prune, args.prune_max, args.ls_max))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if not args.no_plot and len(results) > 1 and plot(results, args.png):
        print(f"plot: {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""ckpt stats: how much a store holds, and what deduplication and compression save."""

from __future__ import annotations

import sys

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import BarProgress, emit_json, exit_status, human_size, out, safe
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.NO_STORE, ExitCode.CORRUPT, ExitCode.IO_ERROR))
def stats(
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Sizes of a store: standalone (each checkpoint as if stored alone), unique (what
    deduplication leaves), stored (compressed, in packs), on disk; the dedup and
    compression ratios; objects, packs; and the same per subject.

    Standalone counts the encoded objects of each checkpoint, uncompressed, tree nodes
    and map keys included, once per checkpoint that needs them: it is not the sum of
    `ckpt ls`'s SIZE, which counts only the strings, byte strings and files a take
    recorded. The dedup ratio is standalone / unique, the compression ratio unique /
    stored (--json: standalone_bytes, unique_bytes, stored_bytes; logical_bytes, the
    same figure under its old name, is deprecated and goes in a later release).

    Every checkpoint's tree nodes are read (as `ckpt verify` reads them); the data
    itself is not. A checkpoint whose objects cannot all be read is counted with what
    can be, and named (run `ckpt verify`); one whose manifest cannot be read is left
    out, and named with what is wrong with it (--json: unreadable_manifests).

    Examples:

      ckpt stats

      ckpt stats --json | jq .dedup_ratio
    """
    from ckptcli.store.repository import DAMAGED_MANIFEST_HINT
    from ckptcli.store.stats import store_stats

    st = open_store(store)
    s = store_stats(st, progress=BarProgress())
    if as_json:
        emit_json(s.to_dict())
        return
    c = out()
    rows = [
        ("store", f"{s.location} (format {s.format_version})"),
        ("checkpoints", f"{s.checkpoints} of {s.subjects} subject(s){_left_out(s.unreadable_manifests)}"),
        ("standalone", human_size(s.standalone_bytes)),
        ("unique", f"{human_size(s.unique_bytes)} (dedup ratio {s.dedup_ratio:.2f}x)"),
        ("stored", f"{human_size(s.stored_bytes)} (compression ratio {s.compression_ratio:.2f}x)"),
        (
            "objects",
            f"{s.objects} needed, {s.indexed_objects} indexed ({human_size(s.unreferenced_bytes)} needed by no "
            "checkpoint: `ckpt prune` removes it)",
        ),
        (
            "on disk",
            f"{s.packs} pack(s) {human_size(s.pack_bytes)}, {s.index_files} index file(s), manifests {human_size(s.manifest_bytes)}",
        ),
    ]
    for key, value in rows:
        c.print(f"{key + ':':<13}{value}", markup=False, highlight=False)
    if s.per_subject:
        c.print("", markup=False)
        c.print(f"{'SUBJECT':<32}{'CHECKPOINTS':>12}{'STANDALONE':>12}{'UNIQUE':>12}{'STORED':>12}", markup=False, highlight=False)
        for subject, sub in sorted(s.per_subject.items()):
            c.print(
                f"{safe(subject):<32}{sub.checkpoints:>12}{human_size(sub.standalone_bytes):>12}{human_size(sub.unique_bytes):>12}{human_size(sub.stored_bytes):>12}",
                markup=False,
                highlight=False,
            )
    for cid, why in list(s.unreadable_manifests.items())[:5]:
        sys.stderr.write(f"ckpt: warning: checkpoint {cid[:12]} is left out: {safe(why)}; {DAMAGED_MANIFEST_HINT}\n")
    for cid in s.unreadable[:5]:
        sys.stderr.write(f"ckpt: warning: checkpoint {cid[:12]} needs objects that cannot be read; run `ckpt verify`\n")


def _left_out(unreadable: dict[str, str]) -> str:
    """What the count of checkpoints leaves out (named on stderr), for its line."""
    if not unreadable:
        return ""
    shown = ", ".join(cid[:12] for cid in list(unreadable)[:3]) + (" ..." if len(unreadable) > 3 else "")
    return f" ({len(unreadable)} more left out: manifest cannot be read: {shown})"

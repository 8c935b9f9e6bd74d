"""Deterministic demo data for the TUI's tests, snapshot tests and docs screenshots.

Checkpoints are written through the format's own pieces (Encoder, Manifest) rather than
`api.take`, so that their creation times, producer and deps are fixed and every id is
the same on every machine and Python version: the snapshots show ids and times.

The store (`build_demo_store`):

    agent:support-bot   root (schema 1) -> triage -> [known-good] -> recorded tail (40 events)
                        -> migration to schema 2 (latest); and a fork of the recorded
                        checkpoint at seq 20 (branch try-again) with one child
    workflow:nightly    extract -> (load-a, load-b) -> merge of both (blobs: a small directory)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ckptcli
from ckptcli.api import split_document
from ckptcli.format.manifest import Manifest, Subject
from ckptcli.format.values import Encoder
from ckptcli.history.events import Reducers, event_from_map
from ckptcli.store.repository import Store

T0 = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z
MINUTE = 60 * 10**9
PRODUCER = {"name": "ckptcli", "version": "demo"}


def write(
    store: Store,
    state: Any,
    *,
    subject: str,
    at: int,
    parents: list[bytes] | None = None,
    labels: dict[str, str] | None = None,
    message: str = "",
    schema_version: int | None = None,
    blobs: Any = None,
) -> bytes:
    """One checkpoint with a fixed creation time (minutes after T0); returns its id."""
    layout, sections = split_document(state)
    layout["format"] = "json"
    txn = store.transaction()
    enc = Encoder(txn, cdc=store.config.cdc)
    encoded = {name: enc.encode_root(value, where=name) for name, value in sections.items()}
    if blobs is not None:
        encoded["blobs"] = enc.encode_root(blobs, where="blobs")
    txn.commit()
    subj = Subject.parse(subject)
    m = Manifest(
        subject=subj,
        sections=encoded,
        layout=layout,
        parents=list(parents or []),
        producer=dict(PRODUCER),
        labels=dict(labels or {}),
        message=message,
        created_ns=T0 + at * MINUTE,
        schema_version=schema_version,
        format_version=store.version,
    )
    cid = store.write_manifest(m)
    store.advance_latest(subj, cid, m.created_ns)
    return cid


def demo_events(first_seq: int, n: int, t0: int) -> list[dict[str, Any]]:
    """A support agent's work, as events: user messages, replies, tool calls, plan steps."""
    out: list[dict[str, Any]] = []
    seq = first_seq
    ts = t0

    def add(kind: str, **fields: Any) -> int:
        nonlocal seq, ts
        out.append({"seq": seq, "ts": ts, "kind": kind, **fields})
        seq += 1
        ts += 1_500_000_000  # 1.5 s apart
        return seq - 1

    k = 0
    while len(out) < n:
        k += 1
        inp = add("message.append", message={"role": "user", "content": f"Where is order {4700 + k}?"})
        add("plan.push", item={"step": f"look up order {4700 + k}", "status": "running"}, cause=inp)
        add("tool.call", call_id=f"call-{k}", tool="orders.lookup", args={"order": 4700 + k}, cause=inp)
        if k % 4 == 3:
            add("tool.result", call_id=f"call-{k}", status="error", error="timeout after 30 s", cause=inp)
            add("error", message=f"orders.lookup failed for {4700 + k}", type="ToolFailed", cause=inp)
        else:
            add("tool.result", call_id=f"call-{k}", result={"status": "shipped", "eta": f"2026-01-0{2 + k % 7}"}, cause=inp)
        add("memory.set", path=["orders", str(4700 + k)], value="shipped" if k % 4 != 3 else "unknown", cause=inp)
        add("plan.update", value="done", path=["status"], cause=inp)
        add("plan.pop", cause=inp)
        add("message.append", message={"role": "assistant", "content": f"Order {4700 + k} is on its way."}, cause=inp)
        if k % 3 == 0:
            add("checkpoint", note=f"after order {4700 + k}")
    return out[:n]


def live(state: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """The state after `events` (the reducers of ckptcli.history.events)."""
    red = Reducers()
    out = state
    for i, e in enumerate(events):
        out = red.apply(out, event_from_map(e, f"events[{i}]"))
    return out


def build_demo_store(path: Path, *, tail: int = 40) -> dict[str, bytes]:
    """The demo store at `path` (see the module's docstring); returns its ids by name."""
    store = ckptcli.init_store(path)
    ids: dict[str, bytes] = {}
    base: dict[str, Any] = {
        "memory": {"goal": "answer the support queue", "customer": {"name": "Ada", "tier": "gold"}, "messages": []},
        "plan": [],
        "tools": [],
    }
    bot = "agent:support-bot"
    ids["root"] = write(store, {**base, "events": []}, subject=bot, at=0, labels={"ticket": "4711"}, message="first", schema_version=1)
    s1 = {**base, "memory": {**base["memory"], "mood": "calm"}, "plan": [{"step": "triage the queue", "status": "running"}]}
    ids["triage"] = write(
        store, {**s1, "events": []}, subject=bot, at=5, parents=[ids["root"]], labels={"ticket": "4711"}, message="triage", schema_version=1
    )
    s2 = {**s1, "memory": {**s1["memory"], "queue": [4711, 4712, 4713]}}
    ids["good"] = write(
        store,
        {**s2, "events": []},
        subject=bot,
        at=10,
        parents=[ids["triage"]],
        labels={"ticket": "4711"},
        message="queue read",
        schema_version=1,
    )
    store.set_tag("known-good", ids["good"])
    events = demo_events(1, tail, T0 + 11 * MINUTE)
    ids["recorded"] = write(
        store,
        {**s2, "events": events},
        subject=bot,
        at=20,
        parents=[ids["good"]],
        labels={"ticket": "4711", "events.seq": str(tail), "recorder.run": "0" * 32},
        message=f"recorder: {tail} events",
        schema_version=1,
    )
    after = live(s2, events)
    fork_state = live(s2, events[:20])
    ids["fork"] = write(
        store,
        {**fork_state, "events": []},
        subject=bot,
        at=25,
        parents=[ids["recorded"]],
        labels={"ticket": "4711", "fork.of": ids["recorded"].hex(), "fork.at": "20", "events.seq": "20"},
        message="fork of the recorded run at seq 20",
        schema_version=1,
    )
    store.set_branch("try-again", ids["fork"])
    ids["fork2"] = write(
        store,
        {**fork_state, "memory": {**fork_state["memory"], "mood": "curious"}, "events": []},
        subject=bot,
        at=27,
        parents=[ids["fork"]],
        labels={"ticket": "4711"},
        message="on the fork",
        schema_version=1,
    )
    store.set_branch("try-again", ids["fork2"])
    migrated = {**after, "memory": {**after["memory"], "customer": {**after["memory"]["customer"], "segment": "retail"}}}
    ids["migrated"] = write(
        store,
        {**migrated, "events": []},
        subject=bot,
        at=30,
        parents=[ids["recorded"]],
        labels={"ticket": "4711", "events.seq": str(tail)},
        message="migrate schema 1 -> 2",
        schema_version=2,
    )
    wf = "workflow:nightly"
    ids["extract"] = write(store, {"memory": {"rows": 0}, "plan": [{"step": "extract"}]}, subject=wf, at=1, message="extract")
    ids["load-a"] = write(
        store, {"memory": {"rows": 120}, "plan": [{"step": "load a"}]}, subject=wf, at=2, parents=[ids["extract"]], message="load a"
    )
    ids["load-b"] = write(
        store, {"memory": {"rows": 80}, "plan": [{"step": "load b"}]}, subject=wf, at=3, parents=[ids["extract"]], message="load b"
    )
    files = {
        "type": "dir",
        "mode": 0o755,
        "mtime_ns": T0,
        "entries": {
            "report.csv": {"type": "file", "size": 24, "mode": 0o644, "mtime_ns": T0, "data": b"table,rows\na,1200\nb,800\n"},
            "latest": {"type": "symlink", "target": "report.csv"},
            "logs": {
                "type": "dir",
                "mode": 0o755,
                "mtime_ns": T0,
                "entries": {"run.log": {"type": "file", "size": 3, "mode": 0o600, "mtime_ns": T0, "data": b"ok\n"}},
            },
        },
    }
    ids["merge"] = write(
        store,
        {"memory": {"rows": 200}, "plan": [{"step": "report"}]},
        subject=wf,
        at=4,
        parents=[ids["load-a"], ids["load-b"]],
        message="merge loads",
        blobs={"out": files},
    )
    store.set_tag("nightly-ok", ids["merge"])
    return ids


def export_demo(store: Store, cid: bytes, path: Path) -> Path:
    """The checkpoint `cid` as a checkpoint file."""
    from ckptcli.api import Checkpoint, export_checkpoint

    export_checkpoint(Checkpoint(store, cid), path)
    return path

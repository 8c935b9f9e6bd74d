"""SIGKILL of take, prune and `migrate --format` against a store on a real S3 server on
loopback (moto), at 20 or more points each (at every write request, where an operation
makes fewer than 11: a take): just before and just after the n-th write request (put,
conditional put, delete, multipart commit). After each kill the store
verifies, every committed checkpoint restores its state exactly, and the same operation
run again succeeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from tests import stress
from tests.helpers_faults import child_env
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures

POINTS = stress.count(11, 4)  # kill points per operation, each before and after: 22 runs at full size, 8 bounded

#: `ckpt ARGS` in a process that SIGKILLs itself just before or after its n-th write
#: request to S3 (CKPT_FAULT="N:before|after"); CKPT_FAULT_TRACE=file logs each request
S3_FAULT = r"""
import os, signal, sys
spec = os.environ.get("CKPT_FAULT", "")
trace = os.environ.get("CKPT_FAULT_TRACE", "")
at, when = (int(spec.split(":")[0]), spec.split(":")[1]) if spec else (-1, "")
count = [0]
import ckptcli.store.backends.s3 as s3

def hook(name, fn):
    def wrapper(*args, **kwargs):
        count[0] += 1
        n = count[0]
        if trace:
            with open(trace, "a") as fh:
                fh.write(f"{name}\n")
        if n == at and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = fn(*args, **kwargs)
        if n == at and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    return wrapper

for name in ("put", "put_if_absent", "put_if_match", "delete"):
    setattr(s3.S3Backend, name, hook(name, getattr(s3.S3Backend, name)))
s3._S3Writer.commit = hook("commit", s3._S3Writer.commit)
from ckptcli.cli.app import run
sys.exit(run(sys.argv[1:]))
"""


def _ckpt(*args: str, fault: str = "", trace: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    env = child_env({"CKPT_FAULT": fault, **({"CKPT_FAULT_TRACE": str(trace)} if trace else {})})
    return subprocess.run([sys.executable, "-c", S3_FAULT, *args], capture_output=True, env=env, timeout=300, check=False)


def _state(i: int) -> dict[str, Any]:
    return {"memory": {"turn": i, "notes": [f"note {j}" for j in range(i % 7)]}, "plan": [i]}


def _setup(url: str, tmp_path: Path, takes: int, version: int = 2) -> dict[str, dict[str, Any]]:
    """A store at `url` with `takes` checkpoints (each with a blob); returns id -> state."""
    st = api.init_store(url, version)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    states = {}
    for i in range(takes):
        (work / "data.bin").write_bytes(bytes([i]) * 200_000 + os.urandom(50_000))
        result = api.take(st, _state(i), subject="agent:k", blobs={"work": work})
        states[result.id.hex()] = _state(i)
    st.close()
    return states


def _check(url: str, states: dict[str, dict[str, Any]]) -> None:
    st = api.open_store(url)
    report = api.verify(st, read_data=True)
    assert report.ok, [p.message for p in report.problems]
    for cid in st.manifest_ids():
        ck = api.open_checkpoint(cid.hex(), st)
        assert ck.state() == states[cid.hex()], cid.hex()
    st.close()


def _points(total: int) -> list[str]:
    """POINTS request numbers spread over 1..total, each killed before and after."""
    picks = sorted({1 + (total - 1) * k // max(1, POINTS - 1) for k in range(POINTS)})
    return [f"{n}:{when}" for n in picks for when in ("before", "after")]


def _run_kills(bucket: S3Bucket, tmp_path: Path, name: str, prepare: Any, op: Any, after: Any) -> tuple[int, int]:
    """Returns: (the runs killed, the operation's write requests)."""
    trace = tmp_path / f"{name}.trace"
    url = f"{bucket.url}/{name}-trace"
    states = prepare(url)
    done = _ckpt(*op(url, tmp_path), trace=trace)
    assert done.returncode == 0, done.stderr.decode()
    total = len(trace.read_text().splitlines())
    assert total >= 4, f"{name}: only {total} write requests"
    runs = 0
    for i, point in enumerate(_points(total)):
        url = f"{bucket.url}/{name}-{i}"
        states = prepare(url)
        killed = _ckpt(*op(url, tmp_path), fault=point)
        assert killed.returncode in (-9, 0), (point, killed.stderr.decode())
        runs += 1
        states = after(url, states)
        _check(url, states)
        again = _ckpt(*op(url, tmp_path))
        assert again.returncode == 0, (point, again.stderr.decode())
        _check(url, after(url, states))
    return runs, total


@pytest.mark.slow
def test_kill_a_take_on_s3_at_every_stage(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    doc = tmp_path / "next.json"
    doc.write_text(json.dumps(_state(99)))
    work = tmp_path / "big"
    work.mkdir()
    (work / "model.bin").write_bytes(os.urandom(40 << 20))  # three packs on object storage

    def after(url: str, states: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        st = api.open_store(url)
        found = {cid.hex() for cid in st.manifest_ids()}
        st.close()
        return {**states, **{cid: _state(99) for cid in found - set(states)}}  # the take committed, or not at all

    runs, total = _run_kills(
        s3_bucket,
        tmp_path,
        "take",
        lambda url: _setup(url, tmp_path, 2),
        lambda url, _tmp: ["--store", url, "take", str(doc), "-S", "agent:k", "--blob", f"big={work}"],
        after,
    )
    # the take's write requests (its lock object, head hint, three packs of 15 MiB, index
    # file, manifest, ref, reflog, and the lock's deletion): each killed before and after
    assert runs >= 2 * min(POINTS, total) and total >= 10, (runs, total)


@pytest.mark.slow
def test_kill_a_prune_on_s3_at_every_stage(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    runs, total = _run_kills(
        s3_bucket,
        tmp_path,
        "prune",
        lambda url: _setup(url, tmp_path, 6),
        lambda url, _tmp: ["--store", url, "prune", "--keep-last", "2", "--lock-wait", "60"],
        lambda _url, states: states,
    )
    assert runs >= 2 * min(POINTS, total)  # every kill point, each before and after (fewer points than POINTS: all)


@pytest.mark.slow
def test_kill_a_format_migration_on_s3_at_every_stage(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    def after(url: str, states: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return states

    runs, total = _run_kills(
        s3_bucket,
        tmp_path,
        "migrate",
        lambda url: _setup(url, tmp_path, 4, version=1),
        lambda url, _tmp: ["--store", url, "migrate", "--format", "--lock-wait", "60"],
        after,
    )
    assert runs >= 2 * min(POINTS, total)  # every kill point, each before and after (fewer points than POINTS: all)
    st = api.open_store(f"{s3_bucket.url}/migrate-0")
    assert st.version == 2  # the run after the kill finished the upgrade
    st.close()

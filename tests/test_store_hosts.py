"""Many hosts on one store: 4 processes, each naming its own host (CKPT_HOST), take 30
checkpoints each into one store while `ckpt prune --keep-last` runs in a loop; every
take the policy keeps restores exactly, `verify --read-data` is clean, nothing is lost.
On a real S3 server on loopback (moto) and on a local store."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from tests import stress
from tests.conftest import run_ckpt
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures

HOSTS = 4
TAKES = stress.count(30, 10)
KEEP = 5

#: one "host": takes TAKES checkpoints of its own subject, each with a state naming it and
#: a blob whose bytes are derived from it, and records every id it was given
WORKER = textwrap.dedent(
    """
    import hashlib, json, os, sys
    from pathlib import Path
    from ckptcli import api
    import time
    store, host, takes, out, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), float(sys.argv[5])
    work = out.parent / f"work-{host}"
    work.mkdir(parents=True, exist_ok=True)
    shared = hashlib.sha256(b"shared").digest() * 4096  # the same 128 KiB in every host's blob: dedup across hosts
    st = api.open_store(store if "://" in store else Path(store))
    with out.open("w") as log:
        for i in range(takes):
            own = hashlib.sha256(f"{host}-{i}".encode()).digest() * 512
            (work / "data.bin").write_bytes(shared + own)
            state = {"memory": {"host": host, "turn": i}, "plan": [host, i]}
            result = api.take(st, state, subject=f"agent:{host}", blobs={"work": work})
            log.write(json.dumps({"id": result.id.hex(), "host": host, "turn": i}) + "\\n")
            log.flush()
            time.sleep(pause)
    st.close()
    """
)


def _run_hosts(location: str, tmp_path: Path, pause: float = 0.0) -> dict[str, list[dict[str, Any]]]:
    """Start the hosts and a pruner looping until they are done; returns each host's takes.
    `pause`: seconds each host waits between takes (a local store takes 120 in less time
    than one prune: without a pause the pruner would not overlap them)."""
    procs = []
    for h in range(HOSTS):
        host = f"host-{h}"
        env = {**os.environ, "CKPT_HOST": host}
        env.pop("CKPT_STORE", None)
        log = tmp_path / f"{host}.jsonl"
        argv = [sys.executable, "-c", WORKER, location, host, str(TAKES), str(log), str(pause)]
        procs.append((host, log, subprocess.Popen(argv, env=env)))
    prunes = 0
    while any(p.poll() is None for _h, _l, p in procs):
        got = run_ckpt("--store", location, "prune", "--keep-last", str(KEEP), "--lock-wait", "120", env={"CKPT_HOST": "pruner"})
        assert got.returncode == 0, got.stderr.decode()
        prunes += 1
        time.sleep(0.05)
    for host, _log, p in procs:
        assert p.wait(timeout=600) == 0, f"{host} failed"
    assert prunes >= 2, "the pruner ran while the hosts took"
    return {host: [json.loads(line) for line in log.read_text().splitlines()] for host, log, _p in procs}


def _check(location: str, takes: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    final = run_ckpt("--store", location, "prune", "--keep-last", str(KEEP), "--lock-wait", "120")
    assert final.returncode == 0, final.stderr.decode()
    st = api.open_store(location if "://" in location else Path(location))
    kept = {cid.hex() for cid in st.manifest_ids()}
    for host, records in takes.items():
        assert len(records) == TAKES, host  # every take succeeded
        assert st.resolve(f"agent:{host}").hex() == records[-1]["id"]  # latest is the last take, never moved back
        survivors = [r for r in records if r["id"] in kept]
        assert [r["id"] for r in survivors] == [r["id"] for r in records[-KEEP:]], host  # the policy's, no more, no fewer
        for r in survivors:
            ck = api.open_checkpoint(r["id"], st)
            assert ck.state() == {"memory": {"host": host, "turn": r["turn"]}, "plan": [host, r["turn"]]}
            out = tmp_path / "restore" / r["id"][:12]
            ck.restore_blobs(out)
            own = hashlib.sha256(f"{host}-{r['turn']}".encode()).digest() * 512
            assert (out / "work" / "data.bin").read_bytes() == hashlib.sha256(b"shared").digest() * 4096 + own
    report = api.verify(st, read_data=True)
    assert report.ok, [p.message for p in report.problems]
    st.close()


@pytest.mark.slow
def test_four_hosts_take_into_one_s3_store_while_prune_loops(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/fleet"
    api.init_store(url).close()
    _check(url, _run_hosts(url, tmp_path), tmp_path)


@pytest.mark.slow
def test_four_hosts_take_into_one_local_store_while_prune_loops(tmp_path: Path) -> None:
    store = tmp_path / "store"
    api.init_store(store).close()
    _check(str(store), _run_hosts(str(store), tmp_path, pause=0.1), tmp_path)

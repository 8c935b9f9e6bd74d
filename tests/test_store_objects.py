"""Stores on object storage: the everyday verbs on a real S3 server on loopback (moto,
tests/s3_server.py) through the CLI, and on memory:// through the API. The store's
operations there are built from the object contract alone (ckptcli.store.remote)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ckptcli import api
from ckptcli.copy import copy_checkpoints
from ckptcli.errors import ExitCode
from ckptcli.store.backends import open_backend
from ckptcli.store.backends.memory import MemoryBackend
from ckptcli.store.remote import ObjectStoreIO
from tests.conftest import run_ckpt
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures


def _state(tmp_path: Path, n: int) -> tuple[Path, Path]:
    doc = tmp_path / f"state-{n}.json"
    doc.write_text(json.dumps({"memory": {"turn": n, "notes": [f"note {i}" for i in range(n)]}, "plan": list(range(n))}))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "model.bin").write_bytes(os.urandom(3 << 20) if n == 1 else (work / "model.bin").read_bytes()[: 2 << 20] + os.urandom(1 << 20))
    (work / f"log-{n}.txt").write_text("line\n" * 1000 * n)
    return doc, work


def _objects(backend: Any, prefix: str = "") -> dict[str, bytes]:
    return {p: backend.get(p) for p in backend.list_paths(prefix)}


def test_every_verb_on_an_s3_store(s3_bucket: S3Bucket, cli: Any, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/team/agents"
    assert cli("init", url).code == 0
    ids = []
    first_model = b""
    for n in (1, 2):
        doc, work = _state(tmp_path, n)
        first_model = first_model or (work / "model.bin").read_bytes()
        got = cli("--store", url, "take", doc, "-S", "agent:a", "--blob", f"work={work}", "-m", f"turn {n}")
        assert got.code == 0, got.err
        ids.append(got.out.strip())
    listed = json.loads(cli("--store", url, "ls", "--json").out)
    assert [c["id"] for c in listed] == ids[::-1]
    assert cli("--store", url, "show", "latest").out.count(ids[1]) == 1
    diff = cli("--store", url, "diff", ids[0], ids[1])
    assert diff.code == 0 and "turn: 1 -> 2" in diff.out
    verified = cli("--store", url, "verify", "--read-data")
    assert verified.code == 0 and "no problems found" in verified.out, verified.err
    out = tmp_path / "restored"
    assert cli("--store", url, "restore", ids[0], "--blobs", out, "--no-state").code == 0
    assert json.loads(cli("--store", url, "cat", ids[1]).out)["sections"]["memory"]["turn"] == 2
    assert (out / "work" / "model.bin").read_bytes() == first_model
    assert (out / "work" / "log-1.txt").read_text() == "line\n" * 1000 and not (out / "work" / "log-2.txt").exists()
    pruned = cli("--store", url, "prune", "--keep-last", "1")
    assert pruned.code == 0, pruned.err
    assert [c["id"] for c in json.loads(cli("--store", url, "ls", "--json").out)] == [ids[1]]
    assert cli("--store", url, "verify", "--read-data").code == 0
    leftovers = [p for p in open_backend(url).list_paths("") if p.startswith(("locks/", "tmp/"))]
    assert leftovers == []  # every lock object released, nothing uploaded through a temp name


def test_copy_local_to_s3_to_local_is_byte_identical_and_sends_nothing_twice(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    src = api.init_store(tmp_path / "src")
    for n in (1, 2, 3):
        doc, work = _state(tmp_path, n)
        api.take(src, json.loads(doc.read_text()), subject="agent:a", blobs={"work": work})
    url = f"{s3_bucket.url}/copy"
    remote = api.init_store(url)
    back = api.init_store(tmp_path / "back")
    first = copy_checkpoints(src, remote, None)
    assert first.objects_sent > 0
    assert copy_checkpoints(src, remote, None).objects_sent == 0  # the second time: nothing to send
    copy_checkpoints(remote, back, None)
    ids = sorted(src.manifest_ids())
    assert sorted(remote.manifest_ids()) == sorted(back.manifest_ids()) == ids
    for cid in ids:
        assert src.manifest_bytes(cid) == remote.manifest_bytes(cid) == back.manifest_bytes(cid)
    for oid, _entry in src.index().items():
        assert src.read_checked(oid)[1:] == remote.read_checked(oid)[1:] == back.read_checked(oid)[1:]
    assert api.verify(remote, read_data=True).ok and api.verify(back, read_data=True).ok
    for st in (src, remote, back):
        st.close()


def test_a_flipped_byte_in_an_s3_pack_is_found_and_named(s3_bucket: S3Bucket, cli: Any, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/flip"
    assert cli("init", url).code == 0
    doc, work = _state(tmp_path, 1)
    assert cli("--store", url, "take", doc, "-S", "agent:a", "--blob", f"work={work}").code == 0
    backend = open_backend(url)
    pack = max(backend.list("packs/"), key=lambda info: info.size)
    data = bytearray(backend.get(pack.path))
    data[len(data) // 2] ^= 0x01
    backend.put(pack.path, bytes(data))
    got = cli("--store", url, "verify", "--read-data", "--json")
    assert got.code != 0
    report = json.loads(got.out)
    kinds = {(p["kind"], p["name"]) for p in report["problems"]}
    assert ("pack", pack.path) in kinds, report  # the pack, and the object in it, each named
    assert any(kind == "object" for kind, _name in kinds), report


def test_the_cli_in_a_subprocess_on_s3(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/proc"
    assert run_ckpt("init", url).returncode == 0
    doc, work = _state(tmp_path, 1)
    took = run_ckpt("--store", url, "take", doc, "-S", "process:nightly", "--blob", f"work={work}")
    assert took.returncode == 0, took.stderr
    listed = run_ckpt("ls", "--json", env={"CKPT_STORE": url})
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["subject"] == "process:nightly"


def test_bad_store_urls_are_one_line_with_their_exit_code(s3_env: Any, tmp_path: Path) -> None:
    unknown = run_ckpt("--store", "nosuchscheme://x/y", "ls")
    assert unknown.returncode == 4 and unknown.stderr.decode().count("\n") <= 2 and b"Traceback" not in unknown.stderr
    assert b"s3" in unknown.stderr  # it lists the schemes it knows
    missing = run_ckpt("--store", "s3://no-such-bucket-here/x", "ls")
    assert missing.returncode != 0 and b"Traceback" not in missing.stderr
    assert b"bucket" in missing.stderr
    bad_option = run_ckpt("--store-option", "novalue", "--store", "s3://b/x", "ls")
    assert bad_option.returncode == 4 and b"Traceback" not in bad_option.stderr


def test_memory_store_through_the_api(tmp_path: Path) -> None:
    MemoryBackend.forget("api-test")
    st = api.init_store("memory://api-test")
    assert isinstance(st.backend, ObjectStoreIO)
    doc, work = _state(tmp_path, 1)
    first = api.take(st, json.loads(doc.read_text()), subject="agent:m", blobs={"work": work})
    doc, work = _state(tmp_path, 2)
    second = api.take(st, json.loads(doc.read_text()), subject="agent:m", blobs={"work": work})
    again = api.open_store("memory://api-test")
    assert again.resolve("latest") == second.id and again.resolve("latest~1") == first.id
    # the reflog of latest was appended twice, by compare-and-swap
    log = again.backend.read("logs/refs/latest/agent/m").decode().splitlines()
    assert len(log) == 2
    assert api.verify(again, read_data=True).ok
    # a long-lived writer's mark is a lock object named "writers"; gone when closed
    mark = again.backend.mark_writer("saver")
    assert again.backend.live_writers() == [mark.name] and again.backend.live_writers(exclude=mark) == []
    mark.close()
    assert again.backend.live_writers() == []
    assert [p for p in _objects(MemoryBackend("api-test")) if p.startswith(("locks/", "tmp/"))] == []


def _plant_lock(url: str, host: str, age_s: float, exclusive: bool = True) -> None:
    """The lock a process on `host` took `age_s` seconds ago and then lost (killed: it
    never refreshed or released it)."""
    from ckptcli.store import objlocks

    then = time.time() - age_s
    env = objlocks.LockEnv(host=host, pid=4242, user="ops", clock=lambda: then)
    held = objlocks.acquire(open_backend(url), exclusive, wait=0, env=env, command="ckpt prune", refresh_every=3600)
    held._stop.set()  # the process is gone: no refresh, and its lock object stays behind


def test_a_killed_hosts_lock_is_reported_and_unlock_clears_it(s3_bucket: S3Bucket, cli: Any, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/locked"
    assert cli("init", url).code == 0
    doc, _work = _state(tmp_path, 1)
    assert cli("--store", url, "take", doc, "-S", "agent:a").code == 0
    _plant_lock(url, "host-b", age_s=60)  # killed a minute ago on another host: still live for 29 minutes
    blocked = run_ckpt("--store", url, "prune", "--keep-last", "1", "--lock-wait", "0")
    assert blocked.returncode == 9, blocked.stderr
    assert b"host-b" in blocked.stderr and b"pid 4242" in blocked.stderr and b"ckpt unlock" in blocked.stderr
    listed = json.loads(cli("--store", url, "unlock", "--dry-run", "--json").out)
    assert [(lk["host"], lk["stale"]) for lk in listed["locks"]] == [("host-b", False)] and listed["removed"] == []
    assert cli("--store", url, "unlock").code == 0  # a live lock is kept without --remove-all
    assert len(json.loads(cli("--store", url, "unlock", "--dry-run", "--json").out)["locks"]) == 1
    removed = json.loads(cli("--store", url, "unlock", "--remove-all", "--json").out)
    assert len(removed["removed"]) == 1
    assert run_ckpt("--store", url, "prune", "--keep-last", "1", "--lock-wait", "0").returncode == 0
    # one killed 40 minutes ago is stale: it blocks nothing, and plain unlock removes it
    _plant_lock(url, "host-c", age_s=40 * 60)
    assert run_ckpt("--store", url, "prune", "--keep-last", "1", "--lock-wait", "0").returncode == 0
    stale = json.loads(cli("--store", url, "unlock", "--json").out)
    assert [lk["host"] for lk in stale["locks"]] == ["host-c"] and len(stale["removed"]) == 1


def test_unlock_on_a_local_store_says_there_is_nothing_to_unlock(cli: Any, tmp_path: Path) -> None:
    assert cli("init", tmp_path / "s").code == 0
    got = cli("--store", tmp_path / "s", "unlock")
    assert got.code == 0 and "nothing to unlock" in got.out


def test_store_options_name_the_endpoint_from_the_command_line_or_the_environment(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/opts"
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ENDPOINT_URL", "CKPT_STORE_OPTIONS")}  # only the options name the server
    init = subprocess.run(
        [sys.executable, "-m", "ckptcli", "--store-option", f"endpoint={s3_bucket.endpoint}", "init", url],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert init.returncode == 0, init.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "ckptcli", "--store", url, "ls", "--json"],
        capture_output=True,
        env={**env, "CKPT_STORE_OPTIONS": f"endpoint={s3_bucket.endpoint} region=us-east-1"},
        timeout=120,
    )
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr


def test_ranged_reads_of_packs_come_from_a_few_block_requests() -> None:
    from ckptcli.store import remote

    calls: list[tuple[str, int, int]] = []

    class Counting(MemoryBackend):
        def get_range(self, path: str, offset: int, length: int) -> bytes:
            calls.append((path, offset, length))
            return super().get_range(path, offset, length)

    MemoryBackend.forget("ranges")
    objects = Counting("ranges")
    blob = os.urandom(3 * remote._BLOCK + 12345)
    objects.put("packs/ab/pack", blob)
    objects.put("refs/x", b"not a pack")
    io = ObjectStoreIO(objects)
    step = 100_003
    for offset in range(0, len(blob), step):  # a restore reading a pack's objects in order
        assert io.read_range("packs/ab/pack", offset, step) == blob[offset : offset + step]
    assert io.read_range("packs/ab/pack", remote._BLOCK - 10, 20) == blob[remote._BLOCK - 10 : remote._BLOCK + 10]  # across blocks
    assert len([c for c in calls if c[0] == "packs/ab/pack"]) == 4  # one request per block, not one per object
    assert io.read_range("refs/x", 0, 3) == b"not" and calls[-1] == ("refs/x", 0, 3)  # only packs are cached


def test_index_files_and_manifests_come_from_the_local_cache_checked_by_hash(tmp_path: Path) -> None:
    from ckptcli.store.objcache import ObjectCache
    from ckptcli.store.repository import Store, read_config

    gets: list[str] = []

    class Counting(MemoryBackend):
        def get(self, path: str) -> bytes:
            gets.append(path)
            return super().get(path)

        def get_range(self, path: str, offset: int, length: int) -> bytes:  # a record file is read capped, by a range
            gets.append(path)
            return super().get_range(path, offset, length)

    MemoryBackend.forget("cached")
    cache = ObjectCache(tmp_path / "cache")

    def opened() -> Store:
        io = ObjectStoreIO(Counting("cached"), cache)
        return Store(io, read_config(io, "memory://cached/config"), io.url)

    st = api.init_store("memory://cached")
    doc, work = _state(tmp_path, 1)
    taken = api.take(st, json.loads(doc.read_text()), subject="agent:c", blobs={"work": work})
    first = opened()
    assert first.manifest(taken.id).subject.kind == "agent" and len(first.index()) > 0
    fetched = [p for p in gets if p.startswith(("index/", "manifests/"))]
    assert fetched  # the first process fetches them, and keeps them
    gets.clear()
    second = opened()
    assert second.manifest(taken.id).subject.kind == "agent" and len(second.index()) == len(first.index())
    assert [p for p in gets if p.startswith(("index/", "manifests/"))] == []  # the second reads them locally
    # a damaged cached copy is not believed: fetched again, and the cache repaired
    cached = cache.root / taken.id.hex()[:2] / taken.id.hex()
    cached.write_bytes(b"planted")
    gets.clear()
    assert opened().manifest(taken.id).subject.kind == "agent"
    assert f"manifests/{taken.id.hex()}" in gets and cache.get(taken.id.hex()) is not None


def test_no_secret_reaches_a_record_or_a_message(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    from tests.s3_server import SECRET

    url = f"s3://{s3_bucket.name}/secrets"
    assert run_ckpt("init", url).returncode == 0
    doc, _work = _state(tmp_path, 1)
    # a URL with user info or a query is refused (credentials go in the environment or
    # the store options), without echoing them
    refused = run_ckpt("--store", f"s3://AKUSER:PassW0rdX@{s3_bucket.name}/secrets?token=TOKQ9", "take", doc, "-S", "agent:s")
    assert refused.returncode == 2, refused.stderr
    took = run_ckpt("--store-option", f"secret_access_key={SECRET}", "--store", url, "take", doc, "-S", "agent:s")
    assert took.returncode == 0, took.stderr
    log = open_backend(url).get("logs/refs/latest/agent/s").decode()
    reflog = run_ckpt("--store", url, "reflog", "--json").stdout.decode()
    for text in (log, reflog, took.stderr.decode(), refused.stderr.decode()):
        assert SECRET not in text and "PassW0rdX" not in text and "TOKQ9" not in text, text
    assert "secret_access_key=***" in log  # the command is kept, its secrets are not


def test_bad_s3_options_are_one_line_that_does_not_echo_their_values(s3_bucket: S3Bucket) -> None:
    url = f"{s3_bucket.url}/opts2"
    for option in ("endpoint=notaurl", "max_retries=VALUEX1", "unsigned_payload=VALUEX2", "retry_timeout=1e999"):
        got = run_ckpt("--store-option", option, "--store", url, "ls")
        err = got.stderr.decode()
        assert got.returncode == 4 and "Traceback" not in err and "panicked" not in err and err.count("\n") == 1, (option, err)
        assert option.partition("=")[2] not in err, (option, err)
    env_endpoint = run_ckpt("--store", url, "ls", env={"AWS_ENDPOINT_URL": "notaurl"})
    assert env_endpoint.returncode == 4 and b"AWS_ENDPOINT_URL" in env_endpoint.stderr and b"Traceback" not in env_endpoint.stderr


def test_an_endpoint_s_query_is_not_echoed_by_an_error(s3_bucket: S3Bucket) -> None:
    """An unreachable endpoint's error named it whole: `http://127.0.0.1:1/?token=S3cretPW/...`."""
    for how in ("option", "env"):
        endpoint = "http://127.0.0.1:1/?token=S3cretPW9"
        if how == "option":
            got = run_ckpt("--store-option", f"endpoint={endpoint}", "--store", f"{s3_bucket.url}/q", "ls")
        else:
            got = run_ckpt("--store", f"{s3_bucket.url}/q", "ls", env={"AWS_ENDPOINT_URL": endpoint})
        err = got.stderr.decode()
        assert got.returncode in (ExitCode.IO_ERROR, ExitCode.INVALID_INPUT) and err.count("\n") == 1, (how, err)
        assert "S3cretPW9" not in err and "Traceback" not in err, (how, err)


def test_a_key_that_is_no_store_path_is_named_with_what_to_do(s3_bucket: S3Bucket, cli: Any) -> None:
    import http.client
    from urllib.parse import urlsplit

    url = f"{s3_bucket.url}/planted"
    assert cli("init", url).code == 0
    endpoint = urlsplit(s3_bucket.endpoint)
    conn = http.client.HTTPConnection(endpoint.hostname or "", endpoint.port)
    conn.request("PUT", f"/{s3_bucket.name}/planted/locks/../x", body=b"junk")  # http.client sends the path as it is
    assert conn.getresponse().status == 200
    got = run_ckpt("--store", url, "verify")
    err = got.stderr.decode()
    assert got.returncode == 5 and "Traceback" not in err and "'locks/../x': not a store path" in err, err  # skipped, and named
    assert "key locks/../x: not a store path" in got.stdout.decode() and "remove it" in got.stdout.decode()  # a finding of verify


def test_locations_keep_bucket_case_and_refuse_ambiguous_forms(tmp_path: Path) -> None:
    from ckptcli.errors import InvalidInputError
    from ckptcli.store.backends.s3 import redact_url
    from ckptcli.store.repository import store_location

    assert redact_url("s3://user:pw@MixedCase/p?token=t") == "s3://MixedCase/p"
    assert store_location("file:///srv/ckpt") == Path("/srv/ckpt") == store_location("file://localhost/srv/ckpt")
    for bad in ("file://u:FILEPW@localhost/x", "file://otherhost/x"):
        with pytest.raises(InvalidInputError) as caught:
            store_location(bad)
        assert "FILEPW" not in str(caught.value)
    with pytest.raises(InvalidInputError) as refused:
        api.open_store("memory://u:MEMPW@n")
    assert "MEMPW" not in str(refused.value)


class _CountingRanges(MemoryBackend):
    """A memory:// bucket that records each ranged GET and the thread that made it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.ranges: list[tuple[str, int, str]] = []

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        import threading

        self.ranges.append((path, offset, threading.current_thread().name))
        return super().get_range(path, offset, length)


def _big_blob_store(tmp_path: Path, name: str, mib: int) -> tuple[Any, bytes, Path]:
    """A memory:// store holding one checkpoint of one `mib` MiB random file."""
    MemoryBackend.forget(name)
    st = api.init_store(f"memory://{name}")
    work = tmp_path / "work"
    work.mkdir()
    data = os.urandom(mib << 20)
    (work / "big.bin").write_bytes(data)
    taken = api.take(st, {"n": 1}, subject="agent:big", blobs={"work": work})
    return taken, data, work


def _opened(name: str) -> tuple[Any, _CountingRanges]:
    from ckptcli.store.repository import Store, read_config

    objects = _CountingRanges(name)
    io = ObjectStoreIO(objects)
    return Store(io, read_config(io, f"memory://{name}/config"), io.url), objects


def test_a_take_on_object_storage_writes_packs_of_two_blocks_and_a_local_one_writes_one(tmp_path: Path) -> None:
    from ckptcli.store import remote

    _big_blob_store(tmp_path, "packsize", 34)
    packs = [p for p in MemoryBackend("packsize").list_paths("packs/")]
    sizes = [len(MemoryBackend("packsize").get(p)) for p in packs]
    assert len(packs) >= 3, sizes  # 34 MiB of data: three packs or more, not one
    assert max(sizes) <= 2 * remote._BLOCK, sizes  # each read whole in two ranged GETs
    local = api.init_store(tmp_path / "local")
    api.take(local, {"n": 1}, subject="agent:big", blobs={"work": tmp_path / "work"})
    assert len(list((tmp_path / "local").rglob("packs/*/*"))) == 1  # a local disk keeps large packs
    assert local.prefetch is None  # and reads no further ahead than before


def test_a_restore_from_object_storage_fetches_each_block_once_on_the_fetch_threads(tmp_path: Path) -> None:
    from ckptcli.checkpoint import open_checkpoint
    from ckptcli.store import remote

    taken, data, _work = _big_blob_store(tmp_path, "prefetch", 24)
    st, objects = _opened("prefetch")
    assert st.prefetch is not None  # object storage reads ahead (a local store: None, below)
    open_checkpoint(taken.id.hex(), st).restore_blobs(tmp_path / "out")
    assert (tmp_path / "out" / "work" / "big.bin").read_bytes() == data
    fetched = [(p, o) for p, o, _t in objects.ranges if p.startswith("packs/")]
    assert len(fetched) == len(set(fetched))  # no block asked for twice
    assert all(o % remote._BLOCK == 0 for _p, o in fetched)  # whole blocks, not one request per object
    data_packs = {p for p, _o in fetched}
    assert len(fetched) <= 3 * len(data_packs)
    threads = {t.split("_")[0] for p, _o, t in objects.ranges if p.startswith("packs/")}
    assert "ckpt-fetch" in threads  # fetched ahead, while the restore writes


def test_a_damaged_byte_in_a_prefetched_block_is_found_and_named(tmp_path: Path) -> None:
    from ckptcli.checkpoint import open_checkpoint
    from ckptcli.errors import CorruptError
    from ckptcli.store.layout import pack_path

    taken, _data, _work = _big_blob_store(tmp_path, "damaged", 20)
    st, objects = _opened("damaged")
    oid, entry = max(st.index().items(), key=lambda it: (it[1].stored_len, it[0]))  # a data chunk, not a node
    path = pack_path(entry.pack)
    pack = bytearray(objects.get(path))
    pack[entry.offset + entry.stored_len // 2] ^= 0x40
    objects.put(path, bytes(pack))
    with pytest.raises(CorruptError) as err:
        open_checkpoint(taken.id.hex(), st).restore_blobs(tmp_path / "out")
    assert f"object {oid.hex()[:12]} in pack {entry.pack.hex()[:12]}" in err.value.message
    assert "content does not match its hash" in err.value.message
    assert not (tmp_path / "out").exists()  # nothing left of the failed restore


def test_blocks_fetched_ahead_are_bounded_and_a_failed_one_is_raised_by_its_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptcli.errors import NotFoundError
    from ckptcli.store import remote

    monkeypatch.setattr(remote, "_BLOCK", 64 << 10)  # small blocks, the same logic
    MemoryBackend.forget("ahead")
    objects = _CountingRanges("ahead")
    blob = os.urandom((remote._AHEAD + 8) * remote._BLOCK // 4)  # more blocks than may wait unread
    packs = [f"packs/ab/p{i}" for i in range(4)]
    for p in packs:
        objects.put(p, blob)
    io = ObjectStoreIO(objects)
    starts = range(0, len(blob), remote._BLOCK)
    for p in packs:
        for s in starts:
            io.prefetch(p, s + 5, 100)
    deadline = time.monotonic() + 30
    while len(objects.ranges) < remote._AHEAD and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert len(objects.ranges) == remote._AHEAD  # no more fetched ahead than wait unread in the cache
    for p in packs:  # every range reads back exactly, the ones not fetched ahead on demand
        for s in starts:
            assert io.read_range(p, s + 5, 100) == blob[s + 5 : s + 105]
    assert len(objects.ranges) == len(set((p, o) for p, o, _t in objects.ranges))  # none fetched twice
    io.prefetch("packs/ab/missing", 0, 10)  # a hint raises nothing ...
    with pytest.raises(NotFoundError):
        io.read_range("packs/ab/missing", 0, 10)  # ... its reader gets the error


def test_verify_on_object_storage_fetches_the_blocks_of_tree_nodes_ahead(tmp_path: Path) -> None:
    from ckptcli.store.verify import verify_store

    _big_blob_store(tmp_path, "verifyahead", 20)
    st, objects = _opened("verifyahead")
    report = verify_store(st, None, read_data=False)
    assert report.ok, report.problems
    fetched = [(p, o, t) for p, o, t in objects.ranges if p.startswith("packs/")]
    assert fetched and all(t.startswith("ckpt-fetch") for _p, _o, t in fetched)  # the walk found them fetched
    assert len({(p, o) for p, o, _t in fetched}) == len(fetched)
    assert verify_store(st, None, read_data=True).ok


def test_sigterm_unwinds_a_take_as_ctrl_c_does_and_leaves_no_lock_object(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    """SIGTERM (timeout, systemd, Kubernetes) killed a take outright, leaving its lock object
    in the bucket: every other host's prune was refused (exit 9) until the lock went stale."""
    url = f"{s3_bucket.url}/term"
    assert run_ckpt("init", url).returncode == 0
    doc, work = _state(tmp_path, 1)
    (work / "big.bin").write_bytes(os.urandom(48 << 20))  # several packs: time to stop it mid-upload
    objects = open_backend(url)
    cmd = [sys.executable, "-m", "ckptcli", "--store", url, "take", str(doc), "-S", "agent:t", "--blob", f"w={work}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "CKPT_HOST": "host-a"})
    try:
        deadline = time.monotonic() + 60
        while not [p for p in objects.list_paths("locks/")] and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, "the take ended before it was stopped"
        proc.send_signal(15)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == ExitCode.TERMINATED, err
    assert err.decode().count("\n") == 1 and "SIGTERM" in err.decode() and b"Traceback" not in err, err
    assert objects.list_paths("locks/") == []
    other = run_ckpt("--store", url, "prune", "--keep-last", "1", env={"CKPT_HOST": "host-b"})
    assert other.returncode == 0, other.stderr
    assert run_ckpt("--store", url, "verify").returncode == 0

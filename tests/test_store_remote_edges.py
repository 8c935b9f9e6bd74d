"""Bad input on stores on object storage: planted objects (oversized record files and
lock objects, lock times in the future, keys that are not store paths), locations that
are not stores (an empty prefix, other data, a missing bucket, an unreachable server) and
malformed --store-option pairs. Each ends in one line with what to do and a documented
exit code (docs/exit-codes.md), never a traceback, never a secret value echoed.

The S3 cases run on the moto server of tests/s3_server.py; the ones that count bytes
fetched, on memory:// through a wrapper backend."""

from __future__ import annotations

import http.client
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from ckptcli import api
from ckptcli.errors import CorruptError, ExitCode
from ckptcli.format import framing, limits
from ckptcli.store import layout
from ckptcli.store.backends.base import ObjectBackend, ObjectInfo
from ckptcli.store.backends.memory import MemoryBackend
from ckptcli.store.backends.s3 import S3Backend
from ckptcli.store.objlocks import MAX_LOCK_BYTES, STALE_AFTER, LockEnv, LockRecord, acquire, encode_lock, list_locks
from ckptcli.store.remote import ObjectStoreIO
from ckptcli.store.repository import Store, read_config
from tests.conftest import run_ckpt
from tests.helpers_backend import FaultyBackend
from tests.s3_server import SECRET, S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures

HEX = "ab" * 32
#: the largest record file ckpt writes: a record's head, a body of MAX_RECORD_SIZE, its checksum
CAP = framing.RECORD_HEAD_SIZE + limits.MAX_RECORD_SIZE + framing.CHECKSUM_SIZE


def one_error(got: Any, code: int, *needles: str) -> str:
    """The one line a failed command prints, checked: its code, no traceback, each needle."""
    err = got.stderr.decode()
    assert got.returncode == code, (got.returncode, err)
    assert "Traceback" not in err and "panicked" not in err and "Exception ignored" not in err, err
    assert err.startswith("ckpt: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


class _Noting:
    """A mixin for a backend: records the most bytes each read of a path returned (`fetched`)."""

    fetched: dict[str, int]

    def _note(self, path: str, data: bytes) -> bytes:
        self.fetched[path] = max(self.fetched.get(path, 0), len(data))
        return data

    def get(self, path: str) -> bytes:
        return self._note(path, super().get(path))  # type: ignore[misc]

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        return self._note(path, super().get_range(path, offset, length))  # type: ignore[misc]

    def get_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str]:
        data, etag = super().get_versioned(path, limit)  # type: ignore[misc]
        return self._note(path, data), etag


class Fetching(_Noting, MemoryBackend):
    """memory:// that records how many bytes each read returned."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.fetched = {}


@pytest.fixture
def memory_store(request: pytest.FixtureRequest) -> Iterator[tuple[Fetching, Store]]:
    """A store on memory:// with one checkpoint, opened through `Fetching` (no local cache)."""
    name = f"edges-{uuid.uuid4().hex}"
    MemoryBackend.forget(name)
    api.take(api.init_store(f"memory://{name}"), {"memory": {"turn": 1, "notes": [f"note {i} " * 40 for i in range(8)]}}, subject="agent:a")
    objects = Fetching(name)
    io = ObjectStoreIO(objects, None)
    yield objects, Store(io, read_config(io, f"memory://{name}/config"), io.url)
    MemoryBackend.forget(name)


# -- 1. record files and lock objects are read at most as large as ckpt writes them -------------


@pytest.mark.parametrize("path", [f"index/{HEX}", f"manifests/{HEX}", "refs/latest/agent/a", "cache/catalog", "config"])
def test_an_oversized_record_object_is_refused_without_reading_it_whole(memory_store: tuple[Fetching, Store], path: str) -> None:
    objects, store = memory_store
    objects.put(path, bytes(CAP + (1 << 20)))  # 1 MiB more than any record file ckpt writes
    with pytest.raises(CorruptError, match=r"larger than \d+ bytes") as err:
        store.backend.read(path)
    assert f"memory://{objects.url.partition('://')[2]}/{path}" in err.value.message
    assert objects.fetched[path] <= CAP + 1  # never the whole object


def test_a_lock_object_grown_after_the_listing_is_read_no_further_than_a_lock_can_be(request: pytest.FixtureRequest) -> None:
    """The listing said a small lock object; by the time it is read, it is 4 MiB."""

    class Grown(Fetching):
        def list(self, prefix: str) -> Iterator[ObjectInfo]:
            for info in super().list(prefix):
                yield ObjectInfo(info.path, 100, info.etag)

    backend = Grown(f"edges-{request.node.name}")
    path = layout.lock_object_path("0" * 32)
    backend.put(path, b"{" + b" " * (4 << 20))
    [info] = list_locks(backend)
    assert info.stale and info.record is None and "not a lock ckpt wrote" in info.why
    assert backend.fetched[path] <= MAX_LOCK_BYTES + 1
    MemoryBackend.forget(f"edges-{request.node.name}")


def test_an_oversized_index_object_on_s3_is_a_finding_of_verify_as_in_a_local_store(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/big"
    assert run_ckpt("init", url).returncode == 0
    doc = tmp_path / "doc.json"
    doc.write_text('{"memory": {"turn": 1}}')
    assert run_ckpt("--store", url, "take", doc, "-S", "agent:a").returncode == 0
    endpoint = urlsplit(s3_bucket.endpoint)
    conn = http.client.HTTPConnection(endpoint.hostname or "", endpoint.port, timeout=120)
    conn.request("PUT", f"/{s3_bucket.name}/big/index/{HEX}", body=bytes(CAP + 1))
    assert conn.getresponse().status == 200
    local = tmp_path / "local"
    assert run_ckpt("init", local).returncode == 0
    with open(local / "index" / HEX, "wb") as fh:
        fh.truncate(CAP + 1)  # sparse: as large, without the bytes
    for where, shown in ((url, f"{url}/index/{HEX}"), (str(local), str(local / "index" / HEX))):
        got = run_ckpt("--store", where, "verify", "--json")
        assert got.returncode == ExitCode.CORRUPT, got.stderr
        [problem] = json.loads(got.stdout)["problems"]
        assert problem["kind"] == "index" and problem["name"] == f"index/{HEX}", problem
        assert f"{shown}: larger than {CAP} bytes" in problem["message"], problem


class Planting(_Noting, FaultyBackend):
    """Records the most bytes each read returned (`fetched`) and, as another writer would,
    puts `big` at `path` just before the first compare-and-swap read of it."""

    def __init__(self, inner: ObjectBackend, path: str, big: bytes) -> None:
        super().__init__(inner)
        self.path, self.big = path, big
        self.fetched = {}

    def get_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str]:
        if path == self.path and self.big:
            self.inner.put(path, self.big)
            self.big = b""
        return super().get_versioned(path, limit)


def _objects(where: str, request: pytest.FixtureRequest) -> ObjectBackend:
    """A store with one checkpoint of agent:a, on memory:// or on the moto server."""
    if where == "memory":
        name = f"edges-{uuid.uuid4().hex}"
        MemoryBackend.forget(name)
        request.addfinalizer(lambda: MemoryBackend.forget(name))
        url = f"memory://{name}"
    else:
        url = f"{request.getfixturevalue('s3_bucket').url}/capped"
    api.take(api.init_store(url), {"memory": {"turn": 1}}, subject="agent:a")
    return MemoryBackend(url.partition("://")[2]) if where == "memory" else S3Backend.from_url(url, {})


def _planted(where: str, path: str, cap: int, request: pytest.FixtureRequest) -> tuple[Planting, Store]:
    """A store (`_objects`) opened through `Planting`, which puts an object 1 MiB larger
    than `cap` at `path` just before the first compare-and-swap read of it. "memory-locked":
    memory:// as a backend without conditional writes (refs move, and reflogs are appended
    to, under the "refs" lock: `ObjectStoreIO.append`)."""
    planting = Planting(_objects(where.removesuffix("-locked"), request), path, bytes(cap + (1 << 20)))
    planting.conditional_writes = not where.endswith("-locked")
    request.addfinalizer(planting.close)
    io = ObjectStoreIO(planting, None)
    return planting, Store(io, read_config(io, f"{io.url}/config"), io.url)


@pytest.mark.parametrize("where", ["memory", "s3"])
def test_a_ref_planted_before_a_takes_compare_and_swap_is_read_no_further_than_a_ref_can_be(
    where: str, request: pytest.FixtureRequest
) -> None:
    """Between a take's capped reads of its ref and its compare-and-swap, something puts a
    1 MiB-too-large object there: the compare-and-swap reads one byte more than the cap
    (one ranged read), and the take ends in exit 5 naming the object."""
    path = layout.latest_ref("agent", "a")
    planting, store = _planted(where, path, CAP, request)
    with pytest.raises(CorruptError) as err:
        api.take(store, {"memory": {"turn": 2}}, subject="agent:a")
    assert err.value.exit_code == ExitCode.CORRUPT == 5
    assert f"{store.backend.url}/{path}: larger than {CAP} bytes" in err.value.message
    assert [limit for p, limit in planting.limits if p == path] == [CAP + 1]  # asked for no more
    assert planting.fetched[path] == CAP + 1


@pytest.mark.parametrize("where", ["memory", "s3", "memory-locked"])
def test_a_reflog_planted_before_a_takes_append_is_read_no_further_than_its_limit(where: str, request: pytest.FixtureRequest) -> None:
    """The same for the reflog the take appends to: read at most MAX_REFLOG_SIZE + 1
    bytes, refused; the checkpoint is committed and its ref moved, and the reflog that
    cannot be written is a warning naming it (as for any reflog that cannot be written)."""
    path = layout.log_path(layout.latest_ref("agent", "a"))
    planting, store = _planted(where, path, limits.MAX_REFLOG_SIZE, request)
    taken = api.take(store, {"memory": {"turn": 2}}, subject="agent:a")
    assert store.resolve("agent:a") == taken.id
    [warning] = store.warnings
    assert f"{store.backend.url}/{path}: larger than {limits.MAX_REFLOG_SIZE} bytes" in warning, warning
    assert [limit for p, limit in planting.limits if p == path] == [limits.MAX_REFLOG_SIZE + 1]
    assert planting.fetched[path] == limits.MAX_REFLOG_SIZE + 1


def test_ckpt_take_on_s3_reads_a_planted_oversized_ref_or_reflog_no_further_than_ckpt_writes_it(
    s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    """`ckpt take` on S3: a planted oversized reflog is a warning naming it (the take is
    committed), not a download of the whole object; a planted oversized ref, exit 5
    naming it."""
    url = f"{s3_bucket.url}/log"
    assert run_ckpt("init", url).returncode == 0
    doc = tmp_path / "doc.json"
    doc.write_text('{"memory": {"turn": 1}}')
    assert run_ckpt("--store", url, "take", doc, "-S", "agent:a").returncode == 0
    planter = S3Backend.from_url(url, {})
    planter.put("logs/refs/latest/agent/a", bytes(limits.MAX_REFLOG_SIZE + 1))
    got = run_ckpt("--store", url, "take", doc, "-S", "agent:a")
    assert got.returncode == 0, got.stderr
    warned = got.stderr.decode()
    assert f"{url}/logs/refs/latest/agent/a: larger than {limits.MAX_REFLOG_SIZE} bytes" in warned and "Traceback" not in warned, warned
    planter.put("refs/latest/agent/a", bytes(CAP + 1))
    planter.close()
    got = run_ckpt("--store", url, "take", doc, "-S", "agent:a")
    err = got.stderr.decode()  # a warning as the take found the ref (a read before the take's), then the error
    assert got.returncode == ExitCode.CORRUPT and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith(f"ckpt: error: {url}/refs/latest/agent/a: larger than {CAP} bytes"), err


# -- 2. an unreachable fsspec server: one line, no destructor's traceback -------------------------


def test_an_unreachable_ftp_store_is_one_line_without_a_traceback_at_exit() -> None:
    pytest.importorskip("fsspec")
    for args in (
        ["--store", "ftp://127.0.0.1:1/x", "ls"],
        ["--store", "ftp://user:PassW0rdX@127.0.0.1:1/x", "ls"],
        ["init", "ftp://127.0.0.1:1/x"],
    ):
        err = one_error(run_ckpt(*args), ExitCode.IO_ERROR, "ftp://127.0.0.1:1/x", "cannot connect")
        assert "PassW0rdX" not in err


# -- 3. a lock refreshed in the future goes stale -------------------------------------------------


def _planted_lock(refreshed: float) -> tuple[str, bytes]:
    record = LockRecord(
        id="f" * 32, kind="exclusive", host="elsewhere", pid=4242, user="u", created=refreshed, refreshed=refreshed, command="ckpt prune"
    )
    return layout.lock_object_path(record.id), encode_lock(record)


def test_a_lock_refreshed_far_in_the_future_is_stale_and_blocks_nobody(request: pytest.FixtureRequest) -> None:
    name = f"edges-{request.node.name}"
    MemoryBackend.forget(name)
    backend = MemoryBackend(name)
    now = time.time()
    here = LockEnv(host="here", clock=lambda: now)
    path, data = _planted_lock(now + 10 * 3600)  # a wrong clock, or planted: ten hours ahead
    backend.put(path, data)
    [info] = list_locks(backend, env=here)
    assert info.stale and "ahead of this host's clock" in info.why, info
    with acquire(backend, True, wait=0, env=here):  # it blocks nobody
        pass
    # a clock a few minutes ahead is skew, not a reason: that lock holds
    backend.put(*_planted_lock(now + 5 * 60))
    [info] = list_locks(backend, env=here)
    assert not info.stale, info
    just_past = _planted_lock(now + STALE_AFTER + 60)
    backend.put(*just_past)
    assert list_locks(backend, env=here)[0].stale
    MemoryBackend.forget(name)


def test_unlock_removes_a_lock_from_the_future_on_s3(s3_bucket: S3Bucket) -> None:
    url = f"{s3_bucket.url}/future"
    assert run_ckpt("init", url).returncode == 0
    path, data = _planted_lock(time.time() + 10 * 3600)
    endpoint = urlsplit(s3_bucket.endpoint)
    conn = http.client.HTTPConnection(endpoint.hostname or "", endpoint.port, timeout=30)
    conn.request("PUT", f"/{s3_bucket.name}/future/{path}", body=data)
    assert conn.getresponse().status == 200
    got = run_ckpt("--store", url, "unlock", "--json")
    assert got.returncode == 0, got.stderr
    report = json.loads(got.stdout)
    assert report["removed"] == [path], report
    assert run_ckpt("--store", url, "prune", "--keep-last", "1").returncode == 0


# -- 4. and 5. a URL that is not a store, a missing bucket ----------------------------------------


def test_a_prefix_that_is_no_store_says_what_to_do(s3_bucket: S3Bucket) -> None:
    endpoint = urlsplit(s3_bucket.endpoint)
    conn = http.client.HTTPConnection(endpoint.hostname or "", endpoint.port, timeout=30)
    conn.request("PUT", f"/{s3_bucket.name}/other/data.csv", body=b"a,b\n")
    assert conn.getresponse().status == 200
    for prefix in ("empty", "other", "other/data.csv"):
        url = f"{s3_bucket.url}/{prefix}"
        for verb in (["ls"], ["verify"], ["show", "latest"]):
            one_error(run_ckpt("--store", url, *verb), ExitCode.NO_STORE, f"{url} is not a ckpt store", f"ckpt init {url}", "prefix")


def test_a_missing_bucket_is_no_store_in_one_line_naming_it(s3_bucket: S3Bucket) -> None:
    missing = f"{s3_bucket.name}-missing"
    for args in (
        ["--store", f"s3://{missing}/p", "ls"],
        ["init", f"s3://{missing}/p"],
        ["--store-option", f"secret_access_key={SECRET}", "--store", f"s3://{missing}/p", "ls"],
    ):
        err = one_error(run_ckpt(*args), ExitCode.NO_STORE, f"s3://{missing}/p: no such bucket '{missing}'", "create the bucket")
        for secret in ("PassW0rdX", "TOKQ9", SECRET):
            assert secret not in err, err


class _Terse:
    """obstore as it answers under load: its errors without the body of the server's
    reply (the XML naming NoSuchBucket), as a HEAD's are always; the requests are real."""

    _BODY = re.compile(r"<\?xml.*?</Error>", re.S)

    def __init__(self, obstore: Any) -> None:
        from obstore.exceptions import BaseError

        self._obstore = obstore
        self._errors = (OSError, BaseError)  # what obstore raises for a failed request

    def _terse(self, exc: BaseException) -> BaseException:
        return type(exc)(self._BODY.sub("", str(exc)))

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except self._errors as exc:
            raise self._terse(exc) from None
        if fn.__name__ == "list":
            return self._iterate(result)
        return result

    def _iterate(self, stream: Any) -> Iterator[Any]:
        try:
            yield from stream
        except self._errors as exc:
            raise self._terse(exc) from None

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._obstore, name)
        return (lambda *a, **k: self._call(fn, *a, **k)) if callable(fn) else fn


def test_a_missing_bucket_is_named_when_the_reply_does_not_say_so(s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's config is missing at the URL: whether its bucket is there is asked
    (one listing, which a bucket that exists never answers with 404), not guessed from
    the reply's text, which under load does not always name NoSuchBucket: it was
    "... is not a ckpt store (no config object there)" then."""
    from ckptcli.errors import NoBucketError, StoreNotFoundError

    terse = _Terse(__import__("obstore"))
    monkeypatch.setattr(S3Backend, "__init__", _with_obstore(S3Backend.__init__, terse))
    missing = f"{s3_bucket.name}-missing"
    for make in (Store.open, Store.init):
        with pytest.raises(NoBucketError) as raised:
            make(f"s3://{missing}/p")
        assert raised.value.message == f"s3://{missing}/p: no such bucket '{missing}'", raised.value
        assert "create the bucket" in (raised.value.hint or "")
    with pytest.raises(StoreNotFoundError, match="is not a ckpt store") as other:  # the bucket is there, the store is not
        Store.open(f"{s3_bucket.url}/p")
    assert not isinstance(other.value, NoBucketError)


def _with_obstore(init: Any, obstore: Any) -> Any:
    def patched(self: S3Backend, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._obs = obstore

    return patched


# -- 6. no --store-option value is ever echoed ---------------------------------------------------


VALUE = "wJalrXUtnFEMIsecretK7MDENGbPxRfiCY"


@pytest.mark.parametrize(
    "args",
    [
        ["--store-option", "secret_access_key", VALUE, "ls"],  # the '=' forgotten: the value is the next word
        ["--store-option=secret_access_key", VALUE, "ls"],
        ["--store-option", VALUE, "ls"],
        ["--store-option", f"={VALUE}", "ls"],
        ["--store-option", f"secret_access_key\n={VALUE}", "ls"],
        ["--store-option", f"region={VALUE}\nx", "ls"],
        ["--store-option", f"secret_access_key={VALUE}\r", "ls"],
        ["--store-option", f"bogus_option={VALUE}", "ls"],
    ],
)
def test_a_malformed_store_option_never_echoes_a_value(s3_bucket: S3Bucket, args: list[str]) -> None:
    url = f"{s3_bucket.url}/opts"
    assert run_ckpt("init", url).returncode == 0
    err = one_error(run_ckpt("--store", url, *args), ExitCode.INVALID_INPUT)
    assert VALUE not in err, err
    assert "store-option" in err or "store options" in err, err


@pytest.mark.parametrize("pairs", ["secret_access_key " + VALUE, f"={VALUE}", f"'region={VALUE}\nx'", f"secret_access_key='{VALUE}"])
def test_a_malformed_ckpt_store_options_never_echoes_a_value(s3_bucket: S3Bucket, pairs: str) -> None:
    url = f"{s3_bucket.url}/opts"
    err = one_error(run_ckpt("--store", url, "ls", env={"CKPT_STORE_OPTIONS": pairs}), ExitCode.INVALID_INPUT, "CKPT_STORE_OPTIONS")
    assert VALUE not in err, err


# -- 7. keys that cannot be store objects: skipped and named, never acted on ---------------------


#: keys under the layout's directories, each a finding of verify; and one at the top of
#: the prefix, which no command lists
PLANTED = ("index/../evil", "index/./dot", "index//double", "locks/a/../b", "manifests/x/../y")
ON_TOP = "../outside"


def _plant(bucket: S3Bucket, prefix: str, keys: tuple[str, ...]) -> None:
    endpoint = urlsplit(bucket.endpoint)
    for key in keys:
        conn = http.client.HTTPConnection(endpoint.hostname or "", endpoint.port, timeout=30)
        conn.request("PUT", f"/{bucket.name}/{prefix}/{key}", body=b"planted")  # http.client sends the path as it is
        assert conn.getresponse().status == 200, key


def test_keys_that_are_no_store_paths_are_skipped_named_and_never_acted_on(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/planted"
    assert run_ckpt("init", url).returncode == 0
    ids = []
    for n in (1, 2):
        doc = tmp_path / f"doc{n}.json"
        doc.write_text(json.dumps({"memory": {"turn": n, "notes": ["x" * 200] * n}}))
        took = run_ckpt("--store", url, "take", doc, "-S", "agent:a")
        assert took.returncode == 0, took.stderr
        ids.append(took.stdout.decode().strip())
    _plant(s3_bucket, "planted", (*PLANTED, ON_TOP))
    listed = run_ckpt("--store", url, "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [c["id"] for c in json.loads(listed.stdout)] == ids[::-1]
    verified = run_ckpt("--store", url, "verify", "--json")
    assert verified.returncode == ExitCode.CORRUPT, verified.stderr
    problems = json.loads(verified.stdout)["problems"]
    assert {p["name"] for p in problems} == set(PLANTED) and {p["kind"] for p in problems} == {"key"}, problems
    err = verified.stderr.decode()
    assert "Traceback" not in err and "'index/../evil': not a store path (it has a '..' part)" in err, err
    # the verbs that write go on around them and touch none of them
    assert run_ckpt("--store", url, "prune", "--keep-last", "1").returncode == 0
    assert run_ckpt("init", tmp_path / "copy").returncode == 0
    copied = run_ckpt("copy", url, tmp_path / "copy")
    assert copied.returncode == 0, copied.stderr
    assert run_ckpt("--store", tmp_path / "copy", "verify", "--read-data").returncode == 0
    assert run_ckpt("--store", url, "unlock", "--remove-all").returncode == 0
    endpoint = urlsplit(s3_bucket.endpoint)
    conn = http.client.HTTPConnection(endpoint.hostname or "", endpoint.port, timeout=30)
    conn.request("GET", f"/{s3_bucket.name}?list-type=2&prefix=planted/")
    keys = re.findall(r"<Key>([^<]*)</Key>", conn.getresponse().read().decode())
    assert {f"planted/{key}" for key in (*PLANTED, ON_TOP)} <= set(keys), keys  # every planted key is still there
    assert not (tmp_path / "copy" / "index" / ".." / "evil").exists() and not (tmp_path / "outside").exists()


def test_a_key_that_is_no_store_path_on_memory_is_skipped_and_named(memory_store: tuple[Fetching, Store]) -> None:
    objects, store = memory_store
    objects._objects["index/../evil"] = (b"planted", "planted")  # put refuses such a path: planted as another program would
    said: list[str] = []
    store.on_warning = said.append
    assert store.backend.list(layout.INDEX) == [p for p in objects.list_paths("index/") if p != "index/../evil"]
    assert said == [f"{objects.url}: skipped the key 'index/../evil': not a store path (it has a '..' part); ckpt wrote no such key"]
    assert len(store.index()) > 0 and "index/../evil" not in objects.fetched


_RSS_CHILD = r"""
import sys
from ckptcli.cli.app import run
code = run(sys.argv[1:])
# VmHWM: this program's peak (ru_maxrss would carry the forking parent's over the exec)
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
print("maxrss-kib", hwm, file=sys.stderr)
sys.exit(code)
"""


def test_a_local_reflog_larger_than_ckpt_writes_one_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    """A planted 1 GiB (sparse) reflog on a local store: `ckpt reflog` says it is damaged,
    naming it, and reads at most MAX_REFLOG_SIZE + 1 bytes of it (the process stays far
    below 1 GiB); a take of that subject still commits (a local take appends to its log)."""
    import subprocess
    import sys

    from tests.helpers_faults import child_env

    st = api.init_store(tmp_path / "s")
    api.take(st, {"memory": {"turn": 1}}, subject="agent:bot")
    st.close()
    log = tmp_path / "s" / layout.log_path(layout.latest_ref("agent", "bot"))
    with log.open("r+b") as fh:
        fh.truncate(1 << 30)
    args = ["--store", str(tmp_path / "s")]
    got = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, *args, "reflog", "agent:bot"], capture_output=True, text=True, env=child_env({})
    )
    assert got.returncode == ExitCode.CORRUPT, got.stderr
    lines = [x for x in got.stderr.splitlines() if not x.startswith("maxrss-kib")]
    assert len(lines) == 1 and "logs/" in lines[0] and "Traceback" not in got.stderr, got.stderr
    rss_kib = int(got.stderr.split("maxrss-kib ")[1].split()[0])
    assert rss_kib < 512 * 1024, rss_kib  # read capped: 64 MiB, not the whole 1 GiB
    doc = tmp_path / "next.json"
    doc.write_text(json.dumps({"memory": {"turn": 2}}))
    took = run_ckpt(*args, "take", str(doc), "-S", "agent:bot")
    assert took.returncode == 0, took.stderr.decode()


# -- a lock that cannot be removed, as its command fails or succeeds ------------------------------


def _bucket_gone_at(monkeypatch: pytest.MonkeyPatch, s3_bucket: S3Bucket, owner: Any, name: str) -> None:
    """Empty the server (the bucket goes) as `owner.name` starts, then run it."""
    original = getattr(owner, name)

    def gone(*args: Any, **kwargs: Any) -> Any:
        s3_bucket.server.post("/moto-api/reset")
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, gone)


def _take_as_the_bucket_goes(
    cli: Any, s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str
) -> tuple[str, Any]:
    """A take into a new store of the bucket, the bucket deleted when `owner.name` is
    first called; returns (the store's URL, the take's result)."""
    url = f"{s3_bucket.url}/p"
    assert cli("init", url).code == 0
    doc = tmp_path / "d.json"
    doc.write_text('{"memory": {"a": 1}}')
    _bucket_gone_at(monkeypatch, s3_bucket, owner, name)
    return url, cli("take", doc, "--store", url, "-S", "agent:a")


def test_a_take_failing_as_its_bucket_goes_prints_one_line_not_the_lock_too(
    cli: Any, s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bucket deleted during a take: the lock's object cannot be removed either, for
    the same cause. The error is the one line (a warning about the lock came first)."""
    url, r = _take_as_the_bucket_goes(cli, s3_bucket, tmp_path, monkeypatch, Store, "write_manifest")
    assert r.code == ExitCode.NO_STORE, r.err
    assert r.err.count("\n") == 1 and r.err.startswith(f"ckpt: error: {url}: no such bucket"), r.err


def test_a_lock_that_cannot_be_removed_after_a_take_that_succeeded_is_a_warning(
    cli: Any, s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The take committed, then its lock's object could not be removed: the take succeeded
    (exit 0, its id printed), and the warning says the lock is left to go stale."""
    from ckptcli.store.objlocks import HeldLock

    _url, r = _take_as_the_bucket_goes(cli, s3_bucket, tmp_path, monkeypatch, HeldLock, "release")
    assert r.code == 0 and len(r.out.strip()) == 64, r.err
    assert r.err.startswith("ckpt: warning: could not remove the lock ") and "`ckpt unlock` removes it once stale" in r.err, r.err


def test_an_unreachable_s3_endpoint_says_what_to_check(s3_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # "... HTTP error: error sending request (Connection refused)", exit 12, and no hint
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    for args in (["init", "s3://nobody/d"], ["--store", "s3://nobody/d", "ls"]):
        err = one_error(run_ckpt(*args), ExitCode.IO_ERROR)
        assert "check the endpoint (AWS_ENDPOINT_URL, or --store-option endpoint=URL), that its server is up" in err, (args, err)

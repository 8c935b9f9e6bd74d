"""S3Backend against a real S3 server on loopback (moto, tests/s3_server.py) and
FsspecBackend on fsspec's memory:// filesystem: what the shared conformance suite
(tests/test_backend_conformance.py, which runs on both) does not cover: S3's multipart
uploads, pagination, the 412 answers on the server, errors
and credentials, and what the generic backend does not promise."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from ckptcli.errors import InvalidInputError, NotFoundError, StoreIOError
from ckptcli.store.backends.base import ObjectBackend
from ckptcli.store.backends.generic import FsspecBackend
from ckptcli.store.backends.s3 import S3Backend
from tests.s3_server import SECRET, S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures

MIB = 1024 * 1024


@pytest.fixture(params=["s3", "fsspec-memory"])
def backend(request: pytest.FixtureRequest) -> Iterator[ObjectBackend]:
    if request.param == "s3":
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        b: ObjectBackend = S3Backend.from_url(f"{bucket.url}/stores/one", {})
    else:
        b = FsspecBackend.from_url(f"memory://ckpt-test-{uuid.uuid4().hex}/store", {})
    yield b
    b.close()


def test_writer_of_nothing_commits_an_empty_object(backend: ObjectBackend) -> None:
    info = backend.open_writer("empty").commit()
    assert info.size == 0 and backend.get("empty") == b"" and backend.stat("empty") == info
    w = backend.open_writer("once")
    w.write(b"x")
    w.commit()
    with pytest.raises(ValueError):
        w.write(b"y")  # a committed writer takes nothing more
    assert backend.get("once") == b"x"


# -- S3 only -----------------------------------------------------------------------------


def _uploads(bucket: S3Bucket) -> str:
    with urllib.request.urlopen(f"{bucket.endpoint}/{bucket.name}?uploads", timeout=30) as response:
        return str(response.read().decode())


def test_s3_multipart_20_mib_object(s3_bucket: S3Bucket) -> None:
    backend = S3Backend.from_url(s3_bucket.url + "/p", {})
    data = os.urandom(20 * MIB + 12345)
    with backend.open_writer("packs/big") as w:
        for start in range(0, len(data), 3 * MIB):  # writes smaller than a part
            w.write(data[start : start + 3 * MIB])
        assert "<UploadId>" in _uploads(s3_bucket)  # parts went up before commit
        assert not backend.exists("packs/big")  # and nothing is visible yet
        info = w.commit()
    assert info.size == len(data)
    assert backend.get("packs/big") == data
    assert backend.get_range("packs/big", 10 * MIB, 100) == data[10 * MIB : 10 * MIB + 100]
    assert "-" in info.etag  # S3's ETag of a multipart object: MD5 of the parts' MD5s, "-N"
    assert "<UploadId>" not in _uploads(s3_bucket)


def test_s3_abort_aborts_the_multipart_upload(s3_bucket: S3Bucket) -> None:
    backend = S3Backend.from_url(s3_bucket.url, {})
    w = backend.open_writer("packs/aborted")
    w.write(os.urandom(12 * MIB))
    assert "<UploadId>" in _uploads(s3_bucket)
    w.abort()
    assert "<UploadId>" not in _uploads(s3_bucket)
    assert not backend.exists("packs/aborted")
    assert backend.list_paths("") == []


def test_s3_prefix_keeps_stores_apart(s3_bucket: S3Bucket) -> None:
    one = S3Backend.from_url(s3_bucket.url + "/team/one", {})
    two = S3Backend.from_url(s3_bucket.url + "/team/two", {})
    one.put("refs/latest/main", b"1")
    assert two.list_paths("") == [] and not two.exists("refs/latest/main")
    root = S3Backend.from_url(s3_bucket.url, {})
    assert root.list_paths("") == ["team/one/refs/latest/main"]
    assert one.url == s3_bucket.url + "/team/one"


def test_s3_list_follows_pagination(s3_bucket: S3Bucket) -> None:
    backend = S3Backend.from_url(s3_bucket.url, {})
    paths = [f"objects/{i:04x}" for i in range(1003)]  # S3 pages 1,000 keys at a time
    for path in paths:
        backend.put(path, b"")
    assert backend.list_paths("objects/") == paths


def test_s3_missing_bucket(s3_env: object) -> None:
    backend = S3Backend.from_url("s3://no-such-bucket-here/store", {})
    with pytest.raises(StoreIOError, match=r"^s3://no-such-bucket-here/store: no such bucket"):
        list(backend.list(""))
    with pytest.raises(StoreIOError, match="no such bucket"):
        backend.get("x")
    with pytest.raises(StoreIOError, match="no such bucket"):
        backend.put("x", b"1")


def test_s3_missing_object(s3_bucket: S3Bucket) -> None:
    backend = S3Backend.from_url(s3_bucket.url + "/p", {})
    with pytest.raises(NotFoundError, match=rf"^{s3_bucket.url}/p/nope: no such object$"):
        backend.get("nope")


def test_s3_wrong_endpoint_is_one_line_without_secret(s3_bucket: S3Bucket) -> None:
    backend = S3Backend.from_url(
        s3_bucket.url + "/p",
        {"endpoint": "http://127.0.0.1:9", "max_retries": "0", "secret_access_key": SECRET + "-option"},
    )
    for call in (lambda: backend.get("x"), lambda: backend.put("x", b"1"), lambda: list(backend.list(""))):
        with pytest.raises(StoreIOError) as caught:
            call()
        message = str(caught.value)
        assert message.startswith(f"{s3_bucket.url}/p"), message
        assert "failed" in message and "\n" not in message, message
        assert SECRET not in message
        assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_s3_cli_like_error_has_no_traceback(s3_bucket: S3Bucket) -> None:
    """The message a user sees from a real process: one line, no traceback, no secret."""
    code = (
        "import sys\n"
        "from ckptcli.errors import CkptError\n"
        "from ckptcli.store.backends.s3 import S3Backend\n"
        f"b = S3Backend.from_url({s3_bucket.url!r}, {{'endpoint': 'http://127.0.0.1:9', 'max_retries': '0'}})\n"
        "try:\n    b.get('x')\nexcept CkptError as e:\n    print(e, file=sys.stderr); sys.exit(e.exit_code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert SECRET not in done.stderr and "Connection refused" in lines[0]


def test_s3_credentials_from_the_aws_config_files(
    s3_bucket: S3Bucket, tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = tmp_path / "credentials"  # type: ignore[operator]
    config = tmp_path / "config"  # type: ignore[operator]
    creds.write_text(f"[ckpt]\naws_access_key_id = AKIAFROMFILE\naws_secret_access_key = {SECRET}-file\n")
    config.write_text(f"[profile ckpt]\nregion = eu-west-1\nendpoint_url = {s3_bucket.endpoint}\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_PROFILE", "ckpt")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    backend = S3Backend.from_url(s3_bucket.url, {})
    backend.put("a", b"from the profile")
    assert backend.get("a") == b"from the profile"
    with pytest.raises(StoreIOError) as caught:
        S3Backend.from_url(s3_bucket.url, {"endpoint": "http://127.0.0.1:9", "max_retries": "0"}).get("a")
    assert f"{SECRET}-file" not in str(caught.value)


def test_s3_bad_url_and_options(s3_env: object) -> None:
    with pytest.raises(InvalidInputError, match="not an object-storage URL"):
        S3Backend.from_url("s3:///nobucket", {})
    with pytest.raises(InvalidInputError, match="bogus_key"):
        S3Backend.from_url("s3://b", {"bogus_key": "1"})
    with pytest.raises(InvalidInputError, match="not a boolean"):
        S3Backend.from_url("s3://b", {"allow_http": "maybe"})
    with pytest.raises(InvalidInputError) as caught:
        S3Backend.from_url("s3://user:hunter22@b/p?token=abc", {"bogus": "1"})
    assert "hunter22" not in str(caught.value) and "abc" not in str(caught.value)


def test_s3_conditional_writes_answer_412_on_the_server(s3_bucket: S3Bucket) -> None:
    """Two backends (two hosts) on one store: the second put_if_absent and a CAS with the
    first's stale etag lose on the server's 412, not on a check in this process."""
    a = S3Backend.from_url(s3_bucket.url, {})
    b = S3Backend.from_url(s3_bucket.url, {})
    assert a.put_if_absent("manifests/m1", b"a") is True
    assert b.put_if_absent("manifests/m1", b"b") is False
    _, etag = a.get_versioned("manifests/m1")
    assert b.put_if_match("manifests/m1", b"b-wins", etag) is not None
    assert a.put_if_match("manifests/m1", b"a-late", etag) is None
    assert a.get("manifests/m1") == b"b-wins"


def test_racing_conditional_writes_on_the_test_server_have_one_winner(s3_bucket: S3Bucket) -> None:
    """S3 checks a condition and stores the object in one step; the loopback server must
    too (tests/s3_server.py), or the race tests of refs on S3 pass or fail by chance. The
    server stores a key under race-window/ 50 ms after checking its condition: eight hosts
    at once, put_if_absent and a compare-and-swap from one etag, one winner each time."""
    hosts = [S3Backend.from_url(s3_bucket.url, {}) for _ in range(8)]
    for r in range(3):
        gate = threading.Barrier(len(hosts))

        def absent(b: S3Backend, i: int, r: int = r, gate: threading.Barrier = gate) -> bool:
            gate.wait(timeout=60)
            return b.put_if_absent(f"race-window/r{r}", b"x%d" % i)

        with ThreadPoolExecutor(len(hosts)) as pool:
            won = list(pool.map(absent, hosts, range(len(hosts))))
        assert won.count(True) == 1, (r, won)
        _, etag = hosts[0].get_versioned(f"race-window/r{r}")
        gate = threading.Barrier(len(hosts))

        def swap(b: S3Backend, i: int, r: int = r, gate: threading.Barrier = gate, etag: str = etag) -> bool:
            gate.wait(timeout=60)
            return b.put_if_match(f"race-window/r{r}", b"y%d" % i, etag) is not None

        with ThreadPoolExecutor(len(hosts)) as pool:
            won = list(pool.map(swap, hosts, range(len(hosts))))
        assert won.count(True) == 1, (r, won)
    for b in hosts:
        b.close()


def test_fsspec_backend_is_not_conditional_and_rejects_unknown_protocol() -> None:
    assert FsspecBackend.conditional_writes is False and S3Backend.conditional_writes is True
    with pytest.raises(InvalidInputError, match="nosuchproto"):
        FsspecBackend.from_url("nosuchproto://x/y", {})


def test_no_client_imported_by_the_package() -> None:
    code = (
        "import sys, ckptcli, ckptcli.store.backends.s3, ckptcli.store.backends.generic\n"
        "print(sorted(m for m in ('obstore', 'fsspec', 's3fs', 'moto') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]"


def test_the_registry_opens_an_s3_url_with_the_s3_backend(s3_bucket: S3Bucket) -> None:
    from ckptcli.store.backends import open_backend

    backend = open_backend(f"{s3_bucket.url}/team/store", {"endpoint": s3_bucket.endpoint})
    try:
        assert isinstance(backend, S3Backend)
        backend.put("config", b"x")
        assert backend.list_paths("") == ["config"]
    finally:
        backend.close()
    direct = S3Backend.from_url(f"{s3_bucket.url}/team/store", {})
    assert direct.get("config") == b"x"  # the prefix is the store: the same object by either road
    direct.close()

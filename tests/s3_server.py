"""A real S3-compatible server on loopback for the tests: moto's ThreadedMotoServer, in a
process of its own.

Test modules import the fixtures they use explicitly:

    from tests.s3_server import fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401

(the fixtures are named `s3_server`, `s3_env` and `s3_bucket`; the functions carry a
`fixture_` prefix so that a test's argument does not shadow an import).

One server serves the whole run (`s3_server`, session scope, 127.0.0.1 on a free port);
`s3_bucket` gives each test a fresh bucket after `POST /moto-api/reset` has emptied the
server, with fake AWS credentials and AWS_ENDPOINT_URL set in the environment for that
test only (and the user's own AWS config files hidden). Nothing reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

#: the fake credentials every test runs with; a test may assert that SECRET never shows
ACCESS_KEY = "AKIAIOSFODNN7CKPTTEST"
SECRET = "ckpt-test-secret-wJalrXUtnFEMI-K7MDENG"
REGION = "us-east-1"

# the AWS variables that would point a client at a real account or change its behaviour
_AWS_VARS = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_ENDPOINT_URL_S3",
    "AWS_BUCKET",
    "AWS_BUCKET_NAME",
)


@dataclass(frozen=True)
class S3Server:
    endpoint: str  #: http://127.0.0.1:PORT

    def post(self, path: str) -> None:
        """POST to the server's control API (e.g. /moto-api/reset)."""
        with urllib.request.urlopen(urllib.request.Request(self.endpoint + path, method="POST"), timeout=30) as response:
            response.read()

    def create_bucket(self, name: str) -> None:
        # moto takes an unsigned path-style PUT to 127.0.0.1 as S3's CreateBucket
        with urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT"), timeout=30) as response:
            response.read()


@dataclass(frozen=True)
class S3Bucket:
    server: S3Server
    name: str

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    @property
    def url(self) -> str:
        """s3://NAME"""
        return f"s3://{self.name}"


#: the server's process: moto's ThreadedMotoServer on 127.0.0.1, a free port, printed
#: once; it stops when its stdin closes
_SERVER = """
import logging, sys, threading
from moto.s3.responses import S3Response
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
# S3 checks a conditional write (If-Match, If-None-Match) and stores the object in one
# step; moto checks, then stores, so two racing writers can both pass the check. One
# write at a time here makes the check atomic, as it is on S3.
_writes = threading.Lock()
_put_object = S3Response.put_object
def _one_at_a_time(self):
    with _writes:
        return _put_object(self)
S3Response.put_object = _one_at_a_time
# a key under race-window/ is stored 50 ms after its condition was checked, so that a test
# can show the writes above are one at a time (test_backend_s3.py)
import time
from moto.s3.models import S3Backend
_store = S3Backend.put_object
def _slow_store(self, bucket_name, key_name, *args, **kwargs):
    if key_name.startswith("race-window/"):
        time.sleep(0.05)
    return _store(self, bucket_name, key_name, *args, **kwargs)
S3Backend.put_object = _slow_store
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(host, port, flush=True)
sys.stdin.read()
server.stop()
"""


@pytest.fixture(name="s3_server", scope="session")
def fixture_s3_server() -> Iterator[S3Server]:
    """One moto server on 127.0.0.1 (a free port) for the whole test run, in a process of
    its own: the objects it holds would otherwise swell the test process, whose memory a
    child started by fork counts as its own peak (the memory tests measure children), and
    its request handling would share the tests' interpreter lock."""
    proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        host, port = proc.stdout.readline().split()
        assert host == "127.0.0.1", host
        yield S3Server(f"http://{host}:{port}")
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture(name="s3_env")
def fixture_s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> S3Server:
    """Fake credentials and the server's endpoint in the environment, for this test only."""
    empty: Path = tmp_path_factory.mktemp("aws-config")
    for name in _AWS_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask 169.254.169.254
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty / "credentials"))
    return s3_server


@pytest.fixture(name="s3_bucket")
def fixture_s3_bucket(s3_env: S3Server) -> S3Bucket:
    """A fresh, empty bucket on a server emptied by POST /moto-api/reset."""
    s3_env.post("/moto-api/reset")
    bucket = S3Bucket(s3_env, f"ckpt-test-{uuid.uuid4().hex[:12]}")
    s3_env.create_bucket(bucket.name)
    return bucket

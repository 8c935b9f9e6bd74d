"""Store URLs and what ckpt records and prints about them: a URL-valued store option's
user info is never recorded nor printed, text read from a store's lock objects is
escaped in doctor's output, and a malformed store URL is refused in one line rather than
taken for a local path.

The S3 cases run on the moto server of tests/s3_server.py."""

from __future__ import annotations

import http.client
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from ckptcli.errors import ExitCode, UsageError
from ckptcli.store import layout
from ckptcli.store.backends import open_backend, redact_args
from ckptcli.store.objlocks import LockRecord, encode_lock
from ckptcli.store.repository import store_location
from tests.conftest import run_ckpt
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures


def one_error(got: Any, code: int, *needles: str) -> str:
    err = got.stderr.decode()
    assert got.returncode == code, (got.returncode, err)
    assert "Traceback" not in err and err.startswith("ckpt: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def _put(bucket: S3Bucket, key: str, data: bytes) -> None:
    endpoint = urlsplit(bucket.endpoint)
    conn = http.client.HTTPConnection(endpoint.hostname or "", endpoint.port, timeout=30)
    conn.request("PUT", f"/{bucket.name}/{key}", body=data)
    assert conn.getresponse().status == 200


# -- a URL-valued store option's user info -------------------------------------------------------


def test_a_url_valued_store_option_loses_its_user_info_in_records() -> None:
    args = ["--store-option", "endpoint=http://EPUSER:EPPASS@127.0.0.1:9000", "--store-option=proxy=https://PX:PXPASS@proxy:3128/"]
    got = " ".join(redact_args(args))
    assert "EPUSER" not in got and "EPPASS" not in got and "PXPASS" not in got, got
    assert "endpoint=http://***@127.0.0.1:9000" in got and "proxy=https://***@proxy:3128/" in got, got


def test_the_command_a_take_records_on_s3_holds_no_endpoint_password(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/rec"
    port = urlsplit(s3_bucket.endpoint).port
    option = f"endpoint=http://EPUSER:EPPASS@127.0.0.1:{port}"
    assert run_ckpt("init", url).returncode == 0
    (tmp_path / "a.txt").write_text("a")
    took = run_ckpt("--store-option", option, "--store", url, "take", "--label", "n=one", tmp_path / "a.txt")
    assert took.returncode == 0, took.stderr
    shown = run_ckpt("--store", url, "reflog", "--json")
    assert shown.returncode == 0, shown.stderr
    assert b"endpoint=http://***@127.0.0.1" in shown.stdout, shown.stdout
    assert b"EPPASS" not in shown.stdout and b"EPUSER" not in shown.stdout, shown.stdout


# -- doctor escapes what it reads from a store ---------------------------------------------------


def test_doctor_escapes_control_characters_of_a_planted_lock(s3_bucket: S3Bucket) -> None:
    url = f"{s3_bucket.url}/evil"
    assert run_ckpt("init", url).returncode == 0
    now = time.time()
    record = LockRecord(
        id="e" * 32,
        kind="exclusive",
        host="evil\x1b[31mhost\nnext",
        pid=4242,
        user="u\x07",
        created=now,
        refreshed=now,
        command="ckpt \x1b]0;owned\x07prune",
    )
    _put(s3_bucket, f"evil/{layout.lock_object_path(record.id)}", encode_lock(record))
    got = run_ckpt("--store", url, "doctor")
    text = got.stdout.decode() + got.stderr.decode()
    assert "\x1b" not in text and "\x07" not in text and "\nnext" not in text, text
    assert "evil\\x1b[31mhost\\nnext" in text, text


# -- one rule for what is a URL ------------------------------------------------------------------

TYPOS = ["s3:/bkt1/foo", "s3:bkt1", "s3:", "file:s3://bkt1/x", "S3:/bkt1/x", "memory:/n"]


@pytest.mark.parametrize("typo", TYPOS)
def test_a_mistyped_url_is_refused_and_no_local_directory_is_made(typo: str, tmp_path: Path) -> None:
    for args in (["init", typo], ["--store", typo, "ls"], ["tui", typo]):
        one_error(run_ckpt(*args, cwd=tmp_path), ExitCode.USAGE, "not a well-formed store URL", "://", f"./{typo}")
    # -o is a local path by design, and a Path argument has its "//" made one "/": refused as a URL
    one_error(run_ckpt("export", "latest", "-o", typo, cwd=tmp_path), ExitCode.USAGE, "://")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError):
        store_location(typo)


def test_a_local_directory_named_like_a_scheme_is_given_as_a_relative_path(tmp_path: Path) -> None:
    assert run_ckpt("init", "./s3:", cwd=tmp_path).returncode == 0
    assert (tmp_path / "s3:" / "config").is_file()
    got = run_ckpt("--store", "./s3:", "ls", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert store_location("dir:x") == Path("dir:x")  # no store scheme: a path


@pytest.mark.parametrize(
    ("prefix", "named"), [("newa/../newb", "'..'"), ("./lg", "'.'"), ("/race2", "empty part"), ("a//b", "empty part"), ("a/.", "'.'")]
)
def test_dot_dotdot_and_empty_parts_of_a_prefix_are_refused(s3_bucket: S3Bucket, prefix: str, named: str) -> None:
    url = f"{s3_bucket.url}/{prefix}"
    one_error(run_ckpt("init", url), ExitCode.USAGE, named, "does not resolve")
    with pytest.raises(UsageError, match=named):
        store_location(f"memory://b/{prefix}")
    assert open_backend(s3_bucket.url).list_paths("") == []  # nothing written anywhere in the bucket


def test_a_trailing_slash_names_the_same_store(s3_bucket: S3Bucket) -> None:
    assert run_ckpt("init", f"{s3_bucket.url}/slash/").returncode == 0
    got = run_ckpt("--store", f"{s3_bucket.url}/slash", "ls")
    assert got.returncode == 0, got.stderr


@pytest.mark.parametrize(
    ("url", "needle"),
    [("s3://bkt/x?endpoint=http://127.0.0.1:1", "--store-option"), ("s3://AKU:PW9secret@bkt/x", "environment"), ("gs://b/x#frag", "query")],
)
def test_a_query_or_user_info_in_an_object_storage_url_is_refused(s3_env: object, url: str, needle: str) -> None:
    # s3_env: the endpoint is the moto server, should a URL get through
    err = one_error(run_ckpt("--store", url, "ls"), ExitCode.USAGE, needle)
    assert "PW9secret" not in err and "AKU" not in err, err


# -- doctor on a server that does not answer; an option value obstore refuses ------------------


def test_doctor_on_an_unreachable_endpoint_hints_at_the_endpoint_not_at_damage(s3_env: object) -> None:
    got = run_ckpt("--store-option", "endpoint=http://127.0.0.1:1", "--store-option", "max_retries=0", "--store", "s3://bkt/x", "doctor")
    assert got.returncode == ExitCode.NO_STORE, got.stderr
    text = got.stdout.decode() + got.stderr.decode()
    assert "ckpt verify" not in text, text
    assert "check the endpoint" in got.stderr.decode() and "network" in got.stderr.decode(), text


@pytest.mark.parametrize("option", ["timeout=abcQ7", "connect_timeout=zzQ7"])
def test_an_option_value_obstore_refuses_is_named_by_its_key_only(s3_bucket: S3Bucket, option: str) -> None:
    key = option.partition("=")[0]
    err = one_error(
        run_ckpt("--store-option", option, "--store", f"{s3_bucket.url}/x", "ls"), ExitCode.INVALID_INPUT, f"--store-option {key}"
    )
    assert "Q7" not in err, err


# -- init refuses a prefix that holds objects, and one inside a store ---------------------------


def test_init_refuses_a_prefix_holding_other_objects(s3_bucket: S3Bucket) -> None:
    _put(s3_bucket, "data/packs/foreign.bin", b"theirs")
    _put(s3_bucket, "data/refs/x", b"theirs")
    one_error(run_ckpt("init", f"{s3_bucket.url}/data"), ExitCode.CONFLICT, "already holds objects", "empty prefix")
    backend = open_backend(s3_bucket.url)
    assert sorted(backend.list_paths("")) == ["data/packs/foreign.bin", "data/refs/x"]  # nothing written
    one_error(run_ckpt("init", f"{s3_bucket.url}/data/"), ExitCode.CONFLICT, "already holds objects")
    assert run_ckpt("init", f"{s3_bucket.url}/dat").returncode == 0  # a prefix of the same start, but another one


def test_init_refuses_a_prefix_inside_a_store_and_the_outer_store_keeps_working(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    outer = f"{s3_bucket.url}/store"
    assert run_ckpt("init", outer).returncode == 0
    (tmp_path / "a.txt").write_text("a")
    assert run_ckpt("--store", outer, "take", "--label", "n=1", tmp_path / "a.txt").returncode == 0
    for inner in ("packs", "deep/er/x", "newdir"):
        one_error(run_ckpt("init", f"{outer}/{inner}"), ExitCode.CONFLICT, f"inside the ckpt store {outer}")
    assert not [p for p in open_backend(outer).list_paths("") if p.endswith("/config")]
    one_error(run_ckpt("init", outer), ExitCode.CONFLICT, "already exists")
    pruned = run_ckpt("--store", outer, "prune", "--keep-last", "1")
    assert pruned.returncode == 0, pruned.stderr
    assert run_ckpt("--store", outer, "verify").returncode == 0


def test_a_path_given_as_a_string_opens_the_local_store_with_its_file_locks(tmp_path: Path) -> None:
    """Store.open("dir") and Store.init("dir") took a plain string for a URL and worked on
    the directory through the object-storage backend, with lock objects that the CLI's
    file locks (and every Store.open(Path)) never see: a prune and a take could run at once."""
    from ckptcli.store.backend import LocalBackend
    from ckptcli.store.repository import Store

    made = Store.init(str(tmp_path / "s"))
    assert isinstance(made.backend, LocalBackend) and made.directory == tmp_path / "s"
    for given in (str(tmp_path / "s"), f"file://{tmp_path / 's'}", tmp_path / "s"):
        opened = Store.open(given)
        assert isinstance(opened.backend, LocalBackend) and opened.directory == tmp_path / "s", given

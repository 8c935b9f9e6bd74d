"""Small edges of stores on object storage and their commands: a URL without a bucket,
exit codes a command's help must list, lock waits that are no number of seconds, a lock
refreshed at an impossible time. Each bad input is one line with a documented exit code."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ckptcli.errors import ExitCode
from ckptcli.store import layout
from ckptcli.store.backends.s3 import S3Backend
from ckptcli.store.objlocks import LockRecord, encode_lock
from tests.conftest import run_ckpt
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures


def _one_line(got: subprocess.CompletedProcess[bytes], code: int, *needles: str) -> str:
    err = got.stderr.decode()
    assert got.returncode == code, (got.returncode, err)
    assert err.startswith("ckpt: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


@pytest.mark.parametrize(("url", "what"), [("s3://", "bucket"), ("s3:///k1", "bucket"), ("gs://", "bucket"), ("az:///x", "container")])
def test_an_object_storage_url_without_a_bucket_is_a_usage_error(url: str, what: str, tmp_path: Path) -> None:
    """docs/storage.md: what is not a well-formed URL is refused in one line, exit 2 (it
    was exit 4, "s3:: not an object-storage URL", the URL itself mangled)."""
    for args in (["--store", url, "ls"], ["init", url]):
        err = _one_line(run_ckpt(*args, cwd=tmp_path), ExitCode.USAGE, f"{url}: names no {what}")
        assert f"{url.split(':')[0]}:: " not in err, err
    assert list(tmp_path.iterdir()) == []  # nothing made for it locally


@pytest.mark.parametrize("command", ["tag", "branch"])
def test_tag_and_branch_list_the_locked_exit_code_in_their_help(command: str) -> None:
    """Both move refs under the store's locks and exit 9 when they cannot have them."""
    got = run_ckpt(command, "--help")
    assert got.returncode == 0
    assert re.search(r"^\s+9\s+the store is locked", got.stdout.decode(), re.MULTILINE), got.stdout.decode()


@pytest.mark.parametrize("value", ["nan", "-1", "-inf", "-0.5"])
@pytest.mark.parametrize("command", [["prune", "--keep-last", "1"], ["repair", "refs"], ["repair", "index"], ["migrate", "--format"]])
def test_a_lock_wait_that_is_no_number_of_seconds_is_refused(command: list[str], value: str, tmp_path: Path) -> None:
    """nan waited forever ("up to nan s"), -1 was taken as 0: each is one line, exit 2,
    before the store is opened (no store here at all)."""
    err = _one_line(run_ckpt("--store", tmp_path / "none", *command, "--lock-wait", value), ExitCode.USAGE, "--lock-wait", value)
    assert "no store" not in err, err


def test_a_lock_wait_of_zero_is_fine(tmp_path: Path) -> None:
    assert run_ckpt("init", tmp_path / "s").returncode == 0
    got = run_ckpt("--store", tmp_path / "s", "prune", "--keep-last", "1", "--lock-wait", "0")
    assert got.returncode == 0, got.stderr


@pytest.mark.parametrize("refreshed", [1e308, 1e20])
def test_a_lock_refreshed_at_an_impossible_time_is_shown_as_such(refreshed: float, s3_bucket: S3Bucket) -> None:
    """A planted lock object with `refreshed: 1e308` was shown as a number of hours 300
    digits long; it is stale, and said to be from no time ckpt writes."""
    url = f"{s3_bucket.url}/far"
    assert run_ckpt("init", url).returncode == 0
    record = LockRecord(
        id="e" * 32, kind="exclusive", host="elsewhere", pid=4242, user="u", created=0.0, refreshed=refreshed, command="ckpt prune"
    )
    planter = S3Backend.from_url(url, {})
    try:
        planter.put(layout.lock_object_path(record.id), encode_lock(record))
    finally:
        planter.close()
    for args in (["doctor"], ["unlock", "--dry-run"] if _has_dry_run() else ["unlock"]):
        got = run_ckpt("--store", url, *args)
        shown = got.stdout.decode() + got.stderr.decode()
        assert "Traceback" not in shown, shown
        about_locks = "\n".join(line for line in shown.splitlines() if "lock" in line and "journals/" not in line)
        assert not re.search(r"\d{12}", about_locks.replace("e" * 32, "")), shown  # no absurd number of hours
        assert "more than 100 years (not a time ckpt wrote)" in shown, shown


def _has_dry_run() -> bool:
    return "--dry-run" in run_ckpt("unlock", "--help").stdout.decode()


@pytest.mark.parametrize("where", ["local", "memory"])
@pytest.mark.parametrize("wait", [float("nan"), -1.0, float("-inf")])
def test_the_library_refuses_a_lock_wait_that_is_no_number_of_seconds(where: str, wait: float, tmp_path: Path) -> None:
    """The same through the API (prune(lock_wait=nan) waited forever): InvalidInputError
    from the lock itself, on a local store (flock) and on object storage (lock objects)."""
    import uuid

    from ckptcli import api
    from ckptcli.errors import InvalidInputError
    from ckptcli.store.backends.memory import MemoryBackend
    from ckptcli.store.prune import Policy, prune

    name = f"waits-{uuid.uuid4().hex}"
    st = api.init_store(tmp_path / "s" if where == "local" else f"memory://{name}")
    try:
        with pytest.raises(InvalidInputError, match="not a number of seconds of 0 or more"):
            prune(st, Policy(keep_last=1), lock_wait=wait)
    finally:
        st.close()
        MemoryBackend.forget(name)

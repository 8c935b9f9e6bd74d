"""Store files larger than ckpt ever writes them (planted, or damaged), on S3 (the moto
server of tests/s3_server.py) and on a local store (sparse files): each is refused
without being read whole, and what the refusal says to do works — `ckpt repair refs`
replaces an oversized latest ref, `ckpt verify` reports an oversized reflog as a
problem, `ckpt reflog` skips it, and no hint names the command that printed it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ckptcli.errors import ExitCode
from ckptcli.format import limits
from ckptcli.store import layout
from ckptcli.store.backends.s3 import S3Backend
from tests.conftest import run_ckpt
from tests.helpers_faults import child_env
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures

CAP = layout.RECORD_FILE_MAX
REF = layout.latest_ref("agent", "p")
LOG = layout.log_path(REF)


def _store(where: str, request: pytest.FixtureRequest | None, tmp_path: Path) -> tuple[str, Path]:
    """A store with one checkpoint of agent:p (on S3 or local) and a state document."""
    url = f"{request.getfixturevalue('s3_bucket').url}/p1" if request is not None and where == "s3" else str(tmp_path / "store")
    assert run_ckpt("init", url).returncode == 0
    doc = tmp_path / "doc.json"
    doc.write_text('{"memory": {"turn": 1}}')
    got = run_ckpt("--store", url, "take", doc, "-S", "agent:p")
    assert got.returncode == 0, got.stderr
    return url, doc


def _plant(url: str, path: str, size: int) -> None:
    """An object of `size` zero bytes at the store path `path` (sparse on a local disk)."""
    if url.startswith("s3://"):
        planter = S3Backend.from_url(url, {})
        try:
            planter.put(path, bytes(size))
        finally:
            planter.close()
        return
    target = Path(url) / path
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as fh:
        fh.truncate(size)


def _lines(got: subprocess.CompletedProcess[bytes]) -> list[str]:
    err = got.stderr.decode()
    assert "Traceback" not in err, err
    return err.splitlines()


@pytest.mark.parametrize("where", ["s3", "local"])
def test_repair_refs_replaces_an_oversized_latest_ref(where: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """`ls` and `take` say to run `ckpt repair refs`; it replaces the ref (S3 refused:
    it could not read the ref to swap it), and `ls` and `take` are clean after it."""
    url, doc = _store(where, request, tmp_path)
    _plant(url, REF, CAP + 1)
    listed = run_ckpt("--store", url, "ls")
    assert listed.returncode == 0 and "run `ckpt repair refs`" in listed.stderr.decode(), listed.stderr
    got = run_ckpt("--store", url, "repair", "refs", "--json")
    assert got.returncode == 0, got.stderr
    assert "latest/agent/p" in json.loads(got.stdout)["moved"], got.stdout
    listed = run_ckpt("--store", url, "ls", "--json")
    assert listed.returncode == 0 and listed.stderr == b"", listed.stderr
    [row] = json.loads(listed.stdout)
    assert "latest" in json.dumps(row), row
    took = run_ckpt("--store", url, "take", doc, "-S", "agent:p")
    assert took.returncode == 0 and "warning" not in took.stderr.decode(), took.stderr
    assert run_ckpt("--store", url, "verify").returncode == 0


@pytest.mark.parametrize("where", ["s3", "local"])
def test_an_oversized_latest_reflog_is_a_problem_verify_reports_and_ckpt_reflog_skips(
    where: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url, _doc = _store(where, request, tmp_path)
    _plant(url, LOG, limits.MAX_REFLOG_SIZE + 1)
    got = run_ckpt("--store", url, "verify", "--json")
    assert got.returncode == ExitCode.CORRUPT, got.stderr
    report = json.loads(got.stdout)
    assert [(p["kind"], p["name"]) for p in report["problems"]] == [("reflog", LOG)], report
    assert f"larger than {limits.MAX_REFLOG_SIZE} bytes" in report["problems"][0]["message"]
    err = _lines(got)[-1]
    assert err.startswith("ckpt: error: verify found 1 problem(s)") and "ckpt verify" not in err, err
    # every ref's log: the damaged one is skipped with a warning naming it
    logs = run_ckpt("--store", url, "reflog", "--json")
    assert logs.returncode == 0, logs.stderr
    [warning] = _lines(logs)
    assert warning.startswith("ckpt: warning: ") and LOG in warning and "ckpt reflog" not in warning, warning
    # that ref's log alone: an error, one line, with a hint that is not `ckpt reflog`
    one = run_ckpt("--store", url, "reflog", "agent:p")
    assert one.returncode == ExitCode.CORRUPT, one.stderr
    [err] = _lines(one)
    assert LOG in err and "remove that file" in err and "ckpt reflog" not in err and "ckpt verify" not in err, err


@pytest.mark.parametrize("where", ["s3", "local"])
def test_an_oversized_config_hints_at_no_command_that_reads_it(where: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    url, _doc = _store(where, request, tmp_path)
    _plant(url, layout.CONFIG, CAP + 1)
    for args in (["verify"], ["ls"]):
        got = run_ckpt("--store", url, *args)
        assert got.returncode == ExitCode.CORRUPT, got.stderr
        [err] = _lines(got)
        assert "config: larger than" in err and "ckpt verify" not in err and "backup" in err, err


def test_verify_without_json_points_to_json_not_to_itself(tmp_path: Path) -> None:
    url, _doc = _store("local", None, tmp_path)
    _plant(url, LOG, limits.MAX_REFLOG_SIZE + 1)
    got = run_ckpt("--store", url, "verify")
    assert got.returncode == ExitCode.CORRUPT
    assert f"damaged reflog {LOG}" in got.stdout.decode(), got.stdout
    err = _lines(got)[-1]
    assert "`ckpt verify" not in err and "--json" in err, err


# -- packs larger than ckpt writes are refused after a stat, in bounded memory -------------------

_RSS_CHILD = r"""
import sys
from ckptcli.cli.app import run
code = run(sys.argv[1:])
# VmHWM: this program's peak (ru_maxrss would carry the forking parent's over the exec)
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
print("maxrss-kib", hwm, file=sys.stderr)
sys.exit(code)
"""

_PACKS = ("packs/bb/" + "bb" * 32, "packs/" + "bb" * 32)


def _peak(*args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """`ckpt ARGS` in a child process, and its peak resident memory in MiB."""
    got = subprocess.run([sys.executable, "-c", _RSS_CHILD, *args], capture_output=True, text=True, env=child_env({}), timeout=600)
    assert "Traceback" not in got.stderr, got.stderr
    return got, int(got.stderr.split("maxrss-kib ")[1].split()[0]) // 1024


@pytest.mark.parametrize("where", ["s3", "local"])
def test_planted_packs_larger_than_ckpt_writes_are_refused_without_being_read(
    where: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Two planted packs, one byte larger than the largest pack ckpt writes on S3 (so the
    moto server is not asked to hold more), 400 MB (sparse) on a local store:
    `verify --read-data` names the one at a pack's path as a damaged pack and `repair
    index` as a damaged pack it leaves out, each without reading it (peak memory far
    below one such pack; the old code read both whole)."""
    url, _doc = _store(where, request, tmp_path)
    size = layout.PACK_FILE_MAX + 1 if where == "s3" else 400_000_000
    for path in _PACKS:
        _plant(url, path, size)
    got, peak = _peak("--store", url, "verify", "--read-data", "--json")
    assert got.returncode == ExitCode.CORRUPT, got.stderr
    problems = {p["name"]: p for p in json.loads(got.stdout)["problems"]}
    assert problems[_PACKS[0]]["kind"] == "pack" and problems[_PACKS[1]]["kind"] == "pack", problems
    assert "not where ckpt keeps a pack" in problems[_PACKS[1]]["message"], problems
    assert f"larger than {layout.PACK_FILE_MAX} bytes" in problems[_PACKS[0]]["message"], problems
    assert peak < 200, peak  # MiB; a planted pack alone is 136 MiB (S3) or 381 MiB (local)
    got, peak = _peak("--store", url, "repair", "index", "--json")
    damaged = json.loads(got.stdout)["damaged_packs"]
    assert f"larger than {layout.PACK_FILE_MAX} bytes" in damaged[_PACKS[0]], damaged
    assert "not where ckpt keeps a pack" in damaged[_PACKS[1]], damaged
    assert peak < 200, peak
    if where == "local":  # named, never removed; gone, the store is clean
        for path in _PACKS:
            assert (Path(url) / path).stat().st_size == size
            (Path(url) / path).unlink()
        assert run_ckpt("--store", url, "verify", "--read-data").returncode == 0


def test_no_backend_writes_packs_larger_than_the_limit() -> None:
    """PACK_FILE_MAX covers every pack a writer can finish: its target at most
    PACK_TARGET_MAX on every backend."""
    from ckptcli.store.backend import Backend
    from ckptcli.store.remote import ObjectStoreIO

    assert Backend.pack_target <= layout.PACK_TARGET_MAX and ObjectStoreIO.pack_target <= layout.PACK_TARGET_MAX
    spec = (Path(__file__).parent.parent / "formats" / "v1.md").read_text()
    assert f"{layout.PACK_FILE_MAX:,} bytes" in spec  # the Limits table says the same


@pytest.mark.parametrize("where", ["s3", "local"])
def test_an_oversized_tag_is_deleted_and_set_again_as_its_error_says(where: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    url, _doc = _store(where, request, tmp_path)
    assert run_ckpt("--store", url, "tag", "t1", "agent:p").returncode == 0
    _plant(url, layout.tag_ref("t1"), CAP + 1)
    got = run_ckpt("--store", url, "tag", "t1", "agent:p", "--force")
    assert got.returncode == ExitCode.CORRUPT, got.stderr
    [err] = _lines(got)
    assert "refs/tags/t1: larger than" in err and "`ckpt tag -d t1`" in err, err
    got = run_ckpt("--store", url, "tag", "-d", "t1")
    assert got.returncode == 0, got.stderr
    assert run_ckpt("--store", url, "tag", "t1", "agent:p").returncode == 0
    assert run_ckpt("--store", url, "verify").returncode == 0

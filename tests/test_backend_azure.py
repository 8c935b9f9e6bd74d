"""Stores on Azure Blob Storage (az://CONTAINER/PREFIX), against Azurite, Microsoft's
emulator, on loopback (tests/azurite_server.py): the conformance suite of the backend
contract, the server's own conditional writes (If-None-Match: *, If-Match), how the
endpoint and the emulator are found, and the CLI's verbs from init to a copy there and
back. Every test skips, saying how to install Azurite, where npm was not there at set-up."""

from __future__ import annotations

import base64
import filecmp
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckptcli.store.backends import open_backend
from ckptcli.store.backends.base import ObjectBackend
from ckptcli.store.backends.s3 import S3Backend
from tests.azurite_server import AzureContainer, fixture_azure_container, fixture_azure_env, fixture_azurite  # noqa: F401 - pytest fixtures
from tests.backend_suite import CHECKS, RACE_CHECKS, SAME_BYTES_CHECKS
from tests.conftest import run_ckpt


def _backend(container: AzureContainer) -> ObjectBackend:
    return S3Backend.from_url(f"{container.url}/stores/one", {})


#: all of the suite: Azurite's ETag changes when the same bytes are put again, and its
#: conditional writes are atomic between racing writers (one winner each round)
SUITE = CHECKS + SAME_BYTES_CHECKS + RACE_CHECKS


@pytest.mark.parametrize("check", SUITE, ids=[c.__name__ for c in SUITE])
def test_conformance_on_azurite(check: Callable[[ObjectBackend], None], azure_container: AzureContainer) -> None:
    backend = _backend(azure_container)
    try:
        check(backend)
    finally:
        backend.close()


def test_conditional_writes_are_the_servers_own(azure_container: AzureContainer) -> None:
    """If-None-Match: * and If-Match reach Azurite and its 409 / 412 are a lost race, not an
    error: the backend says it has conditional writes, and it has them."""
    backend = _backend(azure_container)
    assert backend.conditional_writes is True
    assert backend.put_if_absent("refs/x", b"one") is True
    assert backend.put_if_absent("refs/x", b"two") is False
    first = backend.stat("refs/x")
    second = backend.put_if_match("refs/x", b"three", first.etag)
    assert second is not None and second.etag != first.etag
    assert backend.put_if_match("refs/x", b"four", first.etag) is None  # a stale ETag: another writer won
    assert backend.put_if_match("refs/gone", b"five", first.etag) is None  # no such object: no match
    assert backend.put_if_match("refs/new", b"six", None) is not None  # None: only if absent
    assert backend.put_if_match("refs/new", b"seven", None) is None
    assert backend.get("refs/x") == b"three" and backend.get("refs/new") == b"six"
    assert not backend.exists("refs/gone")


def test_the_endpoint_of_the_emulator_is_honoured(azure_container: AzureContainer, monkeypatch: pytest.MonkeyPatch) -> None:
    """object_store's emulator mode goes to 127.0.0.1:10000 whatever endpoint is given:
    the endpoint in AZURE_STORAGE_ENDPOINT (set by the fixture) or the store option reaches
    the emulator where it listens, and AZURITE_BLOB_STORAGE_URL (object_store's own) does
    too."""
    endpoint = azure_container.server.endpoint
    assert _backend(azure_container).put("a", b"by the environment").size == 18
    monkeypatch.delenv("AZURE_STORAGE_ENDPOINT")
    by_option = S3Backend.from_url(f"{azure_container.url}/stores/one", {"endpoint": endpoint, "use_emulator": "true"})
    assert by_option.get("a") == b"by the environment"
    with_account = S3Backend.from_url(f"{azure_container.url}/stores/one", {"endpoint": f"{endpoint}/devstoreaccount1/"})
    assert with_account.get("a") == b"by the environment"
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", endpoint)
    assert _backend(azure_container).get("a") == b"by the environment"


def test_a_missing_container_and_a_bad_endpoint_are_one_line(azure_env: Any, tmp_path: Path) -> None:
    missing = run_ckpt("ls", "--store", "az://no-such-container/x", cwd=tmp_path)
    err = missing.stderr.decode()
    assert missing.returncode != 0 and err.count("\n") == 1 and "no such bucket 'no-such-container'" in err, err
    bad = run_ckpt("ls", "--store", "az://c/x", env={"AZURE_STORAGE_ENDPOINT": "127.0.0.1:1"}, cwd=tmp_path)
    err = bad.stderr.decode()
    assert bad.returncode == 4 and err.count("\n") <= 2 and "AZURE_STORAGE_ENDPOINT is not an http:// or https:// URL" in err, err
    assert "Traceback" not in err
    maybe = run_ckpt("ls", "--store", "az://c/x", env={"AZURE_STORAGE_USE_EMULATOR": "maybe"}, cwd=tmp_path)
    err = maybe.stderr.decode()
    assert maybe.returncode == 4 and "AZURE_STORAGE_USE_EMULATOR: not a boolean" in err and "Traceback" not in err, err


def _tree(root: Path, n: int) -> Path:
    work = root / "work"
    (work / "sub").mkdir(parents=True, exist_ok=True)
    (work / "model.bin").write_bytes(os.urandom(3 << 20))
    (work / "sub" / f"log-{n}.txt").write_text("line\n" * 1000 * n)
    return work


def _same_tree(a: Path, b: Path) -> None:
    cmp = filecmp.dircmp(a, b)
    assert not (cmp.left_only or cmp.right_only or cmp.funny_files), (cmp.left_only, cmp.right_only)
    _match, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    assert not (mismatch or errors), (mismatch, errors)
    for sub in cmp.common_dirs:
        _same_tree(a / sub, b / sub)


def test_the_cli_on_an_az_store_from_init_to_a_copy_and_back(azure_container: AzureContainer, cli: Any, tmp_path: Path) -> None:
    url = f"{azure_container.url}/team/agents"
    assert cli("init", url).code == 0, cli("init", url).err
    ids = []
    saved = []
    for n in (1, 2):
        doc = tmp_path / f"state-{n}.json"
        doc.write_text(json.dumps({"memory": {"turn": n}, "plan": list(range(n))}))
        work = _tree(tmp_path, n)
        saved.append(tmp_path / f"saved-{n}")
        got = cli("--store", url, "take", doc, "-S", "agent:a", "--blob", f"work={work}", "-m", f"turn {n}")
        assert got.code == 0, got.err
        ids.append(got.out.strip())
        shutil.copytree(work, saved[-1])  # what this take stored, as it was
    listed = json.loads(cli("--store", url, "ls", "--json").out)
    assert [c["id"] for c in listed] == ids[::-1]
    shown = cli("--store", url, "show", "latest", "--json")
    assert shown.code == 0 and json.loads(shown.out)["id"] == ids[1]
    verified = cli("--store", url, "verify", "--read-data")
    assert verified.code == 0 and "no problems found" in verified.out, verified.err
    out = tmp_path / "restored"
    assert cli("--store", url, "restore", ids[0], "--blobs", out, "--no-state").code == 0
    _same_tree(out / "work", saved[0])  # byte-identical
    pruned = cli("--store", url, "prune", "--keep-last", "1")
    assert pruned.code == 0, pruned.err
    assert [c["id"] for c in json.loads(cli("--store", url, "ls", "--json").out)] == [ids[1]]
    local, back = tmp_path / "local.ckpt", f"{azure_container.url}/back"
    assert cli("init", back).code == 0 and cli("init", local).code == 0
    for src, dst in ((url, local), (local, back)):
        copied = cli("copy", src, dst, "--json")
        assert copied.code == 0 and json.loads(copied.out)["copied"] == 1, copied.err
    again = tmp_path / "again"
    assert cli("--store", back, "restore", ids[1], "--blobs", again, "--no-state").code == 0
    _same_tree(again / "work", saved[1])
    assert cli("--store", back, "verify", "--read-data").code == 0
    leftovers = [p for p in open_backend(url).list_paths("") if p.startswith(("locks/", "tmp/"))]
    assert leftovers == []


def test_a_wrong_account_key_is_one_line_that_does_not_echo_it(azure_container: AzureContainer, tmp_path: Path) -> None:
    """A key the emulator refuses (403) is one line naming the store, without the key (exit 12,
    as any refused read)."""
    url = f"{azure_container.url}/keyed"
    assert run_ckpt("init", url, cwd=tmp_path).returncode == 0
    wrong = base64.b64encode(b"not the account's key, 64 bytes long, as an Azure key is.......").decode()
    got = run_ckpt("ls", "--store", url, env={"AZURE_STORAGE_ACCOUNT_KEY": wrong}, cwd=tmp_path)
    err = got.stderr.decode()
    assert got.returncode == 12 and err.count("\n") == 1 and url in err and "HTTP 403" in err, (got.returncode, err)
    assert wrong not in err and "Traceback" not in err


def test_doctor_on_an_az_store(azure_container: AzureContainer, cli: Any) -> None:
    url = f"{azure_container.url}/doc"
    assert cli("init", url).code == 0
    got = cli("doctor", "--store", url, "--json")
    checks = {c["name"]: c for c in json.loads(got.out)["checks"]}
    assert got.code == 0 and checks["store"]["status"] == "ok" and url in checks["store"]["detail"], got.out

"""Azurite, Microsoft's Azure Storage emulator (a Node program installed into .npm/ by
scripts/setup when npm is on PATH), serving blobs on loopback for the tests.

Test modules import the fixtures they use explicitly:

    from tests.azurite_server import fixture_azure_container, fixture_azure_env, fixture_azurite  # noqa: F401

(the fixtures are named `azurite`, `azure_env` and `azure_container`). One `azurite-blob`
serves the whole run (`azurite`, session scope, 127.0.0.1 on a port it picks, data in
memory only); `azure_container` gives each test a fresh container, with the emulator's
endpoint and AZURE_STORAGE_USE_EMULATOR in the environment for that test only (and
every other AZURE_* variable removed). When Azurite is not installed the tests that use
it skip, saying how to install it. Nothing reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import os
import re
import subprocess
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
AZURITE_BLOB = ROOT / ".npm" / "node_modules" / ".bin" / "azurite-blob"
#: the emulator's account and key, as Microsoft publishes them for Azurite
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
API_VERSION = "2021-08-06"
_LISTENS = re.compile(r"Blob service successfully listens on (http://127\.0\.0\.1:\d+)")


def installed() -> bool:
    return AZURITE_BLOB.is_file() and os.access(AZURITE_BLOB, os.X_OK)


@dataclass(frozen=True)
class Azurite:
    endpoint: str  #: http://127.0.0.1:PORT (the account is the first part of each path)

    def create_container(self, name: str) -> None:
        """PUT ?restype=container, signed with the emulator's Shared Key."""
        date = email.utils.formatdate(usegmt=True)
        headers = {"x-ms-date": date, "x-ms-version": API_VERSION}
        # the string to sign: the verb, eleven standard headers (all empty here), the x-ms-
        # headers, the account and the path, and the query
        signed = "PUT\n" + "\n" * 11 + "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
        signed += f"/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container"
        signature = base64.b64encode(hmac.new(base64.b64decode(KEY), signed.encode(), hashlib.sha256).digest()).decode()
        request = urllib.request.Request(
            f"{self.endpoint}/{ACCOUNT}/{name}?restype=container",
            method="PUT",
            headers={**headers, "Authorization": f"SharedKey {ACCOUNT}:{signature}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 201, response.status


@dataclass(frozen=True)
class AzureContainer:
    server: Azurite
    name: str

    @property
    def url(self) -> str:
        """az://NAME"""
        return f"az://{self.name}"


def _drain(stream: object) -> None:
    for _line in stream:  # type: ignore[attr-defined]
        pass


@pytest.fixture(name="azurite", scope="session")
def fixture_azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """One azurite-blob on 127.0.0.1 for the whole run, its data in memory."""
    if not installed():
        pytest.skip("azurite is not installed: run bash scripts/setup with npm on PATH")
    workspace = tmp_path_factory.mktemp("azurite")  # its working directory (it writes nothing there with its data in memory)
    args = [str(AZURITE_BLOB), "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence"]
    args += ["--skipApiVersionCheck", "--loose", "--disableTelemetry", "--silent"]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=workspace)
    drain: threading.Thread | None = None
    try:
        assert proc.stdout is not None
        endpoint = ""
        seen: list[str] = []
        for line in proc.stdout:  # it prints the address it listens on once it answers
            seen.append(line.rstrip())
            found = _LISTENS.search(line)
            if found:
                endpoint = found.group(1)
                break
        if not endpoint:
            raise RuntimeError("azurite-blob did not start: " + " | ".join(seen[-5:]))
        drain = threading.Thread(target=_drain, args=(proc.stdout,), daemon=True)
        drain.start()  # never let its pipe fill
        _wait_until_it_answers(endpoint)
        yield Azurite(endpoint)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if drain is not None:
            drain.join(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def _wait_until_it_answers(endpoint: str) -> None:
    """Any HTTP answer (an unsigned request is refused with 400 or 403) means it serves."""
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"{endpoint}/{ACCOUNT}?comp=list", timeout=5):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            threading.Event().wait(0.1)
    raise RuntimeError(f"azurite-blob at {endpoint} does not answer")


@pytest.fixture(name="azure_env")
def fixture_azure_env(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> Azurite:
    """The emulator in the environment, for this test only: AZURE_STORAGE_USE_EMULATOR and
    AZURE_STORAGE_ENDPOINT (the emulator's account and key are the published ones)."""
    for name in list(os.environ):
        if name.startswith(("AZURE_", "AZURITE_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    monkeypatch.setenv("AZURE_STORAGE_ENDPOINT", azurite.endpoint)
    return azurite


@pytest.fixture(name="azure_container")
def fixture_azure_container(azure_env: Azurite) -> AzureContainer:
    """A fresh, empty container."""
    container = AzureContainer(azure_env, f"ckpt-test-{uuid.uuid4().hex[:12]}")
    azure_env.create_container(container.name)
    return container

"""The URL registry of store backends (ckptcli/store/backends/__init__.py): locations,
the `ckptcli.backends` entry points, install hints, store options, and redaction."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from ckptcli import plugins
from ckptcli.errors import InvalidInputError
from ckptcli.store import backends
from ckptcli.store.backends import Location, open_backend, parse_location, parse_store_options, redact
from ckptcli.store.backends.local import LocalObjects
from ckptcli.store.backends.memory import MemoryBackend

REPO = Path(__file__).resolve().parent.parent


class Recorder(MemoryBackend):
    """A third-party backend: records what from_url was given."""

    given: tuple[str, dict[str, str]] | None = None

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, str]) -> Recorder:
        Recorder.given = (url, dict(options))
        return cls("recorder")


class Exploding(MemoryBackend):
    @classmethod
    def from_url(cls, url: str, options: Mapping[str, str]) -> Exploding:
        raise ValueError(f"bad endpoint in {url} with key {options.get('secret_access_key')}")


class NoFactory:
    pass


def _register(monkeypatch: pytest.MonkeyPatch, **schemes: str) -> None:
    """Make the installed metadata register exactly `schemes` in ckptcli.backends."""
    real = plugins._installed
    monkeypatch.setattr(plugins, "_installed", lambda g: list(schemes.items()) if g == plugins.BACKENDS else real(g))


def test_locations() -> None:
    assert parse_location("/abs/store") == Location("file", "/abs/store")
    assert parse_location("rel/.ckpt").is_local
    assert parse_location("C:\\stores\\x").is_local
    assert parse_location("with:colon") == Location("file", "with:colon")
    assert parse_location("file:///abs") == Location("file", "file:///abs")
    assert parse_location("S3://bucket/prefix") == Location("s3", "S3://bucket/prefix")
    assert not parse_location("memory://x").is_local
    with pytest.raises(InvalidInputError, match="empty"):
        parse_location("")


def test_builtin_schemes(tmp_path: Path) -> None:
    b = open_backend(str(tmp_path))
    assert isinstance(b, LocalObjects) and b.root == tmp_path
    MemoryBackend.forget("reg")
    m = open_backend("memory://reg")
    assert isinstance(m, MemoryBackend)
    m.put("x", b"1")
    assert open_backend("memory://reg").get("x") == b"1"  # the same name, the same store
    with pytest.raises(InvalidInputError, match="no store options"):
        open_backend("memory://reg", {"endpoint": "x"})
    assert set(backends.known_schemes()) >= {"file", "memory", "s3", "gs", "az"}


@pytest.mark.parametrize(("scheme", "extra"), [("s3", "s3"), ("gs", "gcs"), ("az", "azure")])
def test_a_missing_backend_module_names_the_extra(scheme: str, extra: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, **{scheme: "ckptcli_no_such_module_here:S3Backend"})
    with pytest.raises(InvalidInputError) as err:
        open_backend(f"{scheme}://bucket/prefix")
    assert f"pip install 'ckptcli[{extra}]'" in str(err.value)
    assert "Traceback" not in str(err.value)


def test_a_missing_dependency_of_a_third_party_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_a_dep.py").write_text("import ckpt_dependency_nobody_installed\nclass B: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _register(monkeypatch, weird="needs_a_dep:B")
    with pytest.raises(InvalidInputError, match="ckpt_dependency_nobody_installed") as err:
        open_backend("weird://x")
    assert "install the package that provides needs_a_dep" in str(err.value)


def test_a_third_party_backend_gets_the_url_and_options(monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, demo=f"{__name__}:Recorder")
    b = open_backend("demo://host/path?x=1", {"a": "1"})
    assert isinstance(b, Recorder)
    assert Recorder.given == ("demo://host/path?x=1", {"a": "1"})
    assert "demo" in backends.known_schemes()


def test_a_backend_without_from_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, bare=f"{__name__}:NoFactory")
    with pytest.raises(InvalidInputError, match="no from_url"):
        open_backend("bare://x")


def test_a_failing_backend_is_one_line_without_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, boom=f"{__name__}:Exploding")
    with pytest.raises(InvalidInputError) as err:
        open_backend("boom://AKIDUSER:hunter22@host/b?token=t0ps3cret", {"secret_access_key": "wJalrXUtnFEMI"})
    text = str(err.value)
    assert "ValueError: bad endpoint" in text and "\n" not in text
    for secret in ("hunter22", "t0ps3cret", "wJalrXUtnFEMI", "AKIDUSER"):
        assert secret not in text


def test_an_unknown_scheme_lists_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_fsspec_knows", lambda scheme: False)
    with pytest.raises(InvalidInputError) as err:
        open_backend("nosuchscheme://x")
    assert "unknown store URL scheme nosuchscheme://" in str(err.value)
    assert "az, file, gs, memory, s3" in str(err.value)


def test_a_scheme_fsspec_knows_goes_to_the_generic_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_fsspec_knows", lambda scheme: scheme == "ftp")
    monkeypatch.setattr(backends, "FSSPEC_BACKEND", f"{__name__}:Recorder")
    assert isinstance(open_backend("ftp://host/dir", {"k": "v"}), Recorder)
    assert Recorder.given == ("ftp://host/dir", {"k": "v"})
    monkeypatch.setattr(backends, "FSSPEC_BACKEND", "ckptcli_no_generic_here:FsspecBackend")
    with pytest.raises(InvalidInputError, match=r"pip install 'ckptcli\[fsspec\]'"):
        open_backend("ftp://host/dir")


def test_an_installed_entry_point_replaces_a_builtin(monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, memory=f"{__name__}:Recorder")
    assert isinstance(open_backend("memory://x"), Recorder)


def test_redact() -> None:
    assert redact("s3://bucket/prefix") == "s3://bucket/prefix"
    assert redact("/a/path:with@signs") == "/a/path:with@signs"
    assert redact("s3://AKID:secret@bucket/p") == "s3://***@bucket/p"
    assert redact("az://acct/c?sv=2020&sig=abc%2Fdef&se=1") == "az://acct/c?sv=2020&sig=***&se=1"
    assert redact("https://h/p?X-Amz-Security-Token=zzz&region=eu") == "https://h/p?X-Amz-Security-Token=***&region=eu"
    assert redact("s3://u:p@[::1/x") == "s3://***/x"  # malformed: everything before the path goes
    for url in ("s3://u:pw1@b/?token=tk2", "gs://b/?password=pw3&api_key=k4"):
        assert not any(s in redact(url) for s in ("pw1", "tk2", "pw3", "k4"))


def test_store_options() -> None:
    assert parse_store_options([], None) == {}
    assert parse_store_options(["region=eu", "endpoint=http://127.0.0.1:9000/x?a=b"], "") == {
        "region": "eu",
        "endpoint": "http://127.0.0.1:9000/x?a=b",
    }
    env = "region=us endpoint='http://h:1' 'note=two words' empty="
    assert parse_store_options(["region=eu", "region=ap"], env) == {
        "region": "ap",  # the command line over the environment, a later pair over an earlier one
        "endpoint": "http://h:1",
        "note": "two words",
        "empty": "",
    }


@pytest.mark.parametrize(
    ("pairs", "env", "message"),
    [
        (["s3cr3tvalue"], None, "--store-option number 1 has no '='"),
        (["ok=1", "=s3cr3tvalue"], None, "--store-option number 2 has a malformed key"),
        ([], "ok=1 s3cr3tvalue", "pair 2 of CKPT_STORE_OPTIONS has no '='"),
        ([], "key='s3cr3tvalue", "CKPT_STORE_OPTIONS cannot be split"),
    ],
)
def test_bad_store_options_never_echo_the_value(pairs: list[str], env: str | None, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as err:
        parse_store_options(pairs, env)
    assert "s3cr3tvalue" not in str(err.value)


def test_nothing_is_imported_before_a_url_needs_it() -> None:
    code = textwrap.dedent(
        """
        import sys
        import ckptcli.store.backends as b
        b.parse_location("s3://bucket/x"); b.known_schemes(); b.redact("s3://u:p@b/x")
        early = sorted(m for m in ("ckptcli.store.backends.local", "ckptcli.store.backends.memory",
                                   "ckptcli.store.backends.s3", "fsspec", "obstore", "boto3") if m in sys.modules)
        b.open_backend("memory://x")
        print(early, "ckptcli.store.backends.local" in sys.modules, "ckptcli.store.backends.memory" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.split() == ["[]", "False", "True"]

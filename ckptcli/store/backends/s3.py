"""`s3://BUCKET/PREFIX`, `gs://BUCKET/PREFIX`, `az://CONTAINER/PREFIX`: a store on object
storage, through obstore (the Rust object_store crate; bench/objstore.py and docs/design.md,
"Backends: the object-storage client", say why that client).

Credentials and endpoints come from the standard places: the environment (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL, AWS_ALLOW_HTTP;
GOOGLE_* and AZURE_* likewise), then for S3 the AWS config files (AWS_PROFILE, default
`default`, in AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE, default ~/.aws/), then the
`--store-option KEY=VALUE` pairs, which win: `endpoint`, `region`, `allow_http`, `timeout`,
`connect_timeout`, `max_retries`, `retry_timeout` (seconds), and any configuration key of
obstore's store (`virtual_hosted_style_request`, `skip_signature`, `use_emulator`, ...).
Azure's endpoint is AZURE_STORAGE_ENDPOINT or `endpoint`, and with the emulator (Azurite:
AZURE_STORAGE_USE_EMULATOR or `use_emulator`) it is the emulator's address (`_azure_options`).

Conditional writes are the server's own: put_if_absent sends `If-None-Match: *`,
put_if_match sends `If-Match: ETAG` (GCS: the object's generation); a 412 is another
writer's win, never an error. Large objects stream as one multipart upload whose parts
are 8 MiB. Every failure is one line naming the store's URL (without credentials or query)
and the reason; no secret that was configured ever appears in it.
"""

from __future__ import annotations

import builtins
import configparser
import contextlib
import datetime
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

from ckptcli.errors import CkptError, CorruptError, InvalidInputError, NoBucketError, NotFoundError, StoreIOError
from ckptcli.store.backends.base import ObjectBackend, ObjectInfo, ObjectWriter
from ckptcli.store.backends.paths import check_limit, check_path, check_prefix

__all__ = ["S3Backend"]

SCHEMES = ("s3", "gs", "az")
PART_SIZE = 8 * 1024 * 1024  #: bytes per part of a multipart upload (S3's minimum is 5 MiB)

_CLIENT_KEYS = {"allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "proxy_url", "user_agent", "pool_idle_timeout"}
_BOOL_KEYS = {"allow_http", "allow_invalid_certificates"}
_RETRY_KEYS = {"max_retries", "retry_timeout"}
# the AWS config-file keys obstore takes under another name
_AWS_FILE_KEYS = {
    "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "aws_session_token": "session_token",
    "region": "region",
    "endpoint_url": "endpoint",
}
_AZURE_ENDPOINT_KEYS = ("endpoint", "azure_storage_endpoint", "azure_endpoint")
_AZURE_ENDPOINT_VARS = ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT")
_AZURE_EMULATOR_KEYS = ("use_emulator", "azure_storage_use_emulator", "object_store_use_emulator")
_AZURE_EMULATOR_VARS = ("AZURE_STORAGE_USE_EMULATOR", "OBJECT_STORE_USE_EMULATOR")
# Azurite's account and key, published by Microsoft for the emulator (no secret)
_AZURITE_ACCOUNT = "devstoreaccount1"
_AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_SECRET_WORDS = ("secret", "token", "key", "password", "sas", "credential", "signature")
_DEFAULT_RETRIES = {"max_retries": 3, "retry_timeout": datetime.timedelta(seconds=30)}


def _bucket(parts: SplitResult) -> str:
    """The bucket (or container) as written: urlsplit's hostname lower-cases it, and
    `MixedCase` and `mixedcase` are two buckets."""
    return parts.netloc.rpartition("@")[2]


def redact_url(url: str) -> str:
    """The URL without user info, query or fragment (where credentials hide)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{_bucket(parts)}{parts.path}".rstrip("/")


def _failure(exc: BaseException) -> bool:
    """Whether `exc` is a failure to report as one line (obstore's errors, the OS's, a
    panic of obstore's Rust side, which pyo3 raises as a BaseException), not an interrupt."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


_ENDPOINT_VARS = {"s3": ("AWS_ENDPOINT_URL",), "gs": (), "az": _AZURE_ENDPOINT_VARS}
_ENDPOINT_EXAMPLES = {"s3": "https://s3.eu-west-1.amazonaws.com", "gs": "https://storage.googleapis.com", "az": "http://127.0.0.1:10000"}


def _check_endpoint(scheme: str, config: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """An endpoint must be an http(s) URL with a host: anything else makes obstore's Rust
    side panic at the first request."""
    places = [("store option endpoint", config.get("endpoint"))] + [(name, env.get(name)) for name in _ENDPOINT_VARS[scheme]]
    for where, value in places:
        if value is None:
            continue
        parts = urlsplit(str(value))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidInputError(f"{where} is not an http:// or https:// URL", hint=f"give one such as {_ENDPOINT_EXAMPLES[scheme]}")


def _azure_options(config: dict[str, Any], client: dict[str, Any], env: Mapping[str, str]) -> None:
    """An endpoint for Azure, from the store option or AZURE_STORAGE_ENDPOINT: an http://
    one allows plain HTTP, as for S3. With the emulator (Azurite: use_emulator, or
    AZURE_STORAGE_USE_EMULATOR) object_store ignores any endpoint and goes to
    AZURITE_BLOB_STORAGE_URL or 127.0.0.1:10000; an endpoint given by name is then
    honoured: the emulator at that address is its account (devstoreaccount1 unless named)
    under the URL's path, with that account's published development key unless one is
    given."""
    endpoint = next((str(config[k]) for k in _AZURE_ENDPOINT_KEYS if config.get(k)), "") or next(
        (env[k] for k in _AZURE_ENDPOINT_VARS if env.get(k)), ""
    )
    if endpoint.lower().startswith("http://") and "allow_http" not in client and not env.get("AZURE_ALLOW_HTTP"):
        client["allow_http"] = True
    said = [(k, str(config[k])) for k in _AZURE_EMULATOR_KEYS if k in config] + [(k, env[k]) for k in _AZURE_EMULATOR_VARS if env.get(k)]
    if not endpoint or not said or not _bool(*said[0]):
        return
    for key in _AZURE_ENDPOINT_KEYS + _AZURE_EMULATOR_KEYS:
        config.pop(key, None)
    config["use_emulator"] = "false"  # over AZURE_STORAGE_USE_EMULATOR: the endpoint below is the emulator
    account = str(config.get("account_name") or config.get("azure_storage_account_name") or env.get("AZURE_STORAGE_ACCOUNT_NAME") or "")
    if not account:
        account = config["account_name"] = _AZURITE_ACCOUNT
    if not any(config.get(k) for k in ("account_key", "azure_storage_account_key", "access_key")) and not env.get(
        "AZURE_STORAGE_ACCOUNT_KEY"
    ):
        config["account_key"] = _AZURITE_KEY
    parts = urlsplit(endpoint)
    config["endpoint"] = endpoint.rstrip("/") + ("" if parts.path.strip("/") else f"/{account}")


def _refused_option(plain: str, config: Mapping[str, Any], client: Mapping[str, Any], retry: Any) -> str | None:
    """The option without which obstore takes the others (its key), when there is one
    (no request is made)."""
    from obstore.store import from_url

    for key in [*config, *client]:
        rest: Any = ({k: v for k, v in config.items() if k != key}, {k: v for k, v in client.items() if k != key})
        try:
            from_url(plain, config=rest[0] or None, client_options=rest[1] or None, retry_config=retry)
        except BaseException as exc:  # as from_url's own caller: obstore's errors, a panic of its Rust side
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            continue
        return str(key)
    return None


def _bool(key: str, value: str) -> bool:
    low = value.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    where = key if key.isupper() else f"store option {key}"  # an environment variable, or an option
    raise InvalidInputError(f"{where}: not a boolean", hint="use true or false")


def _aws_files(env: Mapping[str, str]) -> dict[str, str]:
    """What the AWS config files say for the profile in use: keys and region."""
    profile = env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"
    home = Path.home() / ".aws"
    found: dict[str, str] = {}
    files = (
        (Path(env.get("AWS_CONFIG_FILE") or home / "config"), profile if profile == "default" else f"profile {profile}"),
        (Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or home / "credentials"), profile),
    )
    for path, section in files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (OSError, configparser.Error, UnicodeDecodeError):
            continue
        if parser.has_section(section):
            for key, ours in _AWS_FILE_KEYS.items():
                if parser.has_option(section, key):
                    found[ours] = parser.get(section, key).strip()
    return found


def _split_options(
    scheme: str, options: Mapping[str, str], env: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(config, client_options, retry_config) for obstore from the options and, for S3,
    the AWS config files where the environment does not say."""
    config: dict[str, Any] = {}
    if scheme == "s3":
        files = _aws_files(env)
        if env.get("AWS_ACCESS_KEY_ID"):
            files = {k: v for k, v in files.items() if k not in ("access_key_id", "secret_access_key", "session_token")}
        if env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"):
            files.pop("region", None)
        if env.get("AWS_ENDPOINT_URL") or env.get("AWS_ENDPOINT"):
            files.pop("endpoint", None)
        if "region" not in files and not (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")):
            files["region"] = "us-east-1"
        config.update(files)
        if env.get("AWS_DEFAULT_REGION") and not env.get("AWS_REGION"):
            config["region"] = env["AWS_DEFAULT_REGION"]
    client: dict[str, Any] = {}
    retry: dict[str, Any] = dict(_DEFAULT_RETRIES)
    for key, value in options.items():
        k = key.strip().lower()
        if k in _BOOL_KEYS:
            client[k] = _bool(key, value)
        elif k in _CLIENT_KEYS:
            client[k] = value
        elif k == "max_retries":
            if not value.strip().isdigit():
                raise InvalidInputError(f"store option {key}: not a whole number", hint="give a number such as 3")
            retry[k] = int(value)
        elif k == "retry_timeout":
            try:
                retry[k] = datetime.timedelta(seconds=float(value))
            except (ValueError, OverflowError):
                raise InvalidInputError(f"store option {key}: not a number of seconds", hint="give a number such as 30") from None
        else:
            config[k] = value
    endpoint = str(config.get("endpoint") or config.get("endpoint_url") or env.get("AWS_ENDPOINT_URL") or env.get("AWS_ENDPOINT") or "")
    if endpoint.lower().startswith("http://") and "allow_http" not in client and not env.get("AWS_ALLOW_HTTP"):
        client["allow_http"] = True  # an http:// endpoint was asked for by name (a MinIO or moto on a private network)
    return config, client, retry


def _secrets(config: Mapping[str, Any], env: Mapping[str, str], url: str) -> list[str]:
    """Every configured value that could be a secret, longest first (to scrub messages)."""
    found = [str(v) for k, v in config.items() if any(w in k.lower() for w in _SECRET_WORDS)]
    found += [v for k, v in env.items() if k.startswith(("AWS_", "GOOGLE_", "AZURE_")) and any(w in k.lower() for w in _SECRET_WORDS)]
    # the store's URL and every endpoint (an option, AWS_ENDPOINT_URL...): errors echo them
    urls = [url, *(str(v) for v in config.values() if "://" in str(v))]
    urls += [v for k, v in env.items() if k.startswith("AWS_ENDPOINT_URL") and "://" in v]
    for u in urls:
        try:
            parts = urlsplit(u)
            found += [p for p in (parts.password, parts.username, parts.query) if p]
        except ValueError:
            continue
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def _reason(text: str) -> str:
    """The cause of an obstore error on one line: the HTTP status and S3's code and message,
    or the connection failure, without the Rust debug dump."""
    head, _, debug = text.partition("\n\nDebug source:")
    head = " ".join(head.split())
    status = re.search(r"status code: (\d{3}[^:<]*)", head)
    code = re.search(r"<Code>([^<]*)</Code>", head)
    message = re.search(r"<Message>([^<]*)</Message>", head)
    if status:
        bits = [f"HTTP {status.group(1).strip()}"] + [m.group(1) for m in (code, message) if m]
        return ": ".join(bits)
    os_message = re.search(r'message: "([^"]*)"', debug)
    head = re.sub(r" in [\d.]+[mµn]?s\b", "", head)
    head = re.sub(r"^Generic \w+ error: ", "", head)
    reason = head[:300] + ("…" if len(head) > 300 else "")
    if os_message:
        reason += f" ({os_message.group(1)})"
    return reason or type(text).__name__


class S3Backend(ObjectBackend):
    """A store under a prefix of a bucket (S3 and S3-compatible servers, GCS) or an Azure
    container, with the server's own conditional writes."""

    conditional_writes = True

    def __init__(self, store: Any, url: str, secrets: list[str], by_version: bool = False, quote: bool = False) -> None:
        import obstore

        self._obs = obstore
        self._store = store
        self.url = url
        self._secrets = secrets
        self._by_version = by_version  # GCS matches a generation, not an ETag
        self._quote = quote  # Azure's listings give ETags without their quotes

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, str]) -> S3Backend:
        """Args: `s3://BUCKET[/PREFIX]` (or gs://, az://), the `--store-option` pairs.
        Raises: InvalidInputError for a malformed URL, an unknown option or a missing client."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        shown = redact_url(url)
        if scheme not in SCHEMES or not _bucket(parts):
            raise InvalidInputError(
                f"{shown}: not an object-storage URL", hint="use s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or az://CONTAINER/PREFIX"
            )
        try:
            from obstore.exceptions import BaseError
            from obstore.store import from_url
        except ImportError:
            raise InvalidInputError(f"{shown}: needs the obstore package", hint=f"pip install 'ckptcli[{_EXTRA[scheme]}]'") from None
        env = dict(os.environ)
        config, client, retry = _split_options(scheme, options, env)
        _check_endpoint(scheme, config, env)
        if scheme == "az":
            _azure_options(config, client, env)
        secrets = _secrets(config, env, url)
        plain = f"{scheme}://{_bucket(parts)}{parts.path}".rstrip("/")
        try:
            store = from_url(plain, config=config or None, client_options=client or None, retry_config=retry)  # type: ignore[call-overload]
        except BaseException as exc:  # obstore's errors, and a panic of its Rust side (a BaseException)
            if not isinstance(exc, (BaseError, ValueError, TypeError, OverflowError)) and type(exc).__name__ != "PanicException":
                raise
            what = f"({type(exc).__name__})"
            if type(exc).__name__ == "UnknownConfigurationKeyError":  # keys are no secret: name them, never values
                what = f"(a key it does not know among: {', '.join(sorted(options)) or 'none given'})"
            bad = None if type(exc).__name__ == "UnknownConfigurationKeyError" else _refused_option(plain, config, client, retry)
            if bad:  # a value it cannot read: name its key, never the value
                raise InvalidInputError(
                    f"{shown}: the --store-option {bad} was refused {what}: its value, or an option it needs with it",
                    hint=f"check the value of {bad} (a number, a duration such as 30s, true or false, a URL: see docs/storage.md)",
                ) from None
            raise InvalidInputError(
                f"{shown}: the store options or the URL were refused {what}",
                hint=f"check the --store-option keys and values, CKPT_STORE_OPTIONS and {_ENDPOINT_HINT[scheme]}",
            ) from None
        return cls(store, shown, secrets, by_version=scheme == "gs", quote=scheme == "az")

    # -- errors -------------------------------------------------------------------------

    def _where(self, path: str) -> str:
        return f"{self.url}/{path}" if path else self.url

    def _error(self, path: str, verb: str, exc: BaseException) -> CkptError:
        text = str(exc)
        # the code in the reply's body, when it came whole; else the status of a listing:
        # a bucket that exists answers a listing of any prefix, even an empty one, with 200
        if "NoSuchBucket" in text or "ContainerNotFound" in text or (verb == "list" and _STATUS_404.search(text)):
            return self._no_bucket()
        if isinstance(exc, FileNotFoundError):
            return NotFoundError(f"{self._where(path)}: no such object")
        return StoreIOError(_scrub(f"{self._where(path)}: {verb} failed: {_reason(text)}", self._secrets), hint=self._hint(text))

    def _hint(self, text: str) -> str:
        """What to do about a failed request: for one that reached no server, check the
        server and the endpoint; else try again, and `ckpt doctor` if it goes on."""
        if _UNREACHED.search(text):
            scheme = urlsplit(self.url).scheme
            where = _ENDPOINT_HINT.get(scheme, "the store options")
            return f"check the endpoint ({where}, or --store-option endpoint=URL), that its server is up, and the network"
        return "try again; if it goes on, `ckpt doctor` checks the store and its credentials"

    def _no_bucket(self) -> NoBucketError:
        bucket = _bucket(urlsplit(self.url))
        return NoBucketError(
            _scrub(f"{self.url}: no such bucket {bucket!r}", self._secrets),
            hint="create the bucket first (ckpt does not create buckets), or check the URL and the endpoint",
        )

    def check_bucket(self) -> None:
        """One listing of the store's prefix (its first page): a missing bucket answers
        it with 404 (NoBucketError); any other failure (no permission to list) says
        nothing of the bucket, and is left to the caller's own report."""
        try:
            with self._calling("", "list"):
                next(iter(self._obs.list(self._store, prefix=None, chunk_size=1)), None)
        except NoBucketError:
            raise
        except CkptError:
            pass

    def _check(self, path: str) -> str:
        return check_path(path, self.url)

    def _token(self, meta: Mapping[str, Any]) -> str:
        if self._by_version and meta.get("version"):
            return str(meta["version"])
        token = str(meta.get("e_tag") or meta.get("version") or "")
        if self._quote and token and not token.startswith(('"', "W/")):
            token = f'"{token}"'  # Azure lists an ETag bare and sends it quoted in a header: one token for both
        return token

    def _info(self, path: str, size: int, result: Mapping[str, Any]) -> ObjectInfo:
        token = self._token(result)
        if not token:  # a server that answers a put without an ETag
            return self.stat(path)
        return ObjectInfo(path, size, token)

    # -- reads --------------------------------------------------------------------------

    def get(self, path: str) -> bytes:
        return self.get_versioned(path)[0]

    @contextlib.contextmanager
    def _calling(self, path: str, verb: str) -> Iterator[None]:
        """Around a call of obstore: what it raises becomes one of ckpt's errors
        (`_error`); an interrupt passes through."""
        try:
            yield
        except CkptError:
            raise
        except BaseException as exc:
            if not _failure(exc):
                raise
            raise self._error(path, verb, exc) from None

    def get_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str]:
        check_limit(limit, self._where(path))
        if limit is None:
            with self._calling(path, "get"):
                result = self._obs.get(self._store, self._check(path))
                return bytes(result.bytes()), self._token(result.meta)
        for _ in range(5):
            if limit > 0:
                try:  # a ranged GET answers with the ETag of the whole object
                    result = self._obs.get(self._store, self._check(path), options={"range": (0, limit)})
                    return bytes(result.bytes()), self._token(result.meta)
                except CkptError:
                    raise
                except BaseException as exc:  # obstore's errors, the OS's, a panic of its Rust side
                    if not _failure(exc):
                        raise
                    if "416 Range Not Satisfiable" not in str(exc) and "InvalidRange" not in str(exc):
                        raise self._error(path, "get", exc) from None
            info = self.stat(path)  # an empty object (S3 answers its ranged GET with 416), or limit 0
            if info.size == 0 or limit == 0:
                return b"", info.etag
        raise StoreIOError(f"{self._where(path)}: changed on every read; try again")

    def get_view(self, path: str) -> bytes | memoryview:
        """The object as a view of the buffer obstore received it into (no copy)."""
        with self._calling(path, "get"):
            return memoryview(self._obs.get(self._store, self._check(path)).bytes())

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        return bytes(self.get_range_view(path, offset, length))

    def get_range_view(self, path: str, offset: int, length: int) -> bytes | memoryview:
        """The range as a view of the buffer obstore received it into (no copy)."""
        if offset < 0 or length < 0:
            raise InvalidInputError(f"{self._where(path)}: a range needs offset >= 0 and length >= 0, not {offset}, {length}")
        if length == 0:
            self.stat(path)
            return b""
        try:
            return memoryview(self._obs.get_range(self._store, self._check(path), start=offset, length=length))
        except CkptError:
            raise
        except BaseException as exc:  # obstore's errors, the OS's, a panic of its Rust side
            if not _failure(exc):
                raise
            if "416" in str(exc) or "InvalidRange" in str(exc):
                self.stat(path)  # past the end of an object that is there: no bytes
                return b""
            raise self._error(path, "get", exc) from None

    def stat(self, path: str) -> ObjectInfo:
        with self._calling(path, "stat"):
            meta = self._obs.head(self._store, self._check(path))
        return ObjectInfo(path, int(meta["size"]), self._token(meta))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # object_store lists whole path segments: list the prefix's directory, keep what
        # starts with the prefix itself
        directory = check_prefix(prefix, self.url).rpartition("/")[0]
        with self._calling(prefix, "list"):
            found = [info for info in self._list_under(directory) if info.path.startswith(prefix)]
        found.sort(key=lambda info: info.path)
        yield from found

    def _list_under(self, directory: str) -> builtins.list[ObjectInfo]:
        """Every object under `directory` ("" for all). A key that is not a path (an empty,
        '.' or '..' part: no ckpt writes one, but anyone may put one in the bucket) makes
        object_store refuse the whole page that holds it; then the directory is listed a
        level at a time, so that only the level holding it is listed around it, and the
        key is listed as it is (`ObjectInfo` of size 0), for the store to skip and name."""
        try:
            return self._list_flat(directory, None)
        except _BadKeyError as first:
            bad = first.key  # the first bad key of the directory, in the order of keys
        try:
            level = self._obs.list_with_delimiter(self._store, prefix=directory or None)
        except BaseException as exc:
            if _bad_key(exc) is None:
                raise
            return self._around(directory, bad)  # the bad key is an entry of this level
        out = [self._meta_info(meta) for meta in level["objects"]]
        for sub in level["common_prefixes"]:
            out.extend(self._list_under(str(sub)))
        return out

    def _around(self, directory: str, bad: str) -> builtins.list[ObjectInfo]:
        """The bad keys directly under `directory` (`bad`, the first) and its objects. A
        bad part ('..', '.', '') sorts before "0", where the names of a store's objects
        start (a letter or a digit), and in that order: the listing goes on just past each
        bad part's keys ('../' is passed over from '..0', './' from '.0', '//' from '0'),
        where it meets the next bad key of this level or, past the last, the objects."""
        head = f"{directory}/" if directory else ""
        out: builtins.list[ObjectInfo] = []
        while True:
            part = self._relative(bad)[len(head) :].partition("/")[0]
            out.append(self._bad_info(bad))
            offset = f"{head}{part}0" if part in ("..", ".") else f"{head}0"
            try:
                return out + self._list_flat(directory, offset)
            except _BadKeyError as again:
                after = self._relative(again.key)[len(head) :].partition("/")[0]
                if (
                    not self._relative(again.key).startswith(head)
                    or after not in _BAD_PARTS
                    or _BAD_PARTS[after] <= _BAD_PARTS.get(part, 2)
                ):
                    raise CorruptError(  # a bad key deeper down, past this level's bad parts: say so rather than list around it blind
                        f"{self.url}: the bucket holds keys that are not store paths (an empty, '.' or '..' part), "
                        f"{self._relative(bad)!r} and {self._relative(again.key)!r} among them; ckpt wrote no such key",
                        hint="find them with an S3 tool (aws s3 ls --recursive) and remove them, then run the command again",
                    ) from None
                bad = again.key

    def _list_flat(self, directory: str, offset: str | None) -> builtins.list[ObjectInfo]:
        try:
            return [
                self._meta_info(meta) for chunk in self._obs.list(self._store, prefix=directory or None, offset=offset) for meta in chunk
            ]
        except BaseException as exc:
            bad = _bad_key(exc)
            if bad is None:
                raise
            raise _BadKeyError(bad) from None

    def _meta_info(self, meta: Mapping[str, Any]) -> ObjectInfo:
        return ObjectInfo(str(meta["path"]), int(meta["size"]), self._token(meta))

    def _relative(self, key: str) -> str:
        """A bucket's key as a path relative to the store's prefix."""
        root = urlsplit(self.url).path.strip("/")
        return key[len(root) + 1 :] if root and key.startswith(root + "/") else key

    def _bad_info(self, key: str) -> ObjectInfo:
        return ObjectInfo(self._relative(key), 0, "")

    # -- writes -------------------------------------------------------------------------

    def put(self, path: str, data: bytes) -> ObjectInfo:
        with self._calling(path, "put"):
            result = self._obs.put(self._store, self._check(path), data, use_multipart=False)
        return self._info(path, len(data), result)

    def _put_if(self, path: str, data: bytes, mode: Any) -> Mapping[str, Any] | None:
        """A conditional put: its result, or None when the server answered 412 / exists."""
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            return self._obs.put(self._store, self._check(path), data, mode=mode, use_multipart=False)  # type: ignore[no-any-return]
        except CkptError:
            raise
        except (AlreadyExistsError, PreconditionError):
            return None
        except BaseException as exc:  # obstore's errors, the OS's, a panic of its Rust side
            if not _failure(exc):
                raise
            error = self._error(path, "conditional put", exc)
            if isinstance(error, NotFoundError):  # If-Match on an object deleted meanwhile
                return None
            raise error from None

    def put_if_absent(self, path: str, data: bytes) -> bool:
        return self._put_if(path, data, "create") is not None

    def put_if_match(self, path: str, data: bytes, etag: str | None) -> ObjectInfo | None:
        if etag is None:
            mode: Any = "create"
        else:
            mode = {"version": etag} if self._by_version else {"e_tag": etag}
        result = self._put_if(path, data, mode)
        return None if result is None else self._info(path, len(data), result)

    def open_writer(self, path: str) -> ObjectWriter:
        with self._calling(path, "open writer"):
            writer = self._obs.open_writer(self._store, self._check(path), buffer_size=PART_SIZE)
        return _S3Writer(self, path, writer)

    def delete(self, path: str) -> None:
        with contextlib.suppress(NotFoundError), self._calling(path, "delete"):  # a missing object is fine
            self._obs.delete(self._store, self._check(path))


_EXTRA = {"s3": "s3", "gs": "gcs", "az": "azure"}
_ENDPOINT_HINT = {"s3": "AWS_ENDPOINT_URL", "gs": "the GOOGLE_* variables", "az": "the AZURE_STORAGE_* variables"}
#: obstore's words for a request that reached no server (refused, no such host, timed out)
_UNREACHED = re.compile(r"error sending request|Connection refused|dns error|timed out|connect error", re.IGNORECASE)
_STATUS_404 = re.compile(r"status code: 404\b|\b404 Not Found\b")  # obstore's words for the reply's status
_BAD_PARTS = {"..": 0, ".": 1, "": 2}  # the parts object_store refuses, in the order their keys sort
_BAD_KEY = re.compile(r'Path "((?:[^"\\]|\\.)*)"')


class _BadKeyError(Exception):
    """A listing met a key object_store cannot take as a path."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _bad_key(exc: BaseException) -> str | None:
    """The bucket's key that made a listing fail (obstore's InvalidPathError), as its
    message quotes it; None for any other failure."""
    if type(exc).__name__ != "InvalidPathError":
        return None
    found = _BAD_KEY.search(str(exc))
    if found is None:
        return "?"
    text = found.group(1)
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape")  # the message escapes as Rust's Debug does
    except UnicodeDecodeError:
        return text


def _scrub(text: str, secrets: list[str]) -> str:
    text = re.sub(r"//[^/@\s]+@", "//", text)  # user info in any URL
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


class _S3Writer(ObjectWriter):
    """One multipart upload: each PART_SIZE bytes written go up as a part; commit completes
    the upload, abort aborts it (the parts sent are discarded by the server)."""

    def __init__(self, backend: S3Backend, path: str, writer: Any) -> None:
        self._backend, self._path, self._writer = backend, path, writer
        self._size = 0
        self._open = True

    def write(self, data: bytes | memoryview) -> None:
        if not self._open:
            raise ValueError("write to a committed or aborted writer")
        try:
            self._writer.write(data)
        except BaseException as exc:  # obstore's errors, the OS's, a panic of its Rust side
            if not _failure(exc):
                raise
            self.abort()
            raise self._backend._error(self._path, "multipart upload", exc) from None
        self._size += len(data)

    def commit(self) -> ObjectInfo:
        if not self._open:
            raise ValueError("commit of a committed or aborted writer")
        self._open = False
        try:
            self._writer.close()
        except BaseException as exc:  # obstore's errors, the OS's, a panic of its Rust side
            if not _failure(exc):
                raise
            self._abort_upload()
            raise self._backend._error(self._path, "complete multipart upload", exc) from None
        return self._backend.stat(self._path)

    def abort(self) -> None:
        if self._open:
            self._open = False
            self._abort_upload()

    def _abort_upload(self) -> None:
        # obstore's writer aborts its multipart upload when its context exits by an exception
        # abort never raises: a part the server lost is gone anyway
        with contextlib.suppress(Exception):
            self._writer.__exit__(_AbortedError, _AbortedError(), None)


class _AbortedError(Exception):
    """The exception the obstore writer is closed with, to abort its upload."""

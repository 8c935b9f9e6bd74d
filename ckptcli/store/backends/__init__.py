"""Store backends: the object-storage contract (base) and its implementations, chosen by
the URL of a store (docs/design.md, "Backends").

The registry: a store location is a path (a local store) or a URL `scheme://...`
(`file:///abs` is local too). A scheme names a backend class through the entry-point
group `ckptcli.backends` (ckptcli.plugins.BACKENDS; ckpt registers its own there as
well), imported only when a URL needs it; a scheme nobody registers goes to the generic
fsspec backend when fsspec is installed and knows the protocol. Every backend class has
the classmethod `from_url(url, options)` (the BackendClass protocol).

Store options (`--store-option KEY=VALUE`, repeated, and the environment variable
CKPT_STORE_OPTIONS): the environment holds `KEY=VALUE` pairs separated by spaces, quoted
as in a POSIX shell (`CKPT_STORE_OPTIONS="endpoint=http://127.0.0.1:9000 region=eu-west-1"`);
an option on the command line replaces the same key from the environment.

Nothing here prints a secret: `redact` strips the user info and secret-looking query
values of a URL, and messages about options name keys and positions, never values.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from ckptcli import plugins
from ckptcli.errors import CkptError, InvalidInputError, UsageError, failed_with

if TYPE_CHECKING:
    from ckptcli.store.backends.base import ObjectBackend

__all__ = [
    "ENV_OPTIONS",
    "EXTRAS",
    "FSSPEC_BACKEND",
    "BackendClass",
    "Location",
    "backend_class",
    "is_secret_key",
    "known_schemes",
    "open_backend",
    "parse_location",
    "parse_store_options",
    "redact",
    "redact_args",
]

#: the environment variable of store options
ENV_OPTIONS = "CKPT_STORE_OPTIONS"
#: the pip extra that installs what a scheme's backend needs
EXTRAS = {"s3": "s3", "gs": "gcs", "az": "azure"}
#: the backend of every protocol fsspec knows and no entry point claims
FSSPEC_BACKEND = "ckptcli.store.backends.generic:FsspecBackend"

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SECRET = re.compile(r"secret|token|passw|pwd|sig|credential|auth|session|key|sas", re.IGNORECASE)


class BackendClass(Protocol):
    """What the registry calls to make a backend (a classmethod of the backend class)."""

    def from_url(self, url: str, options: Mapping[str, str]) -> ObjectBackend:
        """Args: the location as the user gave it, the store options. Returns: the
        backend. Raises: InvalidInputError for a malformed URL or an unknown option."""
        ...


@dataclass(frozen=True)
class Location:
    """A store location: its scheme ("file" for a plain path) and the text as given."""

    scheme: str
    text: str

    @property
    def is_local(self) -> bool:
        """Whether it names a local directory (a path or a file:// URL)."""
        return self.scheme == "file"


def parse_location(text: str) -> Location:
    """Args: `--store` / CKPT_STORE. Returns: its Location: `scheme://...` is a URL
    (the scheme lower-cased), anything else a path.

    One rule tells them apart, everywhere a location is read: a text that starts with a
    registered scheme or `file` and a colon (`s3:/bucket/x`, `s3:bucket`, `file:s3://b`)
    is a URL, and one that is not well formed is refused, never taken for a relative
    path (a local directory named so is given as `./s3:...`). A URL's prefix has no
    `.`, `..` or empty part; an s3://, gs:// or az:// URL has no query (store options
    are --store-option pairs) and no user info (credentials go in the environment or
    the store options).

    Raises: InvalidInputError (empty); UsageError (a malformed URL, its secrets left out)."""
    if not text:
        raise InvalidInputError("the store location is empty", hint="give a path, or a URL such as s3://bucket/prefix")
    found = _SCHEME.match(text)
    if found is None:
        _refuse_scheme_typo(text)
        return Location("file", text)
    scheme = found[1].lower()
    if scheme != "file":
        _check_url(text, scheme)
    return Location(scheme, text)


_HEAD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


def _refuse_scheme_typo(text: str) -> None:
    """A registered scheme (or `file`) and a colon without `//`: a URL mistyped."""
    head = _HEAD.match(text)
    if head is None:
        return
    scheme = head[1].lower()
    if scheme != "file" and scheme not in known_schemes():
        return  # a path such as "dir:x": no store scheme
    shown = text if "@" not in text else f"{head[0]}***@{text.rpartition('@')[2]}"
    right = "file:///absolute/path" if scheme == "file" else f"{scheme}://bucket/prefix"
    raise UsageError(
        f"{shown!r} is not a well-formed store URL (one is written {right})",
        hint=f"fix the URL, or write ./{shown} for a local directory named so",
    )


def _check_url(text: str, scheme: str) -> None:
    """A `scheme://...` URL: no `.`, `..` or empty part in its prefix (a trailing slash
    is allowed); on s3://, gs:// and az://, which read neither, no query or fragment and
    no user info (a plugin's backend may read them)."""
    shown = redact(text)
    try:
        parts = urlsplit(text)
    except ValueError:
        raise UsageError(f"{shown} is not a well-formed store URL", hint=f"write {scheme}://bucket/prefix") from None
    if scheme in EXTRAS and (parts.query or parts.fragment or "?" in text or "#" in text):
        raise UsageError(
            f"{shown}: a store URL takes no query (?...) or fragment (#...)",
            hint="give store options as --store-option KEY=VALUE or in CKPT_STORE_OPTIONS",
        )
    if "@" in parts.netloc and scheme in EXTRAS:
        raise UsageError(
            f"{shown}: a store URL carries no user info (user:password@)",
            hint="put credentials in the environment (e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or in --store-option",
        )
    if scheme in EXTRAS and not parts.netloc:  # (no user info or query left to hide: the text as given)
        bucket = "container" if scheme == "az" else "bucket"
        raise UsageError(
            f"{text}: names no {bucket} (an object-storage URL is written {scheme}://{bucket.upper()}/PREFIX)",
            hint=f"write the {bucket} after {scheme}://, e.g. {scheme}://team-{bucket}/agents",
        )
    prefix = parts.path.removeprefix("/").removesuffix("/")
    for part in prefix.split("/") if prefix else ():
        if part in ("", ".", ".."):
            what = "an empty part (//)" if not part else f"a {part!r} part"
            raise UsageError(
                f"{shown}: the prefix {prefix!r} has {what}; ckpt does not resolve them",
                hint=f"write the prefix in full, e.g. {scheme}://bucket/a/b",
            )


def known_schemes() -> list[str]:
    """The schemes registered in `ckptcli.backends`, sorted (nothing imported)."""
    return plugins.names(plugins.BACKENDS)


def _fsspec_knows(scheme: str) -> bool:
    """Whether fsspec is installed and has an implementation of `scheme`."""
    if importlib.util.find_spec("fsspec") is None:
        return False
    found = importlib.import_module("fsspec.registry")  # imported only for a scheme no entry point claims
    return scheme in found.known_implementations or scheme in found.registry


def _install_hint(scheme: str, entry: plugins.Entry) -> str:
    extra = EXTRAS.get(scheme) or ("fsspec" if entry.value == FSSPEC_BACKEND else None)
    if extra:
        return f"pip install 'ckptcli[{extra}]'"
    return f"install the package that provides {entry.module}, or remove the one that registers {scheme}://"


def backend_class(scheme: str) -> BackendClass:
    """The backend class of `scheme`, imported now. Raises: InvalidInputError naming
    the install to make (a missing module or dependency) or the known schemes."""
    entry = plugins.find(plugins.BACKENDS, scheme)
    if entry is None:
        if not _fsspec_knows(scheme):
            fsspec = "" if importlib.util.find_spec("fsspec") else "; other protocols need pip install 'ckptcli[fsspec]'"
            raise InvalidInputError(
                f"unknown store URL scheme {scheme}://",
                hint=f"known schemes: {', '.join(known_schemes())}, or a path for a local store{fsspec}",
            )
        entry = plugins.Entry(scheme, FSSPEC_BACKEND, plugins.BACKENDS)
    try:
        cls = entry.load()
    except ImportError as exc:
        raise InvalidInputError(
            f"the backend of {scheme}:// URLs is not installed ({type(exc).__name__}: {exc})", hint=_install_hint(scheme, entry)
        ) from None
    except Exception as exc:
        raise InvalidInputError(
            f"loading the backend of {scheme}:// ({entry.value}) failed: {failed_with(exc)}",
            hint="reinstall or remove the package that registers it (ckpt doctor lists the plugins)",
        ) from exc
    if not callable(getattr(cls, "from_url", None)):
        raise InvalidInputError(
            f"the backend registered for {scheme}:// ({entry.value}) has no from_url classmethod",
            hint="fix or remove the package that registers it",
        )
    found: BackendClass = cls
    return found


def open_backend(text: str, options: Mapping[str, str] | None = None) -> ObjectBackend:
    """Args: a store location (path or URL), store options. Returns: its backend.
    Raises: InvalidInputError (an unknown scheme, a missing install, a malformed URL, an
    option the backend does not take), with no secret in the message."""
    location = parse_location(text)
    cls = backend_class(location.scheme)
    given = dict(options or {})
    try:
        return cls.from_url(location.text, given)
    except CkptError:
        raise
    except ImportError as exc:
        entry = plugins.find(plugins.BACKENDS, location.scheme) or plugins.Entry(location.scheme, FSSPEC_BACKEND, plugins.BACKENDS)
        raise InvalidInputError(
            f"the backend of {location.scheme}:// URLs needs a module that is not installed ({type(exc).__name__}: {exc})",
            hint=_install_hint(location.scheme, entry),
        ) from None
    except Exception as exc:  # noqa: BLE001 - a third-party backend's own failure: one line, no secret
        reason = _scrub(failed_with(exc), text, given)
        raise InvalidInputError(f"cannot open the store {redact(text)}: {reason}", hint="check the URL and the store options") from None


def is_secret_key(key: str) -> bool:
    """Whether an option or query key looks like it holds a secret (never shown)."""
    return _SECRET.search(key) is not None


def _scrub(message: str, url: str, options: Mapping[str, str]) -> str:
    """`message` with the URL redacted and every secret-looking option's value masked."""
    message = message.replace(url, redact(url))
    for key, value in options.items():
        if value and is_secret_key(key):
            message = message.replace(value, "***")
        elif "://" in value:
            message = message.replace(value, redact(value))
    return message


def redact(url: str) -> str:
    """Args: a store location. Returns: it without a secret: user info (user:password@)
    and the values of secret-looking query keys (token, signature, key, ...) become ***.
    A path is returned as it is."""
    if _SCHEME.match(url) is None:
        return url
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
    except ValueError:  # a malformed netloc: drop everything up to the path
        scheme, _sep, rest = url.partition("://")
        return f"{scheme}://***" + ("/" + rest.partition("/")[2] if "/" in rest else "")
    netloc = f"***@{host}" if "@" in parts.netloc else host
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{quote(k, safe='')}={'***' if is_secret_key(k) else quote(v, safe='')}" for k, v in pairs)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_args(args: Sequence[str]) -> list[str]:
    """A command line as records may keep it (reflog entries, lock objects): every URL
    redacted (a URL-valued `--store-option` too: `endpoint=http://***@host`), and the
    value of every `--store-option` whose key looks secret replaced by ***."""
    out: list[str] = []
    option_next = False
    for arg in args:
        if option_next or arg.startswith("--store-option="):
            head, eq, pair = arg.partition("=") if not option_next else ("", "", arg)
            key, has, value = pair.partition("=")
            shown = f"{key}=***" if has and is_secret_key(key) else f"{key}={redact(value)}" if "://" in value else pair
            out.append(f"{head}{eq}{shown}" if not option_next else shown)
        elif "://" in arg:
            head, eq, rest = arg.partition("=") if arg.startswith("-") else ("", "", arg)
            out.append(f"{head}{eq}{redact(rest)}")
        else:
            out.append(arg)
        option_next = arg == "--store-option"
    return out


_CLI_OPTIONS: list[str] = []


def set_cli_options(pairs: Sequence[str]) -> None:
    """The `--store-option KEY=VALUE` pairs of this command line (the CLI sets them for the
    run; `cli_options` gives them to every store the run opens)."""
    _CLI_OPTIONS[:] = list(pairs)


def cli_options() -> list[str]:
    return list(_CLI_OPTIONS)


def parse_store_options(pairs: Sequence[str], env_value: str | None) -> dict[str, str]:
    """Args: the `--store-option KEY=VALUE` values in order, the value of
    CKPT_STORE_OPTIONS (None or "" for none). Returns: key -> value, the command line's
    over the environment's, a later pair over an earlier one. Raises: InvalidInputError
    naming the pair by its position (never its text: it may be a secret)."""
    out: dict[str, str] = {}
    if env_value and env_value.strip():
        import shlex

        try:
            words = shlex.split(env_value)
        except ValueError as exc:
            raise InvalidInputError(
                f"{ENV_OPTIONS} cannot be split into KEY=VALUE pairs ({exc})",
                hint=f'separate pairs by spaces and quote as in a shell: {ENV_OPTIONS}="endpoint=http://127.0.0.1:9000 region=eu-west-1"',
            ) from None
        for n, word in enumerate(words, 1):
            key, value = _pair(word, f"pair {n} of {ENV_OPTIONS}")
            out[key] = value
    for n, word in enumerate(pairs, 1):
        key, value = _pair(word, f"--store-option number {n}")
        out[key] = value
    return out


def _pair(word: str, where: str) -> tuple[str, str]:
    key, eq, value = word.partition("=")
    if not eq:
        raise InvalidInputError(f"{where} has no '=': expected KEY=VALUE", hint="for example --store-option endpoint=http://127.0.0.1:9000")
    if not _KEY.fullmatch(key):
        raise InvalidInputError(
            f"{where} has a malformed key: expected KEY=VALUE, the key made of letters, digits, '_', '.' and '-'",
            hint="for example --store-option region=eu-west-1",
        )
    if _CONTROL.search(value):  # a header or a URL cannot hold one (obstore panics on it); the value is never shown
        raise InvalidInputError(
            f"{where} ({key}) has a control character (a newline, a tab...) in its value",
            hint="give the value on one line, without control characters",
        )
    return key, value

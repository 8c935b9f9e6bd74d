"""The object paths every backend accepts: '/'-separated, relative to the store root,
never starting with '/', never with an empty, '.' or '..' part, never a NUL
(ObjectBackend's docstring). ckptcli.store.layout builds every path a store uses; these
checks stop anything else (a hostile ref name, a bug) before it reaches a backend."""

from __future__ import annotations

from ckptcli.errors import InvalidInputError

__all__ = ["check_limit", "check_path", "check_prefix", "path_problem"]


def check_path(path: str, where: str = "") -> str:
    """Args: an object path, the store it is in (for the message). Returns: `path`.
    Raises: InvalidInputError naming what is wrong with it."""
    problem = _problem(path) if path else "it is empty"
    if problem:
        at = f" in {where}" if where else ""
        raise InvalidInputError(
            f"refused the object path {path!r}{at}: {problem}",
            hint="object paths are relative, '/'-separated, without empty, '.' or '..' parts",
        )
    return path


def check_prefix(prefix: str, where: str = "") -> str:
    """Args: a list prefix ("" for every object, "packs/", "refs/latest/"). Returns:
    `prefix`. Raises: InvalidInputError as check_path does (a trailing '/' is allowed)."""
    if prefix:
        check_path(prefix[:-1] if prefix.endswith("/") else prefix, where)
    return prefix


def check_limit(limit: int | None, where: str) -> int | None:
    """Args: the limit of a get_versioned (None: no limit), the object (for the message).
    Returns: `limit`. Raises: InvalidInputError when it is negative."""
    if limit is not None and limit < 0:
        raise InvalidInputError(f"a read of {where} limited to {limit} bytes: the limit must be >= 0")
    return limit


def path_problem(path: str) -> str:
    """Args: a key a listing gave. Returns: why it cannot be an object path ("" when it can)."""
    return _problem(path) if path else "it is empty"


def _problem(path: str) -> str:
    if "\x00" in path:
        return "it holds a NUL byte"
    if path.startswith("/"):
        return "it starts with '/'"
    parts = path.split("/")
    if "" in parts:
        return "it has an empty part ('//' or a trailing '/')"
    if ".." in parts:
        return "it has a '..' part"
    if "." in parts:
        return "it has a '.' part"
    return ""

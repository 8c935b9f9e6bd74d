"""Every entry-point group ckpt reads, in one place.

Adapters (in this package or installed beside it) hook into the layers below them
through these groups, so that no lower module imports an adapter. Listing names
imports nothing; `load` imports only the entry points asked for. The in-tree ones
are registered in pyproject.toml, `[project.entry-points]`.
"""

from __future__ import annotations

import importlib
import os
import re
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ckptcli.errors import InvalidInputError, failed_with, user_failure

__all__ = [
    "ADAPTERS",
    "BACKENDS",
    "BESIDE_STORE",
    "DOCTOR",
    "EXPIRY",
    "GROUPS",
    "MIGRATIONS",
    "REDUCERS",
    "RETENTION",
    "Entry",
    "entries",
    "find",
    "load",
    "names",
]

#: an ext namespace's reducers of its events (ckptcli.history.events)
REDUCERS = "ckptcli.reducers"
#: what a kept checkpoint needs kept with it, per ext namespace (ckptcli.store.prune)
RETENTION = "ckptcli.retention"
#: when a subject of an ext namespace expires, and how to hold it while it is pruned (ckptcli.store.prune)
EXPIRY = "ckptcli.expiry"
#: checks of the files an adapter keeps beside a store, for `ckpt verify` (ckptcli.store.verify)
BESIDE_STORE = "ckptcli.beside_store"
#: `ckpt doctor` checks (ckptcli.doctor)
DOCTOR = "ckptcli.doctor"
#: store backends by URL scheme: `scheme = module:Class`, the class an ObjectBackend with a
#: `from_url(url, options)` classmethod (ckptcli.store.backends)
BACKENDS = "ckptcli.backends"
#: a project's schema migrations, `--migrations ep:NAME` (ckptcli.schema.migrations)
MIGRATIONS = "ckpt.migrations"
#: adapters by name: `name = module:Class`, the class a ckptcli.adapters.base.Adapter
#: (ckptcli.adapters.registry)
ADAPTERS = "ckptcli.adapters"

GROUPS = (REDUCERS, RETENTION, EXPIRY, BESIDE_STORE, DOCTOR, MIGRATIONS, BACKENDS, ADAPTERS)

#: ckpt's own registrations, as pyproject.toml declares them (a test keeps the two equal).
#: Read as well as the installed metadata, so that an install whose metadata predates a
#: group (an editable install not reinstalled after an upgrade) still finds them: without
#: it, `ckpt verify` would skip the LangGraph journals without a word. An installed entry
#: point of the same name replaces the built-in one.
BUILTIN: dict[str, dict[str, str]] = {
    REDUCERS: {
        "langgraph": "ckptcli.adapters.langgraph.events:REDUCERS",
        "process": "ckptcli.adapters.process.events:REDUCERS",
        "temporal": "ckptcli.adapters.temporal.events:REDUCERS",
        "workflow": "ckptcli.workflow.events:REDUCERS",
    },
    RETENTION: {"langgraph": "ckptcli.adapters.langgraph.retention:retain"},
    EXPIRY: {"langgraph": "ckptcli.adapters.langgraph.plugins:Expiry"},
    BESIDE_STORE: {"langgraph": "ckptcli.adapters.langgraph.plugins:check_beside"},
    BACKENDS: {
        "file": "ckptcli.store.backends.local:LocalObjects",
        "memory": "ckptcli.store.backends.memory:MemoryBackend",
        "s3": "ckptcli.store.backends.s3:S3Backend",
        "gs": "ckptcli.store.backends.s3:S3Backend",
        "az": "ckptcli.store.backends.s3:S3Backend",
    },
    ADAPTERS: {
        "compat": "ckptcli.adapters.compat:CompatAdapter",
        "generic": "ckptcli.adapters.generic:GenericAdapter",
        "langgraph": "ckptcli.adapters.langgraph.adapter:LangGraphAdapter",
        "process": "ckptcli.adapters.process.adapter:ProcessAdapter",
        "temporal": "ckptcli.adapters.temporal.adapter:TemporalAdapter",
    },
}


@dataclass(frozen=True)
class Entry:
    """One entry point: `name = value` in `group` (the fields of importlib.metadata's
    EntryPoint, and its `load`)."""

    name: str
    value: str
    group: str

    @property
    def module(self) -> str:
        """The module part of `value`."""
        return self._parts()[0]

    @property
    def attr(self) -> str:
        """The attribute path after the colon ("" when `value` names a module)."""
        return self._parts()[1]

    def load(self) -> Any:
        """The object `value` names (`module` or `module:attr.attr`), imported."""
        module, attr = self._parts()
        obj: Any = importlib.import_module(module)
        for part in attr.split(".") if attr else ():
            obj = getattr(obj, part)
        return obj

    def _parts(self) -> tuple[str, str]:
        found = _VALUE.match(self.value)
        if not found:
            raise ValueError(f"malformed entry point value {self.value!r}")
        return found["module"], found["attr"] or ""


#: bytes of one entry_points.txt read at most (a real one is a few hundred)
_MAX_ENTRY_POINTS_FILE = 1 << 20

#: importlib.metadata's grammar of an entry point's value: `module[:attr.attr] [extras]`
_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")


def entries(group: str) -> list[Entry]:
    """The entry points of `group`: ckpt's own (BUILTIN), then the installed ones; an
    installed one of the same name replaces the built-in."""
    installed = [Entry(name, value, group) for name, value in _installed(group)]
    have = {ep.name for ep in installed}
    builtin = [Entry(name, value, group) for name, value in BUILTIN.get(group, {}).items() if name not in have]
    return builtin + installed


def _installed(group: str) -> list[tuple[str, str]]:
    """(name, value) of each installed entry point of `group`, as
    `importlib.metadata.entry_points(group=group)` finds them. Importing importlib.metadata
    costs ~30 ms (it pulls in the email package), more than the rest of a small `ckpt
    verify`; where every place distributions can come from is a plain directory on
    sys.path (the usual virtualenv), their `entry_points.txt` files are read directly,
    with the same precedence (sys.path order, a directory's .dist-info before its
    .egg-info; the first distribution of a name wins).
    Anything else (a zip on sys.path, a finder of its own) goes to importlib.metadata."""
    dirs = _plain_path()
    if dirs is None:
        from importlib.metadata import entry_points

        return [(ep.name, ep.value) for ep in entry_points(group=group)]
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for d in dirs:
        try:
            listing = os.listdir(d or ".")
        except OSError:
            continue
        for child in [c for c in listing if c.endswith(".dist-info")] + [c for c in listing if c.endswith(".egg-info")]:
            stem = os.path.splitext(child)[0]
            dist = re.sub(r"[-_.]+", "_", stem.partition("-")[0]).lower()
            if dist in seen:
                continue
            seen.add(dist)
            out += _read_group(os.path.join(d or ".", child, "entry_points.txt"), group)
    return out


def _plain_path() -> list[str] | None:
    """sys.path when distributions can only come from its directories; None otherwise."""
    from importlib.machinery import PathFinder

    if any(f is not PathFinder and hasattr(f, "find_distributions") for f in sys.meta_path):
        return None
    if any(os.path.isfile(d) for d in sys.path):  # a zip: importlib.metadata reads inside it
        return None
    return list(sys.path)


def _read_group(path: str, group: str) -> list[tuple[str, str]]:
    """The `name = value` lines of section `[group]` of an entry_points.txt (the
    ini-like format, parsed as importlib.metadata parses it; a line without `=`, which
    importlib.metadata fails on, is skipped)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO planted there must not hang ckpt
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return []
            text = f.read(_MAX_ENTRY_POINTS_FILE).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    out, section = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
        elif section == group and "=" in line:
            name, _eq, value = line.partition("=")
            out.append((name.strip(), value.strip()))
    return out


def names(group: str) -> list[str]:
    """The names registered in `group`, sorted, without importing anything."""
    return sorted({ep.name for ep in entries(group)})


def find(group: str, name: str) -> Entry | None:
    """The entry point `name` of `group` (the first one, if two packages register it), not loaded."""
    return next((ep for ep in entries(group) if ep.name == name), None)


def load(group: str, wanted: Iterable[str] | None = None) -> list[tuple[str, Any]]:
    """(name, loaded object) of each entry point of `group` (only those named in
    `wanted`, when given), in name order."""
    keep = None if wanted is None else set(wanted)
    found = sorted((ep for ep in entries(group) if keep is None or ep.name in keep), key=lambda ep: ep.name)
    return [(ep.name, _load(group, ep)) for ep in found]


def _load(group: str, ep: Entry) -> Any:
    """The object `ep` names; a package whose entry point cannot be imported is one line
    (InvalidInputError) naming it, not a crash of the command that asked."""
    try:
        return ep.load()
    except BaseException as exc:  # the plugin's own import failed (sys.exit too): one line, cause kept
        if not user_failure(exc):
            raise
        raise InvalidInputError(
            f"loading the entry point {ep.name!r} ({ep.value}) of the group {group} failed: {failed_with(exc)}",
            hint="reinstall or remove the package that registers it (ckpt doctor lists the plugins)",
        ) from exc

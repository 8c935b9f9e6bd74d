"""Every entry-point group ckpt reads, in one place.

Adapters (in this package or installed beside it) hook into the layers below them
through these groups, so that no lower module imports an adapter. Listing names
imports nothing; `load` imports only the entry points asked for. The in-tree ones
are registered in pyproject.toml, `[project.entry-points]`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ckptcli.errors import InvalidInputError, failed_with, user_failure

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["BESIDE_STORE", "DOCTOR", "EXPIRY", "GROUPS", "MIGRATIONS", "REDUCERS", "RETENTION", "entries", "find", "load", "names"]

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
#: a project's schema migrations, `--migrations ep:NAME` (ckptcli.schema.migrations)
MIGRATIONS = "ckpt.migrations"

GROUPS = (REDUCERS, RETENTION, EXPIRY, BESIDE_STORE, DOCTOR, MIGRATIONS)

#: ckpt's own registrations, as pyproject.toml declares them (a test keeps the two equal).
#: Read as well as the installed metadata, so that an install whose metadata predates a
#: group (an editable install not reinstalled after an upgrade) still finds them: without
#: it, `ckpt verify` would skip the LangGraph journals without a word. An installed entry
#: point of the same name replaces the built-in one.
BUILTIN: dict[str, dict[str, str]] = {
    REDUCERS: {"langgraph": "ckptcli.adapters.langgraph.events:REDUCERS"},
    RETENTION: {"langgraph": "ckptcli.adapters.langgraph.retention:retain"},
    EXPIRY: {"langgraph": "ckptcli.adapters.langgraph.plugins:Expiry"},
    BESIDE_STORE: {"langgraph": "ckptcli.adapters.langgraph.plugins:check_beside"},
}


def entries(group: str) -> list[EntryPoint]:
    """The entry points of `group` (importlib.metadata is imported on first use: the
    recorder loads this module inside agents, where start-up counts)."""
    from importlib.metadata import EntryPoint, entry_points

    installed = list(entry_points(group=group))
    have = {ep.name for ep in installed}
    builtin = [EntryPoint(name, value, group) for name, value in BUILTIN.get(group, {}).items() if name not in have]
    return builtin + installed


def names(group: str) -> list[str]:
    """The names registered in `group`, sorted, without importing anything."""
    return sorted({ep.name for ep in entries(group)})


def find(group: str, name: str) -> EntryPoint | None:
    """The entry point `name` of `group` (the first one, if two packages register it), not loaded."""
    return next((ep for ep in entries(group) if ep.name == name), None)


def load(group: str, wanted: Iterable[str] | None = None) -> list[tuple[str, Any]]:
    """(name, loaded object) of each entry point of `group` (only those named in
    `wanted`, when given), in name order."""
    keep = None if wanted is None else set(wanted)
    found = sorted((ep for ep in entries(group) if keep is None or ep.name in keep), key=lambda ep: ep.name)
    return [(ep.name, _load(group, ep)) for ep in found]


def _load(group: str, ep: EntryPoint) -> Any:
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

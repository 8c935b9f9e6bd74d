"""The Temporal adapter behind the contract (ckptcli/adapters/base.py): the reducers of
the `temporal:<EventType>` events and the importer of Temporal histories (`ckpt import
temporal HISTORY.json`). Capture and restore belong to Temporal itself (its server keeps
the history; its workers replay it), so this adapter does neither. Importing this module
imports neither temporalio nor ijson."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ckptcli.adapters.base import Adapter, Availability, Importer, Option
from ckptcli.progress import NULL, Progress

if TYPE_CHECKING:
    from ckptcli.store.repository import Store

INSTALL_HINT = "pip install 'ckptcli[temporal]'"


class HistoryImporter(Importer):
    """Temporal workflow histories (JSON), one subject `workflow:<workflow id>` each
    (ckptcli/adapters/temporal/importer.py)."""

    name = "temporal"
    summary = "Temporal workflow histories (temporal workflow show --output json, WorkflowHistory.to_json()), as workflow:ID checkpoints"
    source = "a history JSON file, or a directory of them (ID.json)"
    options = (Option("workflow_id", "The workflow's id (default: the file's name without .json).", str, None, "ID"),)

    def run(self, store: Store, source: str, options: Mapping[str, Any], progress: Progress = NULL) -> dict[str, Any]:
        """Import the history file or directory `source` (see importer.import_histories).

        Args:
            store: the store to write into.
            source: a history file, or a directory of `*.json` history files.
            options: {"workflow_id": ID or None}.
            progress: counts the events written.

        Returns:
            {"workflows", "checkpoints", "events", "already_present"}.

        Raises:
            UsageError: temporalio or ijson is not installed; NotFoundError: no such file;
            CorruptError: malformed or truncated JSON (exit 5); InvalidInputError: JSON
            that is no Temporal history, an unknown event type (exit 4).
        """
        from ckptcli.adapters.temporal.importer import import_histories

        return import_histories(store, source, workflow_id=options.get("workflow_id"), progress=progress)

    def describe(self, result: Mapping[str, Any], where: str) -> str:
        """The line `ckpt import temporal` prints (see Importer.describe)."""
        rows = result["workflows"]
        subjects = ", ".join(r["subject"] for r in rows[:3]) + (f" and {len(rows) - 3} more" if len(rows) > 3 else "")
        again = f"; {result['already_present']} were in the store already" if result["already_present"] else ""
        if result["events"]:
            n = result["checkpoints"]
            return f"imported {result['events']} history events of {subjects} into {where} ({n} checkpoint{'s' if n != 1 else ''}){again}"
        return f"nothing new to import: {where} has the {result['already_present']} events of {subjects} already"


class TemporalAdapter(Adapter):
    """Temporal workflows: their histories imported as checkpoints, replayed with the
    reducers of their events, checked against the workflow code (`ckpt replay --check`)."""

    name = "temporal"
    kind = "workflow"
    summary = "Temporal workflow histories: `ckpt import temporal`, their derived state, `ckpt replay --check MODULE:Workflow`"

    @classmethod
    def available(cls) -> Availability:
        """Whether temporalio and ijson are importable here (the importer and the replay
        check need them; the reducers do not).

        Returns:
            ok with the temporalio version found; not ok when a package is missing
            (details["missing"] names it: an optional package).
        """
        missing = []
        for module in ("temporalio", "ijson"):
            try:
                if importlib.util.find_spec(module) is None:
                    missing.append(module)
            except (ImportError, ValueError):
                missing.append(module)
        if missing:
            return Availability(
                False,
                f"{' and '.join(missing)} not installed: {INSTALL_HINT}",
                {"temporalio": None if "temporalio" in missing else _version("temporalio"), "missing": missing},
            )
        version = _version("temporalio")
        return Availability(True, f"temporalio {version}", {"temporalio": version, "ijson": _version("ijson")})

    def reducers(self) -> Mapping[str, Callable[..., Any]]:
        """The reducers of the `temporal:<EventType>` events.

        Returns:
            kind -> reducer, as the entry point ckptcli.reducers `temporal` registers them.
        """
        from ckptcli.adapters.temporal.events import REDUCERS

        return dict(REDUCERS)

    def importers(self) -> Mapping[str, Importer]:
        """The history importer.

        Returns:
            {"temporal": HistoryImporter()}.
        """
        return {"temporal": HistoryImporter()}


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None

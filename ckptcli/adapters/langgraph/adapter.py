"""The LangGraph adapter behind the contract (ckptcli/adapters/base.py): the saver's event
reducers and the SqliteSaver importer (`ckpt import langgraph DB`).

Capture and restore belong to LangGraph itself: CkptSaver is its checkpointer
(docs/langgraph.md), so this adapter does neither. Importing this module imports neither
LangGraph nor the saver."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptcli.adapters.base import Adapter, Availability, Importer, Option
from ckptcli.progress import NULL, Progress

if TYPE_CHECKING:
    from ckptcli.store.repository import Store

#: the major version of langgraph-checkpoint CkptSaver is built for
MAJOR = "4"


class SqliteImporter(Importer):
    """A LangGraph SqliteSaver database, read-only: one checkpoint per LangGraph checkpoint
    (ckptcli/adapters/langgraph/importer.py)."""

    name = "langgraph"
    summary = "the histories of a LangGraph SqliteSaver database (read-only), as ckpt's saver would have written them"
    source = "a SqliteSaver database"
    options = (Option("thread", "Import this thread only (default: every thread).", str, None, "ID"),)

    def run(self, store: Store, source: str, options: Mapping[str, Any], progress: Progress = NULL) -> dict[str, Any]:
        """Import the database `source` (see ckptcli.adapters.langgraph.importer.import_sqlite).

        Args:
            store: the store to write into.
            source: the database's path.
            options: {"thread": ID or None}.
            progress: reports the checkpoints as they are imported.

        Returns:
            {"threads", "checkpoints", "already_present", "writes"}.

        Raises:
            UsageError: langgraph-checkpoint is not installed; NotFoundError: no such file
            or thread; CorruptError: not SQLite (exit 5); InvalidInputError: SQLite but no
            SqliteSaver database (exit 4).
        """
        from ckptcli.adapters.langgraph.importer import import_sqlite

        return import_sqlite(store, Path(source), thread=options.get("thread"), progress=progress).to_dict()

    def describe(self, result: Mapping[str, Any], where: str) -> str:
        """The line `ckpt import langgraph` prints (see Importer.describe)."""
        n = len(result["threads"])
        threads = f"{n} thread{'s' if n != 1 else ''}"
        already = result["already_present"]
        again = f"; {already} were in the store already" if already else ""
        if result["checkpoints"] or result["writes"]:
            return f"imported {result['checkpoints']} checkpoints ({result['writes']} pending writes) of {threads} into {where}{again}"
        return f"nothing new to import: {where} has the {already} checkpoints of {threads} already"


class LangGraphAdapter(Adapter):
    """LangGraph graphs: CkptSaver checkpoints them; this adapter brings the reducers of
    the saver's events and the SqliteSaver importer."""

    name = "langgraph"
    kind = "agent"
    summary = "LangGraph graphs checkpointed by CkptSaver: the reducers of its events, `ckpt import langgraph` of SqliteSaver databases"

    @classmethod
    def available(cls) -> Availability:
        """Whether langgraph-checkpoint 4.x is importable here (CkptSaver needs it).

        Returns:
            ok with the version found; not ok when it is missing (details["missing"] names
            it: an optional package) or of another major version.
        """
        try:
            found = importlib.util.find_spec("langgraph.checkpoint.base") is not None
        except (ImportError, ValueError):
            found = False
        version = _version("langgraph-checkpoint")
        if not found or version is None:
            return Availability(
                False,
                "langgraph-checkpoint is not installed: pip install 'ckptcli[langgraph]'",
                {"langgraph-checkpoint": None, "missing": ["langgraph-checkpoint"]},
            )
        if version.split(".")[0] != MAJOR:
            return Availability(
                False, f"langgraph-checkpoint {version} is installed; CkptSaver is built for {MAJOR}.x", {"langgraph-checkpoint": version}
            )
        return Availability(True, f"langgraph-checkpoint {version}", {"langgraph-checkpoint": version})

    def reducers(self) -> Mapping[str, Callable[..., Any]]:
        """The reducer of the saver's `langgraph:write` events.

        Returns:
            {"langgraph:write": reducer}, as the entry point ckptcli.reducers registers it.
        """
        from ckptcli.adapters.langgraph.events import REDUCERS

        return dict(REDUCERS)

    def importers(self) -> Mapping[str, Importer]:
        """The SqliteSaver importer.

        Returns:
            {"langgraph": SqliteImporter()}.
        """
        return {"langgraph": SqliteImporter()}


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None

"""A third-party adapter, as a package outside ckpt would ship it (tests/test_adapters.py
installs it by putting this directory, with its .dist-info, on PYTHONPATH).

`dirsnap` captures a directory a workflow writes: its files as blobs, their names and
sizes in ext:dirsnap; restores them into another directory; has one event kind
(`dirsnap:touched`) and one importer (`dirsnap-json`, a listing in JSON)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ckptcli.adapters.base import Adapter, Availability, Capture, Importer, NotSupported, Option
from ckptcli.errors import InvalidInputError, NotFoundError
from ckptcli.progress import NULL, Progress


def _touched(state: Any, ev: Any) -> Any:
    ext = dict(state.get("ext") or {})
    mine = dict(ext.get("dirsnap") or {})
    mine["touched"] = [*(mine.get("touched") or []), ev.fields["path"]]
    ext["dirsnap"] = mine
    return {**state, "ext": ext}


class JsonListing(Importer):
    """A JSON listing {"files": {name: text}} made by another tool, taken as one checkpoint."""

    name = "dirsnap-json"
    summary = "a JSON listing of a directory's files, taken as one checkpoint"
    source = "a JSON file"
    options = (Option("workflow", "The subject's name (workflow:NAME).", str, "imported", "NAME"),)

    def run(self, store: Any, source: str, options: Mapping[str, Any], progress: Progress = NULL) -> dict[str, Any]:
        """Import the listing: see the class.

        Args:
            store: the store.
            source: the JSON file.
            options: {"workflow": NAME}.
            progress: unused.

        Returns:
            {"id", "files"}.

        Raises:
            NotFoundError: no such file; InvalidInputError: not a listing.
        """
        from ckptcli.writer import take

        try:
            text = Path(source).read_text()
        except FileNotFoundError:
            raise NotFoundError(f"{source} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"{source} cannot be read as text ({exc})") from None
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InvalidInputError(f"{source} is not JSON: {exc}") from None
        files = doc.get("files") if isinstance(doc, dict) else None
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise InvalidInputError(f"{source} is not a dirsnap listing", hint='give {"files": {"NAME": "TEXT"}}')
        result = take(
            store, {"ext": {"dirsnap": {"files": files}}}, subject=f"workflow:{options['workflow']}", labels={"adapter": "dirsnap"}
        )
        return {"id": result.hex, "files": len(files)}


class DirSnap(Adapter):
    """A directory a workflow writes: its files (blobs), their names and sizes."""

    name = "dirsnap"
    kind = "workflow"
    summary = "a directory a workflow writes, its files taken as blobs with their listing"
    options = (Option("skip", "A file name left out (repeatable).", str, (), "NAME", True),)

    @classmethod
    def available(cls) -> Availability:
        """Always available.

        Returns:
            ok.
        """
        return Availability(True, "needs nothing", {"os": os.name})

    def capture(self, target: Any, **options: Any) -> Capture:
        """The directory `target`.

        Args:
            target: a directory.
            **options: skip (names left out).

        Returns:
            its listing, and each file as a blob of its name.

        Raises:
            NotFoundError: no such directory.
        """
        root = Path(target)
        if not root.is_dir():
            raise NotFoundError(f"{root} is not a directory")
        skip = set(options.get("skip") or ())
        sizes = {p.name: p.stat().st_size for p in sorted(root.iterdir()) if p.is_file() and p.name not in skip}
        return Capture({"ext": {"dirsnap": {"sizes": sizes}}}, {name: root / name for name in sizes}, {"dirsnap.files": str(len(sizes))})

    def restore(self, checkpoint: Any, target: Any, **options: Any) -> Any:
        """Write the captured files into the directory `target`.

        Args:
            checkpoint: one this adapter took.
            target: an empty directory.
            **options: unused.

        Returns:
            the directory the files are in.

        Raises:
            NotSupported: a checkpoint this adapter did not take.
        """
        if "dirsnap" not in (checkpoint.state().get("ext") or {}):
            raise NotSupported(f"checkpoint {checkpoint.hex[:12]} was not taken by dirsnap")
        checkpoint.restore_blobs(Path(target))
        return Path(target)

    def reducers(self) -> Mapping[str, Callable[..., Any]]:
        """The touched event.

        Returns:
            {"dirsnap:touched": reducer}.
        """
        return {"dirsnap:touched": _touched}

    def importers(self) -> Mapping[str, Importer]:
        """The JSON listing importer.

        Returns:
            {"dirsnap-json": JsonListing()}.
        """
        return {"dirsnap-json": JsonListing()}

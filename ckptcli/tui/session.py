"""What the screens work on, without the app: the session (the source, its history,
the reducers of a replay) and the services a screen asks of the app that hosts it.

Screens import this module, never ckptcli.tui.app (the app imports the screens).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from textual.binding import Binding, BindingType

from ckptcli.api import Checkpoint
from ckptcli.history.events import Reducers
from ckptcli.history.graph import History
from ckptcli.history.lazylist import LRU
from ckptcli.store.repository import Store
from ckptcli.store.single import CheckpointFile

__all__ = ["APP_BINDINGS", "Host", "Session", "View", "open_session"]

View = Literal["history", "checkpoint", "timeline"]

#: The keys of every screen (the app's bindings; the help screen lists them).
APP_BINDINGS: list[BindingType] = [
    Binding("question_mark,f1", "help", "Help"),
    Binding("q", "quit", "Quit"),
]


@runtime_checkable
class Host(Protocol):
    """What a screen asks of the app that shows it (ckptcli.tui.app.CkptApp)."""

    def settle(self) -> None:
        """Long-lived data was just loaded."""

    def copy_id(self, text: str, what: str = "id") -> None:
        """Copy to the terminal's clipboard and say so."""

    def input_pending(self) -> bool:
        """Whether the user is at the keys: a replay in a worker gives way."""
        return False


@dataclass
class Session:
    """What every screen works on: the source, its history, the reducers of a replay."""

    source: Store | CheckpointFile
    history: History
    reducers: Reducers = field(default_factory=Reducers)
    #: build the timeline's kept states in the background after it opens
    prefill: bool = True
    #: timelines follow the run (`ckpt tui --follow`, F): new events and checkpoints are appended
    follow: bool = False
    #: the recorder's journal a followed timeline tails (None: looked for beside the store)
    journal: Path | None = None
    _checkpoints: LRU[bytes, Checkpoint] = field(default_factory=lambda: LRU(32))

    def checkpoint(self, cid: bytes) -> Checkpoint:
        """A checkpoint of the source (its manifest read once, kept for a while)."""
        ck = self._checkpoints.get(cid)
        if ck is None:
            ck = Checkpoint(self.source, cid)
            self._checkpoints.put(cid, ck)
        return ck

    @property
    def is_file(self) -> bool:
        return isinstance(self.source, CheckpointFile)

    @property
    def where(self) -> str:
        """The source's location, relative to the current directory when inside it; a
        store on object storage by its URL."""
        loc = self.source.location
        if isinstance(self.source, Store) and self.source.directory is None:
            return loc  # a URL, as given
        try:
            rel = os.path.relpath(loc)
        except ValueError:  # another drive (Windows)
            return loc
        return loc if rel.startswith("..") else rel


def open_session(
    source: Store | CheckpointFile,
    *,
    reducers: Reducers | None = None,
    prefill: bool = True,
    follow: bool = False,
    journal: Path | None = None,
) -> Session:
    history = History.from_file(source) if isinstance(source, CheckpointFile) else History.from_store(source)
    return Session(source, history, reducers or Reducers(), prefill, follow, journal)

"""What the screens work on, without the app: the session (the source, its history,
the reducers of a replay) and the services a screen asks of the app that hosts it.

Screens import this module, never ckptcli.tui.app (the app imports the screens).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from textual.binding import Binding, BindingType

from ckptcli.api import Checkpoint
from ckptcli.errors import CkptError
from ckptcli.history.events import LABEL_SEQ, Reducers, labelled_seq
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
    #: the `--reducers MODULE:NAME` the reducers were loaded from (the commands the actions print repeat them)
    reducer_specs: tuple[str, ...] = ()
    _checkpoints: LRU[bytes, Checkpoint] = field(default_factory=lambda: LRU(32))

    def checkpoint(self, cid: bytes) -> Checkpoint:
        """A checkpoint of the source (its manifest read once, kept for a while)."""
        ck = self._checkpoints.get(cid)
        if ck is None:
            ck = Checkpoint(self.source, cid)
            self._checkpoints.put(cid, ck)
        return ck

    def tail_range(self, cid: bytes) -> tuple[int, int] | None:
        """(the seq before the first event, the last seq) of a checkpoint's event tail, read
        from the tail's first and last events alone; None without a tail, or unreadable."""
        from ckptcli.history.lazylist import LazyList
        from ckptcli.history.timeline import events_root

        try:
            ck = self.checkpoint(cid)
            tail = LazyList(ck.source, events_root(ck), f"checkpoint {ck.hex[:12]}: events")
            n = len(tail)
            if not n:
                at = labelled_seq(ck.manifest.labels.get(LABEL_SEQ))
                return at, at
            first, last = tail.value(0).get("seq"), tail.value(n - 1).get("seq")
        except CkptError:
            return None
        if type(first) is not int or type(last) is not int:
            return None
        return first - 1, last

    def holder_of_seq(self, subject: str, seq: int, near: bytes, *, limit: int = 64) -> bytes | None:
        """The checkpoint of `subject` whose event tail holds `seq` (its first event <= seq
        <= its last), preferring `near`'s line: its ancestors (first parents), then its
        descendants newest first, then the others newest first. Checkpoints labelled `events.seq` (a
        recorder's: their last seq) are picked by their labels and their parent's, and at
        most `limit` tails are read to confirm; None when no checkpoint holds it."""
        nodes = self.history.rows(subject)
        by_id = {n.id: n for n in nodes}

        def last(cid: bytes) -> int | None:
            n = by_id.get(cid)
            label = n.labels.get(LABEL_SEQ) if n is not None else None
            return labelled_seq(label) if label is not None else None

        ancestors: dict[bytes, int] = {}
        cid: bytes | None = near
        while cid is not None and cid in by_id and cid not in ancestors:
            ancestors[cid] = len(ancestors)
            parents = by_id[cid].parents
            cid = parents[0] if parents else None

        below: set[bytes] = set()
        todo = [near]
        while todo:
            for child in self.history.children.get(todo.pop(), []):
                if child not in below and child in by_id:
                    below.add(child)
                    todo.append(child)

        def plausible(n: Any) -> bool:
            hi = last(n.id)
            if hi is None:
                return True  # unlabelled: its tail says
            if hi < seq:
                return False
            lo = last(n.parents[0]) if n.parents else None
            return lo is None or lo < seq

        order = sorted(
            (n for n in nodes if plausible(n)),
            key=lambda n: (0, ancestors[n.id]) if n.id in ancestors else ((1, 0) if n.id in below else (2, -n.created_ns)),
        )
        for n in order[:limit]:
            got = self.tail_range(n.id)
            if got is not None and got[0] < seq <= got[1]:
                return n.id
        return None

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
    reducer_specs: Sequence[str] = (),
) -> Session:
    """`reducers`: loaded from `reducer_specs` (ckptcli.history.replay.load_reducers), which the
    printed commands repeat."""
    history = History.from_file(source) if isinstance(source, CheckpointFile) else History.from_store(source)
    return Session(source, history, reducers or Reducers(), prefill, follow, journal, tuple(reducer_specs))

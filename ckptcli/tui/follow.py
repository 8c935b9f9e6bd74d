"""Following a running agent, as a log reader tails a log: the events a recorder appends
to its journal (formats/events.md, "The journal file") and the checkpoints it takes, added
as new rows at the end of a timeline.

Invariants: a poll costs a stat of the journal and a read of the subject's `latest` ref
(on object storage, a request: every REMOTE_REF_EVERY-th poll) when nothing changed, and
reads only the bytes appended since the last poll when something did (a journal replaced
after a checkpoint is read again from its header); rows are only ever appended, in seq
order without gaps (the events a replaced journal no longer holds are read from the
checkpoints that hold them), and only from a journal that continues a checkpoint of the
followed line (not a fork's beside it), so a row's index never changes and a cursor
stays where it is. No Textual here but the message a poll posts.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message

from ckptcli.errors import CkptError
from ckptcli.format.journal import intact_records
from ckptcli.history.lazylist import LazyList
from ckptcli.history.recorder import MAGIC, MAX_RECORD

if TYPE_CHECKING:
    from ckptcli.store.repository import Store

__all__ = ["POLL_SECONDS", "Follow", "FollowUpdate", "JournalReader", "LiveEvents", "find_journal"]

#: How often a followed timeline looks for new events (a stat and a ref read when idle).
POLL_SECONDS = 0.25
#: A store on object storage has its `latest` ref read every this many polls (a request each).
REMOTE_REF_EVERY = 8
#: At most this many checkpoints are walked back from a new `latest` to the followed run.
MAX_WALK = 256
#: Files looked at per directory when looking for a subject's journal.
MAX_SCAN = 2000
#: While no journal is found, look again every this many polls (an agent started later).
FIND_EVERY = 20


def _ext_int(code: int, data: bytes) -> Any:
    """Ext type 1 of a journal record: an integer beyond 64 bits (as the recorder reads it)."""
    import msgpack

    if code == 1:
        return int.from_bytes(data, "big", signed=True)
    return msgpack.ExtType(code, data)


class LiveEvents(LazyList):
    """A checkpoint's event tail (a LazyList, read lazily) and the events appended after
    it while following: Timeline reads both as one list. Appending is the only change."""

    def __init__(self, base: LazyList) -> None:
        self.base = base
        self.extra: list[Any] = []
        self.total = len(base)

    def __getattr__(self, name: str) -> Any:  # where, source, nodes_read...: the base's
        return getattr(self.base, name)

    def __len__(self) -> int:
        return self.total + len(self.extra)

    def raw(self, i: int) -> Any:
        return self.base.raw(i) if i < self.total else self.extra[i - self.total]

    def value(self, i: int) -> Any:
        if i < self.total:
            return self.base.value(i)
        if not 0 <= i - self.total < len(self.extra):
            raise IndexError(i)
        return self.extra[i - self.total]

    def append(self, events: list[Any]) -> None:
        self.extra.extend(events)


class JournalReader:
    """A recorder's journal, read as it grows: `poll()` gives the intact records appended
    since the last poll, reading only the new bytes; a journal replaced (the recorder took
    a checkpoint: a new file, a new header) is read from its header on. A record being
    written (torn) is left for the next poll."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ident: tuple[int, int] | None = None
        self.offset = 0
        self.header: dict[str, Any] | None = None
        self.bytes_read = 0  # for tests and bench/tui.py: what polls cost
        self._head = b""  # the journal's bytes up to its header's end: a rewrite in place changes them
        #: the journal was truncated or replaced since it was first read (Follow says so, then clears it)
        self.restarted = False

    def poll(self) -> list[dict[str, Any]]:
        try:
            st = os.stat(self.path)
        except OSError:
            return []  # not there (yet, or between a replacement's steps): the next poll
        if (st.st_dev, st.st_ino) == self.ident and st.st_size == self.offset:
            return []
        try:
            # O_NONBLOCK: a FIFO put at the journal's path is never waited on (an open for
            # reading blocks until a writer comes); it is no journal (S_ISREG below)
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return []
            rewritten = (self.offset > 0 and (st.st_dev, st.st_ino) == self.ident and st.st_size >= self.offset) and os.pread(
                fd, len(self._head), 0
            ) != self._head  # truncated, then written again past where it was read
            if (st.st_dev, st.st_ino) != self.ident or st.st_size < self.offset or rewritten:
                if self.ident is not None:
                    self.restarted = True
                self.ident, self.offset, self.header, self._head = (st.st_dev, st.st_ino), 0, None, b""
            if st.st_size <= self.offset:
                return []
            data = os.pread(fd, st.st_size - self.offset, self.offset)
        finally:
            os.close(fd)
        self.bytes_read += len(data)
        pos = 0
        if self.offset == 0:
            if data[: len(MAGIC)] != MAGIC:
                return []  # not a journal (or its first bytes not written yet)
            pos = len(MAGIC)
        out: list[dict[str, Any]] = []
        for _start, value, end in intact_records(data, pos, None, MAX_RECORD, _ext_int):
            pos = end
            if self.header is None:
                self.header = value
                self._head = data[:end]
            else:
                out.append(value)
        if self.offset == 0:
            if self.header is None:
                return []  # the header not written whole yet: read from the start again
            self.offset = pos
        else:
            self.offset += pos
        return out


def journal_header(path: Path) -> dict[str, Any] | None:
    """The header of the recorder journal at `path`, None for anything else (read: 64 KiB at most)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: not waited on
        with open(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            if fh.read(len(MAGIC)) != MAGIC:  # most files: 8 bytes read
                return None
            data = MAGIC + fh.read(64 * 1024)
    except OSError:
        return None
    for _start, value, _end in intact_records(data, len(MAGIC), None, MAX_RECORD, _ext_int):
        return value if type(value.get("subject")) is str else None
    return None


def find_journal(subject: str, places: list[Path]) -> Path | None:
    """The journal of a recorder of `subject` in one of `places` (directories, not their
    subdirectories; the first MAX_SCAN files of each): the most recently written one."""
    found: list[tuple[float, Path]] = []
    for place in places:
        try:
            with os.scandir(place) as it:
                for n, entry in enumerate(it):
                    if n >= MAX_SCAN:
                        break
                    try:
                        if not entry.is_file(follow_symlinks=False) or entry.stat().st_size < len(MAGIC):
                            continue
                        mtime = entry.stat().st_mtime
                    except OSError:
                        continue
                    header = journal_header(Path(entry.path))
                    if header is not None and header.get("subject") == subject:
                        found.append((mtime, Path(entry.path)))
        except OSError:
            continue
    return max(found)[1] if found else None


def journal_places(store: Store) -> list[Path]:
    """Where a store's recorders usually keep their journals: beside the store (its parent
    directory), in it, and the current directory."""
    out: list[Path] = []
    if store.directory is not None:
        out += [store.directory.parent, store.directory]
    cwd = Path.cwd()
    if cwd not in out:
        out.append(cwd)
    return out


@dataclass
class FollowUpdate(Message):
    """A poll found new events (raw maps, in seq order, continuing the timeline) and
    checkpoints taken ((hex id, its last seq), oldest first)."""

    events: list[dict[str, Any]]
    checkpoints: list[tuple[str, int]] = field(default_factory=list)
    #: the Follow that polled (an update of one stopped since is dropped)
    follower: Any = None
    #: the journal this poll found (looked for beside the store), to say so
    found: Path | None = None
    #: what to say about the journal (truncated, or replaced by another run's)
    said: str | None = None
    #: the journal now records another run, from this checkpoint: the timeline to follow it in
    new_run: bytes | None = None


class Follow:
    """What follows one subject's run from a timeline's last seq on: the checkpoints taken
    after it (through the subject's `latest` ref) and the recorder's journal."""

    def __init__(
        self, store: Store | None, subject: str, last_seq: int, seen: set[bytes], journal: Path | None, places: list[Path] | None = None
    ) -> None:
        """`journal`: the recorder's journal; without one, it is looked for in `places`
        (find_journal, in the polls' thread), again every FIND_EVERY polls while none is."""
        from ckptcli.format.manifest import Subject

        self.store = store
        self.subject = Subject.parse(subject)
        self.last_seq = last_seq
        self.seen = set(seen)  # checkpoints whose events are rows already
        self.head: bytes | None = None
        self.journal = JournalReader(journal) if journal is not None else None
        self.places = places or []
        self.pending: list[dict[str, Any]] = []  # journal events after a gap (their checkpoint not read yet)
        self.polls = 0
        self.said_empty = False  # the journal was found truncated, and that was said

    def poll(self) -> FollowUpdate | None:
        """New events and checkpoints since the last poll, None when there are none."""
        events: list[dict[str, Any]] = []
        checkpoints: list[tuple[str, int]] = []
        self.polls += 1
        found = None
        if self.journal is None and self.places and self.polls % FIND_EVERY == 1:
            found = find_journal(str(self.subject), self.places)
            if found is not None:
                self.journal = JournalReader(found)
        remote = self.store is not None and self.store.directory is None
        if self.store is not None and (not remote or self.polls % REMOTE_REF_EVERY == 1 or self.pending):
            try:
                head = self.store.read_ref(self.store.latest_ref(self.subject))
            except CkptError:
                head = None
            if head is not None and head != self.head:
                self.head = head
                self._from_checkpoints(head, events, checkpoints)
        said: str | None = None
        new_run: bytes | None = None
        if self.journal is not None:
            self.pending += self.journal.poll()
            said, new_run = self._restarted(events, checkpoints)
        if self.journal is not None and self._continues_us(self.journal.header):
            kept: list[dict[str, Any]] = []
            for raw in self.pending:
                seq = raw.get("seq")
                if type(seq) is not int or seq <= self.last_seq:
                    continue
                if seq == self.last_seq + 1:
                    events.append(raw)
                    self.last_seq = seq
                else:
                    kept.append(raw)  # a gap: in a checkpoint the next poll reads
            self.pending = kept
        if not events and not checkpoints and found is None and said is None:
            return None
        return FollowUpdate(events, checkpoints, self, found, said, new_run)

    def _restarted(self, events: list[dict[str, Any]], checkpoints: list[tuple[str, int]]) -> tuple[str | None, bytes | None]:
        """After the journal was truncated or replaced: what to say, and the checkpoint a
        new run starts from. A journal replaced by the next of this run (the recorder took
        a checkpoint) continues it: said nothing, its checkpoints read now if the ref was
        not. A journal emptied says so once; one of another run (a new state, or a base
        not after what is followed) is that run's, followed from its base checkpoint."""
        reader = self.journal
        assert reader is not None
        if not reader.restarted:
            return None, None
        header = reader.header
        if header is None:  # emptied (a replacement is atomic: it comes with its header)
            if self.said_empty:
                return None, None
            self.said_empty = True
            return f"the journal {reader.path} was truncated: waiting for its recorder to write it again", None
        reader.restarted = self.said_empty = False
        if self._continues_us(header):
            return None, None
        base = header.get("base")
        try:
            cid = bytes.fromhex(base) if type(base) is str else None
        except ValueError:
            cid = None
        if cid is not None and self.store is not None:
            self._from_checkpoints(cid, events, checkpoints)  # this run's next checkpoint, before the ref moved
            if self._continues_us(header):
                return None, None
        self.pending = []  # another run's events: not this timeline's rows
        where = f"from checkpoint {cid.hex()[:12]}" if cid is not None else "from a state of its own"
        return f"the journal {reader.path} was replaced by another run ({where}): following it", cid

    def _continues_us(self, header: dict[str, Any] | None) -> bool:
        """Whether the journal continues a checkpoint of the followed line (a fork's journal
        beside it has events of the same seqs that are not this line's: never appended)."""
        base = header.get("base") if header is not None else None
        try:
            return type(base) is str and bytes.fromhex(base) in self.seen
        except ValueError:
            return False

    def _from_checkpoints(self, head: bytes, events: list[dict[str, Any]], checkpoints: list[tuple[str, int]]) -> None:
        """The events of the checkpoints from the followed ones to `head` (first parents)."""
        from ckptcli.api import Checkpoint
        from ckptcli.history.timeline import events_root

        assert self.store is not None
        chain: list[Checkpoint] = []
        cid: bytes | None = head
        while cid is not None and cid not in self.seen and len(chain) < MAX_WALK:
            try:
                ck = Checkpoint(self.store, cid)
                parents = ck.manifest.parents
            except CkptError:
                return
            chain.append(ck)
            cid = parents[0] if parents else None
        if cid is None or cid not in self.seen:
            return  # not a descendant of what is followed (a reset, another run): nothing to add
        for ck in reversed(chain):
            self.seen.add(ck.id)
            try:
                tail = LazyList(ck.source, events_root(ck), f"checkpoint {ck.hex[:12]}: events")
                n = len(tail)
                first = tail.value(0).get("seq") if n else None
                start = max(0, self.last_seq + 1 - first) if type(first) is int else 0
                for i in range(start, n):
                    raw = tail.value(i)
                    seq = raw.get("seq")
                    if type(seq) is int and seq == self.last_seq + 1:
                        events.append(raw)
                        self.last_seq = seq
            except CkptError:
                return
            checkpoints.append((ck.hex, self.last_seq))

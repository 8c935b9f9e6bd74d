"""The history graph of a store: its checkpoints newest first, the refs that name them,
the kind of each, and lanes drawn like `git log --graph` (what `ckpt tui` shows first).

Built from the store's catalog (what `ckpt ls` reads), so a store of 10,000 checkpoints
opens without decoding 10,000 manifests. A checkpoint's kind comes from its metadata: a
root (no parent), a take, a merge (several parents), a fork (labels `fork.of`/`fork.at`,
formats/events.md) or a migration (a schema version other than its parent's). Tags,
branches and each subject's latest come from the refs; a damaged ref or manifest is left
out (verify reports it). No UI here: docs/tui.md shows how it is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptcli.errors import CkptError
from ckptcli.history.events import LABEL_FORK_AT, LABEL_FORK_OF
from ckptcli.listing import format_time
from ckptcli.store import catalog
from ckptcli.store.catalog import Summary

if TYPE_CHECKING:
    from ckptcli.store.repository import Store
    from ckptcli.store.single import CheckpointFile

__all__ = ["FORK", "GLYPHS", "MERGE", "MIGRATION", "ROOT", "TAKE", "History", "Node", "Ref", "SubjectInfo"]

ROOT, TAKE, MERGE, FORK, MIGRATION = "root", "take", "merge", "fork", "migration"
#: One glyph per kind of checkpoint, in the graph.
GLYPHS = {ROOT: "○", TAKE: "●", MERGE: "◉", FORK: "◆", MIGRATION: "▲"}


@dataclass(frozen=True, slots=True)
class Node:
    """A checkpoint as the history shows it (from the catalog: no sections)."""

    id: bytes
    subject: str
    parents: tuple[bytes, ...]
    created_ns: int
    labels: dict[str, str]
    message: str
    schema_version: int | str | None
    kind: str = TAKE

    @property
    def hex(self) -> str:
        return self.id.hex()

    @property
    def time(self) -> str:
        return format_time(self.created_ns)


@dataclass(frozen=True, slots=True)
class Ref:
    kind: str  # "tag", "branch" or "latest"
    name: str


@dataclass
class SubjectInfo:
    name: str
    count: int
    newest_ns: int


def _classify(node: Node, nodes: dict[bytes, Node]) -> str:
    if not node.parents:
        return ROOT
    if LABEL_FORK_OF in node.labels and LABEL_FORK_AT in node.labels:
        return FORK
    if len(node.parents) > 1:
        return MERGE
    parent = nodes.get(node.parents[0])
    if parent is not None and parent.schema_version != node.schema_version:
        return MIGRATION
    return TAKE


class History:
    """The checkpoints of a store (or of one checkpoint file), newest first, with the
    refs that name them and the kind of each."""

    def __init__(self, nodes: list[Node], refs: dict[bytes, list[Ref]], location: str = "") -> None:
        self.location = location
        by_id = {n.id: n for n in nodes}
        classified = [
            Node(n.id, n.subject, n.parents, n.created_ns, n.labels, n.message, n.schema_version, _classify(n, by_id)) for n in nodes
        ]
        classified.sort(key=lambda n: (n.created_ns, n.id), reverse=True)
        self.order = classified
        self.nodes = {n.id: n for n in classified}
        self.refs = refs
        self.children: dict[bytes, list[bytes]] = {}
        for n in classified:
            for p in n.parents:
                self.children.setdefault(p, []).append(n.id)
        self._haystacks: dict[bytes, str] = {}
        self._by_subject: dict[str | None, list[Node]] = {None: classified}

    @classmethod
    def from_store(cls, store: Store) -> History:
        """Every checkpoint of `store`, from its catalog (brought up to date, as `ckpt ls` does)."""
        nodes = []
        for row in catalog.rows(store).values():
            try:
                cid, s = Summary.from_row(row)
            except (ValueError, TypeError, CkptError):
                try:
                    cid, s = row[0], Summary.of(store.manifest(row[0]))
                except CkptError:
                    continue  # a damaged manifest is verify's business
            nodes.append(Node(cid, str(s.subject), tuple(s.parents), s.created_ns, dict(s.labels), s.message, s.schema_version))
        refs: dict[bytes, list[Ref]] = {}
        for path, target in _read_refs(store).items():
            kind, _, name = path.partition("/")
            if kind == "tags":
                refs.setdefault(target, []).append(Ref("tag", name))
            elif kind == "branches":
                refs.setdefault(target, []).append(Ref("branch", name))
            elif kind == "latest":
                refs.setdefault(target, []).append(Ref("latest", name.replace("/", ":", 1)))
        return cls(nodes, refs, store.location)

    @classmethod
    def from_file(cls, f: CheckpointFile) -> History:
        """The one checkpoint of a checkpoint file."""
        m = f.manifest()
        node = Node(f.id, str(m.subject), tuple(m.parents), m.created_ns, dict(m.labels), m.message, m.schema_version)
        return cls([node], {}, str(f.path))

    def __len__(self) -> int:
        return len(self.order)

    def subjects(self) -> list[SubjectInfo]:
        """Subjects, the one with the newest checkpoint first."""
        out: dict[str, SubjectInfo] = {}
        for n in self.order:
            info = out.get(n.subject)
            if info is None:
                out[n.subject] = SubjectInfo(n.subject, 1, n.created_ns)
            else:
                info.count += 1
        return list(out.values())

    def rows(self, subject: str | None = None) -> list[Node]:
        """Checkpoints of `subject` (all when None), newest first."""
        got = self._by_subject.get(subject)
        if got is None:
            got = self._by_subject[subject] = [n for n in self.order if n.subject == subject]
        return got

    def ref_names(self, cid: bytes) -> list[Ref]:
        return self.refs.get(cid, [])

    def _haystack(self, n: Node) -> str:
        text = self._haystacks.get(n.id)
        if text is None:
            parts = [n.hex, n.subject, n.message, n.kind, n.time]
            parts.extend(f"{k}={v}" for k, v in n.labels.items())
            parts.extend(f"{r.kind}:{r.name}" for r in self.ref_names(n.id))
            text = self._haystacks[n.id] = "\n".join(parts).lower()
        return text

    def matches(self, n: Node, query: str) -> bool:
        """Every whitespace-separated term of `query` is in the checkpoint's id, subject,
        message, kind, time, labels (key=value) or refs (tag:NAME, branch:NAME), ignoring case."""
        hay = self._haystack(n)
        return all(term in hay for term in query.lower().split())

    def filter(self, rows: list[Node], query: str) -> list[Node]:
        return [n for n in rows if self.matches(n, query)] if query.strip() else rows

    def find(self, rows: list[Node], query: str, start: int, *, backwards: bool = False) -> int | None:
        """The index of the next row after `start` (before it, `backwards`) that matches,
        wrapping around; None when no row does."""
        if not rows or not query.strip():
            return None
        n = len(rows)
        for step in range(1, n + 1):
            i = (start - step) % n if backwards else (start + step) % n
            if self.matches(rows[i], query):
                return i
        return None

    def graph(self, rows: list[Node], max_lanes: int = 12) -> list[str]:
        """Lanes for `rows` (newest first), one string per row, like `git log --graph`:
        the checkpoint's glyph in its lane, `│` for lanes passing by, `╯` where a branch
        joins its parent (the fork point), `╮` where a merge's other parent opens a lane.
        A parent outside `rows` (another subject, pruned) ends its lane."""
        pos = {n.id: i for i, n in enumerate(rows)}
        lanes: list[bytes | None] = []
        out: list[str] = []
        for i, n in enumerate(rows):
            mine = [k for k, lane in enumerate(lanes) if lane == n.id]
            if mine:
                col = mine[0]
            else:
                col = lanes.index(None) if None in lanes else len(lanes)
                if col == len(lanes):
                    lanes.append(None)
            joining = mine[1:]
            later = [p for p in n.parents if pos.get(p, -1) > i]
            opening: list[int] = []
            lanes[col] = later[0] if later else None
            for k in joining:
                lanes[k] = None
            for p in later[1:]:
                if p in lanes:
                    continue
                slot = next((k for k in range(col + 1, len(lanes)) if lanes[k] is None), None)
                if slot is None:
                    lanes.append(p)
                    slot = len(lanes) - 1
                else:
                    lanes[slot] = p
                opening.append(slot)
            width = max([col, *joining, *opening, len(lanes) - 1]) + 1
            far = max([col, *joining, *opening])
            cells = []
            for k in range(width):
                if k == col:
                    ch = GLYPHS.get(n.kind, "●")
                elif k in joining:
                    ch = "╯"
                elif k in opening:
                    ch = "╮"
                elif k < len(lanes) and lanes[k] is not None:
                    ch = "│"
                elif col < k < far:
                    ch = "─"
                else:
                    ch = " "
                sep = "─" if col <= k < far else " "
                cells.append(ch + sep)
            while lanes and lanes[-1] is None:
                lanes.pop()
            text = "".join(cells).rstrip()
            if len(text) > 2 * max_lanes:
                text = text[: 2 * max_lanes - 1] + "…"
            out.append(text)
        return out


def _read_refs(store: Store) -> dict[str, bytes]:
    """The store's refs; a damaged one is left out (verify reports it)."""
    out: dict[str, bytes] = {}
    for path in store.ref_paths():
        try:
            target = store.read_ref(path)
        except CkptError:
            continue
        if target is not None:
            out[path[len("refs/") :]] = target
    return out

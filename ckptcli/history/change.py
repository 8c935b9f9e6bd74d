"""What changed, as data: one `Change` type for `ckpt diff` (two checkpoints) and for
`ckpt replay` (one step, or two states), and the result of a diff.

A change is one operation of an RFC 6902 patch against the JSON view of a state
(formats/v1.md "JSON view"). Invariants: applying the `patch_op()` of a list of changes
in order turns the JSON view of the old state into the new one; `path` names the place
for people (a removed list item has its index in the old state), `pointer` the place in
the patch. Rendering for people is `ckptcli.history.render`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptcli.history.paths import format_pointer

__all__ = ["BlobChange", "Change", "DiffResult", "PathPart", "pointer"]

PathPart = str | int

#: A JSON Pointer (RFC 6901): "" for the whole document, "/a~1b/0" for ("a/b", 0).
pointer = format_pointer


@dataclass(frozen=True)
class Change:
    """One operation of a patch, with what people need to read it."""

    op: str  # "add", "remove" or "replace"
    #: the place: inside `section` for a diff's change, from the state's root for a
    #: replay step's (section None)
    path: tuple[PathPart, ...]
    old: Any = None  # the value before (remove, replace)
    new: Any = None  # the value after (add, replace)
    #: memory, plan, tools, events, ext:<ns>, ext (the ext map itself), document; None
    #: for a change of a whole state (replay)
    section: str | None = None
    #: the JSON Pointer of the patch operation when it is not `path`'s own (a diff's:
    #: in the whole document; "" for a change outside the patch)
    patch_path: str | None = None
    #: only there to make the next operations' paths valid (the "ext" map added empty
    #: before its namespaces, or removed after them), or to move items a keyed
    #: comparison reports instead (LangGraph's pending writes): in the patch, not in
    #: counts or text
    structural: bool = False
    #: False for a change reported by key rather than by position (a LangGraph pending
    #: write): in counts and text, not in the patch (structural operations do that part)
    in_patch: bool = True
    label: str | None = None  # what the text calls it, when its path does not say

    @property
    def pointer(self) -> str:
        return format_pointer(self.path) if self.patch_path is None else self.patch_path

    def patch_op(self) -> dict[str, Any]:
        """The RFC 6902 operation: {"op", "path"} and, unless a remove, "value" (JSON view)."""
        # imported here: the replay library (and the recorder inside agents) loads
        # without the value codec until a change is shown as JSON
        from ckptcli.format.jsonview import to_json

        if self.op == "remove":
            return {"op": "remove", "path": self.pointer}
        return {"op": self.op, "path": self.pointer, "value": to_json(self.new)}

    to_dict = patch_op


@dataclass(frozen=True)
class BlobChange:
    """A file, directory, symlink or skipped entry of the blobs that differs."""

    op: str  # "add", "remove" or "replace"
    path: str  # "name/sub/file"
    old: dict[str, Any] | None  # listing entry in A (metadata only)
    new: dict[str, Any] | None

    def patch_op(self) -> dict[str, Any]:
        ptr = pointer((self.path,))
        if self.op == "remove":
            return {"op": "remove", "path": ptr}
        return {"op": self.op, "path": ptr, "value": self.new}


@dataclass
class DiffResult:
    a: bytes
    b: bytes
    changes: list[Change] = field(default_factory=list)
    blobs: list[BlobChange] = field(default_factory=list)
    section: str | None = None  # the only section compared, when one was asked for
    _keyed_writes: bool = False  # LangGraph's pending writes were compared by key
    #: which state each side is, when one has an event tail (stateat.StateAt.to_dict)
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    path: str | None = None  # the only JSON Pointer compared, when one was asked for

    @property
    def same(self) -> bool:
        return all(c.structural for c in self.changes) and not self.blobs

    def patch(self) -> list[dict[str, Any]]:
        """RFC 6902 operations turning the JSON view of A's state into B's (only the
        asked-for section's, when one was)."""
        return [c.patch_op() for c in self.changes if c.in_patch]

    def writes(self) -> list[dict[str, Any]] | None:
        """LangGraph's pending writes added, removed and changed, by (task id, write
        index): {"op", "task_id", "idx", "channel", "old", "new"} (a write without
        seq and ts); None when the events were not compared that way."""
        from ckptcli.format.jsonview import to_json  # as in Change.patch_op

        keyed = [c for c in self.changes if not c.in_patch and c.section == "events"]
        if not keyed and not self._keyed_writes:
            return None
        out = []
        for c in keyed:
            w = c.new if c.new is not None else c.old
            out.append(
                {
                    "op": c.op,
                    "task_id": w["task_id"],
                    "idx": w.get("idx", 0),
                    "channel": w.get("channel"),
                    "old": to_json(c.old),
                    "new": to_json(c.new),
                }
            )
        return out

    def blobs_patch(self) -> list[dict[str, Any]]:
        """RFC 6902 operations turning A's blob listing into B's."""
        return [c.patch_op() for c in self.blobs]

    def summary(self) -> dict[str, Any]:
        sections: dict[str, dict[str, int]] = {}
        for c in self.changes:
            if not c.structural:
                _count(sections.setdefault(str(c.section), _zero()), c.op)  # a diff's changes all have one
        if self.blobs:
            counts = sections.setdefault("blobs", {**_zero(), "size_before": 0, "size_after": 0})
            for bc in self.blobs:
                _count(counts, bc.op)
                counts["size_before"] += _file_size(bc.old)
                counts["size_after"] += _file_size(bc.new)
        return {
            "same": self.same,
            "changes": sum(not c.structural for c in self.changes) + len(self.blobs),
            "sections": sections,
        }

    def to_dict(self, *, stat: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"a": self.a.hex(), "b": self.b.hex(), "same": self.same}
        if self.section is not None:
            out["section"] = self.section
        if self.path is not None:
            out["path"] = self.path
        if self.states:
            out["states"] = self.states
        out["summary"] = self.summary()
        if not stat:
            out["patch"] = self.patch()
            out["blobs_patch"] = self.blobs_patch()
            writes = self.writes()
            if writes is not None:
                out["writes"] = writes
        return out


def _zero() -> dict[str, int]:
    return {"added": 0, "removed": 0, "changed": 0}


def _count(counts: dict[str, int], op: str) -> None:
    counts[{"add": "added", "remove": "removed"}.get(op, "changed")] += 1


def _file_size(meta: dict[str, Any] | None) -> int:
    if meta is None or meta.get("type") != "file" or type(meta.get("size")) is not int:
        return 0
    return int(meta["size"])

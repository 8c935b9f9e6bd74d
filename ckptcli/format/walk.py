"""Finding every object a checkpoint needs, by following the references in its sections.

Node objects are read (their references are inside them); data objects are only
named, unless the caller reads them too (`verify --read-data`, export).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ckptcli.errors import CkptError
from ckptcli.format.manifest import Manifest
from ckptcli.format.values import (
    EXT_BYTES,
    EXT_LIST,
    EXT_MAP,
    EXT_REF,
    EXT_STR,
    OBJ_DATA,
    OBJ_NODE,
    ObjectSource,
    check_tree_node,
    parse_tree_node,
    unpack_ev,
    walk_references,
)


@dataclass
class WalkResult:
    #: every object reached: id -> (object type, section that first reached it)
    objects: dict[bytes, tuple[int, str]] = field(default_factory=dict)
    #: objects that could not be read or parsed: id -> (section, error message)
    errors: dict[bytes, tuple[str, str]] = field(default_factory=dict)
    #: data objects: id -> the size the first node that names it says it has
    data_sizes: dict[bytes, int] = field(default_factory=dict)
    #: data objects that nodes name with different sizes (a writer's bug): id -> the
    #: sizes other than `data_sizes[id]`, so that a wrong one is never hidden by a right one
    other_sizes: dict[bytes, set[int]] = field(default_factory=dict)

    def sizes_named(self, oid: bytes) -> set[int]:
        """Every size the nodes walked say data object `oid` has (empty: none names it)."""
        first = self.data_sizes.get(oid)
        return set() if first is None else {first} | self.other_sizes.get(oid, set())


def walk_checkpoint(
    source: ObjectSource,
    manifest: Manifest,
    *,
    result: WalkResult | None = None,
    on_error: Callable[[bytes, str, CkptError], None] | None = None,
) -> WalkResult:
    """Follow every reference of `manifest`. Objects already in `result` are not read again,
    so walking many checkpoints of one store costs each shared object once."""
    res = result or WalkResult()
    seen = res.objects
    stack: list[tuple[int, bytes, int | None, int | None, str]] = []
    for name, ev in manifest.sections.items():
        for ref in walk_references(unpack_ev(ev, f"section {name}")):
            stack.append((ref.code, ref.oid, None, None, name))
    while stack:
        code, oid, want_level, want_total, section = stack.pop()
        if oid in seen:
            continue
        seen[oid] = (OBJ_NODE, section)
        try:
            content = source.get(oid)
            if code == EXT_REF:
                for ref in walk_references(unpack_ev(content, f"object {oid.hex()[:12]}")):
                    stack.append((ref.code, ref.oid, None, None, section))
                continue
            level, _total, children = parse_tree_node(content, code, oid, want_level, want_total)
            if code in (EXT_LIST, EXT_MAP):
                # follow embedded nodes (an open tail) inside this object
                nodes = [(level, children)]
                while nodes:
                    lvl, kids = nodes.pop()
                    if lvl == 0:
                        for ref in walk_references(kids):
                            stack.append((ref.code, ref.oid, None, None, section))
                        continue
                    for count, child in kids:
                        if isinstance(child, bytes):
                            stack.append((code, child, lvl - 1, count, section))
                        else:
                            sub_level, _t, sub = check_tree_node(
                                child, code, f"object {oid.hex()[:12]} (embedded node)", want_total=count, below=lvl
                            )
                            nodes.append((sub_level, sub))
            elif code in (EXT_BYTES, EXT_STR) and level == 1:
                for size, child in children:
                    if child not in seen:
                        seen[child] = (OBJ_DATA, section)
                    if res.data_sizes.setdefault(child, size) != size:
                        res.other_sizes.setdefault(child, set()).add(size)
            else:
                for count, child in children:
                    stack.append((code, child, level - 1, count, section))
        except CkptError as exc:
            res.errors[oid] = (section, exc.message)
            if on_error is not None:
                on_error(oid, section, exc)
            else:
                raise
    return res

"""Copy-on-write updates of a state along a path: what the standard reducers of
`ckptcli.history.events` are built on (formats/events.md "Reducers" says what each kind
does).

Invariants: `set_in` and `delete_in` never change their arguments: they copy the
containers along the path and share everything else. The reducers' `owned` variants
change in place only the containers the same run copied earlier (listed in `owned`,
held so an id is never reused), so appending to a list of n items costs O(1), not O(n).
A path is checked before anything changes: a ReduceError leaves the state as it was.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

__all__ = ["Owned", "PathKey", "ReduceError", "State", "delete_in", "format_pointer", "set_in"]

State = dict[str, Any]
PathKey = str | int


def _type_name(v: object) -> str:
    return {dict: "a map", list: "a list", str: "a string", bytes: "bytes", int: "an integer", float: "a float", bool: "a boolean"}.get(
        type(v), "null" if v is None else f"a {type(v).__name__}"
    )


class ReduceError(Exception):
    """A standard reducer's complaint; Reducers.apply names the event."""


def format_pointer(path: Iterable[PathKey]) -> str:
    """["memory", "a/b", 0] -> "/memory/a~1b/0" (a JSON Pointer, as in `ckpt diff`)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _at(path: list[PathKey]) -> str:
    """A place for a message: its pointer, or "the root"."""
    return format_pointer(path) or "the root"


def _index(container: list[Any], key: PathKey, path: list[PathKey], depth: int, *, allow_end: bool) -> int:
    if type(key) is not int:
        raise ReduceError(f"{_at(path[:depth])} is a list: {key!r} is not an index")
    n = len(container)
    i = key + n if key < 0 else key
    if not (0 <= i < n or (allow_end and i == n)):
        raise ReduceError(f"{_at(path[: depth + 1])}: index {key} is out of range (the list has {n} items)")
    return i


def set_in(root: Any, path: list[PathKey], value: Any) -> Any:
    """A copy of `root` with `value` at `path`; only the containers along the path are
    copied. Missing map keys on the way are created as maps; a list index may equal the
    list's length (append). Raises ReduceError where the path does not fit."""
    return _set(root, path, 0, value)


# A run of events whose in-between states nobody sees (Reducers.apply_all, a timeline
# between the states it keeps) passes `owned`: the containers the run has copied so far,
# by id (holding them, so an id is never reused meanwhile). Those are changed in place
# instead of being copied again, so appending to a list of n items costs O(1), not O(n).
# Everything else (the starting state, values taken from events, what a custom reducer
# returned) is still copied before it is changed. A reducer checks everything before it
# changes anything, so a ReduceError leaves the state as it was.
Owned = dict[int, Any]


_C = TypeVar("_C", dict[str, Any], list[Any])


def _own(node: _C, owned: Owned | None) -> _C:
    """`node` itself when this run copied it already, else a (shallow) copy, owned now."""
    if owned is not None and id(node) in owned:
        return node
    new = node.copy()
    if owned is not None:
        owned[id(new)] = new
    return new


def _set(node: Any, path: list[PathKey], depth: int, value: Any, owned: Owned | None = None) -> Any:
    if depth == len(path):
        return value
    key = path[depth]
    if type(node) is dict:
        if type(key) is not str:
            raise ReduceError(f"{_at(path[:depth])} is a map: {key!r} is not a key (keys are strings)")
        child = node.get(key, _MISSING)
        if child is _MISSING:
            child = {}
        changed = _set(child, path, depth + 1, value, owned)
        new = _own(node, owned)
        new[key] = changed
        return new
    if type(node) is list:
        i = _index(node, key, path, depth, allow_end=depth == len(path) - 1)
        changed = _set(None if i == len(node) else node[i], path, depth + 1, value, owned)
        new_list = _own(node, owned)
        if i == len(node):
            new_list.append(changed)
        else:
            new_list[i] = changed
        return new_list
    raise ReduceError(f"{_at(path[:depth])} is {_type_name(node)}, not a map or list")


def delete_in(root: Any, path: list[PathKey]) -> Any:
    """A copy of `root` without the value at `path` (a non-empty path). A missing map key
    (here or on the way) changes nothing and returns `root` itself; a list index out of
    range or a path through a scalar raises ReduceError."""
    if not path:
        raise ReduceError("the path is empty")
    return _delete(root, path, 0)


def _delete(node: Any, path: list[PathKey], depth: int, owned: Owned | None = None) -> Any:
    key = path[depth]
    last = depth == len(path) - 1
    if type(node) is dict:
        if type(key) is not str:
            raise ReduceError(f"{_at(path[:depth])} is a map: {key!r} is not a key (keys are strings)")
        if key not in node:
            return node
        if last:
            new = _own(node, owned)
            del new[key]
            return new
        child = _delete(node[key], path, depth + 1, owned)
        if child is node[key]:
            return node
        new = _own(node, owned)
        new[key] = child
        return new
    if type(node) is list:
        i = _index(node, key, path, depth, allow_end=False)
        if last:
            new_list = _own(node, owned)
            del new_list[i]
            return new_list
        child = _delete(node[i], path, depth + 1, owned)
        if child is node[i]:
            return node
        new_list = _own(node, owned)
        new_list[i] = child
        return new_list
    raise ReduceError(f"{_at(path[:depth])} is {_type_name(node)}, not a map or list")


_MISSING: Any = object()


def _with(state: State, key: str, value: Any, owned: Owned | None = None) -> State:
    new = _own(state, owned)
    new[key] = value
    return new


def _part(state: State, key: str, want: type, default: Any) -> Any:
    value = state.get(key, _MISSING)
    if value is _MISSING:
        return default
    if type(value) is not want:
        raise ReduceError(f"/{key} is {_type_name(value)}, not {'a map' if want is dict else 'a list'}")
    return value

"""`LazyValues`: the ``channel_values`` of a checkpoint the saver hands out, decoded on
first use (`CkptSaver.list` returns many; most are never read)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["LazyValues"]


class LazyValues(dict):  # type: ignore[type-arg]
    """channel_values decoded on first use (by any dict operation); then a plain dict."""

    __slots__ = ("_load",)

    def __init__(self, load: Callable[[], dict[str, Any]]) -> None:
        super().__init__()
        self._load: Callable[[], dict[str, Any]] | None = load

    def _m(self) -> None:
        load = self._load
        if load is not None:
            self._load = None
            dict.update(self, load())

    def __getitem__(self, k: Any) -> Any:
        self._m()
        return dict.__getitem__(self, k)

    def __contains__(self, k: object) -> bool:
        self._m()
        return dict.__contains__(self, k)

    def __iter__(self) -> Iterator[Any]:
        self._m()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._m()
        return dict.__len__(self)

    def __eq__(self, other: object) -> bool:
        self._m()
        if isinstance(other, LazyValues):
            other._m()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._m()
        return dict.__repr__(self)

    def __reversed__(self) -> Iterator[Any]:
        self._m()
        return dict.__reversed__(self)

    def __setitem__(self, k: Any, v: Any) -> None:
        self._m()
        dict.__setitem__(self, k, v)

    def __delitem__(self, k: Any) -> None:
        self._m()
        dict.__delitem__(self, k)

    def __or__(self, other: Any) -> Any:
        return self.copy() | other

    def __ror__(self, other: Any) -> Any:
        return other | self.copy()

    def __ior__(self, other: Any) -> Any:
        self._m()
        dict.update(self, other)
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (dict, (self.copy(),))

    def __copy__(self) -> dict[str, Any]:
        return self.copy()

    def __deepcopy__(self, memo: Any) -> dict[str, Any]:
        import copy

        return copy.deepcopy(self.copy(), memo)

    def keys(self) -> Any:
        self._m()
        return dict.keys(self)

    def values(self) -> Any:
        self._m()
        return dict.values(self)

    def items(self) -> Any:
        self._m()
        return dict.items(self)

    def get(self, k: Any, default: Any = None) -> Any:
        self._m()
        return dict.get(self, k, default)

    def copy(self) -> dict[str, Any]:
        self._m()
        return {k: dict.__getitem__(self, k) for k in dict.keys(self)}

    def pop(self, *args: Any) -> Any:
        self._m()
        return dict.pop(self, *args)

    def popitem(self) -> Any:
        self._m()
        return dict.popitem(self)

    def setdefault(self, k: Any, default: Any = None) -> Any:
        self._m()
        return dict.setdefault(self, k, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._m()
        dict.update(self, *args, **kwargs)

    def clear(self) -> None:
        self._load = None
        dict.clear(self)

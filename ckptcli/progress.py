"""How long-running library calls report progress without knowing about any UI."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Receives progress; the CLI renders it as a bar, the library ignores it by default."""

    def start(self, label: str, total: int | None) -> None: ...

    def advance(self, amount: int) -> None: ...

    def finish(self) -> None: ...


class NullProgress:
    def start(self, label: str, total: int | None) -> None:
        pass

    def advance(self, amount: int) -> None:
        pass

    def finish(self) -> None:
        pass


NULL = NullProgress()

"""Warnings: things the library works around without failing (a damaged index file, a
damaged ref, an unreadable manifest), which the user should still hear about.

The core never prints. A Store collects its warnings (`Store.warnings`, each said once)
and hands each to its `on_warning` callback, which defaults to the handler set here;
the CLI sets one that prints `ckpt: warning: <message>` on stderr, one line each.
"""

from __future__ import annotations

from collections.abc import Callable

Handler = Callable[[str], None]

_handler: Handler | None = None


def set_handler(handler: Handler | None) -> None:
    """Where new stores send their warnings (None: only collected, never shown)."""
    global _handler
    _handler = handler


def handler() -> Handler | None:
    return _handler


# Notices: what the user may like to know while it happens (who holds the lock a command
# waits for), not a problem. The CLI prints them as `ckpt: <message>` unless --quiet.
_info: Handler | None = None


def set_info_handler(handler: Handler | None) -> None:
    global _info
    _info = handler


def info_handler() -> Handler | None:
    """The handler of `info` messages, or None."""
    return _info


def info(message: str) -> None:
    """Tell the user something through the handler set (nothing when none is)."""
    if _info is not None:
        _info(message)

"""ckpt: take, inspect, diff, verify, prune, migrate and replay checkpoints of
long-running agents, workflows and processes.

The library API lives in `ckptcli.api` and is re-exported here on first use, so
`import ckptcli` stays cheap for the CLI's start-up.
"""

from __future__ import annotations

# typing is not imported at run time: `ckpt` imports this package before it can catch a
# Ctrl-C (ckptcli/cli/__init__.py), so it must be next to free
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.2.0"

_API = (
    "Checkpoint",
    "ListFilter",
    "TakeResult",
    "VerifyReport",
    "export_checkpoint",
    "import_checkpoint",
    "init_store",
    "list_checkpoints",
    "open_checkpoint",
    "open_store",
    "take",
    "verify",
)

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from ckptcli import api

        return getattr(api, name)
    raise AttributeError(f"module 'ckptcli' has no attribute {name!r}")

"""ckpt as a LangGraph checkpointer (`CkptSaver`, in `saver`) and long-term memory store
(`CkptStore`, in `store`), and the parts they share with `ckpt` itself: the layout of a
LangGraph checkpoint as a ckpt checkpoint, the journal, leases, retention, import and
replay (docs/langgraph.md).

`from ckptcli.adapters.langgraph import CkptSaver` is the documented path; the package
imports LangGraph only when one of these names is asked for.
"""

from __future__ import annotations

from typing import Any

# the savers, and the other public names the module had when it was `ckptcli.adapters.langgraph` (0.2)
_EXPORTS = {
    "CkptSaver": "saver",
    "CkptStore": "store",
    "ThreadForkWarning": "crosshost",
    "FSYNC_POLICIES": "saver",
    "JOURNAL_DIR": "saver",
    "ROTATE_BYTES": "saver",
    "read_journal": "saver",
    "DAMAGED_SUFFIX": "journal",
    "blank": "journal",
    "fsync_dir": "journal",
    "hole_message": "journal",
    "mapped": "journal",
    "newer_journal": "journal",
    "open_regular": "journal",
    "record_error": "journal",
    "record_where": "journal",
    "LEASE_DIR": "leases",
    "RECOVER_LOCK": "leases",
    "WANT_DIR": "leases",
    "open_recover_lock": "leases",
}
__all__ = ["CkptSaver", "CkptStore", "ThreadForkWarning"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"ckptcli.adapters.langgraph.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'ckptcli.adapters.langgraph' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

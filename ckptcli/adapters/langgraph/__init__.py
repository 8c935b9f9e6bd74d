"""ckpt as a LangGraph checkpointer (`CkptSaver`, in `saver`) and long-term memory store
(`CkptStore`, in `store`), and the parts they share with `ckpt` itself: the layout of a
LangGraph checkpoint as a ckpt checkpoint, the journal, leases, retention, import and
replay (docs/langgraph.md).

`from ckptcli.adapters.langgraph import CkptSaver` is the documented path; the package
imports LangGraph only when one of these names is asked for.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {"CkptSaver": "saver", "CkptStore": "store"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"ckptcli.adapters.langgraph.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'ckptcli.adapters.langgraph' has no attribute {name!r}")

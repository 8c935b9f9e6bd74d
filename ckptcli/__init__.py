"""ckpt: take, inspect, diff, verify, prune, migrate and replay checkpoints of
long-running agents, workflows and processes.

The library API lives in `ckptcli.api` and is re-exported here on first use, so
`import ckptcli` stays cheap for the CLI's start-up.
"""

from __future__ import annotations

import sys

# typing is not imported at run time: `ckpt` imports this package before it can catch a
# Ctrl-C (ckptcli/cli/__init__.py), so it must be next to free
TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any


_API = (
    "Checkpoint",
    "ListFilter",
    "TakeResult",
    "VerifyReport",
    "copy_checkpoints",
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
    if name == "__version__":  # ckptcli/_version.py, read on first use like the rest
        from ckptcli._version import __version__

        return __version__
    raise AttributeError(f"module 'ckptcli' has no attribute {name!r}")


# Modules that moved in 0.3 keep their old import paths for one minor release. Each old path
# is one line of _MOVED; importing it warns (DeprecationWarning) and gives the module at its
# new path, the same object, so names, private helpers and monkeypatching behave as before.
# The finder is consulted last, only for a name no other finder knows. It lives here, not in
# a module of its own, because `ckpt` imports this package before it can catch a Ctrl-C.
# old path -> new path; remove in 0.4
_MOVED = {
    "ckptcli.adapters.langgraph_doctor": "ckptcli.adapters.langgraph.doctor",
    "ckptcli.adapters.langgraph_events": "ckptcli.adapters.langgraph.events",
    "ckptcli.adapters.langgraph_import": "ckptcli.adapters.langgraph.importer",
    "ckptcli.adapters.langgraph_journal": "ckptcli.adapters.langgraph.journal",
    "ckptcli.adapters.langgraph_layout": "ckptcli.adapters.langgraph.layout",
    "ckptcli.adapters.langgraph_leases": "ckptcli.adapters.langgraph.leases",
    "ckptcli.adapters.langgraph_read": "ckptcli.adapters.langgraph.read",
    "ckptcli.adapters.langgraph_render": "ckptcli.adapters.langgraph.render",
    "ckptcli.adapters.langgraph_replay": "ckptcli.adapters.langgraph.replay",
    "ckptcli.adapters.langgraph_retention": "ckptcli.adapters.langgraph.retention",
    "ckptcli.adapters.langgraph_store": "ckptcli.adapters.langgraph.store",
    "ckptcli.adapters.langgraph_store_log": "ckptcli.adapters.langgraph.store_log",
    "ckptcli.adapters.msgpack_view": "ckptcli.format.msgpack_view",
    "ckptcli.compat": "ckptcli.schema.compat",
    "ckptcli.diff": "ckptcli.history.diff",
    "ckptcli.docstream": "ckptcli.document",
    "ckptcli.events": "ckptcli.history.events",
    "ckptcli.integrity": "ckptcli.store.verify",
    "ckptcli.jsonview": "ckptcli.format.jsonview",
    "ckptcli.prune": "ckptcli.store.prune",
    "ckptcli.recorder": "ckptcli.history.recorder",
    "ckptcli.repair": "ckptcli.store.repair",
    "ckptcli.replay": "ckptcli.history.replay",
    "ckptcli.stateat": "ckptcli.history.stateat",
    "ckptcli.stats": "ckptcli.store.stats",
    "ckptcli.threads": "ckptcli._util.threads",
    "ckptcli.timeline": "ckptcli.history.timeline",
    "ckptcli.timeparse": "ckptcli._util.timeparse",
    "ckptcli.tolerant": "ckptcli.history.tolerant",
    "ckptcli.units": "ckptcli._util.units",
    "ckptcli.upgrade": "ckptcli.store.upgrade",
}


class _MovedFinder:
    """A meta path finder and loader that answers an old path with the module at its new one."""

    @classmethod
    def find_spec(cls, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if name not in _MOVED:
            return None
        from importlib.util import spec_from_loader

        return spec_from_loader(name, cls())

    def load_module(self, fullname: str) -> ModuleType:
        import importlib
        import warnings

        new = _MOVED[fullname]
        warnings.warn(f"{fullname} moved to {new}; the old path goes in ckptcli 0.4", DeprecationWarning, stacklevel=3)
        return importlib.import_module(new)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return self.load_module(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        pass


if _MovedFinder not in sys.meta_path:
    sys.meta_path.append(_MovedFinder)

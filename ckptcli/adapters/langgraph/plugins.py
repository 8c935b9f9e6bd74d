"""The LangGraph adapter's hooks into the store layer (entry points in pyproject.toml;
ckptcli/plugins.py): the checks of its files beside a store for `ckpt verify`, and its
threads' expiry for `ckpt prune --langgraph-ttl`."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from ckptcli.adapters.langgraph.journal import check_journals
from ckptcli.adapters.langgraph.store_log import check_store_logs, log_dir

if TYPE_CHECKING:
    from ckptcli.format.manifest import Manifest
    from ckptcli.store.repository import Store

__all__ = ["Expiry", "check_beside"]


def check_beside(store_dir: Path, manifest_ids: Callable[[], Collection[bytes]]) -> list[tuple[str, Path, str]]:
    """(kind, path, message) of each problem of the saver's journals and of LangGraph's
    memory store (CkptStore) logs beside the store at `store_dir`."""
    found = [("journal", path, message) for path, message in check_journals(store_dir)]
    if log_dir(store_dir).is_dir():
        found += [("journal", path, message) for path, message in check_store_logs(store_dir, set(manifest_ids()))]
    return found


class Expiry:
    """A LangGraph thread's expiry: its TTL and strategy, and the leases to hold while it is pruned."""

    @staticmethod
    def hold(store: Store, manifests: Mapping[bytes, Manifest], subjects: set[str], renew: bool = True) -> AbstractContextManager[set[str]]:
        """`retention.hold_threads`, imported when a prune needs it (not by every `ckpt verify`)."""
        from ckptcli.adapters.langgraph.retention import hold_threads

        return hold_threads(store, manifests, subjects, renew)

    @staticmethod
    def ttl(labels: Iterable[Mapping[str, str]], default_s: float, default_strategy: str) -> tuple[float | None, str]:
        """(TTL in seconds or None: never, strategy) of a thread whose checkpoints'
        labels are `labels`, newest first: the newest one's own TTL, else the default."""
        from ckptcli.adapters.langgraph.layout import thread_ttl
        from ckptcli.adapters.langgraph.retention import effective_ttl

        own = next((got for lab in labels if (got := thread_ttl(lab)) is not None), None)
        return effective_ttl(own, default_s, default_strategy)

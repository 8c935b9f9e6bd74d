"""The LangGraph adapter's hooks into the store layer (entry points in pyproject.toml;
ckptcli/plugins.py): the checks of its files beside a store for `ckpt verify`, and its
threads' expiry for `ckpt prune --langgraph-ttl`."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

from ckptcli.adapters.langgraph.journal import check_journals
from ckptcli.adapters.langgraph.layout import thread_ttl
from ckptcli.adapters.langgraph.retention import effective_ttl, hold_threads
from ckptcli.adapters.langgraph.store_log import check_store_logs, log_dir

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

    hold = staticmethod(hold_threads)

    @staticmethod
    def ttl(labels: Iterable[Mapping[str, str]], default_s: float, default_strategy: str) -> tuple[float | None, str]:
        """(TTL in seconds or None: never, strategy) of a thread whose checkpoints'
        labels are `labels`, newest first: the newest one's own TTL, else the default."""
        own = next((got for lab in labels if (got := thread_ttl(lab)) is not None), None)
        return effective_ttl(own, default_s, default_strategy)

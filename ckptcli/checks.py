"""What a `ckpt doctor` check returns, and what it may look at: the types a check written
anywhere (ckpt's own, an adapter's, an installed package's) needs, below every layer that
writes checks. ckptcli/doctor.py registers and runs them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptcli.errors import CkptError

__all__ = ["FAIL", "OK", "WARN", "Check", "CheckFn", "Context"]

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass
class Check:
    name: str
    status: str  # OK, WARN or FAIL
    detail: str
    hint: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "hint": self.hint}


@dataclass
class Context:
    """What every check may look at: the store (None when there is none: `store_error` says why)."""

    store_path: Path | None = None
    store: Any = None  # a ckptcli.store.repository.Store, opened once for all checks
    store_error: CkptError | None = None
    #: the directory this host keeps the LangGraph saver's journal of a store on object
    #: storage in, when the application names one (`journal_dir=`); None: the default one
    journal_dir: Path | None = None


CheckFn = Callable[[Context], Iterable[Check]]

"""`ckpt doctor`: named checks of what ckpt depends on here, each ok, warn or fail with
a one-line detail and a hint.

A check is a function ``(Context) -> Iterable[Check]``, registered by name: the
built-ins in `BUILTIN` (``"module:function"``, imported only when run), and any
installed package's in the entry-point group ``ckptcli.doctor`` (a backend, an adapter,
a capture component adds its own the same way). A check that raises is reported as
failing with what it raised, never as a crash of the whole command. Reads only: a check
never changes the store (it may take a lock file's flock for an instant to see whether
a live process holds it). docs/cli.md ("ckpt doctor") has the user's view.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptcli import plugins
from ckptcli.checks import FAIL, OK, WARN, Check, CheckFn, Context
from ckptcli.errors import CkptError
from ckptcli.store.backend import LocalBackend
from ckptcli.store.layout import journal_dir

# the check types live in ckptcli.checks (below the adapters that write checks); offered here too
__all__ = [
    "BUILTIN",
    "DOCTOR_GROUP",
    "FAIL",
    "OK",
    "WARN",
    "Check",
    "CheckFn",
    "Context",
    "Report",
    "check_components",
    "check_locks",
    "check_store",
    "registered",
    "run",
]

DOCTOR_GROUP = plugins.DOCTOR

#: the built-in checks, in the order they run: name -> "module:function"
BUILTIN: dict[str, str] = {
    "store": "ckptcli.doctor:check_store",
    "locks": "ckptcli.doctor:check_locks",
    "langgraph": "ckptcli.adapters.langgraph.doctor:check",
    "components": "ckptcli.doctor:check_components",
}


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    def to_dict(self) -> dict[str, Any]:
        worst = FAIL if self.failed else WARN if any(c.status == WARN for c in self.checks) else OK
        return {"status": worst, "checks": [c.to_dict() for c in self.checks]}


def registered() -> dict[str, CheckFn]:
    """Every check by name: the built-ins, then the installed entry points (a third
    party's check of the same name as a built-in replaces it)."""
    out: dict[str, CheckFn] = {name: _lazy(spec) for name, spec in BUILTIN.items()}
    for ep in plugins.entries(plugins.DOCTOR):
        out[ep.name] = _lazy(ep.value)
    return out


def _lazy(spec: str) -> CheckFn:
    def run(ctx: Context) -> Iterable[Check]:
        module, _colon, attr = spec.partition(":")
        fn: CheckFn = getattr(importlib.import_module(module), attr)
        return fn(ctx)

    return run


def run(store_path: Path | str | None, checks: dict[str, CheckFn] | None = None) -> Report:
    """Run every registered check (or `checks`) against the store at `store_path` (found
    as every command finds it when None)."""
    from ckptcli.api import open_store

    ctx = Context()
    try:
        ctx.store = open_store(store_path)
        # the directory of a local store (the files adapters keep beside it); None on object storage
        ctx.store_path = Path(ctx.store.location) if isinstance(ctx.store.backend, LocalBackend) else None
    except CkptError as exc:
        ctx.store_error = exc
    report = Report()
    try:
        for name, fn in (checks if checks is not None else registered()).items():
            try:
                report.checks.extend(fn(ctx))
            except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
                msg = exc.message if isinstance(exc, CkptError) else f"{type(exc).__name__}: {exc}"
                report.checks.append(
                    Check(name, FAIL, f"the check itself failed: {msg}", "run with CKPT_DEBUG=1 and report it if it is a bug")
                )
    finally:
        if ctx.store is not None:
            ctx.store.close()
    return report


# -- built-in checks ---------------------------------------------------------------------
def check_store(ctx: Context) -> Iterable[Check]:
    """Found, its format version, and a quick structural look (config, index files, refs,
    manifest summaries); `ckpt verify` is the full check."""
    from ckptcli.errors import StoreNotFoundError
    from ckptcli.format import limits
    from ckptcli.store import catalog

    if ctx.store is None:
        err = ctx.store_error
        if isinstance(err, StoreNotFoundError):
            yield Check("store", FAIL, f"not found: {err.message}", err.hint or "run `ckpt init`, or pass --store PATH")
        else:
            msg = err.message if err is not None else "not opened"
            yield Check(
                "store",
                FAIL,
                f"cannot be opened: {msg}",
                (err.hint if err is not None else None) or "run `ckpt verify` to see what is damaged",
            )
        return
    st = ctx.store
    yield Check(
        "store",
        OK,
        f"{st.location}: format version {st.version} (this ckpt writes {limits.FORMAT_VERSION} and reads 1-{limits.FORMAT_VERSION})",
    )
    problems: list[str] = []
    st.warnings.clear()
    st.refresh_index()
    if st.damaged_index:
        problems.append(f"{len(st.damaged_index)} damaged index file(s)")
    objects = len(st.index())
    try:
        refs = st.refs(strict=True)
    except CkptError as exc:
        problems.append(f"a ref cannot be read ({exc.message})")
        refs = {}
    ids = st.manifest_ids()
    rows = catalog.rows(st, save=False)
    if len(rows) < len(ids):
        problems.append(f"{len(ids) - len(rows)} manifest(s) cannot be read")
    missing = [name for name, target in refs.items() if target not in rows]
    if missing:
        problems.append(f"{len(missing)} ref(s) name a checkpoint that is not there ({missing[0]})")
    what = f"{len(ids)} checkpoint(s), {objects} indexed object(s), {len(refs)} ref(s)"
    if problems:
        yield Check(
            "store structure", FAIL, f"{what}: {'; '.join(problems)}", "run `ckpt verify` to name every damaged file, then `ckpt repair`"
        )
    else:
        yield Check("store structure", OK, f"{what}: readable", "`ckpt verify --read-data` checks every byte")


#: the store's locks (formats/v1.md, "Locks"): name -> what takes it
LOCKS = {"store": "takes, tags, prunes, repairs and verify", "refs": "ref moves and reflog writes"}


def check_locks(ctx: Context) -> Iterable[Check]:
    """Who holds the store's locks now: an exclusive holder (a prune, a repair) makes
    every other command wait. Looks without waiting: each lock is taken for an instant
    where it is free."""
    if ctx.store is None:
        return
    backend = ctx.store.backend
    for name, what in LOCKS.items():
        state, holder = backend.lock_state(name)
        who = holder or "a process whose record is gone (it is still alive: the kernel drops the lock when it ends)"
        if state == "exclusive":
            yield Check(
                f"lock {name}",
                WARN,
                f"held exclusively by {who}: {what} wait for it",
                "let it finish; commands wait --lock-wait seconds; never delete the lock file (a lock goes with its process)",
            )
        elif state == "shared":
            yield Check(f"lock {name}", OK, f"in use, shared (e.g. {who})", "")
        elif state == "free":
            yield Check(f"lock {name}", OK, "free", "")
        else:
            yield Check(f"lock {name}", WARN, "cannot tell whether it is held here", "")


#: optional packages: distribution -> (what it enables, install hint)
COMPONENTS: dict[str, tuple[str, str]] = {
    "langgraph-checkpoint": ("CkptSaver, ckpt as LangGraph's checkpointer", "pip install 'ckptcli[langgraph]'"),
    "langgraph": ("running LangGraph graphs (your app brings it)", "pip install langgraph"),
    "langgraph-checkpoint-sqlite": (
        "reading SqliteSaver databases with `ckpt import langgraph`",
        "pip install langgraph-checkpoint-sqlite",
    ),
    "textual": ("`ckpt tui`", "pip install textual"),
}


def check_components(ctx: Context) -> Iterable[Check]:
    """The optional packages installed here, their versions, and the plugins registered."""
    from importlib.metadata import PackageNotFoundError, version

    for dist, (enables, hint) in COMPONENTS.items():
        try:
            v = version(dist)
        except PackageNotFoundError:
            status = OK
            if dist == "langgraph-checkpoint" and ctx.store_path is not None and journal_dir(ctx.store_path).is_dir():
                status = WARN  # this store is a saver's: it cannot be opened with one here
            yield Check(f"component {dist}", status, f"not installed: {enables}", hint)
            continue
        if dist == "langgraph-checkpoint" and v.split(".")[0] != "4":
            yield Check(f"component {dist}", WARN, f"{v}: CkptSaver is built for 4.x", "pip install 'langgraph-checkpoint>=4,<5'")
            continue
        yield Check(f"component {dist}", OK, f"{v}: {enables}")
    yield Check("plugins", OK, _plugins())


def _plugins() -> str:
    """The entry points installed packages register with ckpt, by group (not loaded)."""
    from importlib.metadata import distributions

    groups: dict[str, set[str]] = {}
    for dist in distributions():
        for ep in dist.entry_points:
            if ep.group.startswith("ckptcli."):
                groups.setdefault(ep.group, set()).add(f"{ep.name} ({dist.metadata['Name']})")
    return "; ".join(f"{g}: {', '.join(sorted(names))}" for g, names in sorted(groups.items())) or "none installed"

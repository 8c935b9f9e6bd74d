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
import os
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptcli import plugins
from ckptcli._util.units import human_size
from ckptcli.checks import FAIL, OK, WARN, Check, CheckFn, Context
from ckptcli.errors import CkptError, StoreIOError, StoreNotFoundError
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
    "backend_status",
    "check_components",
    "check_free_space",
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
    "free space": "ckptcli.doctor:check_free_space",
    "langgraph": "ckptcli.adapters.langgraph.doctor:check",
    "process supervisors": "ckptcli.adapters.process.doctor:check",
    "components": "ckptcli.doctor:check_components",
}


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    #: why no store was found or reached (none here, a missing bucket, an endpoint that
    #: does not answer): the command exits NO_STORE then; None when one was opened, or
    #: one was found that does not open (a damaged config: a failed check like any other)
    no_store: CkptError | None = None
    #: each installed adapter (or each one asked about): ckptcli.adapters.registry.Status.to_dict
    adapters: list[dict[str, Any]] | None = None
    #: each registered backend (or each one asked about): see backend_status
    backends: list[dict[str, Any]] | None = None
    #: {"python": version, "executable": path, "packages": {distribution: version or None}}
    versions: dict[str, Any] | None = None

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    def to_dict(self) -> dict[str, Any]:
        worst = FAIL if self.failed else WARN if any(c.status == WARN for c in self.checks) else OK
        out: dict[str, Any] = {"status": worst, "checks": [c.to_dict() for c in self.checks]}
        for key in ("adapters", "backends", "versions"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


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


def run(
    store_path: Path | str | None,
    checks: dict[str, CheckFn] | None = None,
    journal_dir: Path | None = None,
    *,
    adapters: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
) -> Report:
    """Run every registered check (or `checks`) against the store at `store_path` (found
    as every command finds it when None), then (unless `checks` is given) report on the
    installed adapters and backends and the versions of Python and the dependencies.
    `journal_dir`: where this host keeps the LangGraph saver's journal of a store on
    object storage, when not the default one.

    `adapters` / `backends`: report on these alone (adapter names, backend URL schemes),
    each a failure unless it works here; no store is looked at.

    Raises:
        UsageError: an adapter or a scheme asked about is not installed (the line lists those that are).
    """
    if adapters is not None or backends is not None:
        asked = Report()
        if adapters is not None:
            _adapter_checks(asked, adapters, asked_for=True)
        if backends is not None:
            _backend_checks(asked, backends, asked_for=True)
        return asked
    report = _store_checks(store_path, checks, journal_dir)
    if checks is None:
        _adapter_checks(report, None, asked_for=False)
        _backend_checks(report, None, asked_for=False)
        _version_checks(report)
    return report


def _store_checks(store_path: Path | str | None, checks: dict[str, CheckFn] | None, journal_dir: Path | None) -> Report:
    """The registered checks (or `checks`) against the store."""
    from ckptcli.api import open_store

    ctx = Context(journal_dir=journal_dir)
    report = Report()
    try:
        ctx.store = open_store(store_path)
        # the directory of a local store (the files adapters keep beside it); None on object storage
        ctx.store_path = ctx.store.directory
    except CkptError as exc:
        ctx.store_error = exc
        if isinstance(exc, StoreNotFoundError) or (isinstance(exc, StoreIOError) and _is_url(store_path)):
            report.no_store = exc
            if exc.hint is None and isinstance(exc, StoreIOError):  # not reached: nothing says it is damaged
                exc.hint = UNREACHED
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


#: the hint when a store on object storage does not answer
UNREACHED = (
    "the store could not be read: check the endpoint (store option endpoint, AWS_ENDPOINT_URL), "
    "that its server is up, the network and the credentials"
)


def _is_url(store_path: Path | str | None) -> bool:
    """Whether the store doctor looks for is on object storage (its URL given, or in CKPT_STORE)."""
    from ckptcli.store.repository import store_location

    where = store_path if store_path is not None else os.environ.get("CKPT_STORE")
    try:
        return where is not None and isinstance(store_location(where), str)
    except CkptError:
        return False


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
    reached = "" if st.directory is not None else "reachable, "
    v = limits.FORMAT_VERSION
    yield Check("store", OK, f"{st.location}: {reached}format version {st.version} (this ckpt writes {v} and reads 1-{v})")
    problems: list[str] = []
    st.warnings.clear()
    st.refresh_index()
    if st.damaged_index:
        problems.append(f"{len(st.damaged_index)} damaged index file(s)")
    objects = len(st.index())
    # the refs `ckpt refs` lists (those that read), counted by kind; one that does not read
    # is a problem of its own, not a reason to count the others as none
    refs, unreadable = st.readable_refs()
    if unreadable:
        more = f" ({len(unreadable)} in all)" if len(unreadable) > 1 else ""
        problems.append(f"a ref cannot be read{more} ({unreadable[0][1]})")  # with its hint: a planted directory says to remove it
    ids = st.manifest_ids()
    rows = catalog.rows(st, save=False)
    if len(rows) < len(ids):
        problems.append(f"{len(ids) - len(rows)} manifest(s) cannot be read")
    missing = [name for name, target in refs.items() if target not in rows]
    if missing:
        problems.append(f"{len(missing)} ref(s) name a checkpoint that is not there ({missing[0]})")
    what = f"{len(ids)} checkpoint(s), {objects} indexed object(s), {_ref_count(refs)}"
    if problems:
        yield Check(
            "store structure", FAIL, f"{what}: {'; '.join(problems)}", "run `ckpt verify` to name every damaged file, then `ckpt repair`"
        )
    else:
        yield Check("store structure", OK, f"{what}: readable", "`ckpt verify --read-data` checks every byte")
    yield from _store_links(st)


def _ref_count(refs: dict[str, bytes]) -> str:
    """ "N ref(s) (A latest, B branch(es), C tag(s))": what `ckpt refs` lists, by kind (a
    subject's latest, a branch, a tag; `ckpt ls` shows them as latest, branch:, tag:)."""
    kinds = {"latest": 0, "branches": 0, "tags": 0}
    for name in refs:
        top = name.split("/", 1)[0]
        kinds[top] = kinds.get(top, 0) + 1
    words = {"latest": "latest", "branches": "branch(es)", "tags": "tag(s)"}
    parts = [f"{n} {words.get(kind, kind)}" for kind, n in kinds.items() if n or kind in words]
    return f"{len(refs)} ref(s) ({', '.join(parts)})"


def _store_links(st: Any) -> Iterable[Check]:
    """One check per symbolic link, FIFO, socket or device in a local store's tree (ckpt
    makes none, reads or writes through none): harmless in tmp/ (a warning), elsewhere
    failing, as the commands that meet it are refused or read around it; the linked lock
    files are `check_locks`'s."""
    from ckptcli.store.backend import LocalBackend
    from ckptcli.store.layout import TMP, lock_path

    backend = st.backend
    if not isinstance(backend, LocalBackend):
        return
    own = {lock_path(name) for name in LOCKS}  # check_locks names these
    for path, what in backend.planted_files():
        at = os.path.join(backend.root, path)
        if what != "a symbolic link":
            if path.startswith(f"{TMP}/"):
                yield Check(f"file {path}", WARN, f"{at} is {what}: never read or written through (harmless)", f"rm {at}")
            else:
                refused = "every command that meets it is refused (exit 5) or reads around it"
                yield Check(f"file {path}", FAIL, f"{at} is {what} ckpt did not make: {refused}", f"remove it (rm {at})")
            continue
        if path in own:
            continue
        if path.startswith(f"{TMP}/"):
            yield Check(f"link {path}", WARN, f"{at} is a symbolic link: never followed (harmless; prune removes it)", f"rm {at}")
        else:
            what = "every command that meets it is refused (exit 8) or reads around it"
            yield Check(f"link {path}", FAIL, f"{at} is a symbolic link ckpt did not make: {what}", backend.link_hint(path))


#: the store's locks (formats/v1.md, "Locks"): name -> what takes it
LOCKS = {"store": "takes, tags, prunes, repairs and verify", "refs": "ref moves and reflog writes"}


def check_locks(ctx: Context) -> Iterable[Check]:
    """Who holds the store's locks now: an exclusive holder (a prune, a repair) makes
    every other command wait. Looks without waiting: each lock is taken for an instant
    where it is free. On object storage the locks are objects: each is listed with its
    holder (host, pid, age), the stale ones too."""
    if ctx.store is None:
        return
    backend = ctx.store.backend
    if ctx.store.directory is None:
        yield from _object_locks(getattr(backend, "objects", None))
        return
    for name, what in LOCKS.items():
        state, holder = backend.lock_state(name)
        who = holder or "a process whose record is gone (it is still alive: the kernel drops the lock when it ends)"
        if state == "exclusive":
            yield Check(
                f"lock {name}",
                WARN,
                f"held exclusively by {who}: {what} wait for it",
                "let it finish (takes wait up to 30 s for it; prune, repair and migrate --format up to their --lock-wait); "
                "never delete the lock file (a lock goes with its process)",
            )
        elif state == "shared":
            yield Check(f"lock {name}", OK, f"in use, shared (e.g. {who})", "")
        elif state == "free":
            yield Check(f"lock {name}", OK, "free", "")
        elif state == "linked":
            yield Check(
                f"lock {name}",
                FAIL,
                f"{holder} is a symbolic link: every command that takes this lock is refused (exit 8)",
                "remove it (something other than ckpt made it); ckpt makes the lock file again when it needs it",
            )
        else:
            yield Check(f"lock {name}", WARN, "cannot tell whether it is held here", "")


def _object_locks(objects: Any) -> Iterable[Check]:
    """The lock objects of a store on object storage (ckptcli.store.objlocks): live ones
    by lock name, an exclusive holder a warning (commands wait for it); stale ones (their
    holder died or stopped refreshing) a warning with what removes them."""
    from ckptcli.store import objlocks

    if objects is None:
        yield Check("locks", WARN, "cannot list the locks of this backend", "")
        return
    now = time.time()
    infos = objlocks.list_locks(objects)
    stale = [i for i in infos if i.stale]
    live = [i for i in infos if not i.stale]
    yield Check("locks", OK, f"{len(live)} live, {len(stale)} stale" if infos else "none held", "")
    for name in sorted({i.record.name for i in live if i.record is not None}):
        held = [i.record for i in live if i.record is not None and i.record.name == name]
        exclusive = [r for r in held if r.exclusive]
        if exclusive:
            yield Check(
                f"lock {name}",
                WARN,
                f"held exclusively by {exclusive[0].holder(now)}: other commands wait for it",
                "let it finish (takes wait up to 30 s for it; prune, repair and migrate --format up to their --lock-wait); "
                "`ckpt unlock --remove-all` only when no ckpt command runs",
            )
        else:
            yield Check(f"lock {name}", OK, f"in use, shared by {len(held)}: " + _some([r.holder(now) for r in held]), "")
    unknown = [i for i in live if i.record is None]
    if unknown:
        yield Check("unknown locks", WARN, "; ".join(f"{i.path}: {i.why}" for i in unknown), "upgrade ckpt to read them")
    if stale:
        what = _some([f"{i.record.holder(now) if i.record else i.path} ({i.why})" for i in stale])
        yield Check("stale locks", WARN, f"{len(stale)} stale lock(s), blocking nothing: {what}", "`ckpt unlock` removes them")


def _some(items: list[str], shown: int = 3) -> str:
    """The first `shown` of `items`, and how many more: a detail stays one readable line."""
    more = f"; and {len(items) - shown} more" if len(items) > shown else ""
    return "; ".join(items[:shown]) + more


#: below this much free space on a local store's disk, doctor warns
LOW_SPACE = 1 << 30


def check_free_space(ctx: Context) -> Iterable[Check]:
    """The free space of the disk a local store is on (a take writes its packs there);
    not applicable on object storage."""
    if ctx.store is None:
        return
    if ctx.store_path is None:
        yield Check("free space", OK, "not applicable on object storage", "")
        return
    try:
        usage = shutil.disk_usage(ctx.store_path)
    except OSError as exc:
        yield Check("free space", WARN, f"cannot tell: {exc.strerror}", "")
        return
    detail = f"{human_size(usage.free)} free of {human_size(usage.total)}"
    if usage.free < LOW_SPACE:
        yield Check("free space", WARN, detail, "a take needs room for its new packs: free some, or `ckpt prune`")
    else:
        yield Check("free space", OK, detail, "")


#: optional packages: distribution -> (what it enables, install hint)
COMPONENTS: dict[str, tuple[str, str]] = {
    "langgraph-checkpoint": ("CkptSaver, ckpt as LangGraph's checkpointer", "pip install 'ckptcli[langgraph]'"),
    "langgraph": ("running LangGraph graphs (your app brings it)", "pip install langgraph"),
    "langgraph-checkpoint-sqlite": (
        "reading SqliteSaver databases with `ckpt import langgraph`",
        "pip install langgraph-checkpoint-sqlite",
    ),
    "textual": ("`ckpt tui`", "pip install textual"),
    "temporalio": ("`ckpt import temporal` and `ckpt replay --check` of Temporal histories", "pip install 'ckptcli[temporal]'"),
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


# -- adapters, backends, versions ----------------------------------------------------------
def _adapter_checks(report: Report, wanted: Sequence[str] | None, *, asked_for: bool) -> None:
    """A row per adapter. Asked about, each is ok only when it loads and can work here.
    Otherwise: one that does not load fails (a broken package); one that cannot work here
    warns, unless all it lacks is optional packages (its Availability's details["missing"]),
    which is ok and says so, as for the components."""
    from ckptcli.adapters import registry

    statuses = registry.survey(wanted)
    report.adapters = [st.to_dict() for st in statuses]
    if not statuses:
        report.checks.append(Check("adapters", OK, "none installed"))
    for st in statuses:
        name = f"adapter {st.name}"
        if not st.loaded:
            report.checks.append(
                Check(name, FAIL, f"does not load: {st.availability.reason}", "reinstall or remove the package that registers it")
            )
            continue
        what = f"{st.kind}: {st.availability.reason or 'available'}"
        if st.importers:
            what += f"; imports {', '.join(st.importers)}"
        if st.availability.ok:
            report.checks.append(Check(name, OK, what))
        elif asked_for:
            report.checks.append(Check(name, FAIL, f"not usable here: {what}", ""))
        elif st.availability.details.get("missing"):
            report.checks.append(Check(name, OK, f"not installed: {what}", ""))
        else:
            report.checks.append(Check(name, WARN, f"not usable here: {what}", f"`ckpt doctor --adapter {st.name}` asks about it alone"))


def backend_status(scheme: str) -> dict[str, Any]:
    """Whether the backend of `scheme` (ckptcli.backends) is usable here.

    Returns:
        {"scheme", "entry_point", "ok", "state", "reason"}: state "ok" when its class
        imports (and, when it has an `available()` classmethod, that says ok);
        "not installed" when a package it needs is missing (an optional dependency);
        "broken" when its own module is missing or fails, or it is no backend;
        "unavailable" when its available() says no.

    Raises:
        UsageError: no backend is registered for `scheme` (the line lists those that are).
    """
    from ckptcli.errors import UsageError
    from ckptcli.store import backends

    entry = plugins.find(plugins.BACKENDS, scheme)
    if entry is None:
        raise UsageError(f"no backend is registered for {scheme}://", hint=f"registered schemes: {', '.join(backends.known_schemes())}")
    out: dict[str, Any] = {"scheme": scheme, "entry_point": entry.value, "ok": False, "state": "broken", "reason": ""}
    try:
        entry.load()
    except ImportError as exc:
        own = exc.name is not None and entry.module.split(".")[0] == exc.name.split(".")[0]
        if not own:
            out["state"] = "not installed"
    except Exception:  # noqa: BLE001 - backend_class below says what failed, in one line
        pass
    try:
        cls = backends.backend_class(scheme)
    except CkptError as exc:
        out["reason"] = exc.message + (f" ({exc.hint})" if exc.hint else "")
        return out
    probe = getattr(cls, "available", None)
    if callable(probe):
        try:
            got = probe()
            out["ok"], out["reason"] = bool(getattr(got, "ok", got)), str(getattr(got, "reason", ""))
        except Exception as exc:  # noqa: BLE001 - a third party's probe: its failure is the answer
            out["reason"] = f"available() failed: {type(exc).__name__}: {exc}"
        out["state"] = "ok" if out["ok"] else "unavailable"
        return out
    out["ok"], out["state"], out["reason"] = True, "ok", f"{entry.value} imports"
    return out


def _backend_checks(report: Report, wanted: Sequence[str] | None, *, asked_for: bool) -> None:
    """A row per backend scheme. Asked about, each is ok only when it can work here;
    otherwise one whose optional package is missing is ok and says so (as the components),
    one that cannot work here warns, a broken one fails."""
    schemes = plugins.names(plugins.BACKENDS) if wanted is None else list(wanted)
    report.backends = [backend_status(s) for s in schemes]
    for b in report.backends:
        name = f"backend {b['scheme']}://"
        if b["ok"]:
            report.checks.append(Check(name, OK, b["reason"]))
        elif asked_for:
            report.checks.append(Check(name, FAIL, f"not usable here: {b['reason']}", ""))
        elif b["state"] == "not installed":
            report.checks.append(Check(name, OK, f"not installed: {b['reason']}", ""))
        elif b["state"] == "unavailable":
            report.checks.append(Check(name, WARN, f"not usable here: {b['reason']}", ""))
        else:
            report.checks.append(Check(name, FAIL, f"broken: {b['reason']}", "reinstall or remove the package that registers it"))


#: the distributions whose versions doctor reports: ckpt's dependencies, then the optional ones
DEPENDENCIES = (
    "msgpack",
    "zstandard",
    "fastcdc",
    "pyfastcdc",
    "blake3",
    "xxhash",
    "typer",
    "rich",
    "textual",
    "deepdiff",
    "obstore",
    "fsspec",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "temporalio",
)


def versions() -> dict[str, Any]:
    """Python's version and the installed version of each of DEPENDENCIES.

    Returns:
        {"python": "3.11.9", "executable": path, "ckptcli": version, "packages": {name: version or None}}.
    """
    import platform
    import sys
    from importlib.metadata import PackageNotFoundError, version

    from ckptcli._version import __version__

    packages: dict[str, str | None] = {}
    for dist in DEPENDENCIES:
        try:
            packages[dist] = version(dist)
        except PackageNotFoundError:
            packages[dist] = None
    return {"python": platform.python_version(), "executable": sys.executable, "ckptcli": __version__, "packages": packages}


def _version_checks(report: Report) -> None:
    v = report.versions = versions()
    report.checks.append(Check("python", OK, f"{v['python']} ({v['executable']}), ckptcli {v['ckptcli']}"))
    listed = "; ".join(f"{name} {ver or 'not installed'}" for name, ver in v["packages"].items())
    report.checks.append(Check("versions", OK, listed))

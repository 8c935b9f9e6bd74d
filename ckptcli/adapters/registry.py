"""The installed adapters: listed by name without importing them, loaded one at a time.

Adapters register in the entry-point group `ckptcli.adapters` (ckptcli/plugins.py), the
built-in ones exactly as third-party ones. An unknown name is a usage error listing what is
installed; an adapter whose module fails to import, or that is no well-formed Adapter, is
one line naming it (InvalidInputError), never a crash; `survey` turns each of those into a
row (`ckpt doctor`). So is an entry point whose name is no adapter name, and a third-party
adapter's method that raises or calls sys.exit() when the registry or a command calls it
(`call`): one line and exit 4, never a silent exit 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ckptcli import plugins
from ckptcli.adapters.base import NAME_RE, Adapter, Availability, Importer, Option
from ckptcli.errors import CkptError, InvalidInputError, UsageError, failed_with, user_failure

__all__ = ["Status", "adapter", "adapter_class", "call", "check_importer", "find_importer", "importers", "names", "status", "survey"]

T = TypeVar("T")
_FIX = "fix or remove the package that registers it (docs/adapters.md)"


def names() -> list[str]:
    """The installed adapters' names, sorted; nothing is imported.

    Returns:
        the names of the entry points of ckptcli.adapters (ckpt's own included).
    """
    return plugins.names(plugins.ADAPTERS)


def _unknown(name: str) -> UsageError:
    have = names()
    return UsageError(
        f"no adapter named {name!r} is installed",
        hint=f"installed: {', '.join(have) if have else 'none'} (`ckpt doctor` says which work here)",
    )


def adapter_class(name: str) -> type[Adapter]:
    """The class of adapter `name`, imported now.

    Args:
        name: an installed adapter's name.

    Returns:
        the Adapter subclass its entry point names.

    Raises:
        UsageError: no adapter of that name is installed (the line lists those that are).
        InvalidInputError: its module fails to import, or it is no well-formed Adapter.
    """
    ep = plugins.find(plugins.ADAPTERS, name)
    if ep is None:
        raise _unknown(name)
    if not NAME_RE.match(name):
        raise InvalidInputError(
            f"the adapter entry point {name!r} ({ep.value}) is malformed: its name is not lower-case letters, digits, '-' and '_'",
            hint=_FIX,
        )
    cls = plugins.load(plugins.ADAPTERS, [name])[0][1]
    if not (isinstance(cls, type) and issubclass(cls, Adapter)):
        raise InvalidInputError(
            f"the adapter {name!r} ({ep.value}) is a {type(cls).__name__}, not a subclass of ckptcli.adapters.base.Adapter",
            hint="fix or remove the package that registers it (docs/adapters.md)",
        )
    if abstract := sorted(getattr(cls, "__abstractmethods__", ())):
        raise InvalidInputError(
            f"the adapter {name!r} ({ep.value}) does not implement {', '.join(abstract)}",
            hint="fix or remove the package that registers it (docs/adapters.md)",
        )
    if problems := call(name, "problems()", cls.problems):
        raise InvalidInputError(
            f"the adapter {name!r} ({ep.value}) is malformed: {problems[0]}", hint="fix or remove the package that registers it"
        )
    return cls


def adapter(name: str) -> Adapter:
    """An instance of adapter `name`.

    Args:
        name: an installed adapter's name.

    Returns:
        the adapter, made with no arguments.

    Raises:
        what adapter_class raises; InvalidInputError when making it fails.
    """
    cls = adapter_class(name)
    try:
        return cls()
    except CkptError:
        raise
    except BaseException as exc:
        if not user_failure(exc):
            raise
        raise InvalidInputError(
            f"making the adapter {name!r} failed: {failed_with(exc)}", hint="fix or remove the package that registers it"
        ) from exc


def call(owner: str, what: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, a method of the adapter `owner` (or of one of its importers),
    whose failure is the adapter's: one line naming it, not a crash, not a silent exit.

    Args:
        owner: the adapter's registered name.
        what: the method, for the message ("importers()", "the importer 'x': run()").
        fn, args, kwargs: the call.

    Returns:
        what `fn` returns.

    Raises:
        CkptError: what `fn` raises (bad input is the adapter's one line, with its code).
        InvalidInputError: `fn` raised anything else or called sys.exit() (a third-party
            adapter; a built-in one's Exception is ckpt's own bug and stays one).
        KeyboardInterrupt: Ctrl-C stays the interruption.
    """
    try:
        return fn(*args, **kwargs)
    except CkptError:
        raise
    except BaseException as exc:
        if not user_failure(exc) or (isinstance(exc, Exception) and _builtin(owner)):
            raise
        raise InvalidInputError(f"the adapter {owner!r}: {what} failed: {failed_with(exc)}", hint=_FIX) from exc


def _builtin(name: str) -> bool:
    """Whether adapter `name` is ckpt's own (not replaced by an installed entry point)."""
    ep = plugins.find(plugins.ADAPTERS, name)
    return ep is not None and plugins.BUILTIN[plugins.ADAPTERS].get(name) == ep.value


@dataclass
class Status:
    """What `ckpt doctor` says of one installed adapter.

    Args:
        name: its registered name.
        value: its entry point's value (module:Class).
        loaded: it imports and is a well-formed Adapter.
        availability: available() when loaded; else not ok with why it did not load.
        kind, summary: its kind and summary when loaded ("" otherwise).
        importers: the names of its importers.
    """

    name: str
    value: str
    loaded: bool
    availability: Availability
    kind: str = ""
    summary: str = ""
    importers: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """It loads and can work here."""
        return self.loaded and self.availability.ok

    def to_dict(self) -> dict[str, Any]:
        """Plain data for --json."""
        return {
            "name": self.name,
            "entry_point": self.value,
            "loaded": self.loaded,
            "kind": self.kind,
            "summary": self.summary,
            "importers": self.importers,
            **self.availability.to_dict(),
        }


def status(name: str) -> Status:
    """The Status of one adapter: loaded and available, or why not.

    Args:
        name: an installed adapter's name.

    Returns:
        its Status (never raises for a broken adapter: that is a Status with the reason).

    Raises:
        UsageError: no adapter of that name is installed.
    """
    ep = plugins.find(plugins.ADAPTERS, name)
    if ep is None:
        raise _unknown(name)
    try:
        inst = adapter(name)
    except CkptError as exc:
        return Status(name, ep.value, False, Availability(False, exc.message))
    try:
        avail = type(inst).available()
        if not isinstance(avail, Availability):
            avail = Availability(False, f"available() returned a {type(avail).__name__}, not an Availability")
    except BaseException as exc:
        if not user_failure(exc):
            raise
        avail = Availability(False, f"available() failed: {failed_with(exc)}")
    try:
        have = inst.importers()
        found = sorted(have)
    except BaseException as exc:
        if not user_failure(exc):
            raise
        found = []
        avail = Availability(False, f"importers() failed: {failed_with(exc)}", avail.details)
    else:
        for fmt in found:
            try:
                check_importer(name, have[fmt])
            except CkptError as exc:
                avail = Availability(False, exc.message, avail.details)
                break
    return Status(name, ep.value, True, avail, inst.kind, inst.summary, found)


def survey(wanted: Iterable[str] | None = None) -> list[Status]:
    """The Status of each installed adapter (or of those named), in name order.

    Args:
        wanted: names to report on; None for all.

    Returns:
        one Status per adapter.

    Raises:
        UsageError: a wanted name is not installed.
    """
    return [status(n) for n in (names() if wanted is None else wanted)]


def importers() -> dict[str, tuple[str, Importer]]:
    """Every importer of the adapters that load, by format name.

    Returns:
        format name -> (adapter name, Importer); an adapter that does not load is left out
        (`ckpt doctor` says why); of two adapters with an importer of the same name, the
        first by adapter name wins, and `ADAPTER:FORMAT` reaches the other.
    """
    out: dict[str, tuple[str, Importer]] = {}
    for name in names():
        found = _importers_of(name)
        for fmt, imp in sorted(found.items(), key=lambda item: str(item[0])):
            out.setdefault(fmt, (name, imp))
    return out


def _importers_of(name: str) -> Mapping[str, Importer]:
    """The importers of adapter `name`; none when it does not load or its importers() fails
    (`ckpt doctor` says why)."""
    try:
        return _importers(name)
    except CkptError:
        return {}
    except BaseException as exc:
        if not user_failure(exc):
            raise
        return {}


def _importers(name: str) -> dict[str, Importer]:
    """adapter(name).importers(), as a dict; its failure is one line (`call`)."""
    inst = adapter(name)

    def read() -> dict[str, Importer]:
        found = inst.importers()
        if not isinstance(found, Mapping):
            raise InvalidInputError(f"the adapter {name!r}: importers() returned a {type(found).__name__}, not a mapping", hint=_FIX)
        return dict(found.items())

    return call(name, "importers()", read)


def check_importer(owner: str, imp: Importer) -> tuple[str, Importer]:
    """(owner, imp) when imp is a well-formed Importer, read as a command reads it.

    Args:
        owner: the name of the adapter whose importers() gave it.
        imp: the importer.

    Returns:
        (owner, imp).

    Raises:
        InvalidInputError: it is no Importer, its name, summary, source or options are
        malformed, or reading them raises or calls sys.exit() (one line naming it).
    """

    def problems() -> tuple[str, list[str]]:
        if not isinstance(imp, Importer):
            return type(imp).__name__, [f"it is a {type(imp).__name__}, not a ckptcli.adapters.base.Importer"]
        name = getattr(imp, "name", None)
        label = name if isinstance(name, str) else type(imp).__name__
        bad = [f"its {a} is not text" for a in ("name", "summary", "source") if not isinstance(getattr(imp, a, None), str)]
        if not isinstance(imp.source_is_path, bool):
            bad.append("its source_is_path is not True or False")
        if not isinstance(imp.options, tuple) or not all(isinstance(o, Option) for o in imp.options):
            return label, [*bad, "its options are not a tuple of Option"]
        return label, bad + [p for o in imp.options for p in o.problems()]

    label, found = call(owner, "reading its importer", problems)
    if found:
        raise InvalidInputError(f"the importer {label!r} of the adapter {owner!r} is malformed: {found[0]}", hint=_FIX)
    return owner, imp


def find_importer(kind: str) -> tuple[str, Importer]:
    """The importer `ckpt import KIND` means.

    Args:
        kind: a format name (`langgraph`), or ADAPTER:FORMAT.

    Returns:
        (adapter name, Importer).

    Raises:
        UsageError: no installed adapter imports `kind` (the line lists the formats that are
        installed); InvalidInputError: the adapter named in ADAPTER:FORMAT does not load,
        or the importer's options are malformed.
    """
    owner, sep, fmt = kind.partition(":")
    if sep:
        found = _importers(owner)
        if fmt in found:
            return check_importer(owner, found[fmt])
    else:
        # the adapter of the same name first: only it is imported when it has the format
        if plugins.find(plugins.ADAPTERS, kind) is not None:
            own = _importers_of(kind)
            if kind in own:
                return check_importer(kind, own[kind])
        every = importers()
        if kind in every:
            return check_importer(*every[kind])
    have = sorted(importers())
    raise UsageError(
        f"no installed adapter imports {kind!r}",
        hint=f"installed importers: {', '.join(have) if have else 'none'}; `ckpt import FILE` imports a checkpoint file",
    )

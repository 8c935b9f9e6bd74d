"""The installed adapters: listed by name without importing them, loaded one at a time.

Adapters register in the entry-point group `ckptcli.adapters` (ckptcli/plugins.py), the
built-in ones exactly as third-party ones. An unknown name is a usage error listing what is
installed; an adapter whose module fails to import, or that is no well-formed Adapter, is
one line naming it (InvalidInputError), never a crash; `survey` turns each of those into a
row (`ckpt doctor`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptcli import plugins
from ckptcli.adapters.base import Adapter, Availability, Importer
from ckptcli.errors import CkptError, InvalidInputError, UsageError, failed_with, user_failure

__all__ = ["Status", "adapter", "adapter_class", "find_importer", "importers", "names", "status", "survey"]


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
    if problems := cls.problems():
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
        found = sorted(inst.importers())
    except BaseException as exc:
        if not user_failure(exc):
            raise
        found = []
        avail = Availability(False, f"importers() failed: {failed_with(exc)}", avail.details)
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
        for fmt, imp in sorted(found.items()):
            out.setdefault(fmt, (name, imp))
    return out


def _importers_of(name: str) -> Mapping[str, Importer]:
    """The importers of adapter `name`; none when it does not load or its importers() fails
    (`ckpt doctor` says why)."""
    try:
        return adapter(name).importers()
    except CkptError:
        return {}
    except BaseException as exc:
        if not user_failure(exc):
            raise
        return {}


def _checked(owner: str, imp: Importer) -> tuple[str, Importer]:
    """(owner, imp) when its options are well formed; a malformed one is one line."""
    problems = [p for o in imp.options for p in o.problems()] if isinstance(imp.options, tuple) else ["its options are not a tuple"]
    if problems:
        raise InvalidInputError(
            f"the importer {imp.name!r} of the adapter {owner!r} is malformed: {problems[0]}",
            hint="fix or remove the package that registers it",
        )
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
        found = adapter(owner).importers()
        if fmt in found:
            return _checked(owner, found[fmt])
    else:
        # the adapter of the same name first: only it is imported when it has the format
        if plugins.find(plugins.ADAPTERS, kind) is not None:
            own = _importers_of(kind)
            if kind in own:
                return _checked(kind, own[kind])
        every = importers()
        if kind in every:
            return _checked(*every[kind])
    have = sorted(importers())
    raise UsageError(
        f"no installed adapter imports {kind!r}",
        hint=f"installed importers: {', '.join(have) if have else 'none'}; `ckpt import FILE` imports a checkpoint file",
    )

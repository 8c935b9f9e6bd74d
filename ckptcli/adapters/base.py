"""The adapter contract: what every adapter (built in or installed) offers ckpt.

An adapter knows one kind of subject (an agent, a workflow, a process): how to capture a
live one into a state document, blobs and labels, how to put a checkpoint back, the
reducers of its own event kinds, the importers of foreign formats (`ckpt import KIND
SOURCE`), the options it takes (the CLI builds flags from them), and whether it can work
on this machine at all (`available()`, which `ckpt doctor` reports with its reason).

Adapters register as `NAME = module:Class` in the entry-point group `ckptcli.adapters`
(ckptcli/plugins.py); ckptcli/adapters/registry.py lists them without importing them and
loads the one asked for. docs/adapters.md is the guide for writing one, and
tests/adapter_suite.py the conformance suite each must pass.

Invariants:
- What an adapter does not do raises NotSupported (a usage error, exit 2), never
  NotImplementedError or AttributeError.
- `available()` never raises: a failed probe is an Availability with ok=False and why.
- Options are declared data: nothing but their declaration builds the flags.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ckptcli.errors import UsageError
from ckptcli.progress import NULL, Progress

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.store.repository import Store
    from ckptcli.writer import TakeResult

__all__ = [
    "KINDS",
    "Adapter",
    "Availability",
    "Capture",
    "Importer",
    "NotSupported",
    "Option",
    "option_values",
]

#: the kinds of subject an adapter may serve (the KIND of a subject KIND:NAME)
KINDS = ("agent", "workflow", "process")

#: an adapter's or an option's name: lower case, digits, '-' and '_' (it becomes a flag)
NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")

#: the flags `ckpt capture` and `ckpt import` take themselves: no option of an adapter or
#: importer may be one of them
RESERVED_FLAGS = frozenset({"--subject", "--store", "--store-option", "--json", "--quiet", "--no-color", "--help"})

#: the types an option's value may have (the CLI converts the flag's text to it)
OPTION_TYPES: tuple[type, ...] = (str, int, float, bool, Path)


class NotSupported(UsageError):  # noqa: N818 - the name the contract gives it
    """An adapter was asked for something it does not do (capture, restore, an importer).
    A usage error: exit 2."""


@dataclass(frozen=True)
class Availability:
    """Whether an adapter can work on this machine, and if not, why.

    Args:
        ok: it can.
        reason: one line: what it needs and is missing, or what it found ("" is allowed when ok).
        details: plain data a user may want (versions found, paths probed); shown by `ckpt doctor --json`.
            When all that is lacking is optional packages, `details["missing"]` lists them:
            `ckpt doctor` then says "not installed" (ok), as for its components, rather
            than warning.
    """

    ok: bool
    reason: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The availability as plain data.

        Returns:
            {"ok", "reason", "details"}.
        """
        return {"ok": self.ok, "reason": self.reason, "details": dict(self.details)}


@dataclass(frozen=True)
class Option:
    """One option an adapter (or an importer) declares; the CLI makes it a flag
    `--NAME` (underscores as dashes).

    Args:
        name: the keyword the adapter's method receives (a valid identifier, lower case).
        help: one line for --help.
        type: str, int, float, bool (a flag without value) or Path.
        default: the value when the flag is not given (for `multiple`, a tuple).
        metavar: what the value is called in --help (default: the type's name, upper case).
        multiple: the flag may be repeated; the method receives a tuple.
    """

    name: str
    help: str
    type: type = str
    default: Any = None
    metavar: str | None = None
    multiple: bool = False

    @property
    def flag(self) -> str:
        """The command-line flag.

        Returns:
            "--" and the name with underscores as dashes.
        """
        return "--" + self.name.replace("_", "-")

    def problems(self) -> list[str]:
        """What is wrong with this declaration (the conformance suite and the registry check it).

        Returns:
            one line per problem; empty when well-formed.
        """
        out = []
        if not (self.name.isidentifier() and self.name == self.name.lower() and not self.name.startswith("_")):
            out.append(f"option name {self.name!r} is not a lower-case identifier")
        if self.type not in OPTION_TYPES:
            out.append(
                f"option {self.name!r} has type {getattr(self.type, '__name__', self.type)!r}, not one of str, int, float, bool, Path"
            )
        if not self.help.strip() or "\n" in self.help:
            out.append(f"option {self.name!r} needs a one-line help")
        if self.flag in RESERVED_FLAGS:
            out.append(f"option {self.name!r} would be {self.flag}, a flag of ckpt itself")
        if self.type is bool and self.multiple:
            out.append(f"option {self.name!r} is a bool flag and cannot be multiple")
        if self.multiple and not isinstance(self.default, tuple):
            out.append(f"option {self.name!r} is multiple: its default must be a tuple")
        return out


def option_values(declared: Sequence[Option], given: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Every declared option's value: the given ones, the defaults for the rest.

    Args:
        declared: the options an adapter or importer declares.
        given: the values passed (by keyword, or parsed from flags).
        where: who takes them, for the error ("the langgraph importer").

    Returns:
        name -> value, one per declared option.

    Raises:
        UsageError: a given name that is not declared.
    """
    names = {o.name for o in declared}
    unknown = sorted(set(given) - names)
    if unknown:
        known = ", ".join(o.flag for o in declared) or "none"
        raise UsageError(f"{where} has no option {unknown[0]!r}", hint=f"its options: {known}")
    return {o.name: given.get(o.name, o.default) for o in declared}


@dataclass
class Capture:
    """What an adapter captured of a live target: what `ckptcli.take` stores.

    Args:
        document: the state document (sections: memory, plan, tools, events, ext, ...).
        blobs: name -> a file or directory to store in the blobs section.
        labels: labels of the checkpoint (the adapter's own, e.g. "process.how").
    """

    document: dict[str, Any]
    blobs: dict[str, Path] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        """Release what the capture holds until it is taken (an adapter's temporary files);
        `Adapter.take` calls it once the checkpoint is taken or has failed.

        Raises:
            nothing (the base holds nothing).
        """


class Importer(abc.ABC):
    """Reads a foreign format (another tool's database or files) into a store: `ckpt
    import NAME SOURCE [options]`.

    Class attributes:
        name: the format's name, the KIND of `ckpt import KIND SOURCE`.
        summary: one line for `ckpt import --help`.
        source: what SOURCE is, for --help and errors ("a SqliteSaver database").
        source_is_path: SOURCE is a local path (a URL there is refused with one line).
        options: the options it takes (flags of `ckpt import NAME`).
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    source: ClassVar[str] = "the source to import"
    source_is_path: ClassVar[bool] = True
    options: ClassVar[tuple[Option, ...]] = ()

    @abc.abstractmethod
    def run(self, store: Store, source: str, options: Mapping[str, Any], progress: Progress = NULL) -> dict[str, Any]:
        """Import `source` into `store`: everything read and checked before anything is
        written; what the store has already is skipped.

        Args:
            store: the open store to write into.
            source: SOURCE as given.
            options: every declared option's value (option_values fills the defaults).
            progress: reports the work as it goes.

        Returns:
            plain data saying what was imported (`ckpt import --json` prints it).

        Raises:
            CkptError: bad input is one line with its exit code (a file that is not the
            format: CorruptError or InvalidInputError; a missing source: NotFoundError).
        """

    def describe(self, result: Mapping[str, Any], where: str) -> str:
        """One line for a person about what `run` did.

        Args:
            result: what run returned.
            where: the store's location.

        Returns:
            the line `ckpt import` prints without --json.

        Raises:
            nothing.
        """
        parts = ", ".join(f"{k} {v}" for k, v in result.items() if isinstance(v, (int, float, str)))
        return f"imported {self.name} into {where}: {parts}" if parts else f"imported {self.name} into {where}"


class Adapter(abc.ABC):
    """Captures live subjects of one kind into checkpoints and restores them.

    Class attributes:
        name: its registered name (the entry point's name in ckptcli.adapters).
        kind: the subject kind it serves: "agent", "workflow" or "process".
        summary: one line saying what it captures (`ckpt doctor` shows it).
        options: what `capture` and `restore` take (flags of `ckpt capture NAME`).
    """

    name: ClassVar[str]
    kind: ClassVar[str]
    summary: ClassVar[str]
    options: ClassVar[tuple[Option, ...]] = ()

    @classmethod
    @abc.abstractmethod
    def available(cls) -> Availability:
        """Whether this adapter can work on this machine.

        Returns:
            Availability: ok, or not ok with the reason (a missing package, a kernel
            feature, a tool that fails its own check) and details.

        Raises:
            nothing: a failed probe is ok=False with what failed.
        """

    def capture(self, target: Any, **options: Any) -> Capture:
        """Capture the live `target` (an object, a PID, a path: the adapter says which).

        Args:
            target: what to capture; from the CLI, the TARGET argument as text.
            **options: the declared options' values.

        Returns:
            Capture: the state document, blobs and labels to take.

        Raises:
            NotSupported: this adapter does not capture.
            CkptError: a target it cannot capture (one line, with its exit code).
        """
        raise NotSupported(f"the {self.name} adapter does not capture", hint=self._does())

    def restore(self, checkpoint: Checkpoint, target: Any, **options: Any) -> Any:
        """Put `checkpoint` back into `target`.

        Args:
            checkpoint: an opened checkpoint (ckptcli.checkpoint.Checkpoint).
            target: where it goes (an object, a directory: the adapter says which).
            **options: the declared options' values.

        Returns:
            what was restored (the adapter says what: the target, a new object).

        Raises:
            NotSupported: this adapter does not restore.
            CkptError: a checkpoint this adapter did not write, or a target it cannot write.
        """
        raise NotSupported(f"the {self.name} adapter does not restore", hint=self._does())

    def reducers(self) -> Mapping[str, Callable[..., Any]]:
        """The reducers of this adapter's own event kinds.

        Returns:
            kind ("NAMESPACE:NAME") -> reducer `(state, event) -> state`, as
            ckptcli.history.events.Reducers.add takes them; deterministic.

        Raises:
            nothing.
        """
        return {}

    def importers(self) -> Mapping[str, Importer]:
        """The foreign formats this adapter reads (`ckpt import NAME SOURCE`).

        Returns:
            format name -> Importer.

        Raises:
            nothing (an importer whose dependency is missing says so when it runs).
        """
        return {}

    # -- helpers every adapter has ------------------------------------------------------
    @classmethod
    def supports(cls, what: str) -> bool:
        """Whether this adapter implements `what` ("capture" or "restore").

        Args:
            what: the method's name.

        Returns:
            True when the class overrides the contract's default (which raises NotSupported).

        Raises:
            ValueError: `what` is not "capture" or "restore".
        """
        if what not in ("capture", "restore"):
            raise ValueError(f"not an optional method of an adapter: {what!r}")
        return getattr(cls, what) is not getattr(Adapter, what)

    def take(
        self,
        store: Store,
        target: Any,
        *,
        subject: str,
        labels: Mapping[str, str] | None = None,
        message: str = "",
        parents: list[str] | None = None,
        progress: Progress = NULL,
        **options: Any,
    ) -> TakeResult:
        """Capture `target` and take a checkpoint of it.

        Args:
            store: the open store.
            target: as `capture` takes it.
            subject: "KIND:NAME"; its kind should be this adapter's.
            labels: more labels (they win over the capture's; `adapter` is always this adapter's name).
            message, parents, progress: as ckptcli.take takes them.
            **options: the declared options' values (the defaults fill the rest).

        Returns:
            ckptcli.writer.TakeResult of the new checkpoint (labelled `adapter=NAME`).

        Raises:
            what capture and ckptcli.take raise.
        """
        from ckptcli.writer import take

        cap = self.capture(target, **option_values(self.options, options, f"the {self.name} adapter"))
        try:
            return take(
                store,
                cap.document,
                subject=subject,
                labels={**cap.labels, **dict(labels or {}), "adapter": self.name},
                blobs=cap.blobs or None,
                message=message,
                parents=parents,
                progress=progress,
            )
        finally:
            cap.close()

    def _does(self) -> str:
        did = [w for w in ("capture", "restore") if self.supports(w)]
        did += [f"ckpt import {n}" for n in self.importers()]
        return f"the {self.name} adapter offers: {', '.join(did)}" if did else f"the {self.name} adapter offers its reducers only"

    @classmethod
    def problems(cls) -> list[str]:
        """What is wrong with this adapter's declaration (the registry refuses such an adapter).

        Returns:
            one line per problem; empty when well-formed.

        Raises:
            nothing.
        """
        out = []
        for attr in ("name", "kind", "summary"):
            if not isinstance(getattr(cls, attr, None), str):
                out.append(f"it declares no {attr}")
        if out:
            return out
        if not NAME_RE.match(cls.name):
            out.append(f"its name {cls.name!r} is not lower-case letters, digits, '-' and '_'")
        if cls.kind not in KINDS:
            out.append(f"its kind {cls.kind!r} is none of {', '.join(KINDS)}")
        if not cls.summary.strip() or "\n" in cls.summary:
            out.append("its summary is not one line")
        if not isinstance(cls.options, tuple) or not all(isinstance(o, Option) for o in cls.options):
            out.append("its options are not a tuple of Option")
        else:
            out += [p for o in cls.options for p in o.problems()]
            names = [o.name for o in cls.options]
            if len(set(names)) != len(names):
                out.append("it declares an option twice")
        return out

"""A generic adapter for hand-built agents: capture a Python object into sections, restore it back.

`AgentAdapter(memory=[...], plan=..., tools=..., events=..., ext={...}, env=[...])` says which
attributes (or keys) of an agent go into which section; `take` stores them, `restore` puts
them back. An agent may be a dataclass, a pydantic model, a plain object or a dict; values
are stored as plain data and converted back by a dataclass's type hints or the model's own
validation. docs/agents.md is the guide (the example, redaction rules, options).

Invariants: redaction (on by default; `redactor=None` turns it off) runs before anything is
stored, over the tool-call log, the captured environment and `redact_sections`; what was
redacted is recorded by path and rule, never by value (labels ``redacted`` and
``redaction.rules``, section ``ext:ckpt.redaction``). A redacted value is never restored:
`restore` leaves the placeholder, and the environment is never written back."""

from __future__ import annotations

import dataclasses
import enum
import os
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# the redaction rules live in ckptcli/_util/redact.py (the in-doubt report uses them too); their names stay here
from ckptcli._util.redact import DEFAULT_KEY_PATTERNS as DEFAULT_KEY_PATTERNS
from ckptcli._util.redact import DEFAULT_VALUE_PATTERNS as DEFAULT_VALUE_PATTERNS
from ckptcli._util.redact import PLACEHOLDER as PLACEHOLDER
from ckptcli._util.redact import Redaction as Redaction
from ckptcli._util.redact import Redactor as Redactor
from ckptcli._util.redact import _escape
from ckptcli.adapters import base as _base
from ckptcli.errors import InvalidInputError

if typing.TYPE_CHECKING:
    from ckptcli.indoubt import InDoubt

STANDARD = ("memory", "plan", "tools", "events")
REDACTION_NAMESPACE = "ckpt.redaction"

# -- plain data -------------------------------------------------------------------------------


def to_plain(value: Any, where: str = "value", _depth: int = 0) -> Any:
    """Plain data ckpt stores (maps with str keys, lists, str, bytes, int, float, bool,
    None) from dataclasses, pydantic models, enums, tuples, sets and plain containers."""
    if _depth > 200:
        raise InvalidInputError(f"{where}: nested more than 200 levels (a cycle?)")
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, enum.Enum):
        return to_plain(value.value, where, _depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name), f"{where}.{f.name}", _depth + 1) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return to_plain(dump(mode="python"), where, _depth + 1)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidInputError(f"{where}: map key {k!r} is not a string", hint="ckpt stores maps with string keys")
            out[k] = to_plain(v, f"{where}.{k}", _depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [to_plain(v, f"{where}[{i}]", _depth + 1) for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        items = [to_plain(v, f"{where}{{}}", _depth + 1) for v in value]
        return sorted(items, key=repr)
    raise InvalidInputError(
        f"{where}: a {type(value).__name__} cannot be stored",
        hint="map it to plain data (a dataclass, a dict, or a value with model_dump) or leave it out of the mapping",
    )


def from_plain(value: Any, hint: Any) -> Any:
    """Rebuild a value of type `hint` (a dataclass, a pydantic model, an enum, list[...],
    dict[str, ...], tuple, set, Optional/Union of those) from plain data."""
    if hint is Any or hint is None:
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        for a in options:
            try:
                return from_plain(value, a)
            except (TypeError, ValueError, InvalidInputError):
                continue
        return value
    if origin in (list, Sequence) and isinstance(value, list):
        (arg,) = typing.get_args(hint) or (Any,)
        return [from_plain(v, arg) for v in value]
    if origin in (tuple,) and isinstance(value, list):
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_plain(v, args[0]) for v in value)
        return tuple(from_plain(v, a) for v, a in zip(value, args, strict=False)) if args else tuple(value)
    if origin in (set, frozenset) and isinstance(value, list):
        (arg,) = typing.get_args(hint) or (Any,)
        return origin(from_plain(v, arg) for v in value)
    if origin in (dict, Mapping) and isinstance(value, dict):
        args = typing.get_args(hint)
        vt = args[1] if len(args) == 2 else Any
        return {k: from_plain(v, vt) for k, v in value.items()}
    if isinstance(hint, type):
        if issubclass(hint, enum.Enum):
            return hint(value)
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            hints = typing.get_type_hints(hint)
            kwargs = {
                f.name: from_plain(value[f.name], hints.get(f.name, Any)) for f in dataclasses.fields(hint) if f.init and f.name in value
            }
            return hint(**kwargs)
        validate = getattr(hint, "model_validate", None)
        if callable(validate) and isinstance(value, dict):
            return validate(value)
        if hint is tuple and isinstance(value, list):
            return tuple(value)
    return value


# -- the adapter ---------------------------------------------------------------------------------

Target = str | Sequence[str] | None


@dataclass
class AgentAdapter:
    """A declared mapping from an agent object onto ckpt sections (see the module docs).

    Each of memory/plan/tools/events is either one attribute name (the section is that
    attribute's value) or a list of names (the section is a map of them). `ext` maps a
    namespace to an attribute (or list). `env` lists environment variables captured,
    redacted, into the ``ext:ckpt.env`` section (never written back on restore).
    """

    memory: Target = None
    plan: Target = None
    tools: Target = None
    events: Target = None
    ext: Mapping[str, Target] = field(default_factory=dict)
    env: Sequence[str] = ()
    redactor: Redactor | None = field(default_factory=Redactor)
    redact_sections: Sequence[str] = ("tools", "ext:ckpt.env")
    environ: Callable[[], Mapping[str, str]] = lambda: os.environ

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for section, target in self._targets():
            for name in _names(target):
                if name in seen:
                    raise InvalidInputError(f"attribute {name!r} is mapped to both {seen[name]} and {section}")
                seen[name] = section
        if not seen and not self.env:
            raise InvalidInputError("the mapping names no attribute", hint="give at least one of memory=, plan=, tools=, events=, ext=")

    def _targets(self) -> Iterable[tuple[str, Target]]:
        for s in STANDARD:
            t = getattr(self, s)
            if t is not None:
                yield s, t
        for ns, t in self.ext.items():
            yield f"ext:{ns}", t

    # -- capture -----------------------------------------------------------------------------
    def capture(self, agent: Any) -> tuple[dict[str, Any], dict[str, str]]:
        """(state document, labels) for `agent`; secrets redacted, the redaction recorded."""
        doc: dict[str, Any] = {}
        ext: dict[str, Any] = {}
        for section, target in self._targets():
            value = self._collect(agent, target, section)
            if section.startswith("ext:"):
                ext[section[4:]] = value
            else:
                doc[section] = value
        if self.env:
            environ = self.environ()
            ext["ckpt.env"] = {k: environ[k] for k in self.env if k in environ}
        if ext:
            doc["ext"] = ext
        labels: dict[str, str] = {}
        if self.redactor is not None:
            report = Redaction()
            for section in self.redact_sections:
                if section.startswith("ext:"):
                    ns = section[4:]
                    if ns in ext:
                        ext[ns] = self.redactor.redact(ext[ns], f"/ext/{_escape(ns)}", report)
                elif section in doc:
                    doc[section] = self.redactor.redact(doc[section], f"/{section}", report)
            labels = {"redacted": str(report.count), "redaction.rules": self.redactor.fingerprint}
            if report.count:
                doc.setdefault("ext", {})[REDACTION_NAMESPACE] = {
                    "rules": self.redactor.fingerprint,
                    "redacted": [{"path": p, "rule": r} for p, r in zip(report.paths, report.rules, strict=True)],
                }
        return doc, labels

    def _collect(self, agent: Any, target: Target, section: str) -> Any:
        if isinstance(target, str):
            return to_plain(_get(agent, target), f"{section} ({target})")
        return {name: to_plain(_get(agent, name), f"{section} ({name})") for name in _names(target)}

    def take(self, store: Any, agent: Any, *, subject: str, labels: Mapping[str, str] | None = None, **kwargs: Any) -> Any:
        """Capture `agent` and take a checkpoint of it (`ckptcli.take` arguments pass through)."""
        from ckptcli.writer import take

        doc, meta = self.capture(agent)
        return take(store, doc, subject=subject, labels={**meta, **dict(labels or {})}, **kwargs)

    # -- restore -----------------------------------------------------------------------------
    def restore_into(self, state: Mapping[str, Any], agent: Any) -> Any:
        """Write a captured state back into `agent`; returns the agent (a new instance for
        frozen dataclasses and pydantic models that refuse attribute writes)."""
        values: dict[str, Any] = {}
        ext = state.get("ext") or {}
        for section, target in self._targets():
            data = ext.get(section[4:]) if section.startswith("ext:") else state.get(section)
            if data is None:
                continue
            if isinstance(target, str):
                values[target] = data
            else:
                for name in _names(target):
                    if isinstance(data, dict) and name in data:
                        values[name] = data[name]
        return _assign(agent, values)

    def restore(self, source: Any, ref: str = "latest", *, into: Any) -> Any:
        """Restore checkpoint `ref` of `source` (a store, or a path to a store or file) into `into`."""
        from ckptcli.checkpoint import open_checkpoint
        from ckptcli.store.repository import Store

        if isinstance(source, Store):
            ck = open_checkpoint(ref, source)
        elif os.path.isfile(source):
            # a checkpoint file holds one checkpoint; its path made absolute is never read as a ref
            ck = open_checkpoint(os.path.abspath(source))
        else:
            ck = open_checkpoint(ref, store_path=source)
        state = ck.state()
        if not isinstance(state, dict):
            raise InvalidInputError(f"checkpoint {ck.hex[:12]} holds a {type(state).__name__}, not sections this adapter wrote")
        return self.restore_into(state, into)

    def in_doubt(self, agent: Any) -> list[InDoubt]:
        """The calls in doubt in `agent`'s tool-call log (the attribute mapped to `tools`,
        or each list among several): records with status "pending" that no later "ok"
        record of the same key settles (ckptcli.indoubt). Call it on the agent `restore`
        gave back and reconcile them before the agent goes on (docs/workflows.md)."""
        from ckptcli.indoubt import in_doubt

        if self.tools is None:
            return []
        if isinstance(self.tools, str):
            return in_doubt({"tools": to_plain(_get(agent, self.tools), "tools")}, redactor=self.redactor)
        found: list[InDoubt] = []
        for name in _names(self.tools):
            found += in_doubt({"tools": to_plain(_get(agent, name), f"tools ({name})")}, redactor=self.redactor)
        return found


def _names(target: Target) -> list[str]:
    if target is None:
        return []
    return [target] if isinstance(target, str) else list(target)


def _get(agent: Any, name: str) -> Any:
    if isinstance(agent, Mapping):
        if name not in agent:
            raise InvalidInputError(f"the agent has no key {name!r}")
        return agent[name]
    try:
        return getattr(agent, name)
    except AttributeError:
        raise InvalidInputError(f"the agent ({type(agent).__name__}) has no attribute {name!r}") from None


def _hints(agent: Any) -> dict[str, Any]:
    cls = type(agent)
    try:
        if dataclasses.is_dataclass(cls):
            return typing.get_type_hints(cls)
        fields = getattr(cls, "model_fields", None)
        if isinstance(fields, dict):
            return {k: f.annotation for k, f in fields.items()}
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - hints that do not resolve: values are restored as stored
        return {}


def _assign(agent: Any, values: dict[str, Any]) -> Any:
    if isinstance(agent, dict):
        agent.update(values)
        return agent
    hints = _hints(agent)
    typed = {k: from_plain(v, hints.get(k, Any)) for k, v in values.items()}
    if dataclasses.is_dataclass(agent) and not isinstance(agent, type):
        params = getattr(type(agent), "__dataclass_params__", None)
        if params is not None and params.frozen:
            return dataclasses.replace(agent, **typed)
    copy = getattr(agent, "model_copy", None)
    if callable(copy):
        validate = type(agent).model_validate  # type: ignore[attr-defined]
        return validate({**agent.model_dump(mode="python"), **values})
    for k, v in typed.items():
        setattr(agent, k, v)
    return agent


# -- behind the adapter contract (ckptcli/adapters/base.py) --------------------------------------


def _one_or_many(names: Sequence[str]) -> Target:
    """An option given once is one attribute (the section is its value); more, a map of them."""
    return None if not names else names[0] if len(names) == 1 else list(names)


class GenericAdapter(_base.Adapter):
    """The generic adapter behind the contract: the mapping of AgentAdapter given as options.

    `capture(agent, memory=("notes",), ...)` and `restore(checkpoint, agent, ...)` take the
    attribute names of each section (one name: the section is its value; several: a map of
    them); from the CLI, the target is MODULE:NAME, an object importable from the current
    directory. AgentAdapter stays the Python API (docs/agents.md)."""

    name = "generic"
    kind = "agent"
    summary = "hand-built agents: attributes (or keys) of a Python object mapped onto memory, plan, tools, events and ext sections"
    options = (
        _base.Option("memory", "An attribute stored as the memory section (repeat for a map of several).", str, (), "ATTR", True),
        _base.Option("plan", "An attribute stored as the plan section (repeat for a map of several).", str, (), "ATTR", True),
        _base.Option("tools", "An attribute stored as the tools section (repeat for a map of several).", str, (), "ATTR", True),
        _base.Option("events", "An attribute stored as the events section (repeat for a map of several).", str, (), "ATTR", True),
        _base.Option("env", "An environment variable captured, redacted, into ext:ckpt.env.", str, (), "NAME", True),
        _base.Option("no_redact", "Store secrets as they are (redaction is on by default).", bool, False),
    )

    @classmethod
    def available(cls) -> _base.Availability:
        """Always: it needs nothing beyond ckpt.

        Returns:
            Availability(ok=True).
        """
        return _base.Availability(True, "needs nothing beyond ckpt")

    def mapping(self, **options: Any) -> AgentAdapter:
        """The AgentAdapter these options declare.

        Args:
            **options: memory, plan, tools, events, env (tuples of names), no_redact.

        Returns:
            the AgentAdapter.

        Raises:
            InvalidInputError: the options name no attribute, or one attribute twice.
        """
        o = _base.option_values(self.options, options, "the generic adapter")
        return AgentAdapter(
            memory=_one_or_many(o["memory"]),
            plan=_one_or_many(o["plan"]),
            tools=_one_or_many(o["tools"]),
            events=_one_or_many(o["events"]),
            env=tuple(o["env"]),
            redactor=None if o["no_redact"] else Redactor(),
        )

    def capture(self, target: Any, **options: Any) -> _base.Capture:
        """Capture an agent object (or MODULE:NAME naming one) by the mapping the options give.

        Args:
            target: the agent (a dataclass, pydantic model, object or dict), or "MODULE:NAME".
            **options: as `mapping` takes them.

        Returns:
            Capture of its sections and the redaction labels (no blobs).

        Raises:
            InvalidInputError: an attribute the agent lacks, a value that cannot be stored;
            NotFoundError: MODULE:NAME that does not import.
        """
        doc, labels = self.mapping(**options).capture(_resolve(target))
        return _base.Capture(doc, {}, labels)

    def restore(self, checkpoint: Any, target: Any, **options: Any) -> Any:
        """Write a checkpoint's sections back into an agent by the same mapping.

        Args:
            checkpoint: an opened checkpoint this mapping wrote.
            target: the agent to restore into (or "MODULE:NAME").
            **options: as `mapping` takes them.

        Returns:
            the agent (a new one for frozen dataclasses and pydantic models).

        Raises:
            InvalidInputError: the checkpoint holds no sections this mapping wrote.
        """
        state = checkpoint.state()
        if not isinstance(state, dict):
            raise InvalidInputError(f"checkpoint {checkpoint.hex[:12]} holds a {type(state).__name__}, not sections this adapter wrote")
        return self.mapping(**options).restore_into(state, _resolve(target))


def _resolve(target: Any) -> Any:
    """An object given as MODULE:NAME (from the command line) imported; anything else as it is."""
    if isinstance(target, str) and ":" in target:
        from ckptcli.schema.migrations import import_object

        return import_object(target, "agent")[1]
    return target

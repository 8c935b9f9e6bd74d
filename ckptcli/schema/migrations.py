"""The subject's own state schema: migrations users declare (`@migration(from_=1, to=2)`),
loading them (`load_migrations`: a module, ``module:NAME`` or ``ep:NAME`` in the group
``ckpt.migrations``) and applying a chain of them. docs/migrations.md is the guide (how a
chain is chosen, where migrations come from, checkpoints without a schema version).

Invariants:
- Checkpoints are immutable: migrating one writes a new checkpoint whose parent is the old
  one (`migrate_checkpoint`), or nothing (`migrate_state`, used by `ckpt compat`).
- A migration gets a decoded copy of the state document (it may change it and return it).
- A chain is the shortest path of declared steps; two shortest paths are refused as
  ambiguous, a missing step as a gap; "3" and 3 are the same version.
- A checkpoint without a `schema_version` is refused unless the caller names the version
  to assume (`assume_version`): guessing could corrupt the state without a word."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from ckptcli import plugins
from ckptcli.errors import (
    CkptError,
    ExitCode,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
    UsageError,
    failed_with,
    how_it_failed,
    user_failure,
)

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.format.manifest import Manifest
    from ckptcli.store.repository import Store
    from ckptcli.writer import TakeResult

Version: TypeAlias = int | str
StateFunc: TypeAlias = Callable[[Any], Any]

ENTRY_POINT_GROUP = plugins.MIGRATIONS
EP_PREFIX = "ep:"


class MigrationError(CkptError):
    """No chain of migrations leads from one version to the other (a gap or an
    ambiguity), or a user's migration raised. Exit 1: the checkpoint is fine, the
    project's migrations are not. The checkpoint and the store are left unchanged."""

    exit_code = ExitCode.FAILURE


class AlreadyMigratedError(MigrationError):
    """The checkpoint is already at the target version: nothing to do. Not a failure
    (`ckpt migrate` says so and exits 0); a library caller may treat it as one."""

    def __init__(self, message: str, *, checkpoint: str, version: Version) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint
        self.version = version


# -- versions -------------------------------------------------------------------------
def parse_version(value: object, what: str = "schema version") -> Version:
    """A schema version as ckpt compares it: non-negative integers, and "3" is 3;
    other non-empty strings are names compared exactly."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{what} {value!r} is a boolean", hint="use an integer such as 2")
    if isinstance(value, int):
        if value < 0:
            raise InvalidInputError(f"{what} {value} is negative", hint="use an integer >= 0")
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isdecimal() and text.isascii():
            return int(text)
        if text:
            return text
    raise InvalidInputError(f"{what} {value!r} is not an integer or a name", hint="use an integer such as 2")


def version_of(manifest: Manifest, assume_version: Version | None = None) -> Version:
    """The checkpoint's schema version, or `assume_version` when it has none.

    Raises:
        MigrationError when it has none and no assumption was given.
    """
    if manifest.schema_version is not None:
        return parse_version(manifest.schema_version)
    if assume_version is not None:
        return parse_version(assume_version)
    raise MigrationError(
        "the checkpoint has no schema_version", hint="pass --assume-version N to treat unversioned checkpoints as version N"
    )


# -- declaring migrations -------------------------------------------------------------------
@dataclass(frozen=True)
class Migration:
    """One step of the state schema: `func(state) -> new state`, from one version to another."""

    from_version: Version
    to_version: Version
    func: StateFunc
    description: str = ""

    @property
    def name(self) -> str:
        return f"{self.from_version}->{self.to_version}"

    def __call__(self, state: Any) -> Any:
        return self.func(state)

    def __str__(self) -> str:
        return f"{self.name} ({self.description})" if self.description else self.name


def _describe(func: StateFunc, description: str | None) -> str:
    if description is not None:
        return description
    doc = (getattr(func, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else getattr(func, "__name__", "")


def _make(from_: Version, to: Version, func: StateFunc, description: str | None) -> Migration:
    a, b = parse_version(from_, "from_ version"), parse_version(to, "to version")
    if a == b:
        raise InvalidInputError(f"migration {a}->{b} goes nowhere", hint="from_ and to must differ")
    if not callable(func):
        raise InvalidInputError(f"migration {a}->{b}: {func!r} is not callable")
    return Migration(a, b, func, _describe(func, description))


def migration(*, from_: Version, to: Version, description: str | None = None) -> Callable[[StateFunc], Migration]:
    """Declare a migration at the top level of a module (loaded by `load_migrations`).

    The decorated name becomes a `Migration`, still callable as the function was. The
    description defaults to the first line of the function's docstring.
    """

    def wrap(func: StateFunc) -> Migration:
        return _make(from_, to, func, description)

    return wrap


class MigrationSet:
    """The migrations of one project, and the version its current code reads (`current`)."""

    def __init__(self, migrations: Iterable[Migration] = (), *, current: Version | None = None, source: str = "") -> None:
        self._steps: dict[tuple[Version, Version], Migration] = {}
        self.source = source
        #: the version the current code reads, as declared (see `current`)
        self.declared = parse_version(current, "SCHEMA_VERSION") if current is not None else None
        for m in migrations:
            self.add(m)

    def add(self, m: Migration) -> Migration:
        key = (m.from_version, m.to_version)
        other = self._steps.get(key)
        if other is not None and other is not m:
            raise InvalidInputError(
                f"two migrations {m.name}{self._where()}: {_qualname(other.func)} and {_qualname(m.func)}", hint="keep one"
            )
        self._steps[key] = m
        return m

    def migration(self, *, from_: Version, to: Version, description: str | None = None) -> Callable[[StateFunc], Migration]:
        """Like the module-level `migration`, but registers into this set."""

        def wrap(func: StateFunc) -> Migration:
            return self.add(_make(from_, to, func, description))

        return wrap

    def __iter__(self) -> Iterator[Migration]:
        return iter(sorted(self._steps.values(), key=lambda m: (str(m.from_version).zfill(12), str(m.to_version).zfill(12))))

    def __len__(self) -> int:
        return len(self._steps)

    def versions(self) -> set[Version]:
        return {v for key in self._steps for v in key}

    @property
    def current(self) -> Version | None:
        """The declared current version (SCHEMA_VERSION, or `current=`); without one, the
        highest version any migration mentions when they are all integers; else None."""
        if self.declared is not None:
            return self.declared
        versions = self.versions()
        if versions and all(isinstance(v, int) for v in versions):
            return max(int(v) for v in versions)
        return None

    def _where(self) -> str:
        return f" in {self.source}" if self.source else ""

    def _declared(self) -> str:
        return ", ".join(m.name for m in self) or "none"

    def plan(self, from_version: Version, to_version: Version) -> list[Migration]:
        """The chain of migrations from one version to another: the shortest path of
        declared steps ([] when the versions are equal).

        Raises:
            MigrationError when no chain exists (a gap) or two shortest chains do.
        """
        start, goal = parse_version(from_version), parse_version(to_version)
        if start == goal:
            return []
        outgoing: dict[Version, list[Migration]] = {}
        for m in self:
            outgoing.setdefault(m.from_version, []).append(m)
        # breadth-first, counting the shortest paths into each version: more than one
        # into the goal is an ambiguity the project must resolve, not something to guess
        via: dict[Version, Migration] = {}
        count: dict[Version, int] = {start: 1}
        frontier = [start]
        while frontier and goal not in count:
            reached: dict[Version, int] = {}
            for v in frontier:
                for m in outgoing.get(v, []):
                    if m.to_version in count:
                        continue
                    if m.to_version not in reached:
                        via[m.to_version] = m
                    reached[m.to_version] = reached.get(m.to_version, 0) + count[v]
            count.update(reached)
            frontier = list(reached)
        if goal not in count:
            reachable = sorted((str(v) for v in count if v != start), key=lambda s: s.zfill(12))
            beyond = f"; from {start} the migrations reach {', '.join(reachable)}" if reachable else f"; no migration starts at {start}"
            raise MigrationError(
                f"no migration path from schema version {start} to {goal}{self._where()} (declared: {self._declared()}{beyond})",
                hint=f"add a migration that leads to {goal}",
            )
        if count[goal] > 1:
            raise MigrationError(
                f"{count[goal]} equally short migration paths lead from schema version {start} to {goal}{self._where()} "
                f"(declared: {self._declared()})",
                hint="remove one, or add a direct step that settles it",
            )
        chain = [via[goal]]
        while chain[-1].from_version != start:
            chain.append(via[chain[-1].from_version])
        return chain[::-1]


def _qualname(func: object) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


# -- loading ----------------------------------------------------------------------------------
def cwd_importable() -> None:
    """Put the current directory first on sys.path, as `python -m` does, so a project's
    modules load from its checkout without installing it. For the CLI; a library caller
    decides its own sys.path."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def import_object(spec: str, what: str) -> tuple[Any, Any]:
    """`module` or `module:attribute` -> (module, attribute or None).

    Raises:
        UsageError for a malformed spec; NotFoundError when the module or attribute does
        not exist; InvalidInputError when importing the module raised.
    """
    module_name, sep, attr = spec.partition(":")
    if not module_name or (sep and not attr) or ":" in attr or any(not p.isidentifier() for p in module_name.split(".")):
        raise UsageError(f"{what} {spec!r} is not MODULE or MODULE:NAME", hint="e.g. myapp.migrations or myapp.migrations:REGISTRY")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name) and module_name[len(exc.name) : len(exc.name) + 1] in ("", "."):
            raise NotFoundError(
                f"{what} {spec!r}: no module named {exc.name!r}",
                hint="install the project (pip install -e .) or run ckpt from its directory",
            ) from None
        raise InvalidInputError(f"{what} {spec!r}: importing {module_name} failed: {type(exc).__name__}: {exc}") from exc
    except BaseException as exc:  # the project's own module failed to import (sys.exit too): say so in one line
        if not user_failure(exc):
            raise
        raise InvalidInputError(f"{what} {spec!r}: importing {module_name} failed: {failed_with(exc)}") from exc
    if not attr:
        return module, None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise NotFoundError(f"{what} {spec!r}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return module, obj


def installed_migrations() -> list[str]:
    """Names in the `ckpt.migrations` entry-point group, without importing anything."""
    return plugins.names(plugins.MIGRATIONS)


def load_migrations(spec: str) -> MigrationSet:
    """Load a project's migrations: "module", "module:NAME" or "ep:NAME" (see the module
    docstring). Imports only the module named (for "ep:", only that entry point's).

    Raises:
        UsageError, NotFoundError, InvalidInputError (see import_object); NotFoundError
        for an unknown entry point, listing the installed ones.
    """
    if spec.startswith(EP_PREFIX):
        name = spec[len(EP_PREFIX) :]
        ep = plugins.find(plugins.MIGRATIONS, name)
        if ep is None:
            have = ", ".join(installed_migrations()) or "none"
            raise NotFoundError(f"no migrations entry point {name!r} in group {ENTRY_POINT_GROUP} (installed: {have})")
        return _from_spec(f"{ep.module}:{ep.attr}" if ep.attr else ep.module, source=spec)
    return _from_spec(spec, source=spec)


def _from_spec(spec: str, source: str) -> MigrationSet:
    module, obj = import_object(spec, "migrations")
    declared = getattr(module, "SCHEMA_VERSION", None)
    if obj is None:
        # every Migration bound at the top level (set-registered ones too), each once
        found = {id(v): v for v in vars(module).values() if isinstance(v, Migration)}
        sets = [v for v in vars(module).values() if isinstance(v, MigrationSet)]
        for s in sets:
            found.update({id(m): m for m in s})
        if not found and declared is None and len(sets) != 1:
            raise InvalidInputError(f"migrations {source!r}: {module.__name__} declares no migrations and no SCHEMA_VERSION")
        if declared is None and len(sets) == 1:
            declared = sets[0].current
        return MigrationSet(found.values(), current=declared, source=source)
    if isinstance(obj, MigrationSet):
        return MigrationSet(obj, current=obj.declared if obj.declared is not None else declared, source=source)
    if isinstance(obj, Migration):
        return MigrationSet([obj], current=declared, source=source)
    if isinstance(obj, (list, tuple)) and all(isinstance(m, Migration) for m in obj):
        return MigrationSet(obj, current=declared, source=source)
    raise InvalidInputError(f"migrations {source!r} is a {type(obj).__name__}, not a MigrationSet, a Migration or a list of them")


# -- applying ----------------------------------------------------------------------------------
def migrate_state(state: Any, steps: list[Migration]) -> Any:
    """Apply a chain (from `MigrationSet.plan`) to a state document, in memory.

    Raises:
        MigrationError naming the step (from->to) and the exception when a migration
        raises or returns None; the exception is its __cause__.
    """
    for step in steps:
        try:
            new = step.func(state)
        except BaseException as exc:  # the project's code failed (sys.exit too): name the step, never a traceback
            if not user_failure(exc):
                raise
            raise MigrationError(f"migration {step} {how_it_failed(exc)}", hint="fix the migration; the checkpoint is unchanged") from exc
        if new is None:
            raise MigrationError(f"migration {step} returned None", hint="return the new state document (it may be the argument, changed)")
        state = new
    return state


class _NullSink:
    def put(self, oid: bytes, content: bytes, obj_type: int) -> None:
        pass


def storable_problem(state: Any) -> str | None:
    """Why ckpt could not store `state` (a key that is not a string, a set, ...), or None.
    Encodes it without writing anything."""
    from ckptcli.document import split_document
    from ckptcli.format.values import Encoder

    try:
        _layout, sections = split_document(state)
        enc = Encoder(_NullSink())
        for name, value in sections.items():
            enc.encode(value, where=name)
    except (InvalidInputError, LimitExceededError) as exc:
        return str(exc)
    return None


@dataclass
class PreparedMigration:
    """A checkpoint's migration worked out in memory: nothing written yet."""

    checkpoint: Checkpoint
    start: Version
    target: Version
    steps: list[Migration]
    state: Any  # the migrated state ([] steps: the state as it is)


def prepare_migration(
    store: Store, ref: str, to_version: Version, migrations: MigrationSet, *, assume_version: Version | None = None
) -> PreparedMigration:
    """Open the checkpoint, plan the chain and run it in memory (what `ckpt migrate
    --dry-run` shows, and the first half of migrate_checkpoint).

    Raises:
        InvalidInputError for a checkpoint file (migrations write into a store);
        MigrationError for a gap, an ambiguity or a failing migration.
    """
    from ckptcli.checkpoint import open_checkpoint
    from ckptcli.store.repository import Store

    ck = open_checkpoint(ref, store)
    if not isinstance(ck.source, Store):
        raise InvalidInputError(f"{ref} is a checkpoint file; migrations write into a store", hint=f"import it first: ckpt import {ref}")
    target = parse_version(to_version, "target version")
    start = version_of(ck.manifest, assume_version)
    steps = migrations.plan(start, target)
    state = migrate_state(ck.state(), steps) if steps else ck.state()
    return PreparedMigration(ck, start, target, steps, state)


def migrate_checkpoint(
    store: Store,
    ref: str,
    to_version: Version,
    migrations: MigrationSet,
    *,
    assume_version: Version | None = None,
    message: str | None = None,
    branch: str | None = None,
    move_latest: bool | None = None,
) -> TakeResult:
    """Migrate a checkpoint of `store` to schema version `to_version`: a new checkpoint,
    child of the old one, with the same subject, labels, config hash and document format,
    the migrated state, `schema_version=to_version`, and the old blobs shared as they
    are (not read again). The old checkpoint is not touched.

    Args:
        ref: any checkpoint reference the store resolves (id, prefix, tag, KIND:NAME, ...).
        assume_version: the version of a checkpoint that records none.
        message: the new checkpoint's message (default: "migrate schema 1 -> 3").
        branch: a branch to point at the new checkpoint (none by default).
        move_latest: whether the subject's `latest` moves to the new checkpoint. None
            (the default): only when the migrated checkpoint is the subject's latest (an
            upgrade in place); a migration of an older checkpoint leaves latest on the
            newest state. True: it moves anyway; False: it never does.
    Returns:
        the TakeResult of the new checkpoint.
    Raises:
        MigrationError for a gap, an ambiguity, a failing migration, or a checkpoint that
        is already at `to_version` (AlreadyMigratedError, which says which); InvalidInputError for a checkpoint file (import it
        first) or a migrated state ckpt cannot store; whatever reading the checkpoint
        raises. Nothing is written to the store unless the whole chain succeeded.
    """
    from ckptcli.writer import take

    prep = prepare_migration(store, ref, to_version, migrations, assume_version=assume_version)
    ck, start, target, steps, state = prep.checkpoint, prep.start, prep.target, prep.steps, prep.state
    if not steps:
        raise AlreadyMigratedError(
            f"checkpoint {ck.hex[:12]} is already at schema version {target}; nothing to migrate", checkpoint=ck.hex, version=target
        )
    m = ck.manifest
    carry = {"blobs": ck.carried("blobs")} if "blobs" in m.sections else None
    try:
        return take(
            store,
            state,
            subject=m.subject,
            parents=[ck.hex],
            labels=dict(m.labels),
            message=message if message is not None else f"migrate schema {start} -> {target}",
            schema_version=target,
            config_hash=m.config_hash,
            doc_format=str(m.layout.get("format", "python")),
            carry=carry,
            branch=branch,
            move_latest=move_latest,
            reason=f"migrate: {ck.hex[:12]} schema {start} -> {target}",
        )
    except (InvalidInputError, LimitExceededError) as exc:
        exc.message = f"after migration {' '.join(s.name for s in steps)}: {exc.message}"
        raise

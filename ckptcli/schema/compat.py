"""Do old checkpoints still restore under the current code? The check behind `ckpt compat`.

Given checkpoints (fixture files made by `ckpt export`, or a store), the project's
migrations (ckptcli.schema.migrations), the schema version its code reads (the target)
and optionally a validator (the project's function that loads a state document into its
current objects and raises when it cannot), each checkpoint is as-is, after-migration
or incompatible, with a reason; docs/ci.md lists the verdicts and the kinds of problem.
Migrations run in memory only; nothing is written to the fixtures or the store.

The validator was called the adapter before 0.3: `load_adapter`, `Adapter` and
`CompatCheck(adapter=...)` still work, with a DeprecationWarning (remove in 0.4). The
problem kind `adapter-rejected` and the reasons' wording are output, and stay.
"""

from __future__ import annotations

import re
import time
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptcli.errors import (
    CkptError,
    ExitCode,
    InvalidInputError,
    NotFoundError,
    StoreIOError,
    UnsupportedVersionError,
    UsageError,
    how_it_failed,
    user_failure,
)
from ckptcli.schema.migrations import (
    MigrationError,
    MigrationSet,
    Version,
    import_object,
    migrate_state,
    parse_version,
    storable_problem,
    version_of,
)

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.store.repository import Store

AS_IS = "as-is"
AFTER_MIGRATION = "after-migration"
INCOMPATIBLE = "incompatible"

#: The project's function that loads a state document into its current objects, raising when it cannot.
Validator = Callable[[Any], Any]
Adapter = Validator  # the name before 0.3; remove in 0.4


class CompatFailed(CkptError):  # noqa: N818 - a verdict, like VerifyFailed
    """`ckpt compat` found incompatible checkpoints; the report has been printed."""

    exit_code = ExitCode.FAILURE


@dataclass
class CompatResult:
    """The verdict on one checkpoint."""

    name: str  # the file's path, or "<short id> <subject>" in a store
    status: str  # AS_IS, AFTER_MIGRATION or INCOMPATIBLE
    checkpoint: str | None = None  # id (hex), when it could be read
    subject: str | None = None
    schema_version: Version | None = None
    steps: list[str] = field(default_factory=list)  # the migrations applied, e.g. ["1->2", "2->3"]
    problem: str | None = None  # the kind of incompatibility (see the module docstring)
    reason: str = ""
    seconds: float = 0.0
    cause: BaseException | None = field(default=None, repr=False, compare=False)  # the project's exception, for CKPT_DEBUG

    @property
    def ok(self) -> bool:
        return self.status != INCOMPATIBLE

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "checkpoint": self.checkpoint,
            "subject": self.subject,
            "schema_version": self.schema_version,
            "steps": self.steps,
            "problem": self.problem,
            "reason": self.reason,
        }


@dataclass
class CompatReport:
    target: Version | None
    results: list[CompatResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def counts(self) -> dict[str, int]:
        out = {AS_IS: 0, AFTER_MIGRATION: 0, INCOMPATIBLE: 0}
        for r in self.results:
            out[r.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "target": self.target, "counts": self.counts(), "checkpoints": [r.to_dict() for r in self.results]}

    def junit(self) -> bytes:
        """A JUnit XML report: one testcase per checkpoint, a <failure> with the reason
        for each incompatible one (what GitHub, GitLab and Jenkins read)."""
        counts = self.counts()
        total = f"{sum(r.seconds for r in self.results):.3f}"
        attrs = {
            "name": "ckpt compat",
            "tests": str(len(self.results)),
            "failures": str(counts[INCOMPATIBLE]),
            "errors": "0",
            "skipped": "0",
            "time": total,
        }
        root = ET.Element("testsuites", attrs)
        suite = ET.SubElement(root, "testsuite", attrs)
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", {"name": "target_schema_version", "value": "" if self.target is None else _xml(str(self.target))})
        for r in self.results:
            case = ET.SubElement(suite, "testcase", {"classname": "ckpt.compat", "name": _xml(r.name), "time": f"{r.seconds:.3f}"})
            if r.ok:
                ET.SubElement(case, "system-out").text = _xml(describe(r))
            else:
                failure = ET.SubElement(case, "failure", {"type": _xml(r.problem or "incompatible"), "message": _xml(r.reason)})
                failure.text = _xml(describe(r))
        ET.indent(root)
        data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
        return data + b"\n"

    def write_junit(self, path: Path) -> None:
        try:
            path.write_bytes(self.junit())
        except OSError as exc:
            raise StoreIOError(f"cannot write the JUnit report {path}: {exc.strerror}") from None


# what XML 1.0 cannot hold (control characters but tab and newlines, surrogates, U+FFFE/U+FFFF)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml(text: str) -> str:
    """`text` with each character XML 1.0 cannot hold written as its escape (`\\x1b`,
    `\\udcff`), so that a file name or message with control characters still makes a
    well-formed JUnit report (ElementTree escapes <, & and quotes itself)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def describe(r: CompatResult) -> str:
    """One line for a person: what was found and why."""
    who = f"checkpoint {r.checkpoint[:12]} of {r.subject}, schema version {r.schema_version}" if r.checkpoint else "checkpoint"
    if r.status == AS_IS:
        return f"{r.name}: {who}: compatible as-is"
    if r.status == AFTER_MIGRATION:
        return f"{r.name}: {who}: compatible after migration {', '.join(r.steps)}"
    return f"{r.name}: {who}: incompatible: {r.reason}"


def load_validator(spec: str) -> Validator:
    """The project's validator, "module:function": called with a state document, it loads
    it into the current code's objects and raises when it cannot.

    Raises:
        UsageError for a spec without ":NAME"; NotFoundError, InvalidInputError as
        ckptcli.schema.migrations.import_object; InvalidInputError when it is not callable.
    """
    if ":" not in spec:
        raise UsageError(f"adapter {spec!r} is not MODULE:FUNCTION", hint="e.g. myapp.state:load")
    _module, obj = import_object(spec, "adapter")
    if not callable(obj):
        raise InvalidInputError(f"adapter {spec!r} is a {type(obj).__name__}, not a function")
    return obj  # type: ignore[no-any-return]


def load_adapter(spec: str) -> Validator:
    """Deprecated name of load_validator (before 0.3); remove in 0.4."""
    warnings.warn("ckptcli.schema.compat.load_adapter is now load_validator", DeprecationWarning, stacklevel=2)
    return load_validator(spec)


@dataclass
class CompatCheck:
    """What checkpoints are checked against: the migrations, the target version, the validator.
    (`adapter=` is the deprecated name of `validator=`.)"""

    migrations: MigrationSet | None = None
    target: Version | None = None
    validator: Validator | None = None
    assume_version: Version | None = None
    adapter: InitVar[Validator | None] = None

    def __post_init__(self, adapter: Validator | None) -> None:
        if adapter is not None:
            warnings.warn("CompatCheck(adapter=...) is now CompatCheck(validator=...)", DeprecationWarning, stacklevel=3)
            if self.validator is not None and self.validator is not adapter:
                raise UsageError("CompatCheck got both validator= and adapter= (its old name)", hint="give validator= alone")
            self.validator = adapter
        if self.target is None and self.migrations is not None:
            self.target = self.migrations.current
            if self.target is None:
                raise UsageError(
                    f"migrations {self.migrations.source!r} declare no SCHEMA_VERSION and their versions are not all integers",
                    hint="pass --target N",
                )
        if self.target is not None:
            self.target = parse_version(self.target, "target version")
        if self.assume_version is not None:
            self.assume_version = parse_version(self.assume_version, "assumed version")

    # -- one checkpoint ---------------------------------------------------------------
    def checkpoint(self, ck: Checkpoint, name: str) -> CompatResult:
        start = time.perf_counter()
        r = CompatResult(name, INCOMPATIBLE, checkpoint=ck.hex, subject=str(ck.manifest.subject), schema_version=ck.manifest.schema_version)
        self._classify(ck, r)
        r.seconds = time.perf_counter() - start
        return r

    def _classify(self, ck: Checkpoint, r: CompatResult) -> None:
        try:
            state = ck.state()
        except CkptError as exc:
            _unreadable(r, exc)
            return
        if self.target is not None:
            try:
                version = version_of(ck.manifest, self.assume_version)
            except (MigrationError, InvalidInputError) as exc:
                r.problem, r.reason = "no-schema-version", str(exc)
                return
            r.schema_version = version
            if version != self.target:
                migrations = self.migrations if self.migrations is not None else MigrationSet()
                try:
                    steps = migrations.plan(version, self.target)
                except MigrationError as exc:
                    r.problem, r.reason = "no-migration-path", str(exc)
                    return
                r.steps = [s.name for s in steps]
                try:
                    state = migrate_state(state, steps)
                except MigrationError as exc:
                    # the message without the hint: "the checkpoint is unchanged" goes without saying here
                    r.problem, r.reason, r.cause = "migration-failed", exc.message, exc.__cause__
                    return
                problem = storable_problem(state)
                if problem is not None:
                    r.problem, r.reason = "unstorable", f"after migration {', '.join(r.steps)}, ckpt cannot store the state: {problem}"
                    return
        if self.validator is not None:
            try:
                self.validator(state)
            except BaseException as exc:  # the project's validator refused the state (sys.exit too): that is the verdict
                if not user_failure(exc):
                    raise
                after = f"after migration {', '.join(r.steps)}, " if r.steps else ""
                r.problem, r.reason, r.cause = "adapter-rejected", f"{after}the adapter {how_it_failed(exc)}", exc
                return
        r.status = AFTER_MIGRATION if r.steps else AS_IS

    # -- sources ------------------------------------------------------------------------
    def file(self, path: Path, name: str | None = None) -> CompatResult:
        """A checkpoint file; one that cannot be opened is incompatible, not an error."""
        from ckptcli.checkpoint import Checkpoint
        from ckptcli.store.single import CheckpointFile

        label = name if name is not None else str(path)
        start = time.perf_counter()
        try:
            f = CheckpointFile(path)
        except CkptError as exc:
            r = CompatResult(label, INCOMPATIBLE)
            _unreadable(r, exc)
            r.seconds = time.perf_counter() - start
            return r
        try:
            damage = f.check_whole_file()
            if damage:
                r = CompatResult(
                    label, INCOMPATIBLE, checkpoint=f.id.hex(), subject=str(f.manifest().subject), problem="unreadable", reason=damage
                )
                r.schema_version = f.manifest().schema_version
                r.seconds = time.perf_counter() - start
                return r
            return self.checkpoint(Checkpoint(f, f.id), label)
        finally:
            f.close()

    def files(self, paths: Iterable[Path]) -> list[CompatResult]:
        return [self.file(p) for p in find_checkpoint_files(paths)]

    def store(self, store: Store, refs: list[str] | None = None, subject: str | None = None) -> list[CompatResult]:
        """Checkpoints of a store: the ones `refs` name, else all (of `subject`), newest first.

        Raises:
            NotFoundError when a ref does not resolve.
        """
        from ckptcli.checkpoint import Checkpoint
        from ckptcli.listing import ListFilter, list_checkpoints

        if refs:
            ids = list(dict.fromkeys(store.resolve(ref) for ref in refs))
        else:
            ids = [cid for cid, _summary in list_checkpoints(store, ListFilter(subject=subject))]
        out = []
        for cid in ids:
            try:
                ck = Checkpoint(store, cid)
            except CkptError as exc:
                r = CompatResult(cid.hex()[:12], INCOMPATIBLE, checkpoint=cid.hex())
                _unreadable(r, exc)
                out.append(r)
                continue
            out.append(self.checkpoint(ck, f"{ck.hex[:12]} {ck.manifest.subject}"))
        return out

    def report(self, results: Iterable[CompatResult]) -> CompatReport:
        return CompatReport(self.target, list(results))


def _unreadable(r: CompatResult, exc: CkptError) -> None:
    r.problem = "format-version" if isinstance(exc, UnsupportedVersionError) else "unreadable"
    r.reason = str(exc)


def find_checkpoint_files(paths: Iterable[Path]) -> list[Path]:
    """Files as given, and every *.ckpt under a directory (sorted, recursively): a FIFO,
    a device or a link that is found there is listed too (and found no checkpoint file
    when checked), never skipped without a word.

    Raises:
        NotFoundError for a path that does not exist.
    """
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*.ckpt") if q.is_symlink() or not q.is_dir()))
        elif p.exists():
            out.append(p)
        else:
            raise NotFoundError(f"{p} does not exist")
    return list(dict.fromkeys(out))

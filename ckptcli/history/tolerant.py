"""Tolerant comparisons: is this state the same apart from declared noise? (`ckpt diff` and
`ckpt replay --check` with --ignore-order, --significant-digits, --tolerance and
--exclude-path: docs/cli.md.) `ckptcli.history.diff` answers "what exactly changed"; this
module answers the looser question with deepdiff, on the two decoded states.

Invariants: equality is the exact diff's (NaN equals NaN, 1 and 1.0 differ); integers are
never rounded through a float; the numbers deepdiff reports are judged here
(`numbers_equal`), not by its own epsilon. It is a second pass: when the exact diff finds
nothing, nothing is decoded. The result is a `DiffResult` whose "patch" lists the
differences found (with ignore_order, removed items have A's indices, added ones B's);
blobs are compared exactly. deepdiff is imported by this module only."""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ckptcli.checkpoint import Checkpoint
from ckptcli.errors import UsageError
from ckptcli.format.manifest import EXT_PREFIX, LAYOUT_DOCUMENT
from ckptcli.history.change import Change, DiffResult, PathPart, pointer
from ckptcli.history.diff import section_of
from ckptcli.history.stateat import state_at

__all__ = ["Tolerance", "deepdiff_changes", "same_apart_from_noise", "tolerant_diff"]

_ADD = ("dictionary_item_added", "iterable_item_added")
_REMOVE = ("dictionary_item_removed", "iterable_item_removed")
_REPLACE = ("values_changed", "type_changes")


@dataclass(frozen=True)
class Tolerance:
    """What counts as noise. The default tolerates nothing (`active` is False)."""

    ignore_order: bool = False
    significant_digits: int | None = None
    tolerance: float | None = None
    exclude: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.ignore_order or self.significant_digits is not None or self.tolerance is not None or bool(self.exclude)

    def patterns(self) -> list[re.Pattern[str]]:
        out = []
        for p in self.exclude:
            try:
                out.append(re.compile(p))
            except re.error as exc:
                raise UsageError(
                    f"--exclude-path {p!r} is not a regular expression: {exc}",
                    hint="e.g. --exclude-path '/ts$' or --exclude-path '^/memory/request_id'",
                ) from None
        return out

    def check(self) -> None:
        """Raise UsageError for values no comparison can use."""
        if self.significant_digits is not None and self.significant_digits < 0:
            raise UsageError(f"--significant-digits must be 0 or more, not {self.significant_digits}")
        if self.tolerance is not None and not self.tolerance >= 0:
            raise UsageError(f"--tolerance must be a number of 0 or more, not {self.tolerance}")
        self.patterns()


def deepdiff_changes(old: Any, new: Any, tol: Tolerance) -> list[tuple[str, tuple[PathPart, ...], Any, Any]]:
    """deepdiff's differences between two decoded values as (op, path, old, new), sorted by
    path; op is "add", "remove" or "replace"."""
    try:
        from deepdiff import DeepDiff
    except ImportError:  # pragma: no cover - deepdiff is a dependency of ckptcli
        raise UsageError(
            "the tolerant comparison options need deepdiff, which this installation lacks",
            hint="reinstall ckptcli (it depends on deepdiff)",
        ) from None
    # NaN equals NaN, as in ckpt's own equality (api.states_equal). Numbers are compared
    # here, not by deepdiff: its math_epsilon is math.isclose's (a relative tolerance of
    # 1e-9 on top of EPS, so 1e20 and 1.00000000001e20 were equal even at --tolerance 0),
    # and its significant_digits formats integers as floats (10**30 and 10**30+1 equal)
    # and fails on infinity at 0 digits
    kwargs: dict[str, Any] = {"ignore_order": tol.ignore_order, "view": "tree", "verbose_level": 2, "ignore_nan_inequality": True}
    a, b = old, new
    if tol.ignore_order and (tol.significant_digits is not None or tol.tolerance is not None):
        # deepdiff pairs unordered items by hash: items are paired with their floats rounded
        # (to N digits, or to EPS's decimal digits), and paired numbers compared below
        digits = tol.significant_digits if tol.significant_digits is not None else _digits(tol.tolerance or 0.0)
        a, b = _rounded(old, digits), _rounded(new, digits)
    logging.getLogger("deepdiff").setLevel(logging.ERROR)  # its advice is for its own users, not ckpt's
    tree = DeepDiff(a, b, **kwargs)
    out: list[tuple[str, tuple[PathPart, ...], Any, Any]] = []
    for report, levels in tree.items():
        if report in _ADD:
            op = "add"
        elif report in _REMOVE:
            op = "remove"
        elif report in _REPLACE:
            op = "replace"
        else:  # nothing else can come out of two JSON values compared this way
            op = "replace"
        for level in levels:
            path = tuple(level.path(output_format="list"))
            # the values as stored (not as rounded for pairing)
            t1 = None if op == "add" else _at_path(old, path, level.t1)
            t2 = None if op == "remove" else _at_path(new, tuple(level.path(output_format="list", use_t2=True)), level.t2)
            if op == "replace" and numbers_equal(t1, t2, tol):
                continue
            out.append((op, path, t1, t2))
    out.sort(key=lambda c: [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in c[1]])
    return out


def same_apart_from_noise(a: Any, b: Any, tol: Tolerance) -> bool:
    """Whether two decoded values differ only in `tol`'s noise (exclusions searched in
    JSON Pointers from the values' root, e.g. "/result/ts")."""
    tol.check()
    patterns = tol.patterns()
    return all(
        any(p.search(pointer(_json_path(b if op != "remove" else a, path))) for p in patterns)
        for op, path, _o, _n in deepdiff_changes(a, b, tol)
    )


def _digits(eps: float) -> int:
    """Decimal digits after the point that resolve `eps`: 1e-6 -> 6, 0.05 -> 2."""
    if eps <= 0:
        return 17
    return max(0, min(17, math.ceil(-math.log10(eps) - 1e-9)))


def numbers_equal(a: Any, b: Any, tol: Tolerance) -> bool:
    """Whether two numbers are equal apart from `tol`'s noise: two floats that round to the
    same `significant_digits` digits after the point, or two ints or two floats that differ
    by at most `tolerance`, exactly (whatever their size: no relative tolerance). An int and
    a float always differ, as in the exact diff; integers are never rounded."""
    if type(a) is not type(b) or type(a) not in (int, float):
        return False
    if a == b or (type(a) is float and math.isnan(a) and math.isnan(b)):
        return True
    if tol.significant_digits is not None and type(a) is float and round(a, tol.significant_digits) == round(b, tol.significant_digits):
        return True
    if tol.tolerance is not None and (type(a) is int or (math.isfinite(a) and math.isfinite(b))):
        return math.isinf(tol.tolerance) or abs(Fraction(a) - Fraction(b)) <= Fraction(tol.tolerance)
    return False


def _rounded(value: Any, digits: int) -> Any:
    """`value` with every finite float rounded to `digits` after the point (-0.0 as 0.0)."""
    if type(value) is float:
        return round(value, digits) + 0.0 if math.isfinite(value) else value
    if type(value) is dict:
        return {k: _rounded(v, digits) for k, v in value.items()}
    if type(value) is list:
        return [_rounded(v, digits) for v in value]
    return value


def _at_path(doc: Any, path: tuple[PathPart, ...], default: Any) -> Any:
    """The value at `path` in `doc`, or `default` (the value deepdiff reports) if none."""
    try:
        for p in path:
            doc = doc[p]
    except (KeyError, IndexError, TypeError):
        return default
    return doc


def _section_prefix(section: str, layout: dict[str, Any]) -> tuple[PathPart, ...]:
    if layout.get("kind") == LAYOUT_DOCUMENT:
        return ()
    if section.startswith(EXT_PREFIX):
        return ("ext", section[len(EXT_PREFIX) :])
    return (section,)


def _json_path(doc: Any, path: tuple[PathPart, ...]) -> tuple[PathPart, ...]:
    """`path` as the JSON view spells it: through "$map" where a map's only key starts
    with "$" (ckptcli.format.jsonview)."""
    out: list[PathPart] = []
    for p in path:
        if type(doc) is dict and len(doc) == 1 and str(next(iter(doc))).startswith("$"):
            out.append("$map")
        out.append(p)
        if type(doc) is dict:
            doc = doc.get(p)
        elif type(doc) is list and isinstance(p, int) and 0 <= p < len(doc):
            doc = doc[p]
        else:
            doc = None
    return tuple(out)


def _at(doc: Any, path: tuple[PathPart, ...]) -> Any:
    for p in path:
        if type(doc) is dict and p in doc:
            doc = doc[p]
        else:
            return None
    return doc


def tolerant_diff(a: Checkpoint, b: Checkpoint, exact: DiffResult, tol: Tolerance, *, snapshot: bool = False) -> DiffResult:
    """`exact` (ckptcli.history.diff.diff_checkpoints(a, b)) compared again with `tol`'s noise
    ignored: the states at the two checkpoints (their tails applied) as the exact diff
    compares them, or with `snapshot` their stored sections. Returns `exact` itself when it found no change; otherwise a DiffResult of
    deepdiff's differences that survive the exclusions, and `exact`'s blob changes."""
    tol.check()
    if exact.same or not any(not c.structural for c in exact.changes):
        return exact
    patterns = tol.patterns()
    layout = b.manifest.layout
    prefix = _section_prefix(exact.section, layout) if exact.section is not None else ()
    doc_a, doc_b = (state_at(ck, snapshot=snapshot, lenient=True).document() for ck in (a, b))
    changes: list[Change] = []
    for op, rel, o, n in deepdiff_changes(_at(doc_a, prefix), _at(doc_b, prefix), tol):
        full = prefix + rel
        ptr = pointer(_json_path(doc_a if op == "remove" else doc_b, full))
        if any(p.search(ptr) for p in patterns):
            continue
        section, inside = section_of(full, a.manifest.layout if op == "remove" else layout)
        changes.append(Change(op, inside, o, n, section, ptr))
    return DiffResult(exact.a, exact.b, changes, exact.blobs, exact.section)

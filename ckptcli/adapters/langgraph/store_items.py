"""The items of LangGraph's memory store (`CkptStore`) as each process holds them
(`Rec`), and what the store does with them in memory: checking what is put (JSON-like
values, within the limits), matching filters and namespaces as InMemoryStore does, and
ranking a semantic search. formats/langgraph-store.md is the format."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import util
from typing import Any

import msgpack
from langgraph.store.base import InvalidNamespaceError, ListNamespacesOp, MatchCondition, PutOp, SearchItem, SearchOp

from ckptcli.adapters.langgraph.store_log import MAX_TTL_MINUTES
from ckptcli.errors import InvalidInputError, LimitExceededError

__all__ = [
    "MAX_DEPTH", "MAX_VALUE_BYTES", "NS", "Items", "NsKey", "Rec", "compare", "cosine", "does_match", "dt",
    "encode_value", "expiry", "list_namespaces", "search", "validate_filter", "validate_put",
]  # fmt: skip

#: the largest value one item may hold (msgpack-encoded)
MAX_VALUE_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 200
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
NS = 1_000_000_000
_FILTER_OPS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")

NsKey = tuple[tuple[str, ...], str]


@dataclass(slots=True)
class Rec:
    """One item as this process holds it: the value (decoded, never handed out) and its
    msgpack bytes (decoded again for every result, so a caller's edits stay its own)."""

    value: dict[str, Any]
    raw: bytes
    created: int
    updated: int
    ttl: float | None
    expires: int | None
    seq: int
    vectors: dict[str, list[float]] | None

    def live(self, now: int) -> bool:
        return self.expires is None or self.expires > now


def dt(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / NS, UTC)


def expiry(t: int, ttl: float) -> int:
    """When an item with `ttl` minutes, written or read at `t` (ns), expires: at most
    2**63-1 (a log holds 64-bit times; a reader refuses more)."""
    return min(t + int(ttl * 60 * NS), 2**63 - 1)


def _where(ns: tuple[str, ...], key: str) -> str:
    return f"item {key!r} of namespace {ns!r}"


def _is_unicode(s: str) -> bool:
    """Whether `s` can be written as UTF-8 (it holds no lone surrogate)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_json(v: Any, where: str, depth: int = 0) -> None:
    """Refuse what is not a JSON value (dict with string keys, list, str, int, float,
    bool, None), naming where it is."""
    t = type(v)
    if v is None or t is bool or t is float or t is str:
        if t is str and not _is_unicode(v):
            raise InvalidInputError(f"{where}: string is not valid Unicode (lone surrogate)")
        return
    if t is int:
        if not _INT_MIN <= v <= _INT_MAX:
            raise InvalidInputError(f"{where}: integer {v} does not fit in 64 bits", hint="store it as a string")
        return
    if depth >= MAX_DEPTH:
        raise LimitExceededError(f"{where}: nesting is deeper than {MAX_DEPTH} levels")
    if t is dict:
        for k, x in v.items():
            if type(k) is not str:
                raise InvalidInputError(f"{where}: key {k!r} is a {type(k).__name__}; keys must be strings")
            if not _is_unicode(k):
                raise InvalidInputError(f"{where}: key {k!r} is not valid Unicode (lone surrogate)")
            _check_json(x, f"{where}.{k}", depth + 1)
        return
    if t is list or t is tuple:
        for i, x in enumerate(v):
            _check_json(x, f"{where}[{i}]", depth + 1)
        return
    raise InvalidInputError(
        f"{where} is a {t.__name__}, not a JSON value",
        hint="store dicts, lists, strings, numbers, booleans and None (convert it, e.g. a datetime to an ISO string)",
    )


def encode_value(ns: tuple[str, ...], key: str, value: Any) -> tuple[dict[str, Any], bytes]:
    where = _where(ns, key)
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where}: the value is a {type(value).__name__}, not a dict", hint="store a dict, e.g. {'text': ...}")
    d = dict(value)
    _check_json(d, f"{where}: value")
    raw: bytes = msgpack.packb(d, use_bin_type=True)
    if len(raw) > MAX_VALUE_BYTES:
        raise LimitExceededError(
            f"{where}: the value takes {len(raw)} bytes, more than the {MAX_VALUE_BYTES} an item may hold",
            hint="split it into several items, or keep large data in files and store their paths",
        )
    return msgpack.unpackb(raw, raw=False), raw


def validate_put(op: PutOp) -> None:
    if not op.namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    if op.namespace[0] == "langgraph":
        raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {op.namespace}')
    if type(op.key) is not str:
        raise InvalidInputError(f"the key of an item of namespace {op.namespace!r} is a {type(op.key).__name__}, not a string")
    if not (_is_unicode(op.key) and all(_is_unicode(label) for label in op.namespace)):
        raise InvalidInputError(f"{_where(op.namespace, op.key)}: its key or a namespace label is not valid Unicode (lone surrogate)")
    if op.ttl is not None and (isinstance(op.ttl, bool) or not isinstance(op.ttl, (int, float)) or not 0 < op.ttl <= MAX_TTL_MINUTES):
        raise InvalidInputError(
            f"{_where(op.namespace, op.key)}: ttl must be a number of minutes from 0 to {MAX_TTL_MINUTES} (a "
            f"century) or None, not {op.ttl!r}"
        )
    if op.index is not None and op.index is not False and not (isinstance(op.index, list) and all(type(p) is str for p in op.index)):
        raise InvalidInputError(f"{_where(op.namespace, op.key)}: index must be False, None or a list of field paths, not {op.index!r}")


def validate_filter(flt: Any) -> None:
    if flt is None:
        return
    if not isinstance(flt, dict):
        raise InvalidInputError(f"a search filter must be a dict, not a {type(flt).__name__}")
    for k, v in flt.items():
        if type(k) is not str:
            raise InvalidInputError(f"search filter key {k!r} is not a string")
        if isinstance(v, dict) and any(type(o) is str and o.startswith("$") for o in v):
            for o in v:
                if o not in _FILTER_OPS:
                    raise InvalidInputError(
                        f"search filter on {k!r}: unsupported operator {o!r}", hint=f"use one of {', '.join(_FILTER_OPS)}"
                    )


# -- matching, as InMemoryStore does --------------------------------------------------------


def does_match(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = cond.path
    if len(ns) < len(path):
        return False
    if cond.match_type == "prefix":
        pairs = zip(ns, path, strict=False)
    elif cond.match_type == "suffix":
        pairs = zip(reversed(ns), reversed(path), strict=False)
    else:
        raise InvalidInputError(f"unsupported namespace match type {cond.match_type!r}", hint="use 'prefix' or 'suffix'")
    return all(p == "*" or k == p for k, p in pairs)


def compare(item_value: Any, filter_value: Any) -> bool:
    if isinstance(filter_value, dict):
        if any(k.startswith("$") for k in filter_value):
            return all(_apply_operator(item_value, o, ov) for o, ov in filter_value.items())
        if not isinstance(item_value, dict):
            return False
        return all(compare(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, (list, tuple)):
        return (
            isinstance(item_value, (list, tuple))
            and len(item_value) == len(filter_value)
            and all(compare(i, f) for i, f in zip(item_value, filter_value, strict=False))
        )
    return bool(item_value == filter_value)


def _num(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _apply_operator(value: Any, op: str, op_value: Any) -> bool:
    if op == "$eq":
        return bool(value == op_value)
    if op == "$ne":
        return bool(value != op_value)
    a, b = _num(value), _num(op_value)
    if a is None or b is None:  # a value that is no number matches no comparison
        return False
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    return a <= b  # $lte (operators are checked before the search runs)


@functools.lru_cache(maxsize=1)
def _have_numpy() -> bool:
    return util.find_spec("numpy") is not None


def cosine(x: list[float], ys: list[list[float]]) -> list[float]:
    """Cosine similarity of `x` with each of `ys`, computed as InMemoryStore computes it."""
    if not ys:
        return []
    if _have_numpy():
        np = importlib.import_module("numpy")  # optional, as for InMemoryStore
        xa, ya = np.array(x), np.array(ys)
        xn, yn = np.linalg.norm(xa), np.linalg.norm(ya, axis=1)
        mask = yn != 0
        sims = np.zeros_like(yn)
        sims[mask] = np.dot(ya[mask], xa) / (yn[mask] * xn)
        return [float(s) for s in sims.tolist()]
    out = []
    for y in ys:
        dot = sum(a * b for a, b in zip(x, y, strict=False))
        n1 = sum(a * a for a in x) ** 0.5
        n2 = sum(a * a for a in y) ** 0.5
        out.append(dot / (n1 * n2) if n1 > 0 and n2 > 0 else 0.0)
    return out


Items = dict[tuple[str, ...], dict[str, Rec]]  # namespace -> key -> item


def search(data: Items, op: SearchOp, now: int, query_vecs: dict[str, list[float]], embeddings: bool) -> list[SearchItem]:
    """The items of `data` a search op finds, ranked by `query_vecs` when `embeddings`."""
    prefix = op.namespace_prefix
    n = len(prefix)
    scoring = bool(op.query) and embeddings
    candidates: list[tuple[tuple[str, ...], str, Rec]] = []
    for ns, recs in data.items():
        if ns[:n] != prefix:
            continue
        for key, r in recs.items():
            if not r.live(now):
                continue
            if op.filter and not all(compare(r.value.get(k), fv) for k, fv in op.filter.items()):
                continue
            candidates.append((ns, key, r))

    def item(c: tuple[tuple[str, ...], str, Rec], score: float | None = None) -> SearchItem:
        ns, key, r = c
        return SearchItem(ns, key, msgpack.unpackb(r.raw, raw=False), dt(r.created), dt(r.updated), score)

    qvec = query_vecs.get(op.query) if scoring and op.query else None
    if qvec is None or not candidates:
        return [item(c) for c in candidates[op.offset : op.offset + op.limit]]
    flat: list[tuple[tuple[str, ...], str, Rec]] = []
    vecs: list[list[float]] = []
    scoreless = []
    for c in candidates:
        vs = list(c[2].vectors.values()) if c[2].vectors else []
        for v in vs:
            flat.append(c)
            vecs.append(v)
        if not vs:
            scoreless.append(c)
    scores = cosine(qvec, vecs)
    ranked = sorted(zip(scores, flat, strict=True), key=lambda x: x[0], reverse=True)
    seen: set[NsKey] = set()
    kept: list[tuple[float | None, tuple[tuple[str, ...], str, Rec]]] = []
    for score, c in ranked:  # each item's best vector, as InMemoryStore pools them
        k = (c[0], c[1])
        if k in seen:
            continue
        ix = len(seen)
        seen.add(k)
        if ix >= op.offset + op.limit:
            break
        if ix < op.offset:
            continue
        kept.append((score, c))
    if scoreless and len(kept) < op.limit:
        kept.extend((None, c) for c in scoreless[: op.limit - len(kept)])
    return [item(c, float(s) if s is not None else None) for s, c in kept]


def list_namespaces(data: Items, op: ListNamespacesOp, now: int) -> list[tuple[str, ...]]:
    namespaces = [ns for ns, recs in data.items() if any(r.live(now) for r in recs.values())]
    if op.match_conditions:
        namespaces = [ns for ns in namespaces if all(does_match(c, ns) for c in op.match_conditions)]
    if op.max_depth is not None:
        namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
    else:
        namespaces = sorted(namespaces)
    return namespaces[op.offset : op.offset + op.limit]

"""State documents: `split_document` maps one onto sections and `join_document` back,
`read_document` parses one (JSON or msgpack), `write_value` writes a decoded one, and
`write_document` writes a checkpoint's state (JSON, msgpack, or the JSON view `ckpt cat`
prints) straight from its objects, without holding the decoded state.

Invariants of `write_document` (tests/test_docstream.py; why: docs/design.md, "Bounded
decoding"): its bytes are exactly those of serializing the decoded value; peak memory is
O(largest object + nesting depth + SMALL_BYTES + PRESIZE_BYTES), not O(state); every value
written is charged to the streaming budget (`Budget.streaming()`), and an output the
`Sizer` sizes over that budget is refused before the first byte. A document to write is a
*skeleton*: a dict of skeletons, a `Section` (a section's encoded root), or any other value."""

from __future__ import annotations

import base64
import codecs
import json
import math
import re
import struct
from collections.abc import Iterator
from typing import IO, Any, NamedTuple

import msgpack

from ckptcli.errors import CkptError, CorruptError, InvalidInputError, LimitExceededError
from ckptcli.format import framing, limits
from ckptcli.format.encode import DEPTH_HINT
from ckptcli.format.jsonview import to_json
from ckptcli.format.manifest import DOC_SECTION_KEYS, EXT_PREFIX, LAYOUT_DOCUMENT, LAYOUT_SECTIONS, NAMESPACE_RE
from ckptcli.format.values import (
    EXT_BYTES,
    EXT_LIST,
    EXT_MAP,
    EXT_REF,
    EXT_STR,
    Budget,
    Decoder,
    Ext,
    ObjectSource,
    _check_key,
    check_tree_node,
    deep_recursion,
    packable,
    parse_tree_node,
    unpack_ev,
)

#: A value that decodes to at most this many bytes (and SMALL_ITEMS values) is decoded
#: and serialized whole; larger ones are streamed.
SMALL_BYTES = 1024 * 1024
SMALL_ITEMS = 65536
#: The Sizer reads at most this much node content (kept for the writer) before giving up.
PRESIZE_BYTES = 8 * 1024 * 1024
_FLUSH = 1024 * 1024
#: What json.dumps(ensure_ascii=False) escapes in a string: control characters, '"' and '\\'.
_NEEDS_ESCAPE = re.compile(rb'[\x00-\x1f"\\]')


class Section(NamedTuple):
    """A section's encoded root, in a skeleton. `lazy_bytes`: byte strings are written as
    the JSON view's {"$blob": ...} (the blobs section of `ckpt cat`), not read."""

    ev: bytes
    where: str
    lazy_bytes: bool = False


Size = tuple[int, int]  # (bytes of strings and byte strings, values)


class _TooBigError(Exception):
    """A trial decode ran past its budget, or the Sizer past PRESIZE_BYTES."""


class _TrialBudget(Budget):
    def refuse(self, nbytes: int, items: int) -> None:
        if nbytes > self.max_bytes or items > self.max_items:
            raise _TooBigError


class _ReadAhead:
    """An ObjectSource that keeps what the Sizer read (up to PRESIZE_BYTES) until the
    writer asks for it once: the writer reads the same nodes in the same order."""

    def __init__(self, source: ObjectSource) -> None:
        self.source = source
        self.kept: dict[bytes, bytes | None] = {}
        self.kept_bytes = 0
        self.presizing = True

    def get(self, oid: bytes) -> bytes:
        if self.presizing:
            if self.kept_bytes > PRESIZE_BYTES:
                raise _TooBigError
            content = self.source.get(oid)
            self.kept[oid] = content
            self.kept_bytes += len(content)
            return content
        kept = self.kept.pop(oid, None) if self.kept else None
        return kept if kept is not None else self.source.get(oid)


class Sizer:
    """The decoded size of values, from node objects only (BYTES/STR trees by their root's
    total), memoised by object id: a reference bomb is sized in O(distinct objects)."""

    def __init__(self, source: ObjectSource) -> None:
        self.source = source
        self.memo: dict[tuple[int, bytes, bool], Size] = {}

    def skeleton(self, node: Any) -> Size:
        if isinstance(node, Section):
            return self.raw(unpack_ev(node.ev, node.where), node.lazy_bytes)
        nbytes = items = 0
        if type(node) is dict:
            for v in node.values():
                b, n = self.skeleton(v)
                nbytes += b
                items += n
        return nbytes, items

    def raw(self, raw: Any, lazy: bool) -> Size:
        """Size of an unpacked EV."""
        t = type(raw)
        if t is list or t is dict:
            nbytes, items = 0, 1
            for x in raw if t is list else raw.values():
                b, n = self.raw(x, lazy)
                nbytes += b
                items += n
            return nbytes, items
        if t is Ext:
            return self.ext(raw, lazy)
        if t is str or t is bytes:
            return len(raw), 1
        return 0, 1

    def ext(self, ref: Ext, lazy: bool) -> Size:
        key = (ref.code, ref.oid, lazy)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        where = f"object {ref.oid.hex()[:12]}"
        if ref.code == EXT_REF:
            size = self.raw(unpack_ev(self.source.get(ref.oid), where), lazy)
        elif ref.code in (EXT_LIST, EXT_MAP):
            b, n = self.tree(ref.oid, ref.code, lazy)
            size = (b, n + 1)
        else:
            _level, total, _children = parse_tree_node(self.source.get(ref.oid), ref.code, ref.oid)
            size = (0 if lazy and ref.code == EXT_BYTES else total, 1)
        self.memo[key] = size
        return size

    def tree(self, oid: bytes, kind: int, lazy: bool) -> Size:
        key = (kind | 0x100, oid, lazy)
        hit = self.memo.get(key)
        if hit is None:
            level, _total, children = parse_tree_node(self.source.get(oid), kind, oid)
            hit = self.memo[key] = self._children(level, children, kind, lazy, oid)
        return hit

    def _children(self, level: int, children: Any, kind: int, lazy: bool, oid: bytes) -> Size:
        nbytes = items = 0
        if level == 0:
            for x in children.values() if kind == EXT_MAP else children:
                b, n = self.raw(x, lazy)
                nbytes += b
                items += n
            return nbytes, items
        for count, child in children:
            if isinstance(child, bytes):
                b, n = self.tree(child, kind, lazy)
            else:  # the embedded open tail
                sub_level, _t, sub = check_tree_node(child, kind, f"object {oid.hex()[:12]} (embedded node)", want_total=count, below=level)
                b, n = self._children(sub_level, sub, kind, lazy, oid)
            nbytes += b
            items += n
        return nbytes, items


def _tree_total(source: ObjectSource, oid: bytes, kind: int) -> int:
    return parse_tree_node(source.get(oid), kind, oid)[1]


def _str_header(n: int, code: int) -> bytes:
    """msgpack str (or bin) header for `n` bytes, the shortest msgpack-python writes."""
    if code == EXT_STR:
        if n < 32:
            return bytes([0xA0 | n])
        forms = ((0x100, b"\xd9", ">B"), (0x10000, b"\xda", ">H"), (1 << 32, b"\xdb", ">I"))
    else:
        forms = ((0x100, b"\xc4", ">B"), (0x10000, b"\xc5", ">H"), (1 << 32, b"\xc6", ">I"))
    for bound, tag, fmt in forms:
        if n < bound:
            return tag + struct.pack(fmt, n)
    raise InvalidInputError(f"a string of {n} bytes is too long for msgpack", hint="pass --format json")


def refuse_json(value: Any) -> Any:
    """json.dumps' `default`: a value JSON cannot carry (bytes, a big int) is one clear error."""
    raise InvalidInputError(f"the state holds a {type(value).__name__} value, which JSON cannot carry", hint="pass --format msgpack")


_NOT_SMALL = object()


class _Writer:
    """Writes raw values (unpacked EVs) to `out` as JSON (plain or the view) or msgpack."""

    def __init__(self, source: ObjectSource, out: IO[bytes], fmt: str, indent: int | None, allow_nan: bool = True) -> None:
        self.source = source
        self.out = out
        self.buf = bytearray()
        self.fmt = fmt  # json, view or msgpack
        self.view = fmt == "view"
        self.allow_nan = allow_nan and not self.view  # the view writes them as {"$float": ...}
        self.indent = indent if fmt != "msgpack" else None
        self.sep = "," if self.indent else ", "
        self.budget = Budget.streaming()
        self.decoders = {lazy: Decoder(source, budget=self.budget, lazy_bytes=lazy) for lazy in (False, True)}
        self.packer = msgpack.Packer(use_bin_type=True, autoreset=True)

    # -- output ------------------------------------------------------------------------
    def write(self, data: bytes | str) -> None:
        self.buf += data.encode("utf-8") if isinstance(data, str) else data
        if len(self.buf) >= _FLUSH:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.out.write(self.buf)
            self.buf = bytearray()

    def nl(self, level: int) -> str:
        return "\n" + " " * (self.indent * level) if self.indent else ""

    def dumps(self, value: Any, level: int) -> str:
        """A decoded value (already prepared) as JSON text, indented for `level`."""
        try:
            text = json.dumps(value, ensure_ascii=False, indent=self.indent, allow_nan=self.allow_nan, default=refuse_json)
        except ValueError as exc:
            if not self.allow_nan and "Out of range float" in str(exc):
                raise InvalidInputError(
                    "the state holds a float NaN or infinity, which JSON cannot carry",
                    hint='pass --format msgpack (`ckpt cat REF` shows such values as {"$float": "inf"})',
                ) from None
            raise InvalidInputError(f"the state cannot be written as JSON ({exc})", hint="pass --format msgpack") from None
        return text.replace("\n", self.nl(level)) if self.indent and level else text

    def prep(self, value: Any) -> Any:
        return to_json(value) if self.view else value

    def small(self, value: Any, level: int) -> None:
        if self.fmt == "msgpack":
            self.write(self.packer.pack(packable(value)))
        else:
            self.write(self.dumps(self.prep(value), level))

    def trial(self, raw: Any, depth: int, hops: int, lazy: bool) -> Any:
        """`raw` decoded, if it decodes to at most SMALL_BYTES and SMALL_ITEMS values
        (charged to the streaming budget then); else _NOT_SMALL."""
        t = type(raw)
        if not (t is list or t is dict or t is Ext):
            return self.decoders[lazy].walk(raw, depth, hops)
        trial = _TrialBudget(SMALL_BYTES, SMALL_ITEMS)
        try:
            value = Decoder(self.source, budget=trial, lazy_bytes=lazy).walk(raw, depth, hops)
        except _TooBigError:
            return _NOT_SMALL
        self.budget.take(trial.used_bytes, trial.used_items)
        return value

    # -- skeletons -----------------------------------------------------------------------
    def skeleton(self, node: Any, level: int) -> None:
        if isinstance(node, Section):
            self.value(unpack_ev(node.ev, node.where), 0, 0, level, node.lazy_bytes)
        elif type(node) is dict:
            if self.fmt == "msgpack":
                self.write(self.packer.pack_map_header(len(node)))
                for k, v in node.items():
                    self.write(self.packer.pack(k))
                    self.skeleton(v, level)
                return
            if not node:
                self.write("{}")
                return
            for i, (k, v) in enumerate(node.items()):
                self.write(("{" if i == 0 else self.sep) + self.nl(level + 1) + json.dumps(k, ensure_ascii=False) + ": ")
                self.skeleton(v, level + 1)
            self.write(self.nl(level) + "}")
        elif self.fmt == "msgpack":
            self.write(self.packer.pack(packable(node)))
        else:
            self.write(self.dumps(node, level))  # as it is: not through the view

    # -- values ------------------------------------------------------------------------------
    def value(self, raw: Any, depth: int, hops: int, level: int, lazy: bool) -> None:
        """Write one raw value found `depth` containers and `hops` references below its
        section root, at indentation `level`."""
        value = self.trial(raw, depth, hops, lazy)
        if value is not _NOT_SMALL:
            self.small(value, level)
            return
        dec = self.decoders[lazy]
        t = type(raw)
        if t is list:
            self.seq(((None, x) for x in raw), len(raw), dec.deeper(depth), hops, level, lazy, is_map=False)
        elif t is dict:
            self.seq(iter(raw.items()), len(raw), dec.deeper(depth), hops, level, lazy, is_map=True)
        else:  # an Ext (trial passes scalars)
            if hops > limits.MAX_DEPTH:
                raise LimitExceededError(f"references chain deeper than {limits.MAX_DEPTH} levels")
            self.ext(raw, depth, hops + 1, level, lazy)

    def ext(self, ref: Ext, depth: int, hops: int, level: int, lazy: bool) -> None:
        dec = self.decoders[lazy]
        if ref.code == EXT_REF:
            self.value(unpack_ev(dec.source.get(ref.oid), f"object {ref.oid.hex()[:12]}"), depth, hops, level, lazy)
        elif ref.code in (EXT_LIST, EXT_MAP):
            is_map = ref.code == EXT_MAP
            total = _tree_total(dec.source, ref.oid, ref.code)
            items = dec.tree_items(ref.oid, ref.code)
            entries = items if is_map else ((None, x) for x in items)
            self.seq(entries, total, dec.deeper(depth), hops, level, lazy, is_map=is_map, unique=is_map)
        else:
            self.string(ref, level)

    def string(self, ref: Ext, level: int) -> None:
        dec = self.decoders[False]
        is_str = ref.code == EXT_STR
        if self.fmt == "json" and not is_str:
            refuse_json(b"")
        utf8 = codecs.getincrementaldecoder("utf-8")() if is_str else None
        carry = b""
        total = _tree_total(dec.source, ref.oid, ref.code)
        self.budget.take(total)  # before reading, as the decoder does
        if self.fmt == "msgpack":
            self.write(_str_header(total, ref.code))
        elif is_str:
            self.write('"')
        else:  # the view's {"$bytes": base64}
            self.write("{" + self.nl(level + 1) + '"$bytes": "')
        try:
            for piece in dec.iter_bytes(ref.oid, ref.code):
                if utf8 is not None:
                    text = utf8.decode(piece)  # checks UTF-8 across piece boundaries
                    if self.fmt == "msgpack" or not _NEEDS_ESCAPE.search(piece):
                        self.write(piece)  # what json.dumps(ensure_ascii=False) keeps as it is
                    else:
                        self.write(json.dumps(text, ensure_ascii=False)[1:-1])
                elif self.fmt == "msgpack":
                    self.write(piece)
                else:
                    data = carry + piece
                    cut = len(data) - len(data) % 3
                    self.write(base64.b64encode(data[:cut]))
                    carry = data[cut:]
            if utf8 is not None:
                utf8.decode(b"", final=True)
        except UnicodeDecodeError:
            raise CorruptError(f"STR tree {ref.oid.hex()[:12]} is not valid UTF-8") from None
        if self.fmt == "msgpack":
            return
        if is_str:
            self.write('"')
        else:
            self.write(base64.b64encode(carry) + b'"' + self.nl(level).encode() + b"}")

    def seq(
        self,
        entries: Iterator[tuple[Any, Any]],
        count: int,
        depth: int,
        hops: int,
        level: int,
        lazy: bool,
        *,
        is_map: bool,
        unique: bool = False,
        wrapped: bool = False,
    ) -> None:
        """A list (or map) of `count` (key or None, raw value) entries; those that decode
        small are serialized in batches."""
        seen: set[str] | None = set() if unique else None
        self.budget.take(0)  # the container itself
        if self.fmt == "msgpack":
            self.write(self.packer.pack_map_header(count) if is_map else self.packer.pack_array_header(count))
        elif is_map and self.view and count == 1 and not wrapped:
            first = next(entries)
            if isinstance(first[0], str) and first[0].startswith("$"):  # see jsonview: {"$map": ...}
                self.write("{" + self.nl(level + 1) + '"$map": ')
                self.seq(iter([first]), 1, depth, hops, level + 1, lazy, is_map=True, wrapped=True)
                self.write(self.nl(level) + "}")
                return
            entries = iter([first])
        opened = False
        open_ch, close_ch = ("{", "}") if is_map else ("[", "]")
        batch: Any = {} if is_map else []
        batch_size = 0

        def flush() -> None:
            nonlocal opened, batch, batch_size
            if batch:
                text = self.dumps(batch, level)
                self.write((self.sep if opened else open_ch) + text[1 : len(text) - 1 - len(self.nl(level))])
                opened = True
                batch = {} if is_map else []
                batch_size = 0

        n = 0
        for key, raw in entries:
            n += 1
            if is_map:
                key = _check_key(key)
                if seen is not None:
                    if key in seen:
                        raise CorruptError(f"map key {key!r} appears twice in a map tree")
                    seen.add(key)
            used = self.budget.used_bytes + 16 * self.budget.used_items
            value = self.trial(raw, depth, hops, lazy)
            if value is not _NOT_SMALL:
                if self.fmt == "msgpack":
                    if is_map:
                        self.write(self.packer.pack(key))
                    self.small(value, level + 1)
                    continue
                if is_map:
                    batch[key] = self.prep(value)
                else:
                    batch.append(self.prep(value))
                batch_size += self.budget.used_bytes + 16 * self.budget.used_items - used
                if batch_size >= SMALL_BYTES:
                    flush()
                continue
            flush()
            if self.fmt == "msgpack":
                if is_map:
                    self.write(self.packer.pack(key))
            else:
                self.write(
                    (self.sep if opened else open_ch) + self.nl(level + 1) + (json.dumps(key, ensure_ascii=False) + ": " if is_map else "")
                )
                opened = True
            self.value(raw, depth, hops, level + 1, lazy)
        flush()
        if n != count:
            raise CorruptError(f"a {'map' if is_map else 'list'} declares {count} entries but holds {n}")
        if self.fmt != "msgpack":
            self.write(self.nl(level) + close_ch if opened else open_ch + close_ch)


def write_document(
    skeleton: Any, source: ObjectSource, out: IO[bytes], fmt: str, *, indent: int | None = 2, allow_nan: bool = True
) -> None:
    """Write `skeleton` (see the module docstring) to `out` as `fmt`: "json" (what
    write_value writes: indented, NaN and infinities as Python's json writes them unless
    not `allow_nan`, byte strings refused), "view" (jsonview.to_json then strict JSON,
    `indent` None for compact) or "msgpack".

    Raises:
        LimitExceededError before writing anything when the output is sized over the
        streaming budget; LimitExceededError (budget), CorruptError, InvalidInputError
        as a decode would, possibly after part of the output (so write to a temporary
        file, see write_file_atomic, or a spool).
    """
    if fmt not in ("json", "view", "msgpack"):
        raise InvalidInputError(f"unknown document format {fmt!r}", hint="use json or msgpack")
    ahead = _ReadAhead(source)
    w = _Writer(ahead, out, fmt, indent if fmt != "json" else 2, allow_nan)
    try:
        with deep_recursion():
            try:
                nbytes, items = Sizer(ahead).skeleton(skeleton)
            except _TooBigError:
                pass  # large in distinct objects: no bomb; the budget stops it while writing
            else:
                w.budget.refuse(nbytes, items)
            ahead.presizing = False
            w.skeleton(skeleton, 0)
    except RecursionError:
        raise LimitExceededError("the state nests too deeply to write") from None
    except MemoryError:
        raise LimitExceededError(
            "the state does not fit in memory while being written",
            hint="the checkpoint is hostile or damaged; if genuine, add memory",
        ) from None
    if fmt != "msgpack":
        w.write("\n")
    w.flush()


# -- state documents as values (`ckpt take` reads them; the API writes a decoded state) ------
def split_document(doc: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Map a state document onto sections; returns (layout, {section: value}).

    A map whose keys are all among memory/plan/tools/events/ext is split into those
    sections (ext: {namespace: value} becomes `ext:<namespace>` sections). Anything
    else is kept whole as `memory`. The layout records which, so restore gives back
    exactly the document that was taken.
    """
    if isinstance(doc, dict) and doc and all(isinstance(k, str) and k in DOC_SECTION_KEYS for k in doc):
        ext = doc.get("ext", {})
        if isinstance(ext, dict) and all(isinstance(ns, str) and NAMESPACE_RE.match(ns) for ns in ext):
            sections = {k: v for k, v in doc.items() if k != "ext"}
            for ns, v in ext.items():
                sections[EXT_PREFIX + ns] = v
            layout = {"kind": LAYOUT_SECTIONS, "keys": list(doc.keys()), "ext": list(ext.keys()) if "ext" in doc else []}
            return layout, sections
    return {"kind": LAYOUT_DOCUMENT}, {"memory": doc}


def join_document(layout: dict[str, Any], sections: dict[str, Any]) -> Any:
    if layout.get("kind") == LAYOUT_DOCUMENT:
        return sections.get("memory")
    doc: dict[str, Any] = {}
    for key in layout.get("keys", []):
        if key == "ext":
            doc["ext"] = {ns: sections[EXT_PREFIX + ns] for ns in layout.get("ext", []) if EXT_PREFIX + ns in sections}
        elif key in sections:
            doc[key] = sections[key]
    return doc


def read_document(stream: IO[bytes], fmt: str = "auto", where: str = "state document") -> tuple[Any, str]:
    """Parse a JSON or msgpack state document; returns (value, format name)."""
    data = stream.read()
    if fmt == "auto":
        # a UTF-8 byte order mark (editors on Windows write one) starts no msgpack document
        # (0xEF is the integer -17, followed by more data): the text after it is JSON or nothing
        stripped = data.removeprefix(codecs.BOM_UTF8).lstrip()[:1]
        fmt = "json" if stripped in (b"{", b"[", b'"') or stripped.isdigit() or stripped in (b"-", b"t", b"f", b"n") else "msgpack"
    if fmt == "json":
        try:
            # json.loads detects the encoding of bytes and skips a UTF-8 byte order mark
            return json.loads(data, parse_int=_JsonNumbers(data, where).integer, parse_float=_JsonNumbers(data, where).real), "json"
        except RecursionError:
            raise LimitExceededError(
                f"{where}: nesting is deeper than {limits.MAX_DEPTH} levels{_json_too_deep_at(data)}", hint=DEPTH_HINT
            ) from None
        except _NumberError as exc:
            raise exc.error from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"{where}: not valid JSON ({exc})", hint="check the file, or pass --format msgpack") from None
    if fmt == "msgpack":
        try:
            return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_document_ext, timestamp=0), "msgpack"
        except msgpack.StackError:
            raise LimitExceededError(f"{where}: nesting is deeper than the decoder allows", hint=DEPTH_HINT) from None
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"{where}: not valid msgpack ({exc})", hint="check the file, or pass --format json") from None
    raise InvalidInputError(f"unknown document format {fmt!r}", hint="use json, msgpack or auto")


def _json_too_deep_at(data: bytes) -> str:
    """Where a JSON text first opens a container deeper than limits.MAX_DEPTH, as
    " (line L, column C)", or "" when it does not (the parser recursed for another reason).
    Only called once json.loads gave up, so the scan costs nothing on good input."""
    try:
        text = data.decode(json.detect_encoding(data)).removeprefix("\ufeff")
    except (UnicodeDecodeError, LookupError):
        return ""
    depth, in_string, escaped, line, column = 0, False, False, 1, 0
    for ch in text:
        column += 1
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limits.MAX_DEPTH:
                return f" (line {line}, column {column})"
        elif ch in "]}":
            depth -= 1
        elif ch == "\n":
            line, column = line + 1, 0
    return ""


#: the most decimal digits an integer ckpt stores can have: a BIGINT holds 8192 bits,
#: two's complement (formats/v1.md), so |v| < 2**8191, which has 2466 digits
_MAX_INT_DIGITS = len(str(2**8191))


class _NumberError(Exception):
    """Carries a CkptError out of json.loads, whose callers would take a ValueError for bad JSON."""

    def __init__(self, error: CkptError) -> None:
        self.error = error


class _JsonNumbers:
    """parse_int/parse_float for json.loads: a number ckpt cannot keep is refused with
    where it is, rather than left to Python (its own message about an integer string
    conversion limit) or made infinite (1e400 would silently become Infinity)."""

    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.where = where

    def _at(self, text: str) -> str:
        # json.loads gives the hook the number's text, not its position: the first
        # place that text appears is where it is in all but contrived documents
        pos = self.data.find(text.encode("ascii"))
        if pos < 0:
            return ""
        line = self.data.count(b"\n", 0, pos) + 1
        column = pos - (self.data.rfind(b"\n", 0, pos) + 1) + 1
        return f" at line {line}, column {column}"

    def integer(self, text: str) -> int:
        digits = len(text.lstrip("-"))
        if digits > _MAX_INT_DIGITS:
            raise _NumberError(
                InvalidInputError(
                    f"{self.where}: the integer{self._at(text)} has {digits} digits, more than ckpt stores "
                    f"(integers of up to 8192 bits, about {_MAX_INT_DIGITS} digits)",
                    hint="store it as a string",
                )
            )
        return int(text)  # up to _MAX_INT_DIGITS: below Python's int_max_str_digits (4300)

    def real(self, text: str) -> float:
        value = float(text)
        if math.isinf(value):
            short = text if len(text) <= 40 else text[:37] + "..."
            raise _NumberError(
                InvalidInputError(
                    f"{self.where}: the number {short}{self._at(text)} is out of range for a float (64-bit, at most about 1.8e308)",
                    hint="store it as a string",
                )
            )
        return value


def write_value(value: Any, out: IO[bytes], fmt: str) -> None:
    """Write a decoded state document to `out` as "json" or "msgpack" (`ckptcli.api`
    offers it as `write_document`; `write_document` here writes the same bytes from
    the store)."""
    if fmt == "msgpack":
        out.write(framing.pack(packable(value)))
        return
    try:
        text = json.dumps(value, ensure_ascii=False, indent=2, allow_nan=True, default=refuse_json)
    except ValueError as exc:
        raise InvalidInputError(f"the state cannot be written as JSON ({exc})", hint="pass --format msgpack") from None
    out.write(text.encode("utf-8") + b"\n")


def _document_ext(code: int, data: bytes) -> Any:
    if code == 1 and 0 < len(data) <= limits.MAX_BIGINT_BYTES:
        return int.from_bytes(data, "big", signed=True)
    raise InvalidInputError(
        f"msgpack ext type {code} is not supported in a state document", hint="use plain msgpack types (ext 1 = big integer)"
    )


def states_equal(a: Any, b: Any) -> bool:
    """Exact equality of states: types must match, NaN equals NaN, 0.0 and -0.0 differ."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(states_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a.keys()) == list(b.keys()) and all(states_equal(a[k], b[k]) for k in a)
    return bool(a == b)

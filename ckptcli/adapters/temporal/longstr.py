"""Long JSON strings of a history file kept in the file, not in memory (the importer's).

A payload of 50 MB is a JSON string of 67 MB (base64). Handed to ijson it was held several
times over (ijson's buffer, the str, temporalio's check decoding it, the encoder's UTF-8
copy and chunks: 400 MB for one such event), and ijson, fed 4 KiB at a time (reader.py),
took minutes over one token that long. `Diverter` is the file object ijson reads instead:
a string longer than LONG bytes with no escape in it reaches ijson as a short placeholder,
and the reader puts a `LongString` in its place in the event: where the string lies in
the file, checked (UTF-8, no control character) as it was passed over. The importer stores
it read back from the file in pieces (`pieces`), as the same STR tree a str of it gives, so
the history exported again is the same. A long string with an escape in it (Temporal's
base64 has none) is decoded by `json` in one pass (ijson took time quadratic in its length)
and reaches the event as a str.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import secrets
from collections.abc import Iterator
from itertools import accumulate
from typing import IO, TYPE_CHECKING, Any

from ckptcli.errors import CkptError, CorruptError, InvalidInputError, LimitExceededError

if TYPE_CHECKING:
    from ckptcli.store.repository import Store

__all__ = ["LONG", "Diverter", "LongString", "NotPlain", "encode_longs", "put_back", "store_long"]

#: a JSON string longer than this (bytes of its content in the file) is kept in the file
LONG = 1 << 20
READ = 64 << 10  # bytes read from the file at a time
_CONTROL = re.compile(rb"[\x00-\x1f]")
#: digits a number of a history may have (an int64 has 19; a float's digits rarely reach 30)
MAX_DIGITS = 400
_LONG_NUMBER = re.compile(rb"[0-9]{%d}" % (MAX_DIGITS + 1))
_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # an escape of a string: a backslash and the byte it escapes
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
#: an escape of a UTF-16 surrogate (half of a pair, or alone: then no Unicode text holds it);
#: it may be a false match (`\\\\ud800` in the file: an escaped backslash): the string is decoded to know
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
#: a history's own start, `{"events": [`: the fast way reads only a file shaped so (see Diverter)
_HEAD = re.compile(rb'\s*\{\s*"events"\s*:\s*\[')
_TAIL = re.compile(rb"\]\s*\}\s*\Z")  # and its end, `]}`: the events list ends with the file
_DELTA = [1 if b in b"[{" else -1 for b in range(256)]  # a bracket's change of the depth


class LongString:
    """A string of the history file, `start`..`end` its content's offsets (no quotes, no
    escapes: its bytes are its UTF-8). `chars` its length in characters; `head`, `tail`
    its first and last few characters."""

    __slots__ = ("chars", "end", "head", "path", "start", "tail")

    def __init__(self, path: str, start: int, end: int, chars: int, head: str, tail: str) -> None:
        self.path, self.start, self.end, self.chars, self.head, self.tail = path, start, end, chars, head, tail

    @property
    def size(self) -> int:
        """Its UTF-8 bytes."""
        return self.end - self.start

    def pieces(self, size: int = 1 << 20) -> Iterator[bytes]:
        """Its UTF-8 bytes, read from the file `size` at a time."""
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            at = self.start
            while at < self.end:
                piece = os.pread(fd, min(size, self.end - at), at)
                if not piece:
                    raise CorruptError(f"{self.path}: the file got shorter while it was imported")
                at += len(piece)
                yield piece
        finally:
            os.close(fd)

    def read(self) -> str:
        """The whole string (memory: its size; for a comparison of one event, rarely)."""
        return b"".join(self.pieces()).decode("utf-8")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LongString):
            return other.read() == self.read()
        if isinstance(other, str):
            if len(other) != self.chars:
                return False
            at = 0
            for piece in self.pieces():
                text = piece.decode("utf-8", "surrogateescape")
                if other[at : at + len(text)] != text:
                    return False
                at += len(text)
            return True
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.path, self.start, self.end))

    def __repr__(self) -> str:
        return f"LongString({self.size} bytes at {self.start} of {self.path})"


class NotPlain(Exception):  # noqa: N818 - no error: a signal to the reader
    """The file is not shaped as the fast way reads it (`{"events": [...]}` and nothing
    else at its top level): reader.py reads it the careful way, which says what it is."""


class Diverter:
    """The history file as ijson reads it, each long string replaced by a placeholder
    (`placeholders`: placeholder -> LongString, until `take` takes them).

    A read of the file is scanned whole with bytes.find, split and regular expressions
    (`_fast`) when nothing in it needs more: no string it ends or leaves open is over LONG
    bytes, no number of more than MAX_DIGITS digits (or a run of digits that may be one),
    no backslash at its end; else it is scanned string by string (`_step`), as
    before. Either way ijson gets the same bytes, in the same reads. With `max_depth`,
    JSON nested deeper (brackets outside strings) is refused (LimitExceededError) before
    any of that read reaches ijson (reader.py: then ijson's C item builder can read the
    file directly; the reader reads it again the slow way to name the event), and so is a
    file whose top level is not `{"events": [...]}` alone (NotPlain): ijson's item builder
    takes `{"events": {"item": ...}}`, or a key "events.item", for the events list too.

    What it refuses itself (a number too long, a lone surrogate escape, a long string that
    is not UTF-8) reaches ijson as an exception once ijson has read every byte before it,
    so the reader's error line names the event that holds it, not one read ahead (without
    max_depth: the careful way, which says it; the fast way gives up at once).

    A string that escapes half of a UTF-16 surrogate pair without the other half (`"\\ud800"`:
    ijson reads it as "?") is refused (InvalidInputError): no Unicode text holds one, so
    neither can a checkpoint (formats/v1.md), nor temporalio's loader."""

    def __init__(self, f: IO[bytes], path: str, *, pass_over: bool = True, max_depth: int | None = None) -> None:
        self.f = f
        self.path = path
        self.max_depth = max_depth
        self.depth = 0  # brackets open outside strings, in what was scanned (counted with max_depth only)
        self.slow = False  # _fast declined the read being scanned: the rest of it goes string by string
        #: False: a long string is decoded here too (a str, never a LongString), for readers
        #: that need every value in memory (replay); numbers are checked either way
        self.pass_over = pass_over
        self.nonce = secrets.token_hex(8)  # 16 hex digits: no string of the file is a placeholder by chance
        self.placeholders: dict[str, LongString | str] = {}  # a str: a long string with escapes, decoded
        self.out = bytearray()
        self.pos = 0  # file offset of the next byte to scan
        self.buf = b""  # the bytes read last
        self.i = 0  # the next byte of buf to scan (at file offset pos)
        self.inside = False  # in a string
        self.escaped = False  # the string so far holds an escape (decoded by json, not passed over)
        self.esc_next = False  # the next byte is escaped
        self.start = 0  # offset of the string's content
        self.held = bytearray()  # the string's content so far, while it may still be short
        self.long = False  # the string is being passed over (longer than LONG)
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.chars = 0
        self.head = ""
        self.tail = ""
        self.eof = False
        self.count = 0
        self.given = 0
        self.fault: CkptError | None = None  # refused: raised once ijson has read what comes before it
        self.head_left = 2  # with max_depth: the brackets of `{"events": [` not yet counted
        self.closed = False  # with max_depth: the events list has ended (only `}` may follow)

    def tell(self) -> int:
        """The bytes handed to ijson so far (a long string counts as its placeholder: what
        the importer holds of it in memory, by which it cuts its checkpoints)."""
        return self.given

    def take(self) -> dict[str, LongString | str]:
        out, self.placeholders = self.placeholders, {}
        return out

    def read(self, n: int = -1) -> bytes:
        if n == 0:  # ijson's look at the type of what the file gives
            return b""
        want = n if n > 0 else READ
        while len(self.out) < want and not self.eof and self.fault is None:
            if self.long and self.out:  # ijson takes what comes before a long string first: then it is in
                break  # the event that holds it when the string is passed over (and a fault in it is that event's)
            try:
                self._step()
            except CkptError as exc:  # scanned ahead of ijson: said once ijson has read up to it
                if self.max_depth is not None:
                    raise  # the fast way: it reads the file again the careful way, which says where
                self.fault = exc
        if self.fault is not None and not self.out:
            raise self.fault
        data = bytes(self.out[:want])
        del self.out[:want]
        self.given += len(data)
        return data

    def _more(self) -> bool:
        if self.i >= len(self.buf):
            first = self.pos == 0 and not self.buf
            self.buf, self.i, self.slow = self.f.read(READ), 0, False
            if first and self.buf.startswith(codecs.BOM_UTF8):
                # a UTF-8 byte order mark (an editor on Windows saved the file) starts no
                # JSON ijson reads; `ckpt take` skips one too (document.read_document)
                self.buf = self.buf[len(codecs.BOM_UTF8) :]
                self.pos = len(codecs.BOM_UTF8)
            if first and self.max_depth is not None and self.buf and not _HEAD.match(self.buf):
                raise NotPlain
            if not self.buf:
                self.eof = True
                if self.long:  # the file ended inside it: ijson sees a string that never ends
                    self.out += b"x"
                return False
        return True

    def _step(self) -> None:
        if not self._more():
            return
        if not (self.long or self.esc_next or self.slow):
            if self._fast():
                return
            self.slow = True
        buf, i = self.buf, self.i
        if not self.inside:
            q = buf.find(b'"', i)
            self._check_numbers(buf, i, len(buf) if q < 0 else q)
            if self.max_depth is not None:
                self._count_depth(buf[i : len(buf) if q < 0 else q])
                if self.closed and q >= 0:
                    raise NotPlain  # a string after the events list
            if q < 0:
                self.out += buf[i:] if i else buf
                self.pos += len(buf) - i
                self.i = len(buf)
                return
            self.out += buf[i : q + 1]
            self.pos += q + 1 - i
            self.i = q + 1
            self.inside, self.escaped, self.esc_next, self.long = True, False, False, False
            self.start = self.pos
            self.held = bytearray()
            return
        # inside a string: up to its closing quote, or the end of what is read
        j = i
        end = -1
        if self.esc_next:
            j, self.esc_next = i + 1, False
        while True:
            q = buf.find(b'"', j)
            b = buf.find(b"\\", j, q if q >= 0 else len(buf))
            if b >= 0:
                self.escaped = True
                if b + 1 >= len(buf):
                    self.esc_next = True
                    j = len(buf)
                    break
                j = b + 2
                continue
            end = q
            break
        stop = end if end >= 0 else len(buf)
        part = buf[i:stop]
        if self.long:
            self._pass_over(part)
        else:
            self.held += part
            if not self.escaped and self.pass_over and len(self.held) > LONG:
                self.long = True
                held, self.held = bytes(self.held), bytearray()
                self._pass_over(held)
        self.pos += len(part)
        if end < 0:
            self.i = len(buf)
            return
        self.i = end + 1
        self.pos += 1
        self.inside = False
        if self.long and self.escaped:  # an escape after its first LONG bytes: decoded after all
            self._decode_escaped(self._read_back(self.start, self.pos - 1))
        elif self.long:
            self._finish_long()
        elif len(self.held) > LONG:  # escapes in it, or not passed over: decoded here in one pass
            held, self.held = bytes(self.held), bytearray()
            self._decode_escaped(held)
        else:
            if self.escaped and _SURROGATE_ESCAPE.search(self.held):
                self._check_unicode(bytes(self.held))
            self.out += self.held
            self.out += b'"'
            self.held = bytearray()

    def _fast(self) -> bool:
        """Scan the rest of the read whole, as `_step` would string by string, when nothing
        in it needs more (see the class docstring); False (nothing done) when something may."""
        buf, i = self.buf, self.i
        seg = buf[i:] if i else buf
        m = len(seg)
        escapes = seg.find(b"\\") >= 0
        if escapes and _SURROGATE_ESCAPE.search(seg):
            return False  # _step decodes the string that holds it (a lone one is refused)
        if self.inside and self.escaped and _SURROGATE_ESCAPE.search(self.held + seg[:6]):
            return False  # the same, in the string this read goes on with (its escape maybe cut in two)
        clean = _ESCAPE.sub(b"__", seg) if escapes else seg  # each escape as two bytes that are no quote
        if escapes and clean.endswith(b"\\"):
            return False  # an escape the read cuts in two
        if self.closed and seg.strip():
            raise NotPlain  # more after the events list than its `}`
        j = 0
        if self.inside:
            q = clean.find(b'"')
            if q < 0:
                if len(self.held) + m > LONG:
                    return False
                self.held += seg
                self.escaped = self.escaped or escapes
                self.pos += m
                self.i = len(buf)
                return True
            if len(self.held) + q > LONG:
                return False
            j = q + 1
        opened = clean.count(b'"', j) % 2 == 1  # a string the read leaves open
        end = clean.rfind(b'"') + 1 if opened else m
        if m - end > LONG:
            return False
        outside = b" ".join(clean[j:end].split(b'"')[0::2])  # what is between the strings
        if escapes and b"_" in outside:
            return False  # a backslash outside a string (no JSON has one): no escape there for _step
        if _LONG_NUMBER.search(outside) is not None:
            return False  # _step refuses it, at its place
        if self.max_depth is not None:
            closed = self.closed
            self._count_depth(outside)
            if self.closed and not closed and (opened or not _TAIL.search(clean)):
                raise NotPlain  # a string after the events list
        if self.inside:
            self.out += self.held
            self.held = bytearray()
        self.out += seg[:end] if end < m else seg
        if opened:
            self.inside, self.escaped, self.esc_next, self.long = True, escapes and seg.find(b"\\", end) >= 0, False, False
            self.start = self.pos + end
            self.held = bytearray(seg[end:])
        else:
            self.inside = False
        self.pos += m
        self.i = len(buf)
        return True

    def _count_depth(self, outside: bytes) -> None:
        """Follow the depth of the brackets in `outside` (bytes outside strings); refuse
        one past max_depth."""
        if self.closed:
            if outside.strip():
                raise NotPlain  # more after the events list than its `}`
            return
        brackets = outside.translate(None, _NOT_BRACKETS)
        if not brackets:
            return
        if self.head_left:  # `{"events": [` (_HEAD): the depth of the events list is 2
            k = min(self.head_left, len(brackets))
            self.depth, self.head_left, brackets = self.depth + k, self.head_left - k, brackets[k:]
            if not brackets:
                return
        opens = brackets.count(b"{") + brackets.count(b"[")
        if self.depth + opens <= len(brackets) + 1 and min(accumulate(map(_DELTA.__getitem__, brackets), initial=self.depth)) <= 1:
            # the events list ends here: its `]`, then the `}` of the file, then nothing
            if not (brackets.endswith(b"]}") and _TAIL.search(outside)):
                raise NotPlain
            if min(accumulate(map(_DELTA.__getitem__, brackets[:-2]), initial=self.depth)) <= 1:
                raise NotPlain
            self.closed = True
        limit = self.max_depth
        assert limit is not None
        if self.depth + opens > limit and max(accumulate(map(_DELTA.__getitem__, brackets), initial=self.depth)) > limit:
            raise LimitExceededError(f"{self.path}: JSON nested deeper than {limit} levels, by byte {self.pos + len(self.buf) - self.i}")
        self.depth += 2 * opens - len(brackets)

    def _check_numbers(self, buf: bytes, i: int, j: int) -> None:
        """Refuse a number of more digits than any field of a history holds, before ijson
        turns it into an int (time quadratic in its digits: minutes for millions). Outside
        strings, between buf[i:j]."""
        m = _LONG_NUMBER.search(buf, i, j)
        if m is not None:
            raise InvalidInputError(
                f"{self.path}: a number of more than {MAX_DIGITS} digits at byte {self.pos + m.start() - i}:"
                " no field of a Temporal history holds one"
            )

    def _read_back(self, start: int, end: int) -> bytes:
        """The file's bytes start..end, read again (a string passed over, then found to
        hold an escape)."""
        self.long = False
        self.decoder.reset()
        self.chars, self.head, self.tail = 0, "", ""
        data = os.pread(self.f.fileno(), end - start, start)
        if len(data) != end - start:
            raise CorruptError(f"{self.path}: the file got shorter while it was imported")
        return data

    def _decode_escaped(self, held: bytes) -> None:
        """A long string with escapes, decoded here in one linear pass and handed to ijson
        as a placeholder: ijson (yajl) parses a token that spans its reads again from its
        start at every read, quadratic in the token's length (minutes for a few MB)."""
        try:
            text = held.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptError(f"{self.path}: not valid UTF-8 at byte {self.start + exc.start}") from None
        try:
            value = json.loads('"' + text + '"')
        except ValueError as exc:
            raise CorruptError(f"{self.path}: malformed JSON in a string starting at byte {self.start}: {exc}") from None
        self._check_unicode(value)
        self.count += 1
        name = f"ckptlong{self.nonce}{self.count:08d}"
        self.placeholders[name] = value
        self.out += name.encode() + b'"'

    def _check_unicode(self, value: str | bytes) -> None:
        """Refuse a string (decoded, or its content in the file) that holds a lone surrogate."""
        if type(value) is bytes:
            try:
                value = json.loads(b'"' + value + b'"')
            except ValueError:
                return  # malformed, or not UTF-8: ijson says so, where
        try:
            str(value).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError(
                f"{self.path}: a string at byte {self.start} holds a lone UTF-16 surrogate escape "
                f"(\\u{ord(str(value)[exc.start]):04x}), which no Unicode text (and no checkpoint) can hold"
            ) from None

    def _pass_over(self, part: bytes) -> None:
        if _CONTROL.search(part):
            raise CorruptError(f"{self.path}: malformed JSON: a control character in a string at byte {self.pos}")
        pending = len(self.decoder.getstate()[0])  # bytes of a character the last part cut
        try:
            text = self.decoder.decode(part)
        except UnicodeDecodeError as exc:
            raise CorruptError(f"{self.path}: not valid UTF-8 at byte {self.pos - pending + exc.start}") from None
        if not self.head:
            self.head = text[:8]
        self.tail = (self.tail + text[-8:])[-8:]
        self.chars += len(text)

    def _finish_long(self) -> None:
        try:
            self.decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise CorruptError(f"{self.path}: not valid UTF-8 at byte {self.pos - 1 - len(self.decoder.getstate()[0])}") from None
        self.count += 1
        name = f"ckptlong{self.nonce}{self.count:08d}"
        self.placeholders[name] = LongString(self.path, self.start, self.pos - 1, self.chars, self.head, self.tail)
        self.out += name.encode() + b'"'
        self.long = False
        self.decoder.reset()
        self.chars, self.head, self.tail = 0, "", ""


def put_back(value: object, found: dict[str, LongString | str]) -> object:
    """`value` (an event as ijson built it) with each placeholder of `found` replaced by
    its LongString, in place (maps and lists); those used are taken out of `found`."""
    stack: list[object] = [value]
    while stack:
        v = stack.pop()
        if type(v) is dict:
            for k, x in v.items():
                if k in found:
                    x = found[k]
                    where = f"{x.path}: " if isinstance(x, LongString) else ""
                    raise InvalidInputError(f"{where}a map key of more than {LONG} bytes: no history has one")
                if type(x) is str and x in found:
                    v[k] = found.pop(x)
                elif type(x) is dict or type(x) is list:
                    stack.append(x)
        elif type(v) is list:
            for j, x in enumerate(v):
                if type(x) is str and x in found:
                    v[j] = found.pop(x)
                elif type(x) is dict or type(x) is list:
                    stack.append(x)
    return value


class _Reader:
    """A LongString as a file object (read(n)) for the chunker."""

    def __init__(self, ls: LongString) -> None:
        self.fd = os.open(ls.path, os.O_RDONLY | os.O_CLOEXEC)
        self.at, self.end, self.path = ls.start, ls.end, ls.path

    def read(self, n: int = -1) -> bytes:
        n = self.end - self.at if n < 0 else min(n, self.end - self.at)
        data = os.pread(self.fd, n, self.at) if n > 0 else b""
        if len(data) < n:
            raise CorruptError(f"{self.path}: the file got shorter while it was imported")
        self.at += len(data)
        return data

    def close(self) -> None:
        os.close(self.fd)


def store_long(store: Store, ls: LongString) -> Any:
    """Write `ls` into `store` (committed), read from its file in pieces, as the STR tree
    the encoder makes of a str of it (the same objects, the same EV); returns that EV as
    an `Encoded`, to place in the value a take encodes. The caller holds the store's shared
    lock until that take commits (no prune removes the objects before they are referenced)."""
    from ckptcli.format.chunker import iter_windows
    from ckptcli.format.encode import Encoder
    from ckptcli.format.ev import EXT_STR, Encoded, _ext

    txn = store.transaction()
    reader = _Reader(ls)
    try:
        enc = Encoder(txn, cdc=store.config.cdc, chunker=store.config.chunker)
        entries: list[tuple[int, bytes]] = []
        for pieces in iter_windows(reader, enc.cdc, algorithm=enc.chunker):  # type: ignore[arg-type]
            entries.extend((len(p), enc._put_data(bytes(p))) for p in pieces)
        root = enc._upper_levels(EXT_STR, entries, 1)[0]
        txn.commit()
    except BaseException:
        txn.abort()
        raise
    finally:
        reader.close()
    return Encoded(_ext(EXT_STR, root), ls.size)


def encode_longs(store: Store, value: Any) -> None:
    """Replace every LongString in `value` (maps and lists, in place) by store_long's EV."""
    stack: list[Any] = [value]
    while stack:
        v = stack.pop()
        if type(v) is dict:
            for k, x in v.items():
                if type(x) is LongString:
                    v[k] = store_long(store, x)
                elif type(x) is dict or type(x) is list:
                    stack.append(x)
        elif type(v) is list:
            for j, x in enumerate(v):
                if type(x) is LongString:
                    v[j] = store_long(store, x)
                elif type(x) is dict or type(x) is list:
                    stack.append(x)

"""A Temporal history file read event by event, in bounded memory, and checked.

A history is `{"events": [...]}` as `temporal workflow show --output json`, the web UI's
download or `WorkflowHistory.to_json()` write it (protobuf JSON: `EVENT_TYPE_...` enum
names, int64 as strings), or the older JSON of tctl and the UI (`eventType`
`WorkflowExecutionStarted`, enum values as `Normal`), which temporalio's own loader reads
too; a UTF-8 byte order mark before it is skipped (as `ckpt take` skips one). ijson
streams the events one at a time, so a 100 MB history is never parsed whole
(and, for the importer, a string over 1 MiB is not read into memory at all: longstr.py);
each event is checked by temporalio's loader (`WorkflowHistory.from_json`, its protobuf
messages). The file is read the fast way (ijson's C item builder over the Diverter, which
scans each read whole and refuses JSON nested too deep before ijson sees it); a file that
fails that way is read again the careful way (ijson's parse events one by one through the
depth check, as it always was read), which says what is wrong and names the event. The
fast way reads only a file whose top level is `{"events": [...]}` (longstr.NotPlain: as
every history Temporal writes is); any other is read the careful way, where _bounded
reads the top level's keys: ijson's prefixes are dotted paths, so `{"events": {"item":
EVENT}}` or a key "events.item" look like the events list to its item builder. What is
refused, each with one line naming the file and the event (and the field being read,
where the fault is inside one):

- JSON that is malformed, not UTF-8 or ends early: CorruptError (exit 5);
- JSON nested deeper than 256 levels: LimitExceededError (exit 7), naming the event;
- no top-level `"events": [...]` list (an `events` object, two `events` keys, a top-level
  key "events.item"), an event that is no map, of an event type Temporal does not have,
  whose fields its protobuf message refuses, event ids not 1, 2, 3, ..., a first event
  that is no WorkflowExecutionStarted; a number no field of a history holds (over 400
  digits, an integer beyond 64 bits, a float beyond 1.8e308), a string with a lone
  surrogate escape (`"\\ud800"`: no checkpoint holds one, nor temporalio):
  InvalidInputError (exit 4).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from ckptcli.adapters.temporal.events import EVENT_TYPES, type_name
from ckptcli.adapters.temporal.longstr import Diverter, put_back
from ckptcli.errors import CkptError, CorruptError, InvalidInputError, LimitExceededError, NotFoundError, UsageError
from ckptcli.format import limits

__all__ = ["HistoryEvent", "event_time_ns", "history_files", "read_events", "require"]

INSTALL_HINT = "pip install 'ckptcli[temporal]'"


def require() -> None:
    """Raise a usage error (exit 2) naming the install when temporalio or ijson is missing."""
    import importlib.util

    missing = [m for m in ("temporalio", "ijson") if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(
            f"the temporal adapter needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed",
            hint=INSTALL_HINT,
        )


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One event of a history file: its id (the seq), time (ns), type (PascalCase) and
    the event as the file has it."""

    seq: int
    ts: int
    name: str
    raw: dict[str, Any]


def history_files(source: str, skipped: list[str] | None = None) -> list[Path]:
    """The history files SOURCE names: a file, or a directory's `*.json` files (sorted).

    Of a directory, only its regular files are read (a symbolic link to one in the same
    directory too); an entry named `*.json` that is none (a subdirectory, a FIFO, a
    socket, a device, a dangling link) is skipped, and said so in `skipped` ("NAME: why"),
    when given.

    Raises:
        NotFoundError: no such file or directory, or a directory without .json files.
        InvalidInputError: SOURCE is neither a regular file nor a directory; an entry of
        the directory is a symbolic link to a file outside it (refused: the import reads
        the directory, not what it points at).
    """
    path = Path(source)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise NotFoundError(
            f"{source}: no such file or directory", hint="give a history file written by `temporal workflow show --output json`"
        ) from None
    except OSError as exc:
        raise InvalidInputError(f"{source}: cannot be read: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        files = _directory(path, skipped)
        if not files:
            raise NotFoundError(
                f"{source}: a directory with no .json history files",
                hint="export one with `temporal workflow show -w ID --output json > ID.json`",
            )
        return files
    if not stat.S_ISREG(mode):
        raise InvalidInputError(
            f"{source}: not a regular file", hint="give a history file written by `temporal workflow show --output json`"
        )
    return [path]


def _directory(path: Path, skipped: list[str] | None) -> list[Path]:
    """The regular `*.json` files of the directory `path`, sorted (see history_files)."""
    home = path.resolve()
    files = []
    for p in sorted(path.iterdir()):
        if p.suffix != ".json":
            continue
        try:
            st = p.stat()  # follows a link
        except OSError:
            if skipped is not None:
                skipped.append(f"{p}: skipped: a dangling symbolic link" if p.is_symlink() else f"{p}: skipped: cannot be read")
            continue
        if not stat.S_ISREG(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
            if skipped is not None:
                skipped.append(f"{p}: skipped: {what}")
            continue
        if p.is_symlink() and p.resolve().parent != home:
            raise InvalidInputError(
                f"{p}: a symbolic link to {p.resolve()}, outside {path}: refused",
                hint="copy the history into the directory, or name the file itself",
            )
        files.append(p)
    return files


def event_time_ns(text: Any) -> int | None:
    """An RFC 3339 time (`2022-08-17T16:27:34.000Z`, up to nanoseconds) -> ns since the epoch."""
    if type(text) is not str or len(text) < 20 or len(text) > 40:
        return None
    head, frac, zone = text[:19], "", text[19:]
    if zone.startswith("."):
        digits = zone[1:]
        n = len(digits) - len(digits.lstrip("0123456789"))
        frac, zone = digits[:n], digits[n:]
        if not frac or n > 9:
            return None
    try:
        base = datetime.fromisoformat(head + (zone if zone not in ("Z", "z") else "+00:00"))
    except ValueError:
        return None
    if base.tzinfo is None:
        return None
    return int(base.timestamp()) * 1_000_000_000 + int(frac.ljust(9, "0") or 0)


def _open(path: Path) -> IO[bytes]:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not hang the import
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise InvalidInputError(f"{path}: not a regular file", hint="give a history file written by `temporal workflow show --output json`")
    return f


def read_events(
    path: Path, *, check: bool = True, check_after: int = 0, position: list[int] | None = None, divert: bool = False
) -> Generator[HistoryEvent, None, None]:
    """The events of the history file `path`, one at a time (ijson: bounded memory).

    Args:
        path: a history file.
        check: check each event with temporalio's protobuf loader too (the first read of a
            file; a second read of a file already checked leaves it out).
        check_after: leave that check out for the events up to this id (those the store
            has already, which are not written again).
        position: if given, its one item is kept at the file offset read so far (the
            importer bounds its checkpoints by it).
        divert: a string over longstr.LONG bytes (a large payload) is not read into
            memory: the event holds a longstr.LongString in its place (the importer's).

    Yields:
        HistoryEvent, in order.

    Raises:
        CorruptError, InvalidInputError (see the module docstring); UsageError when
        temporalio or ijson is not installed.
    """
    require()
    import ijson

    from_json = _loader() if check else None
    where = str(path)
    prev_ts = 0
    done = 0  # events yielded
    with _open(path) as f:
        # the fast way: ijson's C item builder reads the Diverter directly (no Python per
        # parse event), the Diverter refusing JSON nested past MAX_DEPTH before ijson sees
        # it; 4 KiB reads as the careful way below, so `position` is the same. Whatever
        # fails here (bad JSON, a bad event, too deep) is read again the careful way,
        # which says it as it always has, naming the event.
        source = Diverter(f, where, pass_over=divert, max_depth=MAX_DEPTH)
        items = ijson.items(source, "events.item", use_float=True, buf_size=PARSE_READ)
        while True:
            try:
                raw: Any = next(items, _END)
                if raw is _END:
                    break
                if position is not None:
                    position[0] = source.tell()
                ev = _event(raw, done + 1, where)
                if from_json is not None and ev.seq > check_after:
                    from_json(raw, ev.seq, where)  # a long string is checked as its placeholder (a string, and base64)
                if source.placeholders:
                    put_back(raw, source.placeholders)
            except Exception:  # noqa: BLE001 - said by the careful reading below, which meets it again
                f.seek(0)
                yield from _read_carefully(f, where, from_json, check_after, position, divert, done, prev_ts)
                return
            ts = max(ev.ts, prev_ts)  # ts never decreases (formats/events.md)
            prev_ts = ts
            done += 1
            yield HistoryEvent(ev.seq, ts, ev.name, raw) if ts != ev.ts else ev
    if done == 0:
        raise _no_events(where)


_END = object()


def _no_events(where: str) -> InvalidInputError:
    return InvalidInputError(
        f'{where}: no history events: not a Temporal history (a JSON object with an "events" list)',
        hint="export one with `temporal workflow show -w ID --output json`",
    )


def _read_carefully(
    f: IO[bytes],
    where: str,
    from_json: Any,
    check_after: int,
    position: list[int] | None,
    divert: bool,
    skip: int,
    prev_ts: int,
) -> Generator[HistoryEvent, None, None]:
    """read_events the careful way, from the start of `f`, the first `skip` events (read
    and yielded already) left out: ijson's parse events one by one through _bounded (the
    depth, and the id and type of the event being read, for the error line)."""
    import ijson

    n = 0
    # every reader goes through the Diverter: its checks of numbers and its one-pass
    # decoding of long strings spare ijson work quadratic in a token's length
    source = Diverter(f, where, pass_over=divert)
    # small reads: ijson builds every parse event of a read (each with its prefix, as
    # long as the depth) before the first reaches _bounded, so 64 KiB of brackets
    # took gigabytes; 4 KiB bounds that to tens of MiB
    seen: dict[str, Any] = {}  # where the reading is: the event's place, id and type, the last parse event
    items = ijson.items(_bounded(ijson.parse(source, use_float=True, buf_size=PARSE_READ), where, seen), "events.item")
    while True:
        # only the reading is located here; what _event, from_json and _bounded refuse
        # names its event already
        try:
            raw: Any = next(items, _END)
        except ijson.JSONError as exc:
            raise _json_error(exc, f, where, n, seen) from None
        except (InvalidInputError, CorruptError) as exc:
            if exc is not source.fault:
                raise
            # refused by the Diverter (a number too long, a lone surrogate, a long string
            # not UTF-8), once ijson had read every byte before it: `seen` is its place
            hint = "export it again: `temporal workflow show -w ID --output json`"
            raise type(exc)(
                f"{where}: {_place(seen)}: {exc.message.removeprefix(where + ': ')}",
                hint=hint if isinstance(exc, CorruptError) else f"the file is not a history Temporal wrote; {hint}",
            ) from None
        except UnicodeDecodeError:
            raise CorruptError(
                f"{where}: not UTF-8 text after {n} events", hint="a history is JSON, as `temporal workflow show --output json` writes it"
            ) from None
        if raw is _END:
            break
        n += 1
        if n <= skip:
            if source.placeholders:
                put_back(raw, source.placeholders)
            continue
        if position is not None:
            position[0] = source.tell()
        ev = _event(raw, n, where)
        if from_json is not None and ev.seq > check_after:
            from_json(raw, ev.seq, where)  # a long string is checked as its placeholder (a string, and base64)
        if source.placeholders:
            put_back(raw, source.placeholders)
        ts = max(ev.ts, prev_ts)  # ts never decreases (formats/events.md)
        prev_ts = ts
        yield HistoryEvent(ev.seq, ts, ev.name, raw) if ts != ev.ts else ev
    if n == 0:
        raise _no_events(where)


def _json_error(exc: Exception, f: IO[bytes], where: str, n: int, seen: dict[str, Any]) -> CkptError:
    """The error line of what ijson refused, at its place (`seen`: ijson hands on every
    parse event before the one it refuses)."""
    import ijson

    again = "export it again: `temporal workflow show -w ID --output json`"
    text = str(exc)
    if "integer overflow" in text:  # valid JSON, but a number no int64 field of Temporal's holds
        return InvalidInputError(
            f"{where}: {_place(seen)} holds an integer beyond 64 bits, which no field of a Temporal history can",
            hint=f"the file is not a history Temporal wrote; {again}",
        )
    if "floating point) overflow" in text:  # valid JSON too: 1e999999999
        return InvalidInputError(
            f"{where}: {_place(seen)} holds a number out of range (over a 64-bit float's 1.8e308): "
            "no field of a Temporal history holds one",
            hint=f"the file is not a history Temporal wrote; {again}",
        )
    if "invalid bytes in UTF8" in text:
        at = _bad_utf8(f)
        return CorruptError(f"{where}: {_place(seen)}: not valid UTF-8" + (f" at byte {at}" if at is not None else ""), hint=again)
    if isinstance(exc, ijson.IncompleteJSONError) and ("premature" in text.lower() or "incomplete" in text.lower()):
        return CorruptError(f"{where}: the history ends early (truncated JSON, after {n} events of {_size(f)} bytes)", hint=again)
    return CorruptError(f"{where}: malformed JSON after {n} events: {_first_line(exc)}", hint=again)


def _bad_utf8(f: IO[bytes]) -> int | None:
    """The offset of the first byte of `f` that is not UTF-8 (None: every byte is)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    f.seek(0)
    at = 0
    while True:
        piece = f.read(1 << 20)
        pending = len(decoder.getstate()[0])
        try:
            decoder.decode(piece, final=not piece)
        except UnicodeDecodeError as exc:
            return at - pending + exc.start
        if not piece:
            return None
        at += len(piece)


def _place(seen: dict[str, Any]) -> str:
    """Where the careful reading is (`seen`, kept by _bounded), for an error line: the
    event, and the field being read: "event 9 (ActivityTaskScheduled), field input"."""
    prefix, kind, value = seen.get("last", ("", "", None))
    if kind == "map_key":
        path = f"{prefix}.{value}" if prefix else str(value)
    else:
        path = f"{prefix}.item" if kind == "start_array" else prefix
    place = _bomb_place(path, seen.get("index", 0), seen.get("id"), seen.get("type"))
    field = path.removeprefix("events.item.") if path.startswith("events.item.") else ""
    return f"{place}, field {field}" if field else place


#: how deep a history's JSON may nest: a real event nests about 10 deep (a failure's chain
#: of causes a little more); ijson's item builder takes memory quadratic in the depth, so
#: 50,000 brackets would take gigabytes before anything could refuse them
MAX_DEPTH = limits.MAX_DEPTH
PARSE_READ = 4096  # bytes ijson parses at a time (read_events)


def _bounded(events: Iterator[tuple[str, str, Any]], where: str, seen: dict[str, Any] | None = None) -> Iterator[tuple[str, str, Any]]:
    """ijson's parse events, refused (LimitExceededError, exit 7) past MAX_DEPTH, naming
    the event the bomb is in (its id and type when read before it); and refused
    (InvalidInputError) where the file's top level is no one `"events": [...]` list:
    ijson's prefixes are dotted paths, so `{"events": {"item": EVENT}}` or a key
    "events.item" look like the events list to its item builder. `seen`, if given, is
    kept at where the reading is: "index" (events read whole), "id" and "type" of the
    event being read, once read, and "last", the last parse event."""
    depth = 0
    index = 0  # events read whole so far
    eid: Any = None
    etype: Any = None
    events_key = False  # the top level's "events" key was read
    want_list = False  # its value comes next
    if seen is None:
        seen = {}
    seen["index"] = 0
    for ev in events:
        prefix, kind = ev[0], ev[1]
        if want_list:
            want_list = False
            if kind != "start_array":
                what = "a JSON object" if kind == "start_map" else f"a {kind}"
                raise InvalidInputError(
                    f'{where}: its "events" is {what}, not a list: not a Temporal history (a JSON object with an "events" list)',
                    hint="export one with `temporal workflow show -w ID --output json`",
                )
        if kind == "start_map" or kind == "start_array":
            depth += 1
            if depth > MAX_DEPTH:
                raise LimitExceededError(
                    f"{where}: {_bomb_place(prefix, index, eid, etype)} nests deeper than {MAX_DEPTH} levels",
                    hint="a Temporal history nests about 10 deep: the file is not one Temporal wrote; "
                    "export it again: `temporal workflow show -w ID --output json`",
                )
        elif kind == "end_map" or kind == "end_array":
            depth -= 1
            if depth == 2 and kind == "end_map" and prefix == "events.item":
                index += 1
                eid = etype = None
                seen["index"] = index
                seen.pop("id", None)
                seen.pop("type", None)
        elif depth == 1 and kind == "map_key":
            if ev[2] == "events":
                if events_key:
                    raise InvalidInputError(
                        f'{where}: two "events" keys at its top level: not a Temporal history (one "events" list)',
                        hint="export it again: `temporal workflow show -w ID --output json`",
                    )
                events_key = want_list = True
            elif ev[2] == "events.item":
                raise InvalidInputError(
                    f'{where}: a top-level key "events.item": not a Temporal history (its events are one "events" list)',
                    hint="export it again: `temporal workflow show -w ID --output json`",
                )
        elif depth == 3 and prefix in _ID_PREFIXES:
            eid = seen["id"] = ev[2]
        elif depth == 3 and prefix in _TYPE_PREFIXES:
            etype = seen["type"] = ev[2]
        seen["last"] = ev
        yield ev


_ID_PREFIXES = frozenset(("events.item.eventId", "events.item.event_id"))
_TYPE_PREFIXES = frozenset(("events.item.eventType", "events.item.event_type"))


def _bomb_place(prefix: str, index: int, eid: Any, etype: Any) -> str:
    """Where JSON nested too deep is: "event 7 (ActivityTaskCompleted)", "events[6] (...)"."""
    if not prefix.startswith("events.item"):
        return "the JSON outside the events list" if prefix.partition(".")[0] != "events" else "the events list"
    return describe_event(index, eid, etype)


def describe_event(index: int, eid: Any, etype: Any) -> str:
    """An event for an error line, from what is known of it: its id (when it has one that
    is its place: ids are 1, 2, 3, ...), else its place in the list; its type when read."""
    name = type_name(etype) if etype is not None else None
    kind = f" ({name})" if name else f" (type {etype!r})" if etype is not None else " (its type not read yet)"
    seq = eid if type(eid) is int else int(eid) if type(eid) is str and eid.isdecimal() and eid.isascii() and len(eid) < 20 else None
    return f"event {seq}{kind}" if seq == index + 1 else f"events[{index}]{kind}"


def _size(f: IO[bytes]) -> int:
    try:
        return os.fstat(f.fileno()).st_size
    except OSError:
        return 0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _event(raw: Any, n: int, where: str) -> HistoryEvent:
    """Check the fields ckpt reads itself: a map, its id n, a known type, a time."""
    if type(raw) is not dict:
        raise InvalidInputError(
            f"{where}: events[{n - 1}] is a {type(raw).__name__}, not a history event (a JSON object)",
            hint="give a history exported whole (`temporal workflow show --output json`)",
        )
    eid = raw.get("eventId", raw.get("event_id"))
    seq = (
        eid if type(eid) is int else int(eid) if type(eid) is str and eid.isdecimal() and eid.isascii() and len(eid) <= 20 else None
    )  # 20 digits hold every int64; more is no event id (and int() of 4,301 digits raises)
    if seq != n:
        raise InvalidInputError(
            f"{where}: events[{n - 1}] has event id {eid!r}, not {n}",
            hint="a history's event ids are 1, 2, 3, ... in order (export the whole history)",
        )
    raw_type = raw.get("eventType", raw.get("event_type"))
    name = type_name(raw_type)
    if name is None and type(raw_type) is int and 0 < raw_type <= len(EVENT_TYPES):
        name = _int_type(raw_type)
    if name is None:
        raise InvalidInputError(
            f"{where}: event {n} has an unknown event type {raw_type!r}",
            hint="a newer Temporal's event type? upgrade temporalio and ckpt; else the file is not a Temporal history",
        )
    if n == 1 and name != "WorkflowExecutionStarted":
        raise InvalidInputError(
            f"{where}: event 1 is {name}, not WorkflowExecutionStarted", hint="export the whole history, from its first event"
        )
    ts = event_time_ns(raw.get("eventTime", raw.get("event_time")))
    if ts is None:
        raise InvalidInputError(
            f"{where}: event {n} ({name}) has no valid eventTime: {raw.get('eventTime')!r}",
            hint="every event of an exported history has one (an RFC 3339 time); export the history again",
        )
    return HistoryEvent(n, ts, name, raw)


def _int_type(value: int) -> str | None:
    """An event type written as its enum number (temporalio's enum names it)."""
    from temporalio.api.enums.v1 import EventType

    try:
        return type_name(EventType.Name(value))  # type: ignore[arg-type]
    except ValueError:
        return None


def _loader() -> Any:
    """The check of one event by temporalio's protobuf message: protobuf JSON is parsed as
    it is; an event it refuses goes through temporalio's own loader, which also reads the
    older JSON (enum values as `Normal`), and is refused if that refuses it too."""
    from google.protobuf.json_format import ParseDict, ParseError
    from temporalio.api.history.v1 import HistoryEvent

    def check(raw: dict[str, Any], seq: int, where: str) -> None:
        try:
            ParseDict(raw, HistoryEvent(), ignore_unknown_fields=True)
            return
        except (ParseError, ValueError, TypeError, AttributeError, KeyError):
            pass
        # imported here, for the rare event protobuf JSON refuses: temporalio.client costs
        # every `ckpt import temporal` a quarter of a second to import
        from temporalio.client import WorkflowHistory

        try:
            WorkflowHistory.from_json("check", {"events": [raw]})
        except Exception as exc:  # noqa: BLE001 - protobuf's ParseError and whatever the loader raises: the input is bad
            raise InvalidInputError(
                f"{where}: event {seq} is not a Temporal history event: {_first_line(exc)}", hint="the file is not a history Temporal wrote"
            ) from None

    return check

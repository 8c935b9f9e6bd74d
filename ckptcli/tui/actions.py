"""Actions where you look: fork, tag, restore, export, from the screen that shows the
checkpoint or the event. Each is confirmed in a small modal (ckptcli.tui.screens.confirm:
what will happen, Enter does it, Esc cancels), calls the library functions the CLI
command calls (so its errors are the same one-line messages, shown as a notification),
and prints the equivalent `ckpt` command in a notification (and copies it with OSC 52).

An `Action` is plain data and functions: what it asks for (its fields), what it will do
with given values (`describe`), the command line that does the same (`command`), and the
doing (`run`, which raises CkptError). `start` shows it and runs it in a worker thread.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ckptcli.errors import CkptError, ConflictError, InvalidInputError, NotFoundError
from ckptcli.store.repository import Store
from ckptcli.tui.session import Session

__all__ = [
    "ACTION_KEYS",
    "Action",
    "Field",
    "HasPoint",
    "available",
    "checkpoint_fork",
    "cli_command",
    "export_action",
    "fork_action",
    "restore_action",
    "restore_to_directory",
    "run_on",
    "start",
    "store_args",
    "tag_action",
]

Values = dict[str, str]


@dataclass
class Field:
    """An input of the confirm modal."""

    name: str
    label: str
    value: str = ""
    placeholder: str = ""
    required: bool = True


@dataclass
class Action:
    title: str
    #: what will happen, with the values typed so far (the modal shows it as they change)
    describe: Callable[[Values], str]
    #: the ckpt command line that does the same, as its arguments
    command: Callable[[Values], list[str]]
    #: does it; returns what it did in one line. Raises CkptError.
    run: Callable[[Values], str]
    fields: list[Field] = field(default_factory=list)
    #: it writes to the store (the history is read again after it)
    changes_store: bool = False
    #: the checkpoint it wrote, once run (a fork: the history's cursor goes to it)
    made: bytes | None = None

    @property
    def inputs(self) -> list[Field]:
        return self.fields

    def command_line(self, values: Values) -> str:
        return cli_command(self.command(values))


def store_args(session: Session) -> list[str]:
    """`--store WHERE`, unless the command would find that store by itself (CKPT_STORE,
    or .ckpt/ in the current directory or above)."""
    src = session.source
    if not isinstance(src, Store):
        return []
    if src.directory is not None:
        from ckptcli.store.repository import find_store

        try:
            found = find_store()
        except CkptError:
            found = None
        if isinstance(found, Path) and os.path.realpath(found) == os.path.realpath(src.directory):
            return []
    return ["--store", session.where]


def _ref(session: Session, cid: bytes) -> str:
    """How the command names the checkpoint: a checkpoint file by its path, else a short id."""
    if not isinstance(session.source, Store):
        return session.where
    return cid.hex()[:12]


def cli_command(args: list[str]) -> str:
    """The arguments as one shell command line, quoted where needed."""
    return " ".join(shlex.quote(a) for a in ["ckpt", *args])


def _need_store(session: Session, what: str) -> Store:
    if not isinstance(session.source, Store):
        raise InvalidInputError(
            f"a checkpoint file has no history to {what}", hint="import it into a store first (ckpt import), then do it there"
        )
    return session.source


# -- tag -------------------------------------------------------------------------------------------
def tag_action(session: Session, cid: bytes) -> Action:
    """`ckpt tag NAME ID`: Store.set_tag under the store's shared lock, as the command does."""
    short = cid.hex()[:12]

    def command(v: Values) -> list[str]:
        return ["tag", v.get("name", "").strip() or "NAME", _ref(session, cid), *store_args(session)]

    def describe(v: Values) -> str:
        name = v.get("name", "").strip() or "NAME"
        return f"Point the tag {name!r} at checkpoint {short}. A tag that exists already is refused (ckpt tag --force moves one)."

    def run(v: Values) -> str:
        store = _need_store(session, "tag")
        name = v["name"].strip()
        with store.backend.lock("store", shared=True):  # a prune cannot remove the target meanwhile
            store.set_tag(name, cid)
        return f"tagged {short} as {name}"

    return Action("Tag", describe, command, run, [Field("name", "tag name", placeholder="e.g. known-good")], changes_store=True)


# -- fork ------------------------------------------------------------------------------------------
def fork_action(session: Session, cid: bytes, at: int | None = None, *, first: int | None = None, last: int | None = None) -> Action:
    """`ckpt fork ID --at SEQ [--branch NAME]`: ckptcli.history.replay.fork. With `at`, the
    seq is fixed (the timeline's cursor); without it, the modal asks for it (`last`, the
    end of the tail, as its value)."""
    short = cid.hex()[:12]
    action: Action

    def seq_of(v: Values) -> int | None:
        if at is not None:
            return at
        text = v.get("at", "").strip().lstrip("#")
        return int(text) if text.isascii() and text.isdecimal() else None

    def command(v: Values) -> list[str]:
        seq = seq_of(v)
        args = ["fork", _ref(session, cid), "--at", str(seq) if seq is not None else "SEQ"]
        branch = v.get("branch", "").strip()
        if branch:
            args += ["--branch", branch]
        for spec in session.reducer_specs:  # the fork replays with them, as the TUI does
            args += ["--reducers", spec]
        return [*args, *store_args(session)]

    def describe(v: Values) -> str:
        seq = seq_of(v)
        where = f"seq {seq}" if seq is not None else "the seq you give"
        branch = v.get("branch", "").strip()
        out = (
            f"Write a NEW checkpoint whose state is checkpoint {short}'s state replayed to {where}, its parent {short}, "
            f"labelled fork.of and fork.at. {short} is not changed; the subject's latest stays where it is."
        )
        if branch:
            out += f" The branch {branch!r} will point at the fork."
        if first is not None and last is not None:
            out += f" (The tail holds seq {first} to {last}.)"
        return out

    def run(v: Values) -> str:
        from ckptcli.format.manifest import check_ref_name
        from ckptcli.history.replay import fork

        store = _need_store(session, "fork")
        seq = seq_of(v)
        if seq is None:
            raise InvalidInputError(f"{v.get('at', '')!r} is not a seq number", hint="give the seq of the event to fork after")
        branch = v.get("branch", "").strip() or None
        if branch is not None:
            check_ref_name(branch, "branch name")
        result = fork(store, cid.hex(), seq, branch=branch, reducers=session.reducers)
        action.made = result.id
        on = f" on branch {branch}" if branch else ""
        return f"forked {short} at seq {seq} -> {result.hex[:12]}{on}; the original is unchanged"

    fields = [] if at is not None else [Field("at", "at seq", str(last) if last is not None else "", placeholder="the seq to fork after")]
    fields.append(Field("branch", "branch (optional)", placeholder="a branch to point at the fork; empty: none", required=False))
    action = Action("Fork", describe, command, run, fields, changes_store=True)
    return action


# -- restore -----------------------------------------------------------------------------------------
def _state_format(ck: Any) -> str:
    return "msgpack" if ck.manifest.layout.get("format") == "msgpack" else "json"


def restore_to_directory(ck: Any, directory: Path) -> tuple[str, int]:
    """Restore `ck` into `directory` as `ckpt restore ID -o DIR/state.FMT --blobs DIR` does
    (Checkpoint.restore_blobs, then the state document written whole or not at all), into a
    new or empty directory only: one that holds anything is refused before anything is
    written. Returns the state document's name and the bytes of blobs written."""
    from ckptcli.api import refuse_output_into_source, refuse_url
    from ckptcli.store.backend import write_file_atomic

    refuse_url(directory, "the target directory")
    if directory.exists() or directory.is_symlink():
        if not directory.is_dir():
            raise InvalidInputError(f"{directory} is not a directory", hint="give a new or empty directory")
        if any(directory.iterdir()):
            raise ConflictError(
                f"{directory} is not empty", hint="restore into a new or empty directory (ckpt restore --overwrite replaces files)"
            )
    name = f"state.{_state_format(ck)}"
    blobs = ck.blobs()
    if name in blobs:
        raise ConflictError(
            f"checkpoint {ck.hex[:12]} has a blob named {name!r}, where the state document would go", hint="use ckpt restore -o elsewhere"
        )
    refuse_output_into_source(ck, directory / name, "the state document")
    written = ck.restore_blobs(directory) if blobs else 0
    directory.mkdir(parents=True, exist_ok=True)
    fmt = _state_format(ck)
    write_file_atomic(directory / name, lambda fh: ck.write_state(fh, fmt))
    return name, written


def restore_action(session: Session, cid: bytes) -> Action:
    short = cid.hex()[:12]
    ck = session.checkpoint(cid)
    has_blobs = "blobs" in ck.manifest.sections

    def target(v: Values) -> str:
        return v.get("path", "").strip()

    def command(v: Values) -> list[str]:
        d = target(v) or "DIR"
        args = ["restore", _ref(session, cid), "-o", os.path.join(d, f"state.{_state_format(ck)}")]
        if has_blobs:
            args += ["--blobs", d]
        return [*args, *store_args(session)]

    def describe(v: Values) -> str:
        d = target(v) or "DIR"
        what = f"its state document as {os.path.join(d, f'state.{_state_format(ck)}')}"
        if has_blobs:
            what += f" and its blobs (files) under {d}"
        note = ""
        p = Path(os.path.expanduser(d)) if target(v) else None
        if p is not None and p.is_dir() and any(p.iterdir()):
            note = f" {d} is not empty: it will be refused."
        return f"Restore checkpoint {short}: {what}, into a new or empty directory.{note}"

    def run(v: Values) -> str:
        d = Path(os.path.expanduser(target(v)))
        name, written = restore_to_directory(ck, d)
        from ckptcli._util.units import human_size

        blobs = f" and {human_size(written)} of blobs" if has_blobs else ""
        return f"restored {short} into {d}: {name}{blobs}"

    return Action("Restore", describe, command, run, [Field("path", "directory", placeholder="a new or empty directory")])


# -- export ----------------------------------------------------------------------------------------
def export_action(session: Session, cid: bytes) -> Action:
    short = cid.hex()[:12]
    ck = session.checkpoint(cid)

    def target(v: Values) -> str:
        return v.get("path", "").strip()

    def command(v: Values) -> list[str]:
        return ["export", _ref(session, cid), "-o", target(v) or "FILE", *store_args(session)]

    def describe(v: Values) -> str:
        f = target(v) or "FILE"
        out = f"Write checkpoint {short} as one self-contained file {f} (every read command accepts it)."
        p = Path(os.path.expanduser(f)) if target(v) else None
        if p is not None and p.is_file():
            out += f" {f} exists: it will be replaced once the new file is complete."
        return out

    def run(v: Values) -> str:
        from ckptcli._util.units import human_size
        from ckptcli.api import export_checkpoint, refuse_url
        from ckptcli.store.single import check_output_path

        path = Path(os.path.expanduser(target(v)))
        refuse_url(path, "the output")
        check_output_path(path)
        size = export_checkpoint(ck, path)
        return f"exported {short} to {path} ({human_size(size)})"

    return Action("Export", describe, command, run, [Field("path", "file", f"{short}.ckpt", placeholder="e.g. agent.ckpt")])


# -- running one -------------------------------------------------------------------------------------
def start(screen: Any, action: Action, done: Callable[[str], None] | None = None) -> None:
    """Show `action`'s confirm modal over `screen`; on Enter, run it in a worker thread and
    say what it did and the equivalent command (copied), or its error, in a notification.
    `done(result)` is called on the app's thread after it succeeded (the history is read
    again first when the action wrote to the store)."""
    from ckptcli.tui.screens.confirm import ConfirmScreen

    app = screen.app

    def confirmed(values: Values | None) -> None:
        if values is None:
            return
        cmd = action.command_line(values)

        def work() -> None:
            try:
                result = action.run(values)
            except CkptError as exc:
                app.call_from_thread(_failed, app, action, str(exc))
                return
            except OSError as exc:
                where = f"{exc.filename}: " if exc.filename else ""
                app.call_from_thread(_failed, app, action, f"{where}{exc.strerror or exc}")
                return
            except Exception as exc:  # noqa: BLE001 - a bug: a notification, not a crash
                app.call_from_thread(_failed, app, action, f"internal error: {type(exc).__name__}: {exc}")
                return
            app.call_from_thread(_succeeded, app, action, result, cmd, done)

        app.run_worker(work, thread=True, group="action", name=f"action {action.title}", exit_on_error=False)

    app.push_screen(ConfirmScreen(action), confirmed)


def _failed(app: Any, action: Action, error: str) -> None:
    app.notify(error, title=f"{action.title.lower()}: error", severity="error", timeout=10)


def _succeeded(app: Any, action: Action, result: str, cmd: str, done: Callable[[str], None] | None) -> None:
    if action.changes_store:  # the history shows the new tag, branch or fork (HistoryScreen.reload)
        reloaded = False
        for s in app.screen_stack:
            reload = getattr(s, "reload", None)
            if callable(reload):
                reload()
                reloaded = True
            show = getattr(s, "show_checkpoint", None)
            if action.made is not None and callable(show):
                show(action.made)  # the history's cursor on the new fork
        session = getattr(app, "session", None)
        if not reloaded and session is not None and isinstance(session.source, Store):
            # no history screen yet (a timeline opened alone): the one made later reads the store as it is now
            from ckptcli.history.graph import History

            try:
                session.history = History.from_store(session.source)
            except CkptError as exc:
                app.notify(str(exc), title="error", severity="error", timeout=8)
    try:
        app.copy_to_clipboard(cmd)
        copied = " (copied)"
    except Exception:  # noqa: BLE001 - a terminal without OSC 52: the notification still says it
        copied = ""
    app.notify(f"{result}\n$ {cmd}{copied}", title=action.title.lower(), timeout=10)
    if done is not None:
        done(result)


def checkpoint_fork(session: Session, cid: bytes) -> Action:
    """A fork of a checkpoint from the history or its screen: the modal asks for the seq,
    the end of its tail given (NotFoundError for a checkpoint without an event tail)."""
    from ckptcli.history.timeline import Timeline

    ck = session.checkpoint(cid)
    if "events" not in ck.manifest.sections:
        raise NotFoundError(f"checkpoint {cid.hex()[:12]} has no event tail to fork from", hint="a fork replays a tail to a seq")
    model = Timeline.open(ck, reducers=session.reducers)
    return fork_action(session, cid, first=model.base_seq, last=model.last_seq)


# -- the keys, on every screen that shows a checkpoint ------------------------------------------------
#: (key, action kind, description): bound on the app (CkptApp), shown where a screen has a `point`.
ACTION_KEYS: list[tuple[str, str, str]] = [
    ("B", "fork", "Fork here"),
    ("T", "tag", "Tag"),
    ("R", "restore", "Restore to a directory"),
    ("E", "export", "Export to a file"),
]


@runtime_checkable
class HasPoint(Protocol):
    """A screen that shows a checkpoint, or an event of its tail, under the cursor."""

    app: Any

    def point(self) -> tuple[bytes, int | None] | None:
        """The checkpoint under the cursor and, on a timeline, the seq of the event at the
        cursor (the fork goes after it); None when there is none (an empty list)."""


def available(screen: Any) -> bool:
    return isinstance(screen, HasPoint)


def run_on(screen: Any, kind: str) -> None:
    """The action `kind` (fork, tag, restore, export) on what `screen` has under its cursor."""
    if not isinstance(screen, HasPoint):
        return
    at = screen.point()
    notify: Callable[..., Any] = screen.app.notify
    if at is None:
        notify("nothing under the cursor", severity="warning", timeout=3)
        return
    cid, seq = at
    session: Session = getattr(screen, "session")  # noqa: B009 - every screen of the app has one
    try:
        if kind == "fork":
            action = fork_action(session, cid, seq) if seq is not None else checkpoint_fork(session, cid)
        else:
            action = {"tag": tag_action, "restore": restore_action, "export": export_action}[kind](session, cid)
        if action.changes_store:
            _need_store(session, kind)
    except CkptError as exc:
        notify(str(exc), title=f"{kind}: error", severity="error", timeout=8)
        return
    start(screen, action)

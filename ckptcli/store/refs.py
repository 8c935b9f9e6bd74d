"""The refs of a store (formats/v1.md, "Config and refs"; formats/reflog.md): reading,
moving and resolving them, each move recorded in the ref's reflog.

`Refs` is the part of `Store` (repository.py) that deals with refs; it uses the
store's backend, manifests and warnings. Every change of a ref goes through `_swap`:
read the ref, decide, write. Where the backend's conditional writes are atomic
(`Backend.ref_cas`: S3, GCS, Azure, memory://) that is a compare-and-swap: the ref is
put only if it is still the version read (created only if still absent), else read
again and decided again, and its reflog entry is added after the move. Elsewhere (a
local store, fsspec) it happens under the store's "refs" lock, the entry first.

A ref is deleted only where no other move can race it: under the refs lock, or, on
compare-and-swap, under the store lock held exclusively (object storage has no
conditional delete; every other ref move holds the store lock shared).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptcli.errors import (
    CkptError,
    ConflictError,
    CorruptError,
    InvalidInputError,
    LatestMovedError,
    LimitExceededError,
    NotFoundError,
    UnsafePathError,
    UnsupportedVersionError,
    generic_hint,
)
from ckptcli.format import framing
from ckptcli.format.manifest import NAME_RE, Manifest, Subject, check_name, check_ref_name, head_order
from ckptcli.store import layout, reflog
from ckptcli.store.backend import Backend

__all__ = ["Refs"]

_KEEP = object()  # write_ref: the ref's own `reset` stays
_ANY = object()  # advance_latest: from whatever the ref names


class RefMovedError(ConflictError):
    """advance_latest(only_from=...): the ref no longer names what the caller's check read
    (another writer moved it since); nothing was moved."""


_DIGITS = re.compile(r"[0-9]+")  # N in REF~N and NAME@{N}: ASCII digits only


@dataclass(frozen=True)
class _Seen:
    """A ref as one read found it (`Refs._swap`)."""

    target: bytes | None  #: None: no ref, or a damaged one
    reset: int | None
    updated: int | None
    exists: bool
    version: str | None = None  #: the backend's version of it, for compare-and-swap


@dataclass(frozen=True)
class _Move:
    """What `Refs._swap` makes of a ref."""

    target: bytes | None  #: None: the ref is removed
    reason: str
    log: bool = True  #: a reflog entry, when the target changes
    reset: int | object | None = _KEEP  #: _KEEP: the ref's own stays
    kept: bool = False  #: an entry even though the target stays (old == new)


class Refs:
    """The refs part of `Store`."""

    backend: Backend
    location: str
    #: head_order of the checkpoints advance_latest_many moved refs to (the refs' targets: one per subject)
    _head_orders: dict[bytes, tuple[int, int]]

    if TYPE_CHECKING:  # provided by Store

        @property
        def version(self) -> int: ...

        def warn(self, message: str) -> None: ...

        def manifest(self, cid: bytes) -> Manifest: ...

        def manifest_ids(self) -> list[bytes]: ...

    # -- refs --------------------------------------------------------------------
    def read_ref(self, path: str) -> bytes | None:
        return self.read_ref_state(path)[0]

    def read_ref_state(self, path: str) -> tuple[bytes | None, int | None]:
        """(target, reset) of the ref at `path`: `reset` is when a subject's latest was
        last moved on purpose (`ckpt reset`, a repair; formats/v1.md), None when never;
        (None, None) when there is no ref. Raises: CorruptError for a damaged ref."""
        # one read, a missing ref NotFoundError; never `exists` first: a ref that is a link
        # or a FIFO is no regular file there, and reading it as "no ref" hid a tag from
        # prune, which removed what it protects (the read refuses it, naming it)
        try:
            return _decode_ref(self.backend.read(path), path)[:2]
        except NotFoundError:
            return None, None
        except (CorruptError, LimitExceededError) as exc:  # (a newer format's keeps its own: upgrade ckpt)
            if generic_hint(exc):
                exc.hint = damaged_ref_hint(path)
            raise

    def write_ref(self, path: str, target: bytes, reason: str = "update", *, log: bool = True, reset: int | object | None = _KEEP) -> None:
        """Point the ref at `path` at `target`, whatever it names; the caller holds the
        refs lock (`ref_lock`). The move is recorded in the ref's reflog (reflog.py),
        but not with `log` False: a writer that moves a ref at every commit of a chain
        (a LangGraph thread's latest), whose history is the chain itself. `reset`: the
        time of its last deliberate move (read_ref_state), kept in the ref itself; by
        default the ref's own is carried over (every move keeps a `ckpt reset` on record)."""
        self._swap(path, lambda _seen: _Move(target, reason, log, reset), lock=False, replace=True)

    def log_move(self, path: str, old: bytes | None, new: bytes | None, reason: str, time_ns: int | None = None) -> None:
        """Append a move of the ref at `path` to its reflog (`time_ns`: the ref's new
        `updated` stamp, None: now). The reflog is history for people, which nothing else
        depends on: when it cannot be written (something else at its path, no permission,
        a full disk) the ref still moves, and this is said once (a warning) rather than
        failing a command whose checkpoint is already committed."""
        try:
            reflog.append(self.backend, path, old, new, reason, time_ns=time_ns)
        except CkptError as exc:
            self.warn(  # said once per log (`warn` says each message once)
                f"the reflog {layout.log_path(path)} cannot be written ({exc.message}); the ref moved without its reflog entry; "
                "make that path a writable regular file (or remove it) so later moves are recorded"
            )

    def remove_ref(self, path: str, reason: str = "delete") -> bytes | None:
        """Delete the ref at `path` (recorded in its reflog); the caller holds the refs
        lock (`ref_lock`) and, where refs move by compare-and-swap, the store lock
        exclusively (see the module's docstring). Returns: its old target (None if it was
        damaged or missing)."""
        return self._swap(path, lambda _seen: _Move(None, reason), lock=False, replace=True)[0].target

    def ref_lock(self, wait: float = 30.0) -> contextlib.AbstractContextManager[None]:
        """The refs lock, exclusive (waiting up to `wait` seconds), where refs move under
        it; nothing where they move by compare-and-swap (`Backend.ref_cas`). For a caller
        of write_ref and remove_ref, and of reflog.expire."""
        return contextlib.nullcontext() if self.backend.ref_cas else self.backend.lock("refs", shared=False, wait=wait)

    def _see(self, path: str, replace: bool = False) -> _Seen:
        """The ref at `path` as it is now, with its version where refs move by
        compare-and-swap. A damaged ref is seen as existing, with no target. One that
        cannot be read at all (larger than a ref can be) has no version to swap against
        where refs move by compare-and-swap: it raises, unless `replace` (a caller that
        overwrites whatever is there: write_ref, remove_ref, delete_ref), which then
        takes the version from the object's metadata (`Backend.version`), never its bytes."""
        version: str | None = None
        try:
            if self.backend.ref_cas:
                data, version = self.backend.read_versioned(path)
            else:
                data = self.backend.read(path)  # (one missing is NotFoundError: no `exists` first)
        except NotFoundError:
            data = None
        except (UnsafePathError, UnsupportedVersionError):
            raise  # a link (or a linked directory) there: never written through, never replaced unseen
        except CkptError:
            if self.backend.ref_cas:
                if not replace:
                    raise  # no version: nothing can be swapped
                version = self.backend.version(path)
                return _Seen(None, None, None, version is not None, version)
            return _Seen(None, None, None, True)  # its old value is unknown
        if data is None:
            return _Seen(None, None, None, False, version)
        try:
            return _Seen(*_decode_ref(data, path), True, version)
        except UnsupportedVersionError:
            raise  # a newer ckpt's: never replaced by one that cannot read it (formats/v2.md)
        except CkptError:
            return _Seen(None, None, None, True, version)

    def _swap(
        self, path: str, decide: Callable[[_Seen], _Move | None], *, lock: bool = True, replace: bool = False
    ) -> tuple[_Seen, _Move | None]:
        """Change the ref at `path` as `decide` says given the ref as it is (None: leave
        it). Under the refs lock (taken unless `lock` is False: the caller holds it), the
        reflog entry first; by compare-and-swap where the backend has it, the entry after
        the move, and on a conflict (another writer moved the ref since it was read) read
        and decided again, up to reflog.CAS_TRIES times, with a random pause between.
        `replace`: as for `_see`. Returns: (the ref as last seen, what was done). Raises:
        what `decide` raises; ConflictError when every try lost."""
        if not self.backend.ref_cas:
            with self.backend.lock("refs", shared=False) if lock else contextlib.nullcontext():
                seen = self._see(path)
                move = decide(seen)
                if move is not None:
                    self._log(path, seen, move, None)
                    if move.target is None:
                        self.backend.delete(path)
                    else:
                        self.backend.write_atomic(path, self._encode(seen, move, time.time_ns()))
                return seen, move
        for attempt in range(reflog.CAS_TRIES):
            seen = self._see(path, replace)
            move = decide(seen)
            if move is None:
                return seen, None
            # the stamp grows along the ref's moves whatever the writers' clocks: the
            # reflog keeps its entries in this order (reflog.append); it stays a valid
            # entry time even after a ref stamped at the end of time
            stamp = max(time.time_ns(), min((seen.updated or 0) + 1, reflog.MAX_TIME_NS - 1))
            if move.target is None:
                self.backend.delete(path)  # no conditional delete: no other move runs (module docstring)
            elif not self.backend.write_if_match(path, self._encode(seen, move, stamp), seen.version):
                reflog.backoff(attempt)
                continue
            self._log(path, seen, move, stamp)
            return seen, move
        raise ConflictError(f"{path}: {reflog.CAS_TRIES} writers moved the ref at once; it was not moved", hint="try again")

    def _encode(self, seen: _Seen, move: _Move, stamp: int) -> bytes:
        body: dict[str, Any] = {"target": move.target, "updated": stamp}
        reset = seen.reset if move.reset is _KEEP else move.reset
        if reset is not None:
            body["reset"] = reset
        return framing.encode_record(framing.KIND_REF, body, self.version)

    def _log(self, path: str, seen: _Seen, move: _Move, stamp: int | None) -> None:
        if move.target is None:
            if seen.exists and move.log:
                self.log_move(path, seen.target, None, move.reason, stamp)
        elif move.kept or (move.log and seen.target != move.target):
            self.log_move(path, seen.target, move.target, move.reason, stamp)

    def keep_latest(self, subject: Subject, reason: str) -> None:
        """Record in the reflog that a new checkpoint of `subject` deliberately left its
        latest where it is (an entry whose old and new are the same: a fork, a migration
        of an older checkpoint). `ckpt verify` and `ckpt repair refs` then know the
        newer checkpoint is not a take killed before it moved the ref (last_moved_ns)."""
        path = self.latest_ref(subject)
        with self.ref_lock():
            try:
                cur = self.read_ref(path)
            except CkptError:
                return
            if cur is not None:
                self.log_move(path, cur, cur, reason)

    def last_moved_ns(self, path: str, *, quiet: bool = False) -> int | None:
        """When the ref at `path` was last moved (or deliberately kept) by this ckpt, from
        its reflog, or last reset (the ref's own `reset`, which survives a lost reflog);
        None when it has neither (a store an older ckpt wrote). What is wrong with the
        reflog is a warning, but not with `quiet` (verify, which names it as a problem)."""
        warn = (lambda _message: None) if quiet else self.warn
        try:
            entries = reflog.read(self.backend, path, warn)
        except CkptError as exc:  # unreadable (too large, say): as if there were none; verify names it
            warn(f"{exc.message}; its entries are not used")
            entries = []
        when = entries[-1].time_ns if entries else None
        try:
            reset = self.read_ref_state(path)[1]  # a reset is in the ref too: the reflog may be gone
        except CkptError:
            reset = None
        if reset is not None and (when is None or reset > when):
            when = reset
        return when

    def ref_log(self, path: str | None = None) -> list[reflog.Entry]:
        """The reflog of the ref at `path` ("refs/..."), or of every ref, newest first.
        A damaged entry is skipped with a warning."""
        if path is None:
            return reflog.read_all(self.backend, self.warn)
        return list(reversed(reflog.read(self.backend, path, self.warn)))

    def set_latest(self, subject: Subject, cid: bytes, reason: str = "reset") -> bytes | None:
        """Point the subject's latest at `cid`, whatever it pointed at (`ckpt reset`);
        the head hint too, so the next take's parent is `cid`. Returns: the old target."""

        def decide(_seen: _Seen) -> _Move:
            self.note_head(subject, cid)
            # the ref records the reset itself: checkpoints committed before it are left
            # behind on purpose, and a take already running does not undo it
            return _Move(cid, reason, reset=time.time_ns())

        return self._swap(self.latest_ref(subject), decide)[0].target

    def ref_paths(self) -> list[str]:
        return self.backend.list(layout.REFS)

    def refs(self, *, strict: bool = False, prefix: str = "refs") -> dict[str, bytes]:
        """Every ref under `prefix` (path without "refs/" -> target). A damaged ref is
        left out with one warning naming it, unless `strict` (then CorruptError): a
        caller that decides what to delete by the refs (prune) must not overlook one."""
        return self._read_refs(prefix, strict)[0]

    def readable_refs(self, prefix: str = "refs", *, strict: bool = False) -> tuple[dict[str, bytes], list[tuple[str, CkptError]]]:
        """Every ref under `prefix` that reads (as refs() gives them), and each that does
        not, with its error, for the caller to say (no warning here); `strict` raises the
        first such error instead."""
        out = {}
        damaged: list[tuple[str, CkptError]] = []
        for path in self.backend.list(prefix):
            try:
                t = self.read_ref(path)
            except NotFoundError:
                continue  # deleted since the listing
            except CkptError as exc:  # (a newer ckpt's too: the caller tells it apart)
                if strict:
                    raise
                damaged.append((path, exc))
                continue
            if t is not None:
                out[path[len("refs/") :]] = t
        return out, damaged

    def _read_refs(self, prefix: str, strict: bool = False) -> tuple[dict[str, bytes], int]:
        """refs(), and how many refs were left out as damaged."""
        out, left_out = self.readable_refs(prefix, strict=strict)
        damaged = [(path, exc.message) for path, exc in left_out if not isinstance(exc, UnsupportedVersionError)]
        newer = [(path, exc.message) for path, exc in left_out if isinstance(exc, UnsupportedVersionError)]  # not damage
        if damaged:
            more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
            first = damaged[0][0]
            todo = damaged_ref_hint(first) if len(damaged) == 1 else "`ckpt verify` names each; docs/runbooks/store-damaged.md"
            self.warn(f"ref {first}{more} is damaged ({damaged[0][1]}) and is left out; {todo}")
        if newer:
            more = f" (and {len(newer) - 1} more)" if len(newer) > 1 else ""
            self.warn(f"ref {newer[0][0]}{more} is left out: {newer[0][1]}; upgrade ckpt (pip install -U ckptcli)")
        return out, len(damaged) + len(newer)

    @staticmethod
    def latest_ref(subject: Subject) -> str:
        return layout.latest_ref(subject.kind, subject.name)

    def latest_state(self, subject: Subject) -> tuple[bytes | None, int | None]:
        """The subject's latest ref as read_ref_state gives it ((None, None) when it is
        missing or damaged): what a take passes back to advance_latest as `expect`."""
        try:
            return self.read_ref_state(self.latest_ref(subject))
        except UnsupportedVersionError:
            raise  # a newer ckpt's ref: a take refuses it rather than replace it
        except CkptError:
            return None, None

    def advance_latest(
        self,
        subject: Subject,
        cid: bytes,
        created_ns: int,
        *,
        nested: bool = False,
        reason: str = "take",
        log: bool = True,
        expect: tuple[bytes | None, int | None] | None = None,
        only_from: object = _ANY,
    ) -> bool:
        """Point the subject's latest at `cid` unless a newer checkpoint got there first
        (`nested`: `cid` is a nested run's, which ranks below every other; head_order).
        `expect`: the latest ref as the caller read it before building `cid`
        (latest_state); when the ref was reset since (it names another checkpoint and
        its `reset` changed), latest stays where the reset put it and LatestMovedError
        is raised: a take that was running must not undo a `ckpt reset`.
        `only_from`: move only from exactly this value (bytes, or None for no ref), which
        the caller checked before it wrote `cid` (the LangGraph saver across hosts);
        a ref that names anything else but `cid` raises RefMovedError, nothing moved.
        Returns: whether latest names `cid` now."""
        decide = self._latest_decision(subject, cid, created_ns, nested, reason, log, expect, only_from)
        move = self._swap(self.latest_ref(subject), decide)[1]
        if move is None:
            return False
        if move.target is not None and move.target != cid:
            raise LatestMovedError(subject, move.target, cid)
        return True

    def advance_latest_many(
        self, moves: Sequence[tuple[Subject, bytes, int, bool]], *, reason: str = "take", log: bool = True
    ) -> list[bool]:
        """Several subjects' latest moved as advance_latest moves each (no `expect`, no
        `only_from`), for `moves` of (subject, cid, created_ns, nested), one subject once.
        Where refs move under the refs lock (no compare-and-swap), all of them under one
        hold of it and made durable together (Backend.write_atomic_many: one file-system
        sync instead of one per ref; the LangGraph saver moves every thread of a commit).
        After a crash each ref is its old or its new value. Returns: for each move,
        whether latest names its cid now."""
        if self.backend.ref_cas or len(moves) < 2:
            return [self.advance_latest(s, c, t, nested=n, reason=reason, log=log) for s, c, t, n in moves]
        done: list[bool] = []
        writes: list[tuple[str, bytes]] = []
        with self.backend.lock("refs", shared=False):
            for subject, cid, created_ns, nested in moves:
                path = self.latest_ref(subject)
                seen = self._see(path)
                move = self._latest_decision(subject, cid, created_ns, nested, reason, log, None, _ANY)(seen)
                if move is not None and move.target is not None:
                    self._log(path, seen, move, None)
                    writes.append((path, self._encode(seen, move, time.time_ns())))
                    if move.target == cid and seen.target != cid:  # known for the next move: the ref's target, one per subject
                        if seen.target is not None:
                            self._head_orders.pop(seen.target, None)
                        self._head_orders[cid] = (0 if nested else 1, created_ns)
                done.append(move is not None and move.target == cid)
            self.backend.write_atomic_many(writes)
        return done

    def _latest_decision(
        self,
        subject: Subject,
        cid: bytes,
        created_ns: int,
        nested: bool,
        reason: str,
        log: bool,
        expect: tuple[bytes | None, int | None] | None,
        only_from: object,
    ) -> Callable[[_Seen], _Move | None]:
        """What advance_latest does with the ref as it finds it (its docstring)."""

        def decide(seen: _Seen) -> _Move | None:
            cur, reset = seen.target, seen.reset  # a damaged ref is replaced (the take chose its parent around it)
            if only_from is not _ANY and cur != only_from and cur != cid:
                raise RefMovedError(f"{subject}: latest moved to {cur.hex()[:12] if cur else 'nothing'} since it was checked")
            if expect is not None and cur is not None and cur != expect[0] and cur != cid and reset != expect[1]:
                # moved on purpose while the caller ran: `cid` stays, unreferenced, and the
                # ref's reset moves past it (so neither verify, repair refs nor the next
                # take's head hint adopts it as a take killed before its ref moved)
                self.note_head(subject, cur)
                why = f"{reason} (latest kept: it was reset while the take ran; {cid.hex()[:12]} left behind)"
                return _Move(cur, why, log=False, reset=time.time_ns(), kept=True)
            if cur is not None and cur != cid:
                try:
                    if self._head_order(cur) > (0 if nested else 1, created_ns):
                        return None
                except CkptError:
                    pass  # a damaged target is replaced
            return _Move(cid, reason, log)

        return decide

    def _head_order(self, cid: bytes) -> tuple[int, int]:
        """`head_order` of checkpoint `cid`, from its manifest, or from what this store
        object wrote there itself (`advance_latest_many`: a writer that moves many refs at
        every commit reads none of their targets back). A manifest never changes (its id
        is its hash): what is known of it stays true."""
        order = self._head_orders.get(cid)
        if order is None:
            m = self.manifest(cid)
            order = head_order(m.labels, m.created_ns)
        return order

    def head_hint_path(self, subject: Subject) -> str:
        return layout.head_hint_path(subject.kind, subject.name)

    def note_head(self, subject: Subject, cid: bytes) -> None:
        """Say, before a take writes its manifest, which checkpoint it is about to commit
        (`cache/heads/KIND/NAME`, 32 bytes). If the take is killed between its manifest
        (the commit point) and its ref, the next take finds the dangling checkpoint here
        in O(1) instead of scanning every manifest. A hint only: not synced (a process
        kill keeps it; a power cut may lose it, and then the history forks as it would
        without it), ignored unless it names a readable manifest of the subject."""
        with contextlib.suppress(CkptError):  # a cache: a take never fails for want of it
            self.backend.write_hint(self.head_hint_path(subject), cid)

    def head(self, subject: Subject) -> bytes | None:
        """The default parent of a new checkpoint of `subject`: its newest committed
        checkpoint. That is its latest ref, unless a take was killed between writing its
        manifest (the commit point) and moving the ref, leaving a newer checkpoint the
        ref lags behind (a dangling head); then it is that one, so the history does not
        fork. Cost: the ref and one 32-byte hint (note_head), whatever the store's size.
        A damaged ref is answered from every manifest (and said once)."""
        path = self.latest_ref(subject)
        try:
            head, reset = self.read_ref_state(path)
        except (UnsafePathError, UnsupportedVersionError):
            raise  # a link, or a newer ckpt's ref, is refused, not worked around (a take would then replace it)
        except CkptError as exc:
            self.warn(f"{exc.message}; the subject's newest checkpoint is found from the manifests instead; run `ckpt repair refs`")
            newest = self.newest_of(subject)
            return newest[1] if newest is not None else None
        try:
            hint = self.backend.read(self.head_hint_path(subject))
        except CkptError:
            return head
        if len(hint) != 32 or hint == head or not self.backend.exists(layout.manifest_path(hint)):
            return head  # no take left one behind (or it was killed before its manifest)
        try:
            dangling = self.manifest(hint)
        except CkptError:
            return head
        if dangling.subject != subject or (reset is not None and dangling.created_ns <= reset):
            return head  # (one committed before latest was reset was left behind on purpose)
        if head is not None:
            with contextlib.suppress(CkptError):
                if self.manifest(head).created_ns >= dangling.created_ns:
                    return head
        return hint

    def newest_of(self, subject: Subject | None) -> tuple[int, bytes] | None:
        """(created_ns, id) of the newest readable checkpoint of `subject` (by head_order:
        the one its latest ref names) or of any (for None), from every manifest: for a
        damaged or lost ref and `ckpt repair refs`, not for every take."""
        best: tuple[int, bytes] | None = None
        rank: tuple[tuple[int, int], bytes] | None = None
        for name in self.backend.list_names(layout.MANIFESTS):
            if len(name) != 64:
                continue
            try:
                cid = bytes.fromhex(name)
                m = self.manifest(cid)
            except (ValueError, CkptError):
                continue  # not a manifest name, or damaged (verify's business)
            if subject is None:
                if best is None or (m.created_ns, cid) > best:
                    best = (m.created_ns, cid)
            elif m.subject == subject and (rank is None or (head_order(m.labels, m.created_ns), cid) > rank):
                rank, best = (head_order(m.labels, m.created_ns), cid), (m.created_ns, cid)
        return best

    def _check_new_name(self, name: str, what: str) -> None:
        """Refuse a tag or branch name that would hide a checkpoint: `latest`, a full id, or
        a prefix of an id in the store (a tag or branch wins over an id prefix)."""
        check_ref_name(name, what)
        low = name.lower()
        if len(low) >= 4 and all(c in "0123456789abcdef" for c in low):
            hit = next((c for c in self.manifest_ids() if c.hex().startswith(low)), None)
            if hit is not None:
                raise InvalidInputError(
                    f"{what} {name!r} reads as the id of checkpoint {hit.hex()[:12]}: it would hide it",
                    hint="choose a name that is not a checkpoint id or its prefix",
                )

    def set_branch(self, name: str, cid: bytes, reason: str = "branch") -> None:
        self._check_new_name(name, "branch name")
        self._swap(layout.branch_ref(name), lambda _seen: _Move(cid, reason))

    def set_tag(self, name: str, cid: bytes, *, force: bool = False, reason: str = "tag") -> None:
        self._check_new_name(name, "tag name")
        path = layout.tag_ref(name)

        def decide(seen: _Seen) -> _Move:
            if seen.exists and seen.target is None:
                self.read_ref(path)  # damaged: raises, naming what is wrong
            if seen.target is not None and seen.target != cid and not force:
                raise ConflictError(f"tag {name!r} already points at {seen.target.hex()[:12]}", hint="pass --force to move it")
            return _Move(cid, reason)

        self._swap(path, decide)

    def delete_ref(self, path: str, reason: str = "delete") -> bytes | None:
        """Delete a ref; returns its old target (None if it was damaged). Where refs move
        by compare-and-swap this takes the store lock exclusively (see the module's
        docstring): the caller holds no store lock."""
        exclusive = self.backend.lock("store", shared=False) if self.backend.ref_cas else contextlib.nullcontext()

        def decide(seen: _Seen) -> _Move:
            if not seen.exists:
                raise NotFoundError(f"no ref {path[len('refs/') :]!r}")
            return _Move(None, reason)

        with exclusive:
            return self._swap(path, decide, replace=True)[0].target

    # -- resolving names -----------------------------------------------------------
    def resolve(self, ref: str) -> bytes:
        """A checkpoint id for an id, unique id prefix, tag, branch, KIND:NAME or `latest`,
        optionally followed by ~N (N first-parents back)."""
        base, back = ref, 0
        if "~" in ref:
            base, _, n = ref.rpartition("~")
            if not _DIGITS.fullmatch(n):
                raise InvalidInputError(f"{ref!r}: what follows '~' must be a number of steps back")
            back = int(n)
        cid = self._resolve_base(base)
        for step in range(back):
            parents = self.manifest(cid).parents
            if not parents:
                raise NotFoundError(f"{ref!r}: checkpoint {cid.hex()[:12]} has no parent ({step} steps back)")
            cid = parents[0]
        return cid

    def ref_path_of(self, name: str) -> str:
        """The ref path a name means in `ckpt reflog NAME` and NAME@{N}: KIND:NAME is the
        subject's latest; a path as the reflog prints it (latest/..., tags/...,
        branches/...) is itself; a plain name is a tag, else a branch."""
        path: str | None = None
        if name.startswith("latest/"):
            kind, _, rest = name[len("latest/") :].partition("/")
            bad = not rest
            if not bad:
                try:
                    path = self.latest_ref(Subject.parse(f"{kind}:{rest}"))
                except InvalidInputError:
                    bad = True
            if bad:
                raise InvalidInputError(
                    f"{name!r} is not a ref path", hint="give latest/KIND/NAME as `ckpt reflog` prints it, or KIND:NAME"
                )
        elif name.startswith(("tags/", "branches/")):
            ns, _, rest = name.partition("/")
            check_name(rest, f"{ns[:-1]} name in {name!r}")
            path = layout.ref_path(name)
        elif ":" in name:
            path = self.latest_ref(Subject.parse(name))
        else:
            check_name(name, "ref name")
            candidates = [layout.ref_path(f"{ns}/{name}") for ns in ("tags", "branches")]
        for p in [path] if path is not None else candidates:
            if self.backend.exists(p) or self.backend.exists(reflog.log_path(p)):
                return p
        raise NotFoundError(
            f"no such ref: {name!r} (no subject, tag or branch of that name has a ref or a reflog)",
            hint="see `ckpt reflog` for every ref's moves",
        )

    def _resolve_reflog(self, ref: str) -> bytes:
        """NAME@{N}: what the ref NAME pointed at N moves ago (@{0}: now)."""
        name, _, n = ref[:-1].rpartition("@{")
        if not _DIGITS.fullmatch(n):
            raise InvalidInputError(f"{ref!r}: what is inside @{{}} must be a number of moves back")
        back = int(n)
        # newest first; "kept" entries (old == new) are no move
        entries = [e for e in self.ref_log(self.ref_path_of(name)) if e.old != e.new]
        value: str | None
        if back < len(entries):
            value = entries[back].new
        elif back == len(entries) and entries:
            value = entries[-1].old  # what it pointed at before its first recorded move
        else:
            raise NotFoundError(
                f"{ref!r}: the reflog of {name} has only {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}",
                hint=f"see `ckpt reflog {name}`",
            )
        if value is None:
            raise NotFoundError(f"{ref!r}: {name} did not exist then", hint=f"see `ckpt reflog {name}`")
        if not self.backend.exists(f"{layout.MANIFESTS}/{value}"):
            raise NotFoundError(f"{ref!r}: checkpoint {value[:12]} is no longer in the store (pruned)")
        return bytes.fromhex(value)

    def _resolve_base(self, ref: str) -> bytes:
        if not ref:
            raise InvalidInputError("an empty checkpoint reference")
        if ref.endswith("}") and "@{" in ref:
            return self._resolve_reflog(ref)
        if ref == "latest":
            # only the subjects' latest refs are read: a damaged tag or branch is no
            # reason to refuse `latest`; a damaged latest ref or manifest is skipped
            # (with a warning) in favour of the newest readable one
            best: tuple[int, bytes] | None = None
            readable, left_out = self._read_refs("refs/latest")
            damaged = left_out > 0
            for _path, t in readable.items():
                try:
                    created = self.manifest(t).created_ns
                except NotFoundError:
                    continue  # pruned since the listing
                except CkptError as exc:
                    self.warn(f"{exc.message}; `latest` is chosen among the other subjects' latest checkpoints")
                    damaged = True
                    continue
                if best is None or created > best[0]:
                    best = (created, t)
            if best is None or damaged:
                # no readable latest ref (damaged, or something else at its path), or
                # one left out: the newest checkpoint is found from the manifests
                # themselves (only on this path: it reads every manifest)
                newest = self.newest_of(None)
                if newest is not None and (best is None or newest > best):
                    if best is None and not damaged:  # (a damaged ref was named already)
                        self.warn("no subject has a readable latest ref; `latest` was found from the manifests; run `ckpt repair refs`")
                    best = newest
            if best is None and damaged:
                # every checkpoint a latest ref names is damaged (said above), and no other
                # manifest reads: not an empty store, and a new take is not the answer
                raise CorruptError(
                    f"no checkpoint of the store at {self.location} can be read: `latest` names only damaged ones",
                    hint="run `ckpt verify` to see what is damaged, and docs/runbooks/store-damaged.md",
                )
            if best is None:
                raise NotFoundError(f"the store at {self.location} has no checkpoints yet", hint="take one with `ckpt take`")
            return best[1]
        if ":" in ref:
            subject = Subject.parse(ref)
            try:
                head = self.read_ref(self.latest_ref(subject))
            except (UnsafePathError, UnsupportedVersionError):
                raise
            except CkptError as exc:
                self.warn(f"{exc.message}; the newest checkpoint of {ref} was found from the manifests instead; run `ckpt repair refs`")
                newest = self.newest_of(subject)
                if newest is not None:
                    return newest[1]
                raise
            if head is None:
                newest = self.newest_of(subject)  # a ref lost (or something else at its path)
                if newest is None:
                    raise NotFoundError(f"no checkpoints of subject {ref}")
                self.warn(f"{ref} has no latest ref; its newest checkpoint was found from the manifests; run `ckpt repair refs`")
                return newest[1]
            return head
        low = ref.lower()
        if len(low) == 64 and all(c in "0123456789abcdef" for c in low) and self.backend.exists(f"{layout.MANIFESTS}/{low}"):
            return bytes.fromhex(low)  # a full id is that checkpoint, whatever refs exist
        hexlike = len(low) >= 4 and all(c in "0123456789abcdef" for c in low)
        for ns in ("tags", "branches"):
            if NAME_RE.match(ref):
                named = self.read_ref(layout.ref_path(f"{ns}/{ref}"))
                if named is not None:
                    if hexlike and (other := next((c for c in self.manifest_ids() if c.hex().startswith(low) and c != named), None)):
                        # a checkpoint that came later (a copy, an import, another host) starts
                        # with the name: neither is chosen silently
                        raise InvalidInputError(
                            f"{ref!r} is ambiguous: the {ns[:-1]} {ref} points at {named.hex()[:12]}, and checkpoint "
                            f"{other.hex()[:12]} starts with it",
                            hint=f"give more characters of the id, or {ns}/{ref}@{{0}} for the {ns[:-1]}",
                        )
                    return named
        if len(low) >= 4 and all(c in "0123456789abcdef" for c in low):
            if len(low) == 64 and self.backend.exists(f"{layout.MANIFESTS}/{low}"):
                return bytes.fromhex(low)
            matches = [c for c in self.manifest_ids() if c.hex().startswith(low)]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                shown = ", ".join(sorted(m.hex()[:12] for m in matches[:5]))
                raise InvalidInputError(
                    f"{ref!r} is ambiguous: it matches {len(matches)} checkpoints ({shown})", hint="give more characters"
                )
        raise NotFoundError(
            f"no checkpoint, tag or branch named {ref!r} in {self.location}",
            hint="see `ckpt ls` for ids, or use a tag, a branch, KIND:NAME or latest",
        )


def damaged_ref_hint(path: str) -> str:
    """What to do about the damaged ref at `path` (docs/runbooks/store-damaged.md): a
    latest ref is rebuilt from the manifests; a tag or a branch names a choice only a
    person can make again."""
    rel = path.removeprefix(f"{layout.REFS}/")
    kind, _, name = rel.partition("/")
    if kind == "latest":
        return "run `ckpt repair refs` (it points latest at the subject's newest checkpoint)"
    if kind in ("tags", "branches"):
        verb = "tag" if kind == "tags" else "branch"
        return (
            f"delete it (`ckpt {verb} --delete {name}`), then make it again if it is still wanted (`ckpt {verb} {name} ID`); "
            f"`ckpt reflog {rel}` shows what it named (docs/runbooks/store-damaged.md)"
        )
    return f"ckpt writes no ref there: remove {path} (docs/runbooks/store-damaged.md)"


def _decode_ref(data: bytes, path: str) -> tuple[bytes, int | None, int | None]:
    """(target, reset, updated) of the ref record `data` read at `path`; reset and
    updated None where absent or not a time. Raises: CorruptError."""
    _v, body = framing.decode_record(data, framing.KIND_REF, path)
    target = body.get("target")
    if not (isinstance(target, bytes) and len(target) == 32):
        raise CorruptError(f"{path}: ref has no valid target")
    reset, updated = body.get("reset"), body.get("updated")
    return target, reset if type(reset) is int and reset >= 0 else None, updated if type(updated) is int and updated >= 0 else None

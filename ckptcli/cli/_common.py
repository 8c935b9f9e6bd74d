"""How every command opens what it reads or writes: a store, or a checkpoint file, and
the lock it holds meanwhile. Commands never open a store or decide "is this a file or a
reference?" themselves.

The locks (ckptcli.store.locking): a command that resolves a reference and then moves a
ref to it holds the store lock shared, so that a prune cannot remove the target meanwhile;
one that rewrites the refs' logs holds the refs lock too, as their writers do, where
there is one (on object storage refs and logs change by compare-and-swap). Commands
whose library call takes its own lock (take, prune, repair, migrate --format) open the
store with no lock: the library holds the right one for as long as it must.

The library is imported inside the functions: `ckpt --help` and the commands that open
nothing start without it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ckptcli.api import Checkpoint, Source
    from ckptcli.store.repository import Store

__all__ = ["Lock", "is_checkpoint_file", "is_path", "locked", "open_checkpoint", "open_source", "open_store", "opened_store"]

#: "none": the library locks what it needs; "shared": the store lock, shared (no prune
#: meanwhile); "refs": that and the refs lock, exclusive (rewriting the refs' logs),
#: where refs move under it (not where they move by compare-and-swap: Store.ref_lock).
Lock = Literal["none", "shared", "refs"]


def open_store(path: Path | str | None) -> Store:
    """The store of --store (a store directory or one holding `.ckpt/`), or the one found
    as git finds `.git`: CKPT_STORE, then `.ckpt/` in cwd or any parent."""
    from ckptcli.store.repository import Store, store_location  # not ckptcli.api: `ckpt ls` starts without it

    return Store.open(store_location(path) if path is not None else None)


@contextlib.contextmanager
def opened_store(path: Path | str | None, lock: Lock) -> Iterator[Store]:
    """The store of --store, holding `lock` (see the module's docstring) until the block ends."""
    st = open_store(path)
    with locked(st, lock):
        yield st


@contextlib.contextmanager
def locked(st: Store, lock: Lock) -> Iterator[None]:
    """Hold `lock` on an open store until the block ends (a command that reads first,
    unlocked, and locks only its step that moves a ref)."""
    with contextlib.ExitStack() as held:
        if lock != "none":
            held.enter_context(st.backend.lock("store", shared=True))
        if lock == "refs":
            held.enter_context(st.ref_lock())
        yield


def _is_url(arg: str) -> bool:
    """Whether an argument is a store's URL (s3://bucket/prefix, file:///srv/ckpt)."""
    from ckptcli.store.backends import parse_location

    return bool(arg) and (not parse_location(arg).is_local or arg[:7].lower() == "file://")


def is_checkpoint_file(arg: str) -> bool:
    """Whether a command's argument is a checkpoint file rather than a reference: a file
    that looks like a path to one (a .ckpt name, a "/"), or is one. A bare name that
    merely matches some other file in cwd is still a tag or a branch."""
    from ckptcli.api import names_a_file

    return names_a_file(arg)


def is_path(arg: str, store: Path | str | None = None) -> bool:
    """Whether an argument names files rather than checkpoints of the store of `store`
    (`ckpt compat`'s sources): a directory, anything with a "/" (refs never hold one), a
    .ckpt name, or a checkpoint file; a bare name that is both a checkpoint file and a
    reference of the store is InvalidInputError (checkpoint.refuse_file_and_ref)."""
    from ckptcli.checkpoint import refuse_file_and_ref

    refuse_file_and_ref(arg, store_path=store)
    return Path(arg).is_dir() or os.sep in arg or arg.endswith(".ckpt") or is_checkpoint_file(arg)


def open_checkpoint(ref: str, store: Path | str | None) -> Checkpoint:
    """A checkpoint by reference: a checkpoint file (is_checkpoint_file), else a checkpoint
    of the store of --store (an id or prefix, tag, branch, KIND:NAME, latest, REF~N); a
    path (a .ckpt name, ./x, /x...) that is not there is NotFoundError, not a reference."""
    from ckptcli import api

    return api.open_checkpoint(ref, store_path=store)


def open_source(
    target: str | None, store: Path | str | None, *, directory: bool = False, resolve: bool = True
) -> tuple[Source, bytes | None]:
    """What a command that reads a store or a checkpoint file works on, and the id of the
    checkpoint `target` names (None for no target):

    - a checkpoint file (is_checkpoint_file), or what can only be a path (a .ckpt
      name, ./x, /x...: checkpoint.looks_like_a_path): the file, and its one checkpoint; a
      path that is not there is NotFoundError, a directory InvalidInputError, never a
      reference (whether or not there is a store); a bare name that is both a checkpoint
      file and a reference of the store is InvalidInputError (checkpoint.refuse_file_and_ref);
    - with `directory`, a directory or a store's URL: that store (`ckpt tui /srv/ckpt`);
    - anything else: the store of --store, and the checkpoint `target` names in it.

    Without `resolve`, the file's checkpoint is not read and a reference is not resolved
    (None): the caller does it (`ckpt verify`, which reports a damaged one)."""
    from ckptcli.api import refuse_url
    from ckptcli.checkpoint import looks_like_a_path, refuse_file_and_ref

    if target is None:
        return open_store(store), None
    if directory and (Path(target).is_dir() or _is_url(target)):
        return open_store(target if _is_url(target) else Path(target)), None
    refuse_url(target, "a checkpoint file")
    if not resolve:
        refuse_file_and_ref(target, store_path=store)
        if is_checkpoint_file(target) or looks_like_a_path(target):
            from ckptcli.store.single import CheckpointFile

            return CheckpointFile(Path(target)), None
        return open_store(store), None
    if is_checkpoint_file(target) or looks_like_a_path(target):
        ck = open_checkpoint(target, store)
        return ck.source, ck.id
    st = open_store(store)
    return st, st.resolve(target)


def refuse_checkpoint_file(ref: str, verb: str, st: Store, then: str) -> None:
    """Verbs that read or move the refs of a store (log, tag, branch, reset) take a
    reference of it, never a checkpoint file: a path given as REF is refused with one line
    (UsageError) that says so and what to do (`then`), rather than looked up as a ref name
    and reported missing. A bare word that is a file here and also a ref of the store is
    the ref, as before.

    Raises:
        UsageError for a path (looks_like_a_path), or a checkpoint file here the store
        does not resolve."""
    from ckptcli.checkpoint import looks_like_a_path, names_a_file
    from ckptcli.errors import CkptError, UsageError

    if not looks_like_a_path(ref):
        if not names_a_file(ref):
            return
        try:
            st.resolve(ref)
            return
        except CkptError:
            pass
    raise UsageError(
        f"{ref} is a checkpoint file, but `ckpt {verb}` takes a reference of a store (a tag, a branch, KIND:NAME, an id), "
        "not a checkpoint file",
        hint=then,
    )

"""ckpt unlock: list and remove the lock objects of a store on object storage."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.NO_STORE, ExitCode.INVALID_INPUT, ExitCode.IO_ERROR))
def unlock(
    remove_all: Annotated[
        bool,
        typer.Option("--remove-all", help="Remove every lock, live ones too: only when no ckpt runs against the store."),
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="List what would be removed; remove nothing.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove the stale locks of a store on object storage (docs/storage.md, "Locks").

    A store shared by hosts keeps its locks as objects under locks/, one per holder
    (host, pid, user, command), refreshed every 5 minutes while held. A lock is stale
    when it has not been refreshed for 30 minutes (or its refresh time lies more than 30
    minutes ahead of this host's clock), or at once when it was taken on this host by a
    process that is gone; stale locks block nobody, and this removes them.
    A process killed on another host leaves a lock that blocks prune and migrations
    until it is stale: when you know that process is gone, --remove-all removes it.

    A local store's locks are the kernel's (flock): they go with their process, and
    there is nothing to unlock.

    Examples:

      ckpt unlock --store s3://team-bucket/agents

      ckpt unlock --dry-run --json

      ckpt unlock --remove-all      # after checking no ckpt runs against the store
    """
    from ckptcli.store import objlocks
    from ckptcli.store.remote import ObjectStoreIO

    st = open_store(store)
    if not isinstance(st.backend, ObjectStoreIO):
        if as_json:
            emit_json({"store": st.location, "locks": [], "removed": []})
        else:
            out().print(f"{st.location} is a local store: its locks go with their processes, nothing to unlock", markup=False)
        return
    objects = st.backend.objects
    found = objlocks.list_locks(objects)
    doomed = [i for i in found if i.stale or remove_all]
    if not dry_run:
        doomed = objlocks.remove_locks(objects, all=remove_all)
    now = time.time()
    if as_json:
        emit_json({"store": st.location, "locks": [i.to_json(now) for i in found], "removed": [i.path for i in doomed]})
        return
    c = out()
    verb = "would remove" if dry_run else "removed"
    for info in found:
        what = info.record.holder(now) if info.record else "an unreadable lock object"
        kind = f"{info.record.name}/{info.record.kind}" if info.record else "?"
        state = f"stale: {info.why}" if info.stale else "live"
        mark = verb if info in doomed else "kept"
        c.print(f"{mark:<12} {kind:<18} {safe(what)} ({state})", markup=False, highlight=False)
    c.print(f"{len(found)} lock(s), {len(doomed)} {verb}", markup=False)

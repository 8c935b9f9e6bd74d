"""ckpt tag: fixed names for checkpoints."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli._common import locked, open_store, refuse_checkpoint_file
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe
from ckptcli.errors import ExitCode, UsageError


@app.command(
    epilog=exit_status(
        ExitCode.USAGE,
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.CORRUPT,
        ExitCode.UNSAFE_PATH,
        ExitCode.LOCKED,
        ExitCode.NO_STORE,
        ExitCode.CONFLICT,
    )
)
def tag(
    name: Annotated[str | None, typer.Argument(help="Tag name.", show_default=False)] = None,
    ref: Annotated[str, typer.Argument(help="Checkpoint to tag.")] = "latest",
    delete: Annotated[bool, typer.Option("--delete", "-d", help="Delete the tag.")] = False,
    force: Annotated[bool, typer.Option("--force", "-f", help="Move an existing tag.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Name a checkpoint with a tag, list tags (no NAME), or delete one.

    Examples:

      ckpt tag known-good            # tags latest

      ckpt tag before-upgrade 3f2a9c

      ckpt tag --json

      ckpt tag --delete known-good
    """
    _ref_command("tags", name, ref, delete, force, store, as_json)


def _ref_command(ns: str, name: str | None, ref: str, delete: bool, force: bool, store: object, as_json: bool) -> None:
    st = open_store(store)  # type: ignore[arg-type]
    if name is None:
        if delete:
            raise UsageError("--delete needs a NAME")
        rows = {k[len(ns) + 1 :]: v.hex() for k, v in st.refs().items() if k.startswith(ns + "/")}
        if as_json:
            emit_json(rows)
        else:
            for k, v in rows.items():
                out().print(f"{safe(k)}\t{v[:12]}", markup=False)
        return
    if delete:
        old = st.delete_ref(f"refs/{ns}/{name}", reason=f"{'tag' if ns == 'tags' else 'branch'} --delete")
        if as_json:
            emit_json({"name": name, "deleted": old.hex() if old is not None else None})
        else:
            out().print(f"deleted {name} (was {old.hex()[:12] if old is not None else 'damaged'})", markup=False)
        return
    verb = "tag" if ns == "tags" else "branch"
    refuse_checkpoint_file(ref, verb, st, f"import it first (`ckpt import {ref}`), then `ckpt {verb} {name}` the id it prints")
    with locked(st, "shared"):  # a prune cannot remove the target meanwhile
        cid = st.resolve(ref)
        if ns == "tags":
            st.set_tag(name, cid, force=force)
        else:
            st.set_branch(name, cid)
    if as_json:
        emit_json({"name": name, "id": cid.hex()})
    else:
        out().print(f"{name} -> {cid.hex()[:12]}", markup=False)

"""ckpt reset: point a subject's latest at a checkpoint you choose."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli._common import opened_store, refuse_checkpoint_file
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, short
from ckptcli.errors import ExitCode


@app.command(
    epilog=exit_status(ExitCode.USAGE, ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.LOCKED, ExitCode.NO_STORE, ExitCode.IO_ERROR)
)
def reset(
    subject: Annotated[str, typer.Argument(help="The subject whose latest moves, as KIND:NAME.")],
    ref: Annotated[
        str, typer.Argument(help="Where it moves: id or prefix, tag, branch, REF~N, or NAME@{N} (N moves ago, see `ckpt reflog`).")
    ],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Point SUBJECT's latest at REF, as `git reset` moves a branch.

    The next `ckpt restore SUBJECT` gives REF back, and the next take of SUBJECT is
    REF's child. REF must be a checkpoint of SUBJECT. Nothing is deleted: the
    checkpoints latest leaves behind stay in the store (until pruned), and the move is
    recorded in the reflog, so `ckpt reset SUBJECT SUBJECT@{1}` undoes it. The ref
    itself records the reset too: a take of SUBJECT already running does not move
    latest past it (it exits 11), and `ckpt repair refs` leaves the checkpoints it
    abandoned alone, with or without the reflog.

    --json prints {"subject", "old", "new"} (full ids; old is null when SUBJECT had no
    latest).

    Examples:

      ckpt reset agent:bot 3f2a9c

      ckpt reset agent:bot 'agent:bot@{1}'     # undo the last move of its latest

      ckpt reset agent:bot known-good --json
    """
    from ckptcli.errors import InvalidInputError
    from ckptcli.format.manifest import Subject

    subj = Subject.parse(subject)
    with opened_store(store, "shared") as st:  # a prune cannot remove the target meanwhile
        refuse_checkpoint_file(ref, "reset", st, f"import it first (`ckpt import {ref}`), then reset {subject} to the id it prints")
        cid = st.resolve(ref)
        target = st.manifest(cid).subject
        if target != subj:
            raise InvalidInputError(
                f"checkpoint {short(cid.hex())} is of {target}, not {subj}",
                hint=f"give a checkpoint of {subj} (see `ckpt ls --subject {subj}`)",
            )
        old = st.set_latest(subj, cid, reason=f"reset: moving to {ref}")
    if as_json:
        emit_json({"subject": str(subj), "old": old.hex() if old is not None else None, "new": cid.hex()})
        return
    was = short(old.hex()) if old is not None else "nothing"
    out().print(f"{subj}: latest {was} -> {short(cid.hex())}", markup=False)
    if old is not None and old != cid:
        out().print(f"(undo: ckpt reset {subj} {short(old.hex())})", markup=False)

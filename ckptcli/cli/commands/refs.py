"""ckpt refs: every ref in the store."""

from __future__ import annotations

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.NO_STORE, ExitCode.CORRUPT))
def refs(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """List refs: each subject's latest, branches and tags.

    Examples:

      ckpt refs

      ckpt refs --json
    """

    rows = {k: v.hex() for k, v in open_store(store).refs().items()}
    if as_json:
        emit_json(rows)
        return
    for k, v in rows.items():
        out().print(f"{safe(k)}\t{v[:12]}", markup=False)

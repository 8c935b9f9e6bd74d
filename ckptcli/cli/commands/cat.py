"""ckpt cat: the whole checkpoint decoded to JSON."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli.app import StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.NO_STORE, ExitCode.CORRUPT, ExitCode.UNSUPPORTED_VERSION, ExitCode.LIMIT_EXCEEDED))
def cat(
    ref: Annotated[str, typer.Argument(help="Checkpoint: id or prefix, tag, branch, KIND:NAME, latest, REF~N, or a .ckpt file.")],
    store: StoreOpt = None,
) -> None:
    """Print the whole checkpoint (manifest and every section) as JSON.

    Byte strings print as {"$bytes": base64}, file data as {"$blob": {size, id}},
    and NaN or infinities as {"$float": "nan"}, so the output is strict JSON.

    Examples:

      ckpt cat latest | jq .sections.memory

      ckpt cat exported.ckpt > decoded.json
    """
    from ckptcli import api
    from ckptcli.jsonview import to_json

    ck = api.open_checkpoint(ref, store_path=store)
    doc = api.info_dict(ck.id, ck.manifest)
    doc["layout"] = ck.manifest.layout
    doc["sections"] = {name: to_json(ck.section(name, lazy_bytes=name == "blobs")) for name in ck.section_names()}
    emit_json(doc)

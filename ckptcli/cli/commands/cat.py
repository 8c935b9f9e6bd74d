"""ckpt cat: the whole checkpoint decoded to JSON."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli.app import StoreOpt, app
from ckptcli.cli.output import emit_spooled, exit_status
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.NO_STORE, ExitCode.CORRUPT, ExitCode.UNSUPPORTED_VERSION, ExitCode.LIMIT_EXCEEDED))
def cat(
    ref: Annotated[str, typer.Argument(help="Checkpoint: id or prefix, tag, branch, KIND:NAME, latest, REF~N, or a .ckpt file.")],
    store: StoreOpt = None,
) -> None:
    """Print the whole checkpoint (manifest and every section) as JSON.

    Byte strings print as {"$bytes": base64}, file data as {"$blob": {size, id}},
    and NaN or infinities as {"$float": "nan"}, so the output is strict JSON.

    The state is streamed from the store, so memory stays small whatever its size; one
    that decodes to more than CKPT_MAX_DECODED_BYTES (default 4 GiB) is refused before
    anything is printed.

    Examples:

      ckpt cat latest | jq .sections.memory

      ckpt cat exported.ckpt > decoded.json
    """
    import sys

    from ckptcli import api

    ck = api.open_checkpoint(ref, store_path=store)
    # indented for a person at a terminal; compact (and faster to write) for a program
    emit_spooled(lambda out: ck.write_view(out, indent=2 if sys.stdout.isatty() else None))

"""ckpt cat: the whole checkpoint decoded to JSON."""

from __future__ import annotations

from ckptcli.cli._common import open_checkpoint
from ckptcli.cli.app import JsonOpt, RefArg, SnapshotOpt, StoreOpt, app
from ckptcli.cli.output import emit_spooled, exit_status
from ckptcli.errors import ExitCode


@app.command(
    epilog=exit_status(
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.NO_STORE,
        ExitCode.CORRUPT,
        ExitCode.UNSUPPORTED_VERSION,
        ExitCode.LIMIT_EXCEEDED,
    )
)
def cat(
    ref: RefArg,
    snapshot: SnapshotOpt = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the whole checkpoint (manifest and every section) as JSON.

    Byte strings print as {"$bytes": base64}, file data as {"$blob": {size, id}},
    and NaN or infinities as {"$float": "nan"}, so the output is strict JSON.

    The state is streamed from the store, so memory stays small whatever its size; one
    that decodes to more than CKPT_MAX_DECODED_BYTES (default 4 GiB) is refused before
    anything is printed.

    A recorded checkpoint (one with an event tail, formats/events.md) is printed at its
    state: the sections hold the snapshot with the tail applied, as `ckpt replay` gives
    it, and "state" says so ({"seq", "snapshot_seq", "tail", "events", "applied"});
    --snapshot prints the stored sections (the state at the previous checkpoint). The
    parts the tail changes are decoded in memory (bounded by CKPT_MAX_HELD_BYTES).

    Examples:

      ckpt cat latest | jq .sections.memory

      ckpt cat agent:bot --snapshot | jq .state

      ckpt cat exported.ckpt > decoded.json

    The output is JSON with or without --json (taken, as by every read command); with
    it, compact even at a terminal.
    """
    import sys

    from ckptcli.history.stateat import state_at

    at = state_at(open_checkpoint(ref, store), snapshot=snapshot, lenient=True)
    # indented for a person at a terminal; compact (and faster to write) for a program
    indent = 2 if sys.stdout.isatty() and not as_json else None
    emit_spooled(lambda out: at.write_view(out, indent=indent))
    if at.problem is not None:
        from ckptcli.cli.app import warn
        from ckptcli.history.stateat import problem_warning

        warn(problem_warning(at.problem))

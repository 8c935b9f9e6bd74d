"""ckpt bisect: the first checkpoint, and event, where a predicate on the state turned false."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, ReducersOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out, safe, user_output_to_stderr
from ckptcli.errors import ExitCode


@app.command(
    "bisect",
    epilog=exit_status(
        ExitCode.FAILURE,
        ExitCode.USAGE,
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.NO_STORE,
        ExitCode.CORRUPT,
        ExitCode.LIMIT_EXCEEDED,
    ),
)
def bisect_cmd(
    subject: Annotated[str, typer.Argument(metavar="SUBJECT", help="The subject (KIND:NAME) whose history is searched.")],
    good: Annotated[str, typer.Option("--good", metavar="REF", help="A checkpoint whose state passes (a first-parent ancestor of --bad).")],
    bad: Annotated[
        str | None,
        typer.Option("--bad", metavar="REF", help="A checkpoint whose state fails. Default: the subject's latest.", show_default=False),
    ] = None,
    check: Annotated[
        str | None, typer.Option("--check", metavar="MODULE:FUNC", help="A function state -> bool (true: good).", show_default=False)
    ] = None,
    expect: Annotated[
        str | None,
        typer.Option("--expect", metavar="POINTER==JSON", help="Good while the value at POINTER equals JSON.", show_default=False),
    ] = None,
    expect_missing: Annotated[
        str | None, typer.Option("--expect-missing", metavar="POINTER", help="Good while there is no value at POINTER.", show_default=False)
    ] = None,
    reducers: ReducersOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Find the first checkpoint, and within a recorded one the first event, after which
    a predicate on the state is false.

    The checkpoints from --good to --bad (first parents of --bad) are halved with the
    predicate, each call on the state at one checkpoint (docs/replay.md "The state at a
    checkpoint"); then the found checkpoint's event tail is halved the same way. That is
    2 + about log2(n) calls for n checkpoints, plus about log2(m) for a tail of m events;
    the count is printed. --expect and --expect-missing read only the value at their
    path (by hash, as ckpt log does); --check gets the whole state (memory, plan, tools,
    ext) as a dict.

    --json prints {"first_bad", "last_good", "event": {"seq", "ts", "kind", ...} or null,
    "snapshot_bad", "predicate", "checkpoints", "tail_events", "calls",
    "checkpoint_calls", "event_calls", "good", "bad"}. Exit status 1 when --good
    fails or --bad passes the predicate.

    Examples:

      ckpt bisect agent:bot --good known-good --expect '/memory/refund/status=="pending"'

      ckpt bisect agent:bot --good agent:bot~200 --expect-missing /memory/error

      ckpt bisect agent:bot --good known-good --bad 3f2a9c --check mychecks:consistent --json
    """
    from ckptcli.errors import UsageError
    from ckptcli.history.query import Expect, bisect, load_check, parse_expect
    from ckptcli.history.replay import load_reducers

    given = [x for x in (check, expect, expect_missing) if x is not None]
    if len(given) != 1:
        raise UsageError("give exactly one predicate: --check MODULE:FUNC, --expect POINTER==JSON or --expect-missing POINTER")
    exp = parse_expect(expect) if expect is not None else (Expect(expect_missing, missing=True) if expect_missing is not None else None)
    with user_output_to_stderr():  # the check's module prints on stderr, never into --json
        func = load_check(check) if check is not None else None
        red = load_reducers(reducers or [])
        st = open_store(store)
        result = bisect(st, subject, good=good, bad=bad or subject, expect=exp, check=func, check_name=check or "", reducers=red)
    if as_json:
        emit_json(result.to_dict())
        return
    c = out()
    c.print(f"first bad checkpoint {result.first_bad.hex()}", markup=False)
    c.print(f"  last good          {result.last_good.hex()}", markup=False)
    if result.event is not None:
        ev = result.event
        c.print(f"  first bad event    #{ev.seq} {safe(ev.kind)} (of its {result.tail_events}-event tail)", markup=False)
    elif result.snapshot_bad:
        c.print("  its snapshot already fails: the change came with the checkpoint, not from its tail", markup=False)
    c.print(f"  predicate          {safe(result.what, backslash=False)}", markup=False)
    c.print(
        f"{result.calls} predicate calls ({result.checkpoint_calls} over {result.checkpoints} checkpoints"
        + (f", {result.event_calls} over {result.tail_events} events)" if result.tail_events else ")"),
        markup=False,
    )

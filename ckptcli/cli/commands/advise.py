"""ckpt advise: how often to checkpoint, by Young's and Daly's rules, from given or measured
take times and failures (ckptcli.history.advise; docs/intervals.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ckptcli.cli.app import JsonOpt, StoreOpt, app, warn
from ckptcli.cli.output import emit_json, exit_status, out, safe
from ckptcli.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from ckptcli.history.advise import Advice, Measurement


@app.command(
    epilog=exit_status(ExitCode.FAILURE, ExitCode.USAGE, ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.IO_ERROR)
)
def advise(
    subject: Annotated[
        str | None,
        typer.Argument(
            metavar="[SUBJECT]", help="Measure D and M from this subject's checkpoints (KIND:NAME, e.g. process:sim).", show_default=False
        ),
    ] = None,
    take_seconds: Annotated[
        str | None,
        typer.Option(
            "--take-seconds",
            metavar="D",
            help="How long a checkpoint takes: seconds (300, 0.5) or with a unit (5m, 1h). With SUBJECT: instead of the measured one.",
            show_default=False,
        ),
    ] = None,
    mtbf: Annotated[
        str | None,
        typer.Option(
            "--mtbf",
            metavar="M",
            help="Mean time between failures: seconds or with a unit (24h, 1d, 2w). With SUBJECT: instead of the measured one.",
            show_default=False,
        ),
    ] = None,
    restart_seconds: Annotated[
        str | None,
        typer.Option(
            "--restart-seconds",
            metavar="R",
            help="How long a restart takes (default: measured with SUBJECT, else 0); changes the overhead, not the interval.",
            show_default=False,
        ),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """How often to checkpoint, by Young's and Daly's rules, from given or measured times.

    The optimum interval between checkpoints by Young's rule (sqrt(2DM), 1974) and
    Daly's higher-order one (2006), for a take time D and a mean time between failures
    M, with each interval's expected overhead (the share of wall-clock time spent on
    checkpoints, redone work and restarts, by Daly's complete model) and the work a
    failure loses on average. The interval is the compute time from the end of one
    checkpoint to the start of the next (`ckpt run --every`).

    With SUBJECT, D is measured from its checkpoints' recorded take durations
    (`process:checkpoint` events of `ckpt run`; without them, from the checkpoints'
    created times, an upper bound), M as its running time per failure (`process:exit`
    with a non-zero code or a signal) and R as the time from a failure to the next start;
    the output says what was measured and from how many samples. --take-seconds, --mtbf
    and --restart-seconds replace a measured value. When a value can be neither measured
    nor was given (no take recorded, no failure yet), the command says so and exits 1:
    it does not guess. The formulas and their sources: docs/intervals.md.

    Examples:

      ckpt advise --take-seconds 5m --mtbf 24h

      ckpt advise --take-seconds 300 --mtbf 6h --restart-seconds 10m --json

      ckpt advise process:sim

      ckpt advise process:sim --mtbf 1d
    """
    from ckptcli.history import advise as lib

    given_d = lib.parse_seconds(take_seconds, "--take-seconds") if take_seconds is not None else None
    given_m = lib.parse_seconds(mtbf, "--mtbf") if mtbf is not None else None
    given_r = lib.parse_seconds(restart_seconds, "--restart-seconds", zero_ok=True) if restart_seconds is not None else None
    measured: Measurement | None = None
    if subject is None:
        if given_d is None or given_m is None:
            missing = " and ".join(n for n, v in (("--take-seconds", given_d), ("--mtbf", given_m)) if v is None)
            raise UsageError(f"give {missing}, or a SUBJECT to measure from", hint="e.g. ckpt advise --take-seconds 5m --mtbf 24h")
        d, m, r = given_d, given_m, given_r or 0.0
    else:
        from ckptcli.cli._common import open_store

        measured = lib.measure(open_store(store), subject)
        d, m, r = _values(measured, given_d, given_m, given_r)
    advice = lib.advise(d, m, r)
    restart_measured = measured is not None and measured.restart_seconds is not None
    sources = {
        "take": "given" if given_d is not None or measured is None else measured.take_source,
        "mtbf": "given" if given_m is not None or measured is None else "failures",
        "restart": "given" if given_r is not None else ("failures" if restart_measured else "none"),
    }
    if measured is not None:
        who = measured.subject
        if measured.ignored:
            warn(f"{measured.ignored} event record(s) of {who} do not follow the event format (formats/events.md) and were skipped")
        if measured.unreadable:
            warn(f"{measured.unreadable} checkpoint(s) of {who} could not be read and were skipped; run `ckpt verify`")
    if advice.take_exceeds_half_mtbf:
        warn("a checkpoint takes at least half the MTBF: no interval keeps up with the failures; make the take faster (or rarer failures)")
    if as_json:
        doc: dict[str, Any] = advice.to_dict()
        doc["sources"] = sources
        doc["measured"] = measured.to_dict() if measured is not None else None
        emit_json(doc)
        return
    _render(advice, measured, sources)


def _values(ms: Measurement, d: float | None, m: float | None, r: float | None) -> tuple[float, float, float]:
    """D, M and R: the given ones, else the measured ones; TooLittleData for one that is neither."""
    from ckptcli.history.advise import TooLittleData, format_seconds

    if d is None:
        if ms.take_seconds is None or ms.take_seconds <= 0:
            raise TooLittleData(
                f"{ms.subject}: no take duration is recorded in its {ms.checkpoints} checkpoint(s), so the take time cannot be measured",
                hint="give --take-seconds",
            )
        d = ms.take_seconds
    if m is None:
        if ms.mtbf_seconds is None:
            ran = "and no running time is" if ms.uptime_seconds <= 0 else f"in {format_seconds(ms.uptime_seconds)} of running"
            raise TooLittleData(
                f"{ms.subject}: no failure {ran} ({ms.checkpoints} checkpoint(s)) recorded, so the MTBF cannot be measured",
                hint="give --mtbf",
            )
        m = ms.mtbf_seconds
    if r is None:
        r = ms.restart_seconds or 0.0
    return d, m, r


def _render(advice: Advice, ms: Measurement | None, sources: dict[str, str]) -> None:
    from ckptcli.history.advise import TAKE_WINDOW
    from ckptcli.history.advise import format_seconds as f

    c = out()

    def line(text: str = "") -> None:
        c.print(text, markup=False, highlight=False)

    if ms is not None:
        line(f"measured {safe(ms.subject)} from {ms.checkpoints} checkpoint(s):")
        if sources["take"] == "take_seconds":
            n, total = ms.take_samples, ms.take_total
            line(f"  take     {f(advice.take_seconds)}: the median of the newest {n} of {total} recorded take durations")
        elif sources["take"] == "created":
            line(
                f"  take     {f(advice.take_seconds)}: the median over {ms.take_samples} checkpoint(s) of created time minus their last "
                f"event's time (no take durations recorded; an upper bound; the newest {TAKE_WINDOW} at most)"
            )
        if sources["mtbf"] == "failures":
            ran = f(ms.uptime_seconds)
            line(f"  MTBF     {f(advice.mtbf_seconds)}: {ran} of running over {ms.failures} failure(s) ({ms.starts} start(s))")
        if sources["restart"] == "failures":
            line(f"  restart  {f(advice.restart_seconds)}: the median of {ms.restart_samples} time(s) from a failure to the next start")
        line()
    line(f"take D = {f(advice.take_seconds)}, MTBF M = {f(advice.mtbf_seconds)}, restart R = {f(advice.restart_seconds)}")
    line()
    line(f"{'RULE':<14}{'INTERVAL':<14}{'OVERHEAD':>9}  LOST PER FAILURE")
    restart = f" (+ {f(advice.restart_seconds)} restart)" if advice.restart_seconds else ""
    for name, iv in (("Young (1974)", advice.young), ("Daly (2006)", advice.daly)):
        line(f"{name:<14}{f(iv.seconds):<14}{iv.waste * 100:>8.2f}%  {f(iv.lost_seconds)}{restart}")

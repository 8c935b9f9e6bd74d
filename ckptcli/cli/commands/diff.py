"""ckpt diff: what changed between two checkpoints, by section."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from ckptcli.cli.app import (
    REF_HELP,
    ExcludePathOpt,
    IgnoreOrderOpt,
    JsonOpt,
    SignificantDigitsOpt,
    SnapshotOpt,
    StoreOpt,
    ToleranceOpt,
    app,
    tolerance_of,
)
from ckptcli.cli.output import emit_json, exit_status, out, safe
from ckptcli.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from ckptcli.history.change import DiffResult

STYLES = {"header": "bold", "section": "bold cyan", "add": "green", "remove": "red", "change": "yellow", "summary": "dim"}


@app.command(
    epilog=exit_status(
        ExitCode.FAILURE,
        ExitCode.USAGE,
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.NO_STORE,
        ExitCode.CORRUPT,
        ExitCode.UNSUPPORTED_VERSION,
        ExitCode.LIMIT_EXCEEDED,
    )
)
def diff(
    ref_a: Annotated[str, typer.Argument(metavar="A", help=f"The old side. {REF_HELP}")],
    ref_b: Annotated[str, typer.Argument(metavar="B", help=f"The new side. {REF_HELP}")],
    section: Annotated[
        str | None,
        typer.Option("--section", help="Compare only this section (memory, plan, tools, events, blobs, ext:NS).", show_default=False),
    ] = None,
    path: Annotated[
        str | None,
        typer.Option(
            "--path",
            metavar="JSON-POINTER",
            help="Compare only the value at this JSON Pointer of the state (e.g. /memory/user/name).",
            show_default=False,
        ),
    ] = None,
    snapshot: SnapshotOpt = False,
    stat: Annotated[bool, typer.Option("--stat", help="Print only the counts of changes per section.")] = False,
    exit_code: Annotated[bool, typer.Option("--exit-code", help="Exit with 1 when the checkpoints differ, 0 when they do not.")] = False,
    ignore_order: IgnoreOrderOpt = False,
    significant_digits: SignificantDigitsOpt = None,
    tolerance: ToleranceOpt = None,
    exclude_path: ExcludePathOpt = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="LangGraph checkpoints: also show LangGraph's bookkeeping and messages as stored.")
    ] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show what changed from checkpoint A to checkpoint B, section by section.

    Memory keys added, removed and changed (old -> new), plan items pushed and popped,
    tool calls and events added, blobs changed with their sizes. Long strings, byte
    strings and long lists of numbers are summarised. Unchanged parts are skipped by
    their hashes without being read, so a few changes in a large state cost little.

    --json prints {"a", "b", "same", "summary", "patch", "blobs_patch"}: "patch" is a
    JSON Patch (RFC 6902) that turns the JSON view of A's state document (as `ckpt cat`
    and `ckpt show --section` print values: byte strings as {"$bytes": base64},
    NaN and infinities as {"$float": "nan"}, big integers as JSON integers, a map whose
    only key starts with "$" as {"$map": {...}}) into B's; "blobs_patch" does the same
    for the blob listing (path -> type, size, mode and content id; never the content).
    Key order and file times are not compared. With --section, both cover that section
    only; with --stat, only the summary is printed. Between LangGraph checkpoints,
    messages read `role: text` (tool calls `ai: → name(arg=...)`), a stored datetime
    or date reads as its ISO 8601 text in UTC, and LangGraph's bookkeeping (channel
    versions, versions seen, branch:to:* channels) is left out of the text; --all shows
    it as stored. A number that reads as a time in nanoseconds (an event's ts) is
    followed by its UTC time. Two LangGraph checkpoints' pending
    writes are compared by task id and write index, not by position (a write that only
    sits at another seq is no change): --json then adds "writes", [{"op", "task_id",
    "idx", "channel", "old", "new"}].

    A recorded checkpoint (one with an event tail, formats/events.md) is compared at its
    state: its snapshot with the tail applied, as `ckpt replay` gives it (a header line
    says "state at seq N (snapshot at seq B + tail B+1..N)"; --json adds "states").
    --snapshot compares the stored sections instead. --path compares one value only,
    walking down to it by hashes (--json adds "path").

    Tolerant comparison (the same apart from noise?): --ignore-order, --significant-digits,
    --tolerance and --exclude-path compare the two decoded states again with deepdiff,
    only when the exact diff found a change. Changes print as above, paths as JSON
    Pointers in --json; "patch" then lists the differences found (with --ignore-order
    not operations to apply in order). Blobs are still compared exactly.

    Examples:

      ckpt diff good latest

      ckpt diff agent:bot~1 agent:bot --section memory

      ckpt diff 3f2a9c exported.ckpt --stat

      ckpt diff good latest --json | jq .patch

      ckpt diff good latest --exit-code > /dev/null || echo changed

      ckpt diff agent:bot~1 agent:bot --path /memory/user/name

      ckpt diff run1 run2 --ignore-order --tolerance 1e-6 --exclude-path '/ts$'
    """
    from ckptcli.history.diff import diff_checkpoints, open_pair

    a, b = open_pair(ref_a, ref_b, store_path=store)
    result = diff_checkpoints(a, b, section=section, path=path, snapshot=snapshot)
    tol = tolerance_of(ignore_order, significant_digits, tolerance, exclude_path)
    if tol is not None:
        if path is not None:
            raise UsageError(
                "--path compares one value exactly; narrow a tolerant comparison with --section and --exclude-path",
                hint="see `ckpt diff --help`",
            )
        from ckptcli.history.tolerant import tolerant_diff

        result = tolerant_diff(a, b, result, tol, snapshot=snapshot)
    shown = result
    if not as_json and not show_all and "langgraph.checkpoint" in b.manifest.labels:
        from ckptcli.adapters.langgraph.render import for_people

        shown = for_people(result)  # the bookkeeping left out, here and in --exit-code
    if as_json:
        emit_json(result.to_dict(stat=stat))
    else:
        _print_changes(shown, stat)
    _warn_problems(result)
    if exit_code and not shown.same:
        raise typer.Exit(int(ExitCode.FAILURE))


def _print_changes(shown: DiffResult, stat: bool) -> None:
    from ckptcli.history.render import render

    # keys, labels and names come from whoever made the checkpoints: controls escaped
    lines = [
        (kind, ("  " if kind in ("add", "remove", "change") else "") + safe(text, backslash=False))
        for kind, text in render(shown, stat=stat)
    ]
    console = out()
    if console.color_system is None:
        # plain text (NO_COLOR, or not a terminal): written directly, which is much
        # faster than laying out many lines with rich
        sys.stdout.writelines(text + "\n" for _kind, text in lines)
    else:
        from rich.text import Text

        for kind, text in lines:
            console.print(Text(text, style=STYLES.get(kind, "")))


def _warn_problems(result: DiffResult) -> None:
    """A tail that does not replay: said once the output is written."""
    for problem in dict.fromkeys(st["problem"] for st in result.states.values() if "problem" in st):
        from ckptcli.cli.app import warn
        from ckptcli.history.stateat import problem_warning

        warn(problem_warning(problem))

"""ckpt capture: capture a live target with an installed adapter and take a checkpoint of it."""

from __future__ import annotations

from typing import Annotated

import typer
from typer._click.core import Context
from typer._click.formatting import HelpFormatter
from typer.core import TyperCommand

from ckptcli.cli._adapter_flags import flag_usage, parse
from ckptcli.cli._common import open_store
from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, out
from ckptcli.errors import CkptError, ExitCode, UsageError


class _CaptureCommand(TyperCommand):
    """`ckpt capture --help` ends with the installed adapters that capture, and their options."""

    def format_epilog(self, ctx: Context, formatter: HelpFormatter) -> None:
        rows = _adapter_help()
        if rows:
            with formatter.section("Installed adapters that capture (ckpt capture ADAPTER TARGET)"):
                formatter.write_dl(rows)
        super().format_epilog(ctx, formatter)


def _adapter_help() -> list[tuple[str, str]]:
    from ckptcli.adapters import registry

    rows: list[tuple[str, str]] = []
    for name in registry.names():
        try:
            cls = registry.adapter_class(name)
        except CkptError:
            continue  # `ckpt doctor` says why
        try:
            if not registry.call(name, "supports()", cls.supports, "capture"):
                continue
        except CkptError:
            continue
        rows.append((f"{name} TARGET", f"{cls.summary} (subjects {cls.kind}:NAME)"))
        rows += [(f"  {flag_usage(o)}", o.help) for o in cls.options]
    return rows


@app.command(
    cls=_CaptureCommand,
    context_settings={"ignore_unknown_options": True},
    epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.INVALID_INPUT, ExitCode.NO_STORE, ExitCode.LIMIT_EXCEEDED, ExitCode.IO_ERROR),
)
def capture(
    words: Annotated[
        list[str],
        typer.Argument(
            metavar="ADAPTER TARGET [OPTIONS]",
            help="An installed adapter's name, what it captures (a PID, a path, MODULE:NAME: the adapter says), its options.",
            show_default=False,
        ),
    ],
    subject: Annotated[
        str | None,
        typer.Option(
            "--subject", "-S", metavar="KIND:NAME", help="What this is a checkpoint of (KIND: the adapter's kind).", show_default=False
        ),
    ] = None,
    label: Annotated[list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE label; repeatable.", show_default=False)] = None,
    message: Annotated[str, typer.Option("--message", "-m", help="A note stored with the checkpoint.")] = "",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Capture a live target with an adapter and take a checkpoint of it.

    The adapter (entry-point group ckptcli.adapters, docs/adapters.md) turns TARGET into
    a state document, blobs and labels; ckpt takes them as one checkpoint of --subject,
    labelled adapter=NAME (--label adds labels; they win over the adapter's, except
    adapter). The adapter's options follow TARGET (listed below). An
    unknown ADAPTER, or one that does not capture, exits 2; a target it cannot capture
    exits with the adapter's code (3 when it is gone, 4 when it is not what the adapter
    takes). Prints the new checkpoint's id; --json prints {"id", "subject", "adapter",
    "parents", "new_objects", "new_bytes", "labels"}.

    Examples:

      ckpt capture generic myapp.agent:BOT --memory notes --plan steps -S agent:bot

      ckpt capture process 4242 --subject process:sim --json

      ckpt capture process 4242 -S process:sim -l incident=INC-7 -m "before the restart"
    """
    from ckptcli.adapters import registry

    name = words[0]
    if name.startswith("-"):
        raise UsageError(f"unexpected option {name!r} before the adapter", hint="ckpt capture ADAPTER TARGET --subject KIND:NAME")
    adapter = registry.adapter(name)
    if not registry.call(name, "supports()", adapter.supports, "capture"):
        registry.call(name, "capture()", adapter.capture, None)  # raises NotSupported, saying what it offers
    target, options = parse(f"ckpt capture {name}", adapter.options, "TARGET", "the target to capture", words[1:])
    if subject is None:
        raise UsageError("ckpt capture needs --subject", hint=f"e.g. --subject {adapter.kind}:NAME")
    from ckptcli import api

    labels = api.parse_labels(label)  # before the adapter touches the target
    from ckptcli.schema.migrations import cwd_importable

    cwd_importable()  # a MODULE:NAME target loads from the project's checkout, as `python -m` does
    st = open_store(store)
    # the adapter's own code: its failure (an exception, sys.exit()) is one line naming it
    result = registry.call(name, "capture()", adapter.take, st, target, subject=subject, labels=labels, message=message, **options)
    if as_json:
        emit_json(
            {
                "id": result.hex,
                "subject": str(result.manifest.subject),
                "adapter": name,
                "parents": [p.hex() for p in result.manifest.parents],
                "new_objects": result.new_objects,
                "new_bytes": result.new_bytes,
                "labels": dict(result.manifest.labels),
            }
        )
        return
    out().print(result.hex, markup=False)

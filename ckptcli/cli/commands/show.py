"""ckpt show: metadata and a summary of each section, or one section in full."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptcli.cli.app import JsonOpt, StoreOpt, app
from ckptcli.cli.output import emit_json, exit_status, human_size, out
from ckptcli.errors import ExitCode


@app.command(epilog=exit_status(ExitCode.NOT_FOUND, ExitCode.NO_STORE, ExitCode.CORRUPT, ExitCode.UNSUPPORTED_VERSION, ExitCode.LIMIT_EXCEEDED))
def show(
    ref: Annotated[str, typer.Argument(help="Checkpoint: id or prefix, tag, branch, KIND:NAME, latest, REF~N, or a .ckpt file.")],
    section: Annotated[str | None, typer.Option("--section", help="Print this section in full (memory, plan, tools, events, blobs, ext:NS).", show_default=False)] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="LangGraph checkpoints: print --section values exactly as stored (messages as $ext views).")
    ] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a checkpoint's metadata and sections.

    Examples:

      ckpt show latest

      ckpt show 3f2a9c --section memory

      ckpt show agent:bot~2 --json

      ckpt show exported.ckpt

    For a LangGraph checkpoint, --section prints messages as "role: text" lines (tool
    calls as "→ name(arg=...)"); --all or --json print them as stored.
    """
    from ckptcli import api
    from ckptcli.jsonview import to_json

    ck = api.open_checkpoint(ref, store_path=store)
    if section is not None:
        value = to_json(ck.section(section, lazy_bytes=section == "blobs"))
        if as_json:
            emit_json(value)
        else:
            import json

            if not show_all and "langgraph.checkpoint" in ck.manifest.labels:
                from ckptcli.adapters.langgraph_render import readable

                value = readable(value)
            out().print_json(json.dumps(value, ensure_ascii=False))
        return
    info = ck.summary()
    if as_json:
        emit_json(info)
        return
    c = out()
    c.print(f"checkpoint {info['id']}", markup=False)
    c.print(f"subject    {info['subject']}", markup=False)
    c.print(f"created    {info['created']}", markup=False)
    c.print(f"parents    {' '.join(info['parents']) or '(none)'}", markup=False)
    if info["labels"]:
        c.print("labels     " + " ".join(f"{k}={v}" for k, v in info["labels"].items()), markup=False)
    if info["message"]:
        c.print(f"message    {info['message']}", markup=False)
    c.print(f"producer   {info['producer'].get('name', '?')} {info['producer'].get('version', '')}  (format {info['format']})", markup=False)
    if info["schema_version"] is not None:
        c.print(f"schema     {info['schema_version']}", markup=False)
    c.print("sections", markup=False)
    for name, d in info["sections"].items():
        extra = f"{d['items']} items, " if "items" in d else ""
        if "files" in d:
            extra += f"{d['files']} files, "
        c.print(f"  {name:<12} {d['type']:<7} {extra}{human_size(d['bytes'])}", markup=False)

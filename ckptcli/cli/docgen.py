"""Generate docs/cli.md and docs/exit-codes.md from the commands themselves, so the
reference cannot drift: tests/test_docs.py fails when the files are stale.

    python -m ckptcli.cli.docgen        # rewrite both files
"""

from __future__ import annotations

import sys
from pathlib import Path

from ckptcli.errors import EXIT_CODE_MEANINGS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def command_help() -> dict[str, str]:
    from ckptcli.cli.app import _register, build_command

    _register()
    group = build_command()
    ctx = group.make_context("ckpt", [], resilient_parsing=True, terminal_width=100, max_content_width=100)  # type: ignore[attr-defined]
    out = {"": group.get_help(ctx)}
    for name in group.list_commands(ctx):  # type: ignore[attr-defined]
        cmd = group.get_command(ctx, name)  # type: ignore[attr-defined]
        sub = cmd.make_context(name, [], parent=ctx, resilient_parsing=True)
        out[name] = cmd.get_help(sub)
    return out


def cli_md() -> str:
    helps = command_help()
    parts = [
        "# CLI reference",
        "",
        "Generated from the commands' own help by `python -m ckptcli.cli.docgen`; do not edit by hand.",
        "Every command also prints this with `-h` / `--help`.",
        "",
        "## ckpt",
        "",
        "```text",
        helps.pop("").rstrip(),
        "```",
    ]
    for name, text in helps.items():
        parts += ["", f"## ckpt {name}", "", "```text", text.rstrip(), "```"]
    return "\n".join(parts) + "\n"


def exit_codes_md() -> str:
    rows = "\n".join(f"| {int(code)} | `{code.name}` | {meaning} |" for code, meaning in sorted(EXIT_CODE_MEANINGS.items()))
    return f"""# Exit codes

One table for the whole tool (`ckptcli/errors.py`); each command's help ends with the
codes it uses. Any code not listed here also means failure.

| code | name | meaning |
|---:|---|---|
{rows}

On any failure ckpt prints exactly one line on stderr, `ckpt: error: <what is wrong>; <what to do>`,
and never a traceback (set `CKPT_DEBUG=1` to see one for an internal error, code 70;
`CKPT_DEBUG=0`, `false`, `no` or `off` is the same as unset).
`ckpt diff --exit-code` (like `git diff --exit-code`) and `ckpt verify` use 1 and 5 as documented
in their help. `ckpt verify` names what it finds as problems and exits 5 (a symbolic link in the
store among them, `locks/refs.lock` too); what keeps it from reading at all stops it with
that error's own code, as it stops every command: 8 for a store directory that is a link, and
for a linked `locks/store.lock`, the lock verify takes (shared, so that no prune deletes what
it reads) and cannot take through a link, as no command can.
`ckpt doctor` exits 1 when one of its checks fails (warnings alone exit 0), and 10 when it finds no
store or cannot reach it (none here, a missing bucket, an endpoint that does not answer);
asked about one adapter or backend (`ckpt doctor --adapter NAME`, `--backend SCHEME`), it exits
0 when that works here, 1 when not, and 2 when none of that name is installed.
`ckpt import KIND SOURCE` and `ckpt capture ADAPTER TARGET` exit 2 for a KIND or ADAPTER that is
not installed (the line lists those that are), for an option the importer or adapter does not
declare, and for an adapter asked for what it does not do (`NotSupported`); 4 when a
third-party adapter's own code raises or calls `sys.exit()` (one line naming the adapter).
`ckpt import temporal` exits 11 for a history of a run the store holds another history of
(the line names the first event that differs; nothing is written: docs/workflows.md).
`ckpt import -` and `ckpt import temporal -` (a file on stdin) exit 12 when stdin is closed.
`ckpt copy` exits 5 when an object it reads from SRC does not match its hash: the line names
the object and the checkpoint, nothing of that checkpoint is committed in DST, and the
checkpoints copied before it (oldest first) stay there. A checkpoint of SRC whose manifest
cannot be read is left out and the others are copied; then it exits 5, the line naming it
(docs/runbooks/store-damaged.md, "A damaged manifest").
`ckpt run` exits with its program's status (0 when the program exited 0 or `ckpt halt` ended
it, 128+N when signal N did), and before the program starts 4 for a value it cannot use (a
duration, a `--state` path its checkpoint holds no copy of), 8 for a `--state` path outside
the allowed root or through a symlink and 9 when the subject is already supervised;
`ckpt checkpoint` and `ckpt halt` exit 3 when no supervisor runs (docs/processes.md).
`ckpt workflow rollback --run` exits 1 when a compensation raises or calls `sys.exit()` (one
line naming it; it is recorded, and running the rollback again goes on with it), 9 while the
workflow runs (whatever `--journal-dir` each was given) and 11 when a rollback to another
checkpoint is unfinished; `ckpt workflow` exits 3 for a `--journal-dir` that does not exist, 4
for one that is not a directory, is not the one holding the workflow's journal or is not the
one its first run recorded, 8 for a
symbolic link, and 5 for a workflow's journal or lock file that is a FIFO, a socket or a
device (never waited on, read or written through); the library's `NonDeterminismError` (a re-run that calls another
step than the recorded run did) carries 13 (docs/workflows.md).
When the reader of stdout goes away early (`ckpt log | head`), every command stops quietly
and exits 0, as `git log | head` does: nothing it would have printed is an error. The one
exception is `ckpt export -o -`, whose output is of use only whole (a checkpoint file
piped to `ssh host ckpt import -`): a reader gone before its end is one line and exit 12,
so a cut transfer does not look successful. When
stdout cannot be written at all (a full disk, `ckpt ls > /dev/full`, or ckpt started
with it closed, `ckpt ls >&-`), the command ends with one line,
`ckpt: error: cannot write the output to stdout: <why>; ...`, and exit 12 (`IO_ERROR`):
what it did (a take, a restore) is done, its output is what was lost. stderr carries only
ckpt's notes, warnings, progress and error line: when it cannot be written (`2>/dev/full`,
`2>&-`) those lines are lost and nothing else, so a command that did its work and wrote its
output exits 0 (`ckpt take ... 2>/dev/full` prints the id and exits 0), and one that failed
exits with its own code.

Your own code that ckpt runs (a `bisect --check` predicate, a migration, a reducer, a
`compat --validator`, a `replay --check` step function, the modules they are in) fails the
command the same way whatever it raises, `sys.exit()` and `GeneratorExit` included: one line
naming the function and what it did (e.g. `the check mychecks:ok called sys.exit(0)`), with
the code the command documents for it (4 for a check, a reducer or a step function, 1 for a
migration); only Ctrl-C (KeyboardInterrupt) is the interruption, 130, and SIGTERM, which
unwinds the command as Ctrl-C does (its locks released, its temporary files removed), 143.
What such code writes to stdout while ckpt runs it (a `bisect --check` or `replay --check`
module, at import and in its function: `print`, `os.write(1, ...)`, a C library) goes to
stderr, so that stdout (`--json`) carries ckpt's output alone.
"""


def main() -> None:
    DOCS.mkdir(exist_ok=True)
    (DOCS / "cli.md").write_text(cli_md())
    (DOCS / "exit-codes.md").write_text(exit_codes_md())
    sys.stdout.write("wrote docs/cli.md and docs/exit-codes.md\n")


if __name__ == "__main__":
    main()

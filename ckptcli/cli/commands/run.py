"""ckpt run: supervise a program, checkpoint its declared state consistently, restart it
from its last good checkpoint when it dies (docs/processes.md)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from ckptcli.cli._common import open_store
from ckptcli.cli.app import GLOBALS, ProgramStatus, StoreOpt, app
from ckptcli.cli.output import exit_status, quiet, safe
from ckptcli.errors import ExitCode, UnsafePathError, UsageError


@app.command(
    context_settings={"allow_interspersed_args": False},
    epilog=exit_status(
        ExitCode.FAILURE,
        ExitCode.NOT_FOUND,
        ExitCode.INVALID_INPUT,
        ExitCode.UNSAFE_PATH,
        ExitCode.LOCKED,
        ExitCode.NO_STORE,
        ExitCode.IO_ERROR,
    ),
)
def run(
    cmd: Annotated[list[str], typer.Argument(help="The program and its arguments, after --.", metavar="-- CMD...", show_default=False)],
    subject: Annotated[str, typer.Option("--subject", "-S", help="The program's subject, process:NAME.", show_default=False)],
    state: Annotated[
        list[str] | None,
        typer.Option("--state", metavar="PATH", help="A file or directory the program writes (its state); repeatable.", show_default=False),
    ] = None,
    state_root: Annotated[
        Path | None,
        typer.Option(
            "--state-root", metavar="DIR", help="Where --state paths may be (default: the working directory).", show_default=False
        ),
    ] = None,
    every: Annotated[
        str,
        typer.Option(
            "--every",
            metavar="DURATION",
            help="Checkpoint interval: seconds, or 300ms, 30s, 10m, 2h; auto: Daly's interval "
            "from the subject's measured take times and failures, shorter while failures rise (ckpt advise).",
        ),
    ] = "10m",
    on_signal: Annotated[
        str | None,
        typer.Option(
            "--on-signal", metavar="SIG", help="Also send SIG (USR1, SIGUSR2, 10) with each checkpoint request.", show_default=False
        ),
    ] = None,
    freeze: Annotated[
        str,
        typer.Option(
            "--freeze",
            metavar="MODE",
            help="auto, cgroup (cgroup2, else the v1 freezer), cgroup2, freezer, sigstop or none: "
            "how a program that does not quiesce is frozen.",
        ),
    ] = "auto",
    timeout: Annotated[
        str, typer.Option("--timeout", metavar="DURATION", help="How long a checkpoint request waits for `ready` before freezing.")
    ] = "10s",
    max_restarts: Annotated[
        int | None,
        typer.Option("--max-restarts", metavar="N", help="Give up after N restarts (default: never).", show_default=False),
    ] = None,
    backoff: Annotated[
        str, typer.Option("--backoff", metavar="MIN[:MAX]", help="Delay before a restart, doubling from MIN to MAX.")
    ] = "10s:5m",
    bad_after: Annotated[
        int, typer.Option("--bad-after", metavar="K", help="Mark a checkpoint bad after K failed starts from it; use the one before.")
    ] = 3,
    store: StoreOpt = None,
) -> None:
    """Run a program under supervision, with checkpoints of its state.

    Restores the subject's last good checkpoint of the --state paths first (each file
    written to a temporary name and renamed) and starts CMD with CKPT_RESTORED=<id>
    (nothing: a cold start), in its own process group, with one end of a control socket
    as CKPT_CONTROL_FD. A checkpoint is taken every --every, on SIGUSR1 to ckpt, on
    `ckpt checkpoint SUBJECT`, and before ckpt exits: the program is asked to quiesce
    (ckptcli.process; label process.consistency=application), or, when it does not say
    ready within --timeout, frozen (--freeze; consistency=crash). When CMD dies it is
    restarted from the last good checkpoint after the backoff (reset after 10 healthy
    minutes); a checkpoint it fails on --bad-after times in a row is tagged
    process-bad-<id> and the one before it is used. CMD exiting 0 or `ckpt halt
    SUBJECT` ends it; SIGTERM and SIGINT are forwarded to CMD after a final checkpoint,
    and ckpt exits with CMD's status (0 after `ckpt halt`).

    Examples:

      ckpt run --subject process:sim --state state.bin --every 5m -- python sim.py

      ckpt run -S process:etl --state out/ --freeze sigstop --backoff 1s:1m -- ./etl.sh

      ckpt run -S process:train --state ckpt.pt --on-signal USR1 --timeout 60s -- python train.py

      ckpt run -S process:sim --state state.bin --every auto -- python sim.py
    """
    from ckptcli._util.timeparse import parse_seconds
    from ckptcli.adapters.process import freeze as freezing
    from ckptcli.adapters.process.control import parse_signal
    from ckptcli.adapters.process.procfs import describe as describe_proc
    from ckptcli.adapters.process.state import check_state_paths
    from ckptcli.adapters.process.supervisor import FixedSchedule, RunConfig, Schedule, Supervisor, parse_backoff, process_subject

    if GLOBALS.get("json"):
        # stdout is the program's own (it inherits it), and the status lines on stderr
        # are for people: JSON would be mixed into the program's output
        raise UsageError(
            "--json: ckpt run prints no JSON (its stdout is the program's, its status lines on stderr are for people)",
            hint=f"leave out --json; `ckpt ls {safe(subject)} --json` lists the checkpoints of a run",
        )
    subj = process_subject(subject)
    if not cmd:
        raise UsageError("no program to run", hint="give it after --: ckpt run --subject process:NAME -- CMD ARGS...")
    from ckptcli.checkpoint import refuse_url

    for path in state or []:
        refuse_url(path, "--state")
    if state_root is not None:
        refuse_url(state_root, "--state-root")
    adaptive = every.strip().lower() == "auto"
    interval = 0.0 if adaptive else parse_seconds(every, "--every")
    wait = parse_seconds(timeout, "--timeout")
    delays = parse_backoff(backoff)
    if bad_after < 1:
        raise UsageError(f"--bad-after {bad_after} must be at least 1")
    if max_restarts is not None and max_restarts < 0:
        raise UsageError(f"--max-restarts {max_restarts} must be 0 or more")
    sig = None
    if on_signal is not None:
        try:
            sig = parse_signal(on_signal)
        except (KeyError, ValueError):
            raise UsageError(f"--on-signal {on_signal!r} is not a signal", hint="give a name (USR1, SIGUSR2) or a number") from None
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            raise UsageError(
                f"--on-signal {on_signal}: {signal.Signals(sig).name} cannot be handled by a program, so it cannot ask it to checkpoint",
                hint="give a signal the program handles (USR1, USR2, HUP)",
            )
    cwd = Path.cwd()
    paths = check_state_paths(state or [], state_root if state_root is not None else cwd, cwd)
    st = open_store(store)
    if st.directory is not None:  # a store inside a state path would be copied into itself, and restored over itself
        home = Path(os.path.realpath(st.directory))
        for sp in paths:
            where = Path(os.path.realpath(sp.path))
            if where == home or where in home.parents or home in where.parents:
                raise UnsafePathError(
                    f"--state {sp.given}: {where} holds the store {home} (or lies inside it)",
                    hint="declare the program's own files, not the store's",
                )
    if adaptive:
        from ckptcli.history.advise import AdaptiveSchedule

        schedule: Schedule = AdaptiveSchedule.for_subject(st, str(subj))
    else:
        schedule = FixedSchedule(interval)
    freezer = freezing.choose(freeze, f"ckpt-{os.getpid()}-{subj.name}"[:200])
    prefix = f"ckpt run: {subj}: "

    def log(line: str) -> None:
        if not quiet():
            sys.stderr.write(prefix + safe(line, backslash=False) + "\n")
            sys.stderr.flush()

    cfg = RunConfig(
        store=st,
        subject=subj,
        argv=list(cmd),
        cwd=cwd,
        root=Path(os.path.abspath(state_root if state_root is not None else cwd)),
        state=paths,
        freezer=freezer,
        schedule=schedule,
        describe=describe_proc,
        on_signal=sig,
        timeout=wait,
        max_restarts=max_restarts,
        backoff=delays,
        bad_after=bad_after,
        log=log,
    )
    status = Supervisor(cfg).run()
    if status:
        # the program's status, said as it is: a 130 (SIGINT) is no interruption of ckpt's,
        # whose final checkpoint the log named
        raise ProgramStatus(status)

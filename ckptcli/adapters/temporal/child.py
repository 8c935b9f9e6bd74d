"""One replay of the replay check, in a process of its own (`python -m
ckptcli.adapters.temporal.child`), so that the workflow code cannot take ckpt down with
it: code blocked in C (inside `workflow.unsafe.sandbox_unrestricted()`) is killed at
`--timeout`, `os._exit()` ends this process and not ckpt's, and what the code writes to
file descriptor 1 goes to stderr, never into ckpt's report.

The parent (check.py, `_replay`) writes one JSON document on this process's stdin:
`{"path": sys.path, "specs": ["module:Class", ...], "workflow_id", "events": [...]}`, and
reads one on its stdout when the replay ended: `{"failure": null | {"nondeterminism":
bool, "text": str}}`, or `{"escaped": "called sys.exit(5)"}` (the workflow code raised
what is no Exception), or `{"error": str, "exit": int}` (a ckpt error, such as the module
failing to import). No document (the process ended otherwise) is the workflow code ending
the process. Ctrl-C is the parent's to handle: this process ignores SIGINT, and the
parent kills it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    report = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the workflow code's writes to fd 1 (os.write, a C library) reach stderr
    sys.stdout = sys.stderr
    job = json.load(sys.stdin)
    sys.path[:] = job["path"]
    out: dict[str, Any]
    try:
        from temporalio.workflow import NondeterminismError

        from ckptcli.adapters.temporal import check
        from ckptcli.errors import CkptError

        try:
            workflows = check.load_workflows(job["specs"])
            failure = check._replay_here(workflows, job["events"], job["workflow_id"], float("inf"))
            nondeterminism = isinstance(failure, NondeterminismError)
            out = {"failure": None if failure is None else {"nondeterminism": nondeterminism, "text": str(failure)}}
        except check._Escaped as exc:
            out = {"escaped": str(exc)}
        except CkptError as exc:
            out = {"error": exc.message + (f"; {exc.hint}" if exc.hint else ""), "exit": int(exc.exit_code)}
    except BaseException as exc:  # noqa: BLE001 - anything else, as one line for the parent
        out = {"error": f"the replay's process failed: {type(exc).__name__}: {exc}", "exit": 1}
    report.write(json.dumps(out))
    report.flush()
    os._exit(0)  # temporalio's threads must not hold the process open


if __name__ == "__main__":
    main()

"""`ckpt doctor`'s check of the `ckpt run` supervisors on this host (their runtime records,
ckptcli.adapters.process.supervisor): each live one, and each whose supervisor is gone,
with what it left (a program frozen, a cgroup, a program still running unsupervised).

Reads only: what a dead supervisor left is undone by the next `ckpt run`, `ckpt
checkpoint` or `ckpt halt` of its subject (docs/processes.md, "Freeze modes").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ckptcli.adapters.process.supervisor import _alive, read_record, runtime_dir
from ckptcli.checks import OK, WARN, Check, Context
from ckptcli.errors import LockError

#: records read at most (a runtime directory holds one per running supervisor)
MAX_RECORDS = 1000


def check(ctx: Context) -> Iterable[Check]:
    """One line for the supervisors of this host: how many run, and a warning for each
    record whose supervisor is gone."""
    try:
        paths = sorted(runtime_dir().glob("*.json"))[:MAX_RECORDS]
    except OSError as exc:
        yield Check("process supervisors", WARN, f"the runtime directory cannot be read: {exc.strerror}", "")
        return
    live: list[str] = []
    for path in paths:
        try:
            rec = read_record(path)
        except LockError as exc:
            yield Check(f"supervisor record {path.name}", WARN, exc.message, exc.hint or "")
            continue
        if rec is None:
            continue
        subject = str(rec.get("subject"))
        if not rec["stale"]:
            live.append(f"{subject} (pid {rec.get('pid')})")
            continue
        yield Check(f"supervisor {subject}", WARN, _left(rec), _undo_hint(subject, rec))
    yield Check("process supervisors", OK, f"{len(live)} running on this host" + (f": {', '.join(live)}" if live else ""))


def _left(rec: dict[str, Any]) -> str:
    said = [f"its supervisor (pid {rec.get('pid')}) is gone"]
    frozen = rec.get("frozen")
    if isinstance(frozen, dict) and frozen.get("how") not in (None, "none"):
        said.append(f"it left its program frozen ({frozen.get('how')})")
    child = rec.get("child")
    if isinstance(child, dict) and _alive(child.get("pid"), child.get("started")):
        said.append(f"its program (pid {child.get('pid')}) still runs, unsupervised")
    return "; ".join(said)


def _undo_hint(subject: str, rec: dict[str, Any]) -> str:
    """What undoes what a dead supervisor left: `ckpt halt` (or the next `ckpt run`) thaws
    and clears, but refuses while its program still runs: that one is stopped first."""
    then = f"`ckpt halt {subject}` (or the next `ckpt run` of it) undoes what it left"
    child = rec.get("child")
    if isinstance(child, dict) and _alive(child.get("pid"), child.get("started")):
        return f"stop its program first (kill -TERM -{child.get('pgid', child.get('pid'))}); then {then}"
    return then

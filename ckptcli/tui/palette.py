"""ckpt's own commands in the ctrl+p palette (a Textual command Provider): the actions
(fork, tag, restore, export), diff with the mark, go to a ref or tag, open the timeline,
refresh, follow, help; each offered where the screen it is opened over can do it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from textual.command import DiscoveryHit, Hit, Hits, Provider

__all__ = ["COMMANDS", "CkptCommands", "Command", "offered"]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    #: the action run: on the app (`app`) or on the screen the palette was opened over
    action: str
    on_app: bool = False
    #: what the screen must have for the command to be offered (a method or action's name)
    needs: str | None = None


COMMANDS: list[Command] = [
    Command("Fork here", "a new checkpoint from the event or checkpoint under the cursor (ckpt fork)", "act('fork')", True, "point"),
    Command("Tag", "name the checkpoint under the cursor (ckpt tag)", "act('tag')", True, "point"),
    Command("Restore to a directory", "its state document and blobs, into a new directory (ckpt restore)", "act('restore')", True, "point"),
    Command("Export to a file", "one self-contained checkpoint file (ckpt export)", "act('export')", True, "point"),
    Command("Mark A", "mark the row under the cursor, to diff with", "mark", needs="action_mark"),
    Command(
        "Diff with the mark",
        "what changed from the marked point (else the one before) to the cursor (ckpt diff)",
        "diff",
        needs="action_diff",
    ),
    Command("Go to…", "a step, SUBJECT STEP, a tag, branch or id", "goto", needs="action_goto"),
    Command("Open the timeline", "the event tail of the checkpoint under the cursor", "timeline", needs="action_timeline"),
    Command("Refresh", "read the store again: what another process took or pruned", "refresh", needs="action_refresh"),
    Command("Follow", "tail the running agent's journal and new checkpoints", "follow", needs="action_follow"),
    Command("Help", "every key", "help", True),
]


def _allowed(screen: Any, action: str) -> bool:
    """Whether the screen's check_action lets `action` (its name, without arguments) run."""
    check = getattr(screen, "check_action", None)
    if check is None:
        return True
    try:
        return check(action, ()) is not False
    except Exception:  # noqa: BLE001 - a screen's check that cannot answer: offer it
        return True


def offered(screen: Any) -> list[Command]:
    """The commands the screen can run now."""
    out = []
    for c in COMMANDS:
        if c.needs is not None and not callable(getattr(screen, c.needs, None)):
            continue
        if not c.on_app and not _allowed(screen, c.action):
            continue
        out.append(c)
    return out


class CkptCommands(Provider):
    """ckpt's commands, and `Go to tag NAME` / `branch NAME` / `latest SUBJECT` for each ref."""

    def _run(self, command: Command) -> Callable[[], Any]:
        target = self.app if command.on_app else self.screen
        return partial(target.run_action, command.action)

    def _refs(self) -> list[tuple[str, bytes]]:
        session = getattr(self.app, "session", None)
        if session is None:
            return []
        out = []
        for cid, refs in session.history.refs.items():
            for r in refs:
                out.append((f"Go to {r.kind} {r.name}", cid))
        return sorted(out)

    def _go(self, cid: bytes) -> None:
        """To the history, its cursor on `cid`."""
        from ckptcli.tui.screens.base import to_history

        session = getattr(self.app, "session", None)
        if session is not None:
            to_history(self.app, session, cid)

    async def discover(self) -> Hits:
        for c in offered(self.screen):
            yield DiscoveryHit(c.name, self._run(c), help=c.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for c in offered(self.screen):
            score = matcher.match(c.name)
            if score > 0:
                yield Hit(score, matcher.highlight(c.name), self._run(c), help=c.help)
        for name, cid in self._refs():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(self._go, cid), help=cid.hex()[:12])

"""What every screen shares: the session, the app, inputs, and errors shown, not raised."""

from __future__ import annotations

from rich.text import Text
from textual.screen import Screen
from textual.widgets import Input

from ckptcli.errors import CkptError
from ckptcli.history.graph import GLYPHS, Node, Ref
from ckptcli.tui.session import Host, Session

#: How each kind of checkpoint and ref is coloured.
KIND_STYLES = {"root": "bold", "take": "", "merge": "bold blue", "fork": "bold magenta", "migration": "bold yellow"}
REF_STYLES = {"tag": "bold yellow", "branch": "bold green", "latest": "cyan"}


class BaseScreen(Screen[None]):
    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session

    @property
    def ckpt_app(self) -> Host:
        """The app showing this screen, as the services a screen asks of it."""
        app = self.app
        assert isinstance(app, Host)
        return app

    def make_input(self, placeholder: str, id: str) -> Input:
        box = Input(placeholder=placeholder, id=id, classes="hidden")
        box.cursor_blink = getattr(self.app, "blink", True)
        return box

    def error(self, exc: CkptError) -> None:
        """A ckpt error is a notification, never a crash of the TUI."""
        self.notify(str(exc), title="error", severity="error", timeout=8)


def refs_text(refs: list[Ref]) -> Text:
    out = Text()
    for r in refs:
        shown = {"tag": f"[{r.name}]", "branch": f"({r.name})", "latest": "<latest>"}.get(r.kind, r.name)
        out.append(shown + " ", style=REF_STYLES.get(r.kind, ""))
    return out


def node_glyph(n: Node) -> Text:
    return Text(GLYPHS.get(n.kind, "●"), style=KIND_STYLES.get(n.kind, ""))

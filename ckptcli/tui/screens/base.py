"""What every screen shares: the session, the app, inputs, and errors shown, not raised."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Input
from textual.widgets._footer import FooterKey

from ckptcli.errors import CkptError
from ckptcli.history.graph import GLYPHS, Node, Ref
from ckptcli.tui.session import Host, Session

#: The actions the footer always shows, first when the keys do not all fit.
KEPT_ACTIONS = ("help", "quit")


class KeyFooter(Footer):
    """The footer, compact (less padding) when its keys do not fit the terminal's width;
    when they do not fit even so, Help and Quit come first, so that a small terminal
    always shows them."""

    def compose(self) -> ComposeResult:
        keys = list(super().compose())
        shown = [k for k in keys if isinstance(k, FooterKey)]
        width = self.app.size.width
        # a key takes its key, its description and 3 cells of padding; 1 fewer when compact
        self.compact = sum(len(k.key_display) + len(k.description) + 3 for k in shown) > width
        if sum(len(k.key_display) + len(k.description) + 2 for k in shown) <= width:
            yield from keys
            return
        kept = [k for k in shown if k.action in KEPT_ACTIONS]
        yield from (*kept, *(k for k in keys if k not in kept))

    def on_resize(self) -> None:
        self.call_later(self.recompose)


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


def mark_text(marked: bool) -> Text:
    """The `A ` of a marked row (a span of its own: its colours stay off the rest of the row)."""
    return Text.assemble(("A", "bold reverse magenta"), " ") if marked else Text("  ")


def refs_text(refs: list[Ref]) -> Text:
    out = Text()
    for r in refs:
        shown = {"tag": f"[{r.name}]", "branch": f"({r.name})", "latest": "<latest>"}.get(r.kind, r.name)
        out.append(shown + " ", style=REF_STYLES.get(r.kind, ""))
    return out


def node_glyph(n: Node) -> Text:
    return Text(GLYPHS.get(n.kind, "●"), style=KIND_STYLES.get(n.kind, ""))

"""What every screen shares: the session, the app, inputs, and errors shown, not raised."""

from __future__ import annotations

from typing import Any, cast

from rich.text import Text
from textual.app import App, ComposeResult
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

    composed_width = -1  # the width the keys were laid out for

    def compose(self) -> ComposeResult:
        keys = list(super().compose())
        shown = [k for k in keys if isinstance(k, FooterKey)]
        width = self.app.size.width
        if shown:
            self.composed_width = width
        # a key takes its key, its description and 3 cells of padding; 1 fewer when compact
        self.compact = sum(len(k.key_display) + len(k.description) + 3 for k in shown) > width
        for k in shown:  # made compact now, the keys are styled once as they mount (not each again)
            k.set_class(self.compact, "-compact", update=False)
        if sum(len(k.key_display) + len(k.description) + 2 for k in shown) <= width:
            yield from keys
            return
        kept = [k for k in shown if k.action in KEPT_ACTIONS]
        yield from (*kept, *(k for k in keys if k not in kept))

    def on_resize(self) -> None:
        if self.app.size.width != self.composed_width:  # not the resize of its first layout
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

    def leave(self, focus: bytes | None = None) -> None:
        """Back to the screen below; the bottom screen (the timeline `ckpt tui --timeline`
        opens alone, for its first paint) gives its place to the history, its cursor on
        `focus`."""
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.switch_screen(history_screen(self.app, self.session, focus))

    def error(self, exc: CkptError) -> None:
        """A ckpt error is a notification, never a crash of the TUI."""
        self.notify(str(exc), title="error", severity="error", timeout=8)


def history_screen(app: App[Any], session: Session, focus: bytes | None) -> Screen[None]:
    """The history screen, its cursor on `focus`, made by the app (CkptApp.history_screen:
    the history's module imports this one, which must not import it back)."""
    return cast("Screen[None]", cast(Any, app).history_screen(session, focus))


def to_history(app: App[Any], session: Session, cid: bytes) -> None:
    """Close the screens above the history and put its cursor on `cid`; a stack without a
    history (the timeline opened alone) gets one in place of its bottom screen."""
    while len(app.screen_stack) > 2 and not callable(getattr(app.screen, "show_checkpoint", None)):
        app.pop_screen()
    show = getattr(app.screen, "show_checkpoint", None)
    if callable(show):
        show(cid)
    elif len(app.screen_stack) == 2:
        app.switch_screen(history_screen(app, session, cid))


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

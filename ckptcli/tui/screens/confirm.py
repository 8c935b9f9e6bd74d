"""The confirm modal of an action (ckptcli.tui.actions): what will happen, the inputs it
needs (a tag name, a directory, a file), the equivalent command; Enter does it, Esc cancels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class Asked(Protocol):
    """An input the action asks for (ckptcli.tui.actions.Field)."""

    name: str
    label: str
    value: str
    placeholder: str
    required: bool


class Confirmable(Protocol):
    """What the modal shows and asks for (ckptcli.tui.actions.Action; this module does not
    import it: the actions module shows this modal)."""

    title: str

    @property
    def inputs(self) -> Sequence[Asked]: ...

    def describe(self, values: dict[str, str], /) -> str: ...

    def command_line(self, values: dict[str, str]) -> str: ...


class ConfirmScreen(ModalScreen["dict[str, str] | None"]):
    """Dismissed with the values typed (Enter) or None (Esc)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("enter", "confirm", "Do it"),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: 76; max-width: 100%; height: auto; max-height: 100%;
        border: thick $warning; background: $surface; padding: 0 1;
    }
    ConfirmScreen #confirm-title { text-style: bold; color: $warning; }
    ConfirmScreen .field-label { color: $text-muted; margin-top: 1; }
    ConfirmScreen #confirm-what { margin-top: 1; }
    ConfirmScreen #confirm-command { margin-top: 1; color: $text-muted; }
    ConfirmScreen #confirm-keys { margin-top: 1; }
    ConfirmScreen Input { height: 3; }
    """

    def __init__(self, action: Confirmable) -> None:
        super().__init__()
        self.act = action

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(self.act.title, id="confirm-title")
            for f in self.act.inputs:
                yield Static(f.label, classes="field-label")
                box = Input(value=f.value, placeholder=f.placeholder, id=f"field-{f.name}")
                box.cursor_blink = getattr(self.app, "blink", True)
                yield box
            yield Static("", id="confirm-what")
            yield Static("", id="confirm-command")
            yield Static(Text.assemble(("Enter", "bold"), " do it   ", ("Esc", "bold"), " cancel"), id="confirm-keys")

    def on_mount(self) -> None:
        self._update()
        boxes = list(self.query(Input))
        if boxes:
            boxes[0].focus()
            boxes[0].cursor_position = len(boxes[0].value)

    def values(self) -> dict[str, str]:
        return {f.name: self.query_one(f"#field-{f.name}", Input).value for f in self.act.inputs}

    def _update(self) -> None:
        v = self.values()
        self.query_one("#confirm-what", Static).update(self.act.describe(v))
        self.query_one("#confirm-command", Static).update(Text("$ " + self.act.command_line(v)))

    def on_input_changed(self, event: Input.Changed) -> None:
        self._update()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_confirm()

    def action_confirm(self) -> None:
        v = self.values()
        missing = [f for f in self.act.inputs if f.required and not v[f.name].strip()]
        if missing:
            self.notify(f"give the {missing[0].label} first (Esc cancels)", severity="warning", timeout=4)
            self.query_one(f"#field-{missing[0].name}", Input).focus()
            return
        self.dismiss(v)

    def action_cancel(self) -> None:
        self.dismiss(None)

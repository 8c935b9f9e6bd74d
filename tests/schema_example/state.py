"""The support bot's current state objects, and the adapter `ckpt compat` calls."""

from dataclasses import dataclass


@dataclass
class User:
    first: str
    last: str


@dataclass
class BotState:
    scratchpad: str
    user: User
    plan: list[str]


def load(doc):
    """Load a v3 state document; raise if the current code cannot use it."""
    memory = doc["memory"]
    user = User(**memory["user"])
    if not isinstance(memory["scratchpad"], str):
        raise TypeError("memory.scratchpad must be a string")
    return BotState(memory["scratchpad"], user, list(doc.get("plan", [])))

"""Migrations of the support bot's state (the example in docs/migrations.md).

v1  {"memory": {"notes": "...", "user": "Ada Lovelace"}, "plan": [...]}
v2  memory.notes is renamed memory.scratchpad
v3  memory.user is split into {"first": ..., "last": ...}
"""

from ckptcli.schema import migration

SCHEMA_VERSION = 3  # the version the current code reads


@migration(from_=1, to=2)
def rename_notes(state):
    """memory.notes is now memory.scratchpad"""
    memory = state["memory"]
    memory["scratchpad"] = memory.pop("notes")
    return state


@migration(from_=2, to=3)
def split_user(state):
    """memory.user "First Last" becomes {"first": ..., "last": ...}"""
    first, _, last = state["memory"]["user"].partition(" ")
    state["memory"]["user"] = {"first": first, "last": last}
    return state

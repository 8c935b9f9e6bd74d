"""The support bot of docs/replay.md, recorded and checked by tests/test_replay.py: the
doc shows agent.py verbatim (a test checks it). agent_changed.py and agent_extra.py are
the same bot with one change each, which `ckpt replay --check` must catch."""

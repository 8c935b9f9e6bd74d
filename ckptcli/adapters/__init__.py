"""Adapters: capture live agents, workflows and processes into checkpoints and restore them.

Every adapter implements the contract in `base` (docs/adapters.md) and registers in the
entry-point group `ckptcli.adapters`; `registry` lists and loads them. The generic
adapter's Python API is docs/agents.md; the LangGraph saver's, docs/langgraph.md."""

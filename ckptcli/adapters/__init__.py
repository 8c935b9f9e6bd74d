"""Adapters: capture live agents, workflows and processes into checkpoints and restore them (docs/agents.md)."""

"""The process adapter: capture a running program, freeze it, checkpoint it under `ckpt run` (docs/processes.md)."""

"""The screens of `ckpt tui`: history, checkpoint, timeline, diff and help."""

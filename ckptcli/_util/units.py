"""Sizes for people: one formatter for the CLI, `ckpt diff` and the TUI."""

from __future__ import annotations


def human_size(n: float) -> str:
    """1536 -> "1.5 KiB"; bytes below 1 KiB as "1,000 B"."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{n:,.0f} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"

"""What one Recorder.append costs, by fsync policy and by the size of the state.

    python -m bench.recorder [--events 20000]

Appends small events (memory.set of a short value, message.append) to a recorder on a
local store and prints the mean time per append. A measurement, not a test: the figures
depend on the machine and, for fsync, on its disk. The state is never encoded by an
append. The containers along the event's path are copied (shallowly) only the first time
an append changes them after the state was last handed out or checkpointed, then changed
in place; the rows with a 10,000-key memory and a 10,000-message conversation show that
an append then costs the same whatever the size of the state.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import ckptcli
from ckptcli.history.recorder import Durability, Recorder


def _measure(events: int, durability: Durability, state: dict[str, Any] | None, kind: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        store = ckptcli.init_store(Path(d) / "store")
        rec = Recorder.open(store, "agent:bench", Path(d) / "j", state=state, durability=durability)
        try:
            start = time.perf_counter()
            for i in range(events):
                if kind == "memory.set":
                    rec.append("memory.set", path=["notes", str(i % 50)], value={"i": i, "text": "a short note"})
                else:
                    rec.append("message.append", message={"role": "user", "content": f"message {i}"})
            rec.flush()
            return (time.perf_counter() - start) / events
        finally:
            rec.close()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.recorder", description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    args = ap.parse_args()
    n = args.events
    wide = {"memory": {f"key{i}": i for i in range(10_000)}, "plan": [], "tools": []}
    chat = {"memory": {"messages": [{"role": "user", "content": f"m{i}"} for i in range(10_000)]}, "plan": [], "tools": []}
    rows = [
        ("memory.set, fsync never, batch 64", Durability(batch_size=64, fsync="never"), None, "memory.set", n),
        ("memory.set, fsync batch, batch 64", Durability(batch_size=64, fsync="batch"), None, "memory.set", n),
        ("memory.set, fsync always", Durability(fsync="always"), None, "memory.set", max(n // 20, 100)),
        ("memory.set, 10,000-key memory, fsync never", Durability(batch_size=64, fsync="never"), wide, "memory.set", n),
        ("message.append, 10,000 messages, fsync never", Durability(batch_size=64, fsync="never"), chat, "message.append", n),
    ]
    print(f"{'case':<48} {'per append':>12}")
    for label, durability, state, kind, events in rows:
        per = _measure(events, durability, state, kind)
        print(f"{label:<48} {per * 1e6:>9.1f} µs")


if __name__ == "__main__":
    main()

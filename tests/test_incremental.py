"""Checkpoint N+1 stores only what changed: appending to a long history costs a bounded
number of bytes and files per take, and the store grows linearly, not quadratically.
(The full 1,000/4,000-step comparison with LangGraph's SqliteSaver is in bench/history.py.)"""

from __future__ import annotations

import random
from pathlib import Path

import ckptcli
from ckptcli.api import open_checkpoint, states_equal, take


def _store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _message(rng: random.Random, i: int) -> dict[str, str]:
    words = ["alpha", "order", "refund", "ticket", "status", "shipping", "customer", "lookup", "agent", "reply"]
    return {"role": "assistant" if i % 2 else "user", "id": f"m{i}", "content": " ".join(rng.choices(words, k=70))[:450]}


def _run(store_root: Path, steps: int) -> list[int]:
    store = ckptcli.init_store(store_root)
    rng = random.Random(7)
    state: dict = {"memory": {"messages": [], "step": 0}, "tools": []}  # type: ignore[type-arg]
    sizes = []
    for i in range(steps):
        state["memory"]["messages"].append(_message(rng, i))
        state["memory"]["step"] = i
        state["tools"].append({"id": f"c{i}", "name": "lookup", "args": {"q": i}, "result": "ok " * 20, "status": "ok"})
        take(store, state, subject="agent:hist")
        sizes.append(_store_bytes(store_root))
    assert states_equal(open_checkpoint("latest", store).state(), state)
    return sizes


def test_history_grows_linearly(tmp_path: Path) -> None:
    sizes = _run(tmp_path / "s", 400)
    per_step_early = (sizes[99] - sizes[49]) / 50
    per_step_late = (sizes[399] - sizes[349]) / 50
    # a quadratic store would cost ~8x more per step at 400 than at 100; with the open
    # tail embedded in the root the cost per step stays flat (measured ~1.9 KB vs ~1.6 KB)
    assert per_step_late < 1.2 * per_step_early, (per_step_early, per_step_late)
    # and each step costs a few KB at most, whatever the history length (~500 B message + ~150 B tool call)
    assert per_step_late < 4096, per_step_late
    # 4x the steps: linear growth gives ~4x (measured 3.6x); quadratic would be ~16x
    assert sizes[399] < 4.3 * sizes[99], sizes[399] / sizes[99]


def test_a_take_writes_a_handful_of_files(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = ckptcli.init_store(root)
    state = {"memory": {"messages": [f"message {i} " * 40 for i in range(500)]}}
    take(store, state, subject="agent:a")
    before = {p for p in root.rglob("*") if p.is_file()}
    state["memory"]["messages"].append("new " * 100)
    take(store, state, subject="agent:a")
    new = {p.relative_to(root).parts[0] for p in root.rglob("*") if p.is_file()} - set()
    added = [p for p in root.rglob("*") if p.is_file() and p not in before]
    # one pack, one index, one manifest (the latest ref is rewritten in place)
    assert sorted(p.relative_to(root).parts[0] for p in added) == ["index", "manifests", "packs"]
    assert "tmp" not in new or not any((root / "tmp").iterdir())


def test_unchanged_state_adds_only_a_manifest(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / "s")
    state = {"memory": {"big": "x" * 200_000, "items": list(range(1000))}}
    first = take(store, state, subject="agent:a")
    again = take(store, state, subject="agent:a")
    assert first.new_objects > 0
    assert again.new_objects == 0 and again.new_bytes == 0


def test_small_edit_in_a_large_blob_adds_little(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / "s")
    f = tmp_path / "data.bin"
    data = bytearray(random.Random(1).randbytes(4_000_000))
    f.write_bytes(data)
    first = take(store, {}, subject="process:p", blobs={"data": f})
    data[2_000_000:2_000_100] = b"E" * 100
    f.write_bytes(data)
    second = take(store, {}, subject="process:p", blobs={"data": f})
    assert first.new_bytes > 3_900_000
    assert second.new_bytes < 600_000  # one or two ~64 KiB chunks and tree nodes, not the file


def test_unchanged_files_are_not_read_again(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / "s")
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    rng = random.Random(3)
    for i in range(5):
        (work / ("sub" if i % 2 else ".") / f"f{i}.bin").write_bytes(rng.randbytes(100_000 + i))
    (work / "small.txt").write_text("small")
    first = take(store, {}, subject="process:p", blobs={"w": work})
    assert first.capture.reused_files == 0
    # change one file's content (same size); the others keep size, mtime, ctime and inode
    changed = work / "sub" / "f1.bin"
    changed.write_bytes(rng.randbytes(100_001))
    second = take(store, {}, subject="process:p", blobs={"w": work})
    assert second.capture.files == 6 and second.capture.reused_files == 5
    out = tmp_path / "out"
    open_checkpoint(second.hex, store).restore_blobs(out)
    for p in work.rglob("*"):
        if p.is_file():
            assert (out / "w" / p.relative_to(work)).read_bytes() == p.read_bytes(), p
    # --force-read reads everything, and finds nothing new
    forced = take(store, {}, subject="process:p", blobs={"w": work}, force_read=True)
    assert forced.capture.reused_files == 0 and forced.new_bytes < 2_000
    # a file rewritten in place with the same size and mtime is still read (its ctime moved)
    import os

    st = changed.stat()
    changed.write_bytes(rng.randbytes(100_001))
    os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns))
    third = take(store, {}, subject="process:p", blobs={"w": work})
    assert third.capture.reused_files == 5
    open_checkpoint(third.hex, store).restore_blobs(tmp_path / "out3")
    assert (tmp_path / "out3" / "w" / "sub" / "f1.bin").read_bytes() == changed.read_bytes()


def test_take_works_in_a_forked_child_after_the_parent_used_the_pool(tmp_path: Path) -> None:
    """The chunk pool is per process: a child forked after a parallel take can take too."""
    import os

    store = ckptcli.init_store(tmp_path / "s")
    f = tmp_path / "big.bin"
    f.write_bytes(random.Random(5).randbytes(1_000_000))
    take(store, {}, subject="process:p", blobs={"f": f})  # starts the pool in this process
    f.write_bytes(random.Random(6).randbytes(1_000_000))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        try:
            child_store = ckptcli.open_store(tmp_path / "s")
            take(child_store, {}, subject="process:child", blobs={"f": f})
            os._exit(0)
        except BaseException:  # noqa: BLE001 - a forked child must exit, whatever went wrong
            os._exit(1)
    deadline = 60
    import time

    start = time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - start > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child's take hung")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0
    child = open_checkpoint("process:child", ckptcli.open_store(tmp_path / "s"))
    child.restore_blobs(tmp_path / "out")
    assert (tmp_path / "out" / "f").read_bytes() == f.read_bytes()

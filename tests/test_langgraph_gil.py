"""gil.py: the saver's threads let the interpreter go during long Python work (what an
event loop's thread waits for; bench/langgraph_async.py measures the loop's lag)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from ckptcli import api
from ckptcli.adapters.langgraph import gil
from ckptcli.adapters.langgraph.saver import CkptSaver


def _spin(seconds: float) -> None:
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        pass


def test_a_breather_lets_go_after_a_quarter_millisecond_of_cpu_and_not_before(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(gil.time, "sleep", slept.append)
    breathe = gil.Breather()
    breathe()
    assert slept == []  # no work since it was made
    for _ in range(20):
        _spin(gil.BREATHE_AFTER / 4)
        breathe()
    assert 3 <= len(slept) <= 6 and set(slept) == {0}  # 5 quarter-ms of CPU: a release after each


def test_breathing_returns_what_the_call_returns_and_lets_go_after_a_long_one(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(gil.time, "sleep", slept.append)
    assert gil.breathing(lambda a, b=0: a + b, 1, b=2) == 3
    assert slept == []  # a short call: nothing to let go of
    assert gil.breathing(lambda: _spin(4 * gil.BREATHE_AFTER) or "done") == "done"
    assert slept == [0]

    def fails() -> None:
        _spin(4 * gil.BREATHE_AFTER)
        raise KeyError("x")

    with pytest.raises(KeyError):
        gil.breathing(fails)
    assert slept == [0, 0]


def test_the_commit_thread_lets_go_while_it_seals_a_burst(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # sealing every checkpoint at once (back-pressure) held the interpreter for the whole
    # batch: an event loop waited for the forced switch (5 ms) at each of its wake-ups
    releases: list[str] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if seconds == 0 and threading.current_thread() is threading.main_thread():  # not the commit thread's own
            releases.append(threading.current_thread().name)
        real_sleep(seconds)

    monkeypatch.setattr(gil.time, "sleep", sleep)
    saver = CkptSaver(api.init_store(tmp_path / ".ckpt"), commit_interval=3600, seal_idle=0)
    try:
        cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for i in range(200):
            cp = empty_checkpoint()
            cp["channel_values"] = {"messages": [f"message {j} " * 20 for j in range(i % 20)]}
            cp["channel_versions"] = {"messages": f"{i + 1:016}.0"}
            cfg = saver.put(cfg, cp, {"step": i}, {"messages": f"{i + 1:016}.0"})
        assert saver.backlog == 200
        with saver._commit_mutex, saver._lock:
            saver._committer.seal_all()  # what the commit thread does under back-pressure
        assert saver.backlog == 200 and len(saver._queue) == 200
        assert releases, "sealed 200 checkpoints without letting the interpreter go"
    finally:
        saver.close()
    with CkptSaver(api.open_store(tmp_path / ".ckpt")) as again:  # every checkpoint committed as sealed
        tup = again.get_tuple({"configurable": {"thread_id": "t"}})
        assert tup is not None and len(tup.checkpoint["channel_values"]["messages"]) == 199 % 20
        assert len(list(again.list({"configurable": {"thread_id": "t"}}))) == 200

"""The saver's hold on the cyclic garbage collector (gcfreeze.py, docs/langgraph.md).

A full collection walks every tracked object of the process, ~100,000 in one running
LangGraph, in whichever turn it falls: the slowest turns of a run
(bench/langgraph_gcprobe.py). From its first put until it is closed a saver keeps the
objects alive at that put out of those walks (`gc.freeze()`), and gives them back on
close. Each case runs in a fresh interpreter: the collector's state is the process's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ckptcli.adapters.langgraph.saver import CkptSaver
from ckptcli.errors import InvalidInputError

ROOT = Path(__file__).resolve().parent.parent

_SCRIPT = r"""
import gc, json, sys
from ckptcli.adapters.langgraph import gcfreeze
from ckptcli.adapters.langgraph.saver import CkptSaver
from langchain_core.messages import HumanMessage
from tests.langgraph_graphs import chat_builder

case, work = sys.argv[1], sys.argv[2]
out = {}
if case == "host-froze":
    gc.freeze()
if case == "disabled":
    gc.disable()
out["before"] = gc.get_freeze_count()
kept = [[i] for i in range(5000)]  # objects (lists: always tracked) alive before the first put: frozen with the rest
opts = {} if case != "off" else {"gc_freeze": False}
config = {"configurable": {"thread_id": "t"}}
if case == "closed":  # a put on a closed saver is refused, and takes no hold
    closed = CkptSaver.open(work + "/c")
    closed.close()
    try:
        from langgraph.checkpoint.base import empty_checkpoint
        closed.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
    except Exception as exc:
        out["refused"] = type(exc).__name__
    out["closed_freeze"], out["closed_holders"] = gc.get_freeze_count(), gcfreeze.holders()
saver = CkptSaver.open(work + "/a", **opts)
graph = chat_builder(4, words=8).compile(checkpointer=saver)
out["after_open"] = gc.get_freeze_count()
graph.invoke({"messages": []}, config)
out["after_put"] = gc.get_freeze_count()
out["kept_walked"] = any(o is kept[0] for o in gc.get_objects())  # the collector's generations
out["holders"] = gcfreeze.holders()
if case == "two":
    other = CkptSaver.open(work + "/b")
    chat_builder(4, words=8).compile(checkpointer=other).invoke({"messages": []}, config)
    out["holders_two"] = gcfreeze.holders()
    saver.close()
    out["after_first_close"] = gc.get_freeze_count()
    other.close()
else:
    saver.close()
out["after_close"] = gc.get_freeze_count()
out["holders_end"] = gcfreeze.holders()
out["messages"] = len(CkptSaver.open(work + "/a", gc_freeze=False).get_tuple(config).checkpoint["channel_values"]["messages"])
print(json.dumps(out))
"""


def _run(case: str, tmp_path: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, case, str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_a_saver_freezes_what_is_alive_from_its_first_put_until_it_closes(tmp_path: Path) -> None:
    out = _run("default", tmp_path)
    assert out["before"] == 0 and out["after_open"] == 0  # opening alone leaves the collector alone
    assert out["after_put"] > 5000  # the process's objects, among them the 5,000 made before the put
    assert out["kept_walked"] is False  # not in the generations a collection walks
    assert out["holders"] == 1
    assert out["after_close"] == 0 and out["holders_end"] == 0  # given back on close
    assert out["messages"] == 4  # and the thread is stored as always


def test_the_freeze_lasts_until_the_last_saver_closes(tmp_path: Path) -> None:
    out = _run("two", tmp_path)
    assert out["holders_two"] == 2
    assert out["after_first_close"] > 0
    assert out["after_close"] == 0 and out["holders_end"] == 0


def test_gc_freeze_false_leaves_the_collector_alone(tmp_path: Path) -> None:
    out = _run("off", tmp_path)
    assert out["after_put"] == 0 and out["kept_walked"] is True and out["holders"] == 0
    assert out["messages"] == 4


def test_a_process_that_manages_its_collector_is_left_alone(tmp_path: Path) -> None:
    froze = _run("host-froze", tmp_path / "froze")
    # the host's own freeze: not added to (what it made since is walked as before), not undone on close
    assert froze["before"] > 0 and froze["after_close"] > 0
    assert froze["kept_walked"] is True and froze["holders"] == 0
    disabled = _run("disabled", tmp_path / "disabled")
    assert disabled["after_put"] == 0 and disabled["kept_walked"] is True and disabled["holders"] == 0
    assert disabled["messages"] == 4


def test_a_put_on_a_closed_saver_takes_no_hold(tmp_path: Path) -> None:
    out = _run("closed", tmp_path)
    assert out["refused"] == "UsageError" and out["closed_freeze"] == 0 and out["closed_holders"] == 0
    # the next saver's first put freezes as usual, and its close unfreezes
    assert out["after_put"] > 0 and out["after_close"] == 0 and out["holders_end"] == 0


def test_a_bad_gc_freeze_option_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="gc_freeze must be True or False"):
        CkptSaver.open(tmp_path / ".ckpt", gc_freeze="yes")  # type: ignore[arg-type]
    assert not (tmp_path / ".ckpt").exists()  # every option is checked before the store is made

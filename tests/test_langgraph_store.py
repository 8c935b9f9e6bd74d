"""CkptStore, LangGraph's long-term memory store on ckpt.

The installed LangGraph packages ship no conformance suite for stores (the
langgraph-checkpoint-conformance package tests checkpointers only), so the main test is
an equivalence test: the same randomized sequence of every BaseStore method and op
(sync and async, direct batches too), with and without semantic search, runs against
LangGraph's InMemoryStore and CkptStore, and every result must be equal. Then what
InMemoryStore cannot show: persistence, SIGKILL, two processes, TTLs, hostile input,
and a real graph using the store beside CkptSaver on one directory.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from ckptcli import api
from ckptcli.adapters.langgraph.store import MAX_VALUE_BYTES, CkptStore
from ckptcli.errors import InvalidInputError, LimitExceededError, UsageError
from tests.conftest import REPO

SCALE = max(1, int(os.environ.get("CKPT_STRESS_SCALE", "1") or "1"))


# -- the reference: InMemoryStore, without two artifacts of its dicts -------------------------
class _NoGhosts(dict):  # type: ignore[type-arg]
    def __missing__(self, key: Any) -> dict[str, Any]:
        return {}  # a get or delete in a namespace never creates it


class Reference(InMemoryStore):
    """InMemoryStore with three faults fixed: a namespace that was only read (or whose
    items were all deleted) is listed by its list_namespaces; a re-put item keeps the
    vectors of paths it no longer indexes; a batch in which one text is to be embedded
    twice fails (it embeds each text once, then pairs the vectors with every place a
    text goes). CkptStore has none of them; everything else is InMemoryStore's own code."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._data = _NoGhosts()

    def _extract_texts(self, put_ops: Any) -> Any:
        for ns, key in put_ops:
            self._vectors[ns].pop(key, None)  # a put replaces the item's vectors
        return super()._extract_texts(put_ops)

    def _insertinmem_store(self, to_embed: Any, embeddings: Any) -> None:
        assert len(embeddings) == len(to_embed)
        for vector, places in zip(embeddings, to_embed.values(), strict=True):
            for ns, key, path in places:
                self._vectors[ns][key][path] = vector

    def _apply_put_ops(self, put_ops: Any) -> None:
        for (ns, _key), op in put_ops.items():
            if op.value is not None:
                self._data.setdefault(ns, {})
        super()._apply_put_ops(put_ops)
        for ns in [ns for ns, items in self._data.items() if not items]:
            del self._data[ns]


WORDS = ["apple", "banana", "cherry", "date", "egg", "fig", "grape"]


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding: letter counts (ties between items are common, so the
    order among equal scores is tested too)."""
    return [[float(t.count(c)) for c in "abcdefgh"] for t in texts]


async def aembed(texts: list[str]) -> list[list[float]]:
    return embed(texts)


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        self.t += 0.001  # every reading later than the one before
        return self.t


def norm(result: Any) -> Any:
    """A result with timestamps left out (their order is checked apart) and scores rounded."""
    if isinstance(result, list):
        return [norm(r) for r in result]
    if isinstance(result, SearchItem):
        score = None if result.score is None else round(result.score, 9)
        return ("S", result.namespace, result.key, result.value, score)
    if isinstance(result, Item):
        return ("I", result.namespace, result.key, result.value)
    return result


def check_times(result: Any) -> None:
    for r in result if isinstance(result, list) else [result]:
        if isinstance(r, Item):
            assert r.created_at.tzinfo is not None and r.created_at.utcoffset() == UTC.utcoffset(None)
            assert r.created_at <= r.updated_at


def rand_value(rng: random.Random) -> dict[str, Any]:
    v: dict[str, Any] = {"n": rng.choice([rng.randint(-3, 3), rng.uniform(-3, 3), True])}
    if rng.random() < 0.7:
        v["text"] = " ".join(rng.choices(WORDS, k=rng.randint(1, 3)))
    if rng.random() < 0.5:
        v["tag"] = rng.choice(["a", "b", None])
    if rng.random() < 0.3:
        v["nested"] = {"a": rng.randint(0, 2), "l": [rng.randint(0, 1) for _ in range(rng.randint(0, 2))]}
    if rng.random() < 0.2:
        v["parts"] = [{"t": rng.choice(WORDS)} for _ in range(rng.randint(1, 3))]
    return v


NAMESPACES = [("a",), ("a", "b"), ("a", "c"), ("b",), ("b", "x", "y"), ("a", "b", "c", "d"), ("users", "u1", "memories")]


def rand_filter(rng: random.Random) -> dict[str, Any] | None:
    return rng.choice(
        [
            None,
            {"n": rng.randint(-3, 3)},
            {"n": {"$gt": rng.uniform(-3, 3)}},
            {"n": {"$gte": 0, "$lt": 2}},
            {"n": {"$lte": 1}},
            {"n": {"$ne": 1}},
            {"n": {"$eq": True}},
            {"tag": rng.choice(["a", "b", None])},
            {"tag": {"$ne": "a"}},
            {"nested": {"a": 1}},
            {"nested": {"l": [0, 1]}},
            {"text": rng.choice(WORDS)},
        ]
    )


def rand_pattern(rng: random.Random) -> tuple[str, ...]:
    ns = rng.choice(NAMESPACES)
    k = rng.randint(1, len(ns))
    return tuple("*" if rng.random() < 0.3 else x for x in (ns[:k] if rng.random() < 0.5 else ns[-k:]))


def rand_call(rng: random.Random, indexed: bool) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """One call of a BaseStore method (name, args, kwargs); "batch" holds ops."""
    ns = rng.choice(NAMESPACES)
    key = rng.choice(["k1", "k2", "k3", "k4"])
    r = rng.random()
    if r < 0.35:
        kw: dict[str, Any] = {}
        if indexed and rng.random() < 0.4:
            kw["index"] = rng.choice([False, ["text"], ["parts[*].t"], ["nested.a", "text"]])
        return "put", (ns, key, rand_value(rng)), kw
    if r < 0.45:
        return "delete", (ns, key), {}
    if r < 0.6:
        return "get", (ns, key), {}
    if r < 0.8:
        prefix = rng.choice([(), *NAMESPACES, ("a",), ("zzz",)])
        prefix = prefix[: rng.randint(0, len(prefix))]
        kw = {"filter": rand_filter(rng), "limit": rng.randint(1, 6), "offset": rng.choice([0, 0, 1, 2])}
        if rng.random() < 0.5:
            kw["query"] = " ".join(rng.choices(WORDS, k=2))
        return "search", (prefix,), kw
    if r < 0.9:
        kw = {"limit": rng.randint(1, 10), "offset": rng.choice([0, 0, 1, 3])}
        if rng.random() < 0.5:
            kw["prefix"] = rand_pattern(rng)
        if rng.random() < 0.3:
            kw["suffix"] = rand_pattern(rng)
        if rng.random() < 0.4:
            kw["max_depth"] = rng.randint(1, 3)
        return "list_namespaces", (), kw
    ops: list[Any] = []
    for _ in range(rng.randint(1, 6)):
        name, args, kw = rand_call(rng, indexed)
        if name == "put":
            ops.append(PutOp(args[0], args[1], args[2], index=kw.get("index")))
        elif name == "delete":
            ops.append(PutOp(args[0], args[1], None))
        elif name == "get":
            ops.append(GetOp(*args))
        elif name == "search":
            ops.append(SearchOp(args[0], kw["filter"], kw["limit"], kw["offset"], kw.get("query")))
        elif name == "list_namespaces":
            conds = tuple(MatchCondition(t, kw[t]) for t in ("prefix", "suffix") if t in kw)
            ops.append(ListNamespacesOp(conds or None, kw.get("max_depth"), kw["limit"], kw["offset"]))
    return "batch", (ops,), {}


def call(store: Any, loop: asyncio.AbstractEventLoop, use_async: bool, name: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    if use_async:
        return loop.run_until_complete(getattr(store, "a" + name)(*args, **kw))
    return getattr(store, name)(*args, **kw)


@pytest.mark.parametrize("indexed", [False, True], ids=["kv", "semantic"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_method_and_op_gives_what_in_memory_store_gives(tmp_path: Path, seed: int, indexed: bool) -> None:
    index: Any = {"dims": 8, "embed": embed, "fields": ["text"]} if indexed else None
    aindex: Any = {"dims": 8, "embed": aembed, "fields": ["text"]} if indexed else None
    rng = random.Random(seed)
    ref = Reference(index=index)
    # compact_bytes small: the run crosses several snapshots and new logs
    ours = CkptStore.open(tmp_path / ".ckpt", index=index, clock=Clock(), compact_bytes=8192)
    aref, aours = Reference(index=aindex), None
    loop = asyncio.new_event_loop()
    try:
        for step in range(300 * SCALE):
            name, args, kw = rand_call(rng, indexed)
            use_async = rng.random() < 0.4
            want = call(ref, loop, use_async, name, args, kw)
            got = call(ours, loop, use_async, name, args, kw)
            assert norm(got) == norm(want), (step, name, args, kw)
            check_times(got)
        assert ours.compactions >= 1
        # a second store on the same directory reads exactly the same items, in the same order
        everything = ours.search((), limit=1000)
        again = CkptStore.open(tmp_path / ".ckpt", index=index)
        assert [(i.namespace, i.key, i.value, i.created_at, i.updated_at) for i in again.search((), limit=1000)] == [
            (i.namespace, i.key, i.value, i.created_at, i.updated_at) for i in everything
        ]
        assert norm(again.search(("a",), query="apple fig", limit=20)) == norm(ref.search(("a",), query="apple fig", limit=20))
        assert again.list_namespaces() == ref.list_namespaces()
        again.close()
        # async embeddings (an async embed function) give the same as sync ones
        if indexed:
            aours = CkptStore.open(tmp_path / "async", index=aindex)
            for _ in range(40):
                name, args, kw = rand_call(rng, indexed)
                want = call(aref, loop, True, name, args, kw)
                assert norm(call(aours, loop, True, name, args, kw)) == norm(want), (name, args, kw)
    finally:
        loop.close()
        ours.close()
        if aours is not None:
            aours.close()
    assert api.verify(api.open_store(tmp_path / ".ckpt"), read_data=True).ok


def test_timestamps_created_kept_updated_moved(tmp_path: Path) -> None:
    clock = Clock()
    with CkptStore.open(tmp_path / ".ckpt", clock=clock) as s:
        s.put(("u",), "k", {"v": 1})
        first = s.get(("u",), "k")
        clock.t += 10
        s.put(("u",), "k", {"v": 2})
        second = s.get(("u",), "k")
        assert first is not None and second is not None
        assert second.created_at == first.created_at and second.updated_at > first.updated_at
        assert (second.updated_at - first.updated_at).total_seconds() >= 10
        s.delete(("u",), "k")
        clock.t += 10
        s.put(("u",), "k", {"v": 3})
        third = s.get(("u",), "k")
        assert third is not None and third.created_at > second.updated_at  # a new item after a delete
        # an item's value handed out is a copy: editing it changes nothing stored
        third.value["v"] = 99
        assert s.get(("u",), "k").value == {"v": 3}  # type: ignore[union-attr]


def test_the_async_methods_run_off_the_event_loop(tmp_path: Path) -> None:
    seen: set[int] = set()

    class Watched(CkptStore):
        def _execute(self, *a: Any, **k: Any) -> Any:
            seen.add(threading.get_ident())
            return super()._execute(*a, **k)

    async def main() -> int:
        s = Watched(api.init_store(tmp_path / ".ckpt"))
        try:
            await s.aput(("a",), "k", {"x": 1})
            assert (await s.aget(("a",), "k")).value == {"x": 1}  # type: ignore[union-attr]
            assert [i.key for i in await s.asearch(("a",))] == ["k"]
            assert await s.alist_namespaces() == [("a",)]
            await s.adelete(("a",), "k")
            assert await s.aget(("a",), "k") is None
            return threading.get_ident()
        finally:
            s.close()

    loop_thread = asyncio.run(main())
    assert seen and loop_thread not in seen


# -- TTL, with a clock the test moves -----------------------------------------------------------
def test_ttl_expires_refreshes_and_sweeps(tmp_path: Path) -> None:
    clock = Clock()
    s = CkptStore.open(tmp_path / ".ckpt", clock=clock)
    s.put(("m",), "short", {"v": 1}, ttl=1)  # minutes
    s.put(("m",), "forever", {"v": 2})
    s.put(("gone",), "x", {"v": 3}, ttl=0.75)
    clock.t += 40
    assert s.get(("m",), "short") is not None  # read at 40 s: refreshed, expires at 100 s
    assert s.list_namespaces() == [("gone",), ("m",)]
    clock.t += 40  # 80 s
    assert s.get(("m",), "short", refresh_ttl=False) is not None  # not refreshed
    assert s.get(("gone",), "x") is None and s.list_namespaces() == [("m",)]  # expired at 45 s
    clock.t += 30  # 110 s
    assert s.get(("m",), "short") is None
    assert [i.key for i in s.search(("m",))] == ["forever"]
    # expired items are invisible before a sweep, and a sweep deletes them from the log
    assert s.sweep_ttl() == 2
    assert s.sweep_ttl() == 0
    # search refreshes what it returns; another process sees the refreshed expiry
    s.put(("m",), "r", {"v": 4}, ttl=1)
    clock.t += 50
    assert [i.key for i in s.search(("m",))] == ["forever", "r"]
    clock.t += 50  # 100 s after the put, 50 after the search
    other = CkptStore.open(tmp_path / ".ckpt", clock=lambda: clock.t)
    assert other.get(("m",), "r", refresh_ttl=False) is not None
    clock.t += 20
    assert other.get(("m",), "r") is None and s.get(("m",), "r") is None
    other.close()
    s.close()


def test_ttl_config_default_and_no_refresh_on_read(tmp_path: Path) -> None:
    clock = Clock()
    with CkptStore.open(tmp_path / ".ckpt", clock=clock, ttl={"default_ttl": 2, "refresh_on_read": False}) as s:
        assert s.supports_ttl
        s.put(("m",), "k", {"v": 1})  # ttl from the config: 2 minutes
        s.put(("m",), "keep", {"v": 1}, ttl=None)  # explicitly none
        clock.t += 100
        assert s.get(("m",), "k") is not None  # not refreshed (refresh_on_read False)
        clock.t += 30
        assert s.get(("m",), "k") is None and s.get(("m",), "keep") is not None
        assert s.get(("m",), "keep", refresh_ttl=True) is not None


# -- persistence and crashes --------------------------------------------------------------------
def test_reopen_keeps_items_order_timestamps_and_ttls(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    s = CkptStore.open(tmp_path / ".ckpt", clock=clock, compact_bytes=4096)
    for i in range(60):
        s.put(("docs", f"u{i % 3}"), f"k{i}", {"i": i, "body": "x" * (i * 7)}, ttl=None if i % 2 else 5)
    for i in range(0, 60, 7):
        s.delete(("docs", f"u{i % 3}"), f"k{i}")
    before = s.search(("docs",), limit=100)
    s.close()
    assert s.compactions >= 1
    with pytest.raises(UsageError):
        s.get(("docs", "u0"), "k1")
    t = CkptStore.open(tmp_path / ".ckpt", clock=lambda: clock.t)
    after = t.search(("docs",), limit=100)
    assert [(i.namespace, i.key, i.value, i.created_at, i.updated_at) for i in after] == [
        (i.namespace, i.key, i.value, i.created_at, i.updated_at) for i in before
    ]
    clock.t += 301  # the items with a TTL expire for the reopened store too
    assert all(i.value["i"] % 2 for i in t.search(("docs",), limit=100, refresh_ttl=False))
    t.close()
    # the snapshots are ckpt checkpoints: `ckpt ls` shows them, prune keeps the newest
    ls = cli("ls", "--store", tmp_path / ".ckpt", "--json")
    assert ls.code == 0 and "workflow:langgraph-store" in ls.out
    pr = cli("prune", "--store", tmp_path / ".ckpt", "--keep-last", "1", "--allow-remove-all")
    assert pr.code == 0, pr.err
    u = CkptStore.open(tmp_path / ".ckpt", clock=lambda: clock.t)
    assert len(u.search(("docs",), limit=100)) == len(after) // 2 + (len(after) % 2)
    u.close()


PUTTER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from ckptcli.adapters.langgraph.store import CkptStore
    s = CkptStore.open({store!r}, fsync={fsync!r}, compact_bytes={compact})
    i = 0
    while True:
        s.put(("crash", str(i % 5)), f"k{{i}}", {{"i": i, "pad": "p" * (i % 300)}})
        print(i, flush=True)  # only once put returned
        i += 1
    """
)


def test_a_put_that_returned_survives_sigkill(tmp_path: Path, fsync: str = "always") -> None:
    # (a kill is no power cut: fsync="never" keeps what was written as well; the slow
    # test below kills writers of the default policy at random points)
    store = tmp_path / ".ckpt"
    CkptStore.open(store).close()
    child = subprocess.Popen(
        [sys.executable, "-c", PUTTER.format(repo=str(REPO), store=str(store), fsync=fsync, compact=65536)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    done = -1
    for line in child.stdout:
        done = int(line)
        if done >= 200:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    child.stderr.close()
    with CkptStore.open(store) as s:
        for i in range(done + 1):
            item = s.get(("crash", str(i % 5)), f"k{i}")
            assert item is not None and item.value == {"i": i, "pad": "p" * (i % 300)}, i
        assert s.compactions == 0
        s.put(("after",), "k", {"ok": True})  # a torn record the kill left is cut, not read as damage
    assert api.verify(api.open_store(store), read_data=True).ok


WORKER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from ckptcli.adapters.langgraph.store import CkptStore
    s = CkptStore.open({store!r}, compact_bytes=8192)
    s.put(("shared",), "from-child", {{"hello": "parent"}})
    print("ready", flush=True)
    sys.stdin.readline()
    got = s.get(("shared",), "from-parent")
    print(got.value["hello"] if got else "nothing", flush=True)
    for i in range(150):
        s.put(("child", str(i % 3)), f"k{{i}}", {{"i": i, "who": "child"}})
    print("done", flush=True)
    sys.stdin.readline()
    """
)


def test_two_processes_see_each_others_writes(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    s = CkptStore.open(store, compact_bytes=8192)
    child = subprocess.Popen(
        [sys.executable, "-c", WORKER.format(repo=str(REPO), store=str(store))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        got = s.get(("shared",), "from-child")  # no reopen: the next call reads what the other wrote
        assert got is not None and got.value == {"hello": "parent"}
        s.put(("shared",), "from-parent", {"hello": "child"})
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "child"
        # both write at once, across compactions (new logs) made by either
        for i in range(150):
            s.put(("parent", str(i % 3)), f"k{i}", {"i": i, "who": "parent"})
        assert child.stdout.readline().strip() == "done", child.stderr.read() if child.stderr else ""
        child.stdin.write("bye\n")
        child.stdin.flush()
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for f in (child.stdin, child.stdout, child.stderr):
            if f is not None:
                f.close()
    mine = s.search(("parent",), limit=1000)
    theirs = s.search(("child",), limit=1000)
    assert sorted(i.value["i"] for i in mine) == list(range(150))
    assert sorted(i.value["i"] for i in theirs) == list(range(150))
    assert s.list_namespaces(max_depth=1) == [("child",), ("parent",), ("shared",)]
    s.close()
    assert api.verify(api.open_store(store), read_data=True).ok


# -- hostile input ----------------------------------------------------------------------------------
def test_bad_input_is_refused_in_one_line_and_changes_nothing(tmp_path: Path) -> None:
    s = CkptStore.open(tmp_path / ".ckpt")
    s.put(("ok",), "k", {"v": 1})
    log = next((tmp_path / ".ckpt" / "langgraph" / "store").glob("*.log"))
    size = log.stat().st_size

    for bad_ns in [("a.b",), ("",), (1,), ("x\x00",)]:
        for name, args in [("put", (bad_ns, "k", {"v": 1})), ("get", (bad_ns, "k")), ("search", (bad_ns,)), ("delete", (bad_ns, "k"))]:
            with pytest.raises(InvalidNamespaceError):
                getattr(s, name)(*args)
        with pytest.raises(InvalidNamespaceError):
            s.list_namespaces(prefix=bad_ns)
        with pytest.raises(InvalidNamespaceError):
            s.batch([GetOp(bad_ns, "k")])  # direct batches are checked too
    for bad_ns in [(), ("langgraph", "x")]:
        with pytest.raises(InvalidNamespaceError):
            s.put(bad_ns, "k", {"v": 1})
        with pytest.raises(InvalidNamespaceError):
            s.batch([PutOp(bad_ns, "k", {"v": 1})])

    import datetime

    cases: list[tuple[Any, type[Exception], str]] = [
        ("a string", InvalidInputError, "not a dict"),
        ([1, 2], InvalidInputError, "not a dict"),
        ({"when": datetime.datetime.now()}, InvalidInputError, "value.when is a datetime, not a JSON value"),
        ({"s": {1, 2}}, InvalidInputError, "value.s is a set"),
        ({"deep": [{"o": object()}]}, InvalidInputError, "value.deep[0].o is a object"),
        ({1: "x"}, InvalidInputError, "keys must be strings"),
        ({"big": 2**70}, InvalidInputError, "does not fit in 64 bits"),
        ({"b": b"bytes"}, InvalidInputError, "is a bytes"),
        ({"huge": "x" * (MAX_VALUE_BYTES + 1)}, LimitExceededError, "more than the"),
    ]
    for value, exc, words in cases:
        with pytest.raises(exc) as info:
            s.put(("ok",), "bad", value)
        msg = str(info.value.message)  # type: ignore[attr-defined]
        assert words in msg and "\n" not in msg and "'bad'" in msg, msg
    # a batch with one bad put writes none of its puts
    with pytest.raises(InvalidInputError):
        s.batch([PutOp(("ok",), "good", {"v": 2}), PutOp(("ok",), "bad", {"v": object()})])
    with pytest.raises(InvalidInputError, match="unsupported operator"):
        s.search(("ok",), filter={"v": {"$regex": "x"}})
    with pytest.raises(InvalidInputError, match="ttl"):
        s.batch([PutOp(("ok",), "k", {"v": 1}, ttl=-1)])
    with pytest.raises(InvalidInputError, match="fsync"):
        CkptStore.open(tmp_path / ".ckpt", fsync="sometimes")
    assert log.stat().st_size == size
    assert [i.key for i in s.search(("ok",))] == ["k"]
    # namespaces given as lists in direct batches work as tuples
    assert s.batch([GetOp(["ok"], "k")])[0].value == {"v": 1}  # type: ignore[arg-type,union-attr]
    s.close()
    # with an index, a bad value is refused before anything is embedded, sync and async
    calls: list[list[str]] = []

    def counting(texts: list[str]) -> list[list[float]]:
        calls.append(texts)
        return embed(texts)

    with CkptStore.open(tmp_path / "indexed", index={"dims": 8, "embed": counting}) as t:
        for value in ("a string", {"when": datetime.date.today()}):
            with pytest.raises(InvalidInputError):
                t.put(("ok",), "k", value)  # type: ignore[arg-type]
            with pytest.raises(InvalidInputError):
                asyncio.run(t.aput(("ok",), "k", value))  # type: ignore[arg-type]
        assert calls == [] and t.search(()) == []


def test_verify_reports_a_damaged_log_and_the_store_reads_past_it(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / ".ckpt"
    with CkptStore.open(store) as s:
        for i in range(20):
            s.put(("n",), f"k{i}", {"i": i, "text": "memory " * 20})
    assert cli("verify", "--store", store).code == 0  # memories are not damage
    log = next((store / "langgraph" / "store").glob("*.log"))
    data = bytearray(log.read_bytes())
    mid = len(data) // 2
    data[mid] ^= 0xFF
    log.write_bytes(bytes(data))
    res = cli("verify", "--store", store)
    assert res.code == 5 and str(log) in res.out + res.err
    with CkptStore.open(store) as s:
        got = {i.key for i in s.search(("n",), limit=100)}
        assert "k0" in got and "k19" in got and len(got) == 19  # the damaged record alone is lost
        assert any("unreadable" in w for w in s.store.warnings)


# -- a real graph: checkpointer and store on one directory ---------------------------------------
def test_a_graph_keeps_threads_and_memories_in_one_store(tmp_path: Path) -> None:
    from typing import TypedDict

    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph
    from langgraph.store.base import BaseStore

    from ckptcli.adapters.langgraph.saver import CkptSaver

    class S(TypedDict):
        user: str
        said: str
        recalled: list[str]

    def remember(state: S, *, store: BaseStore) -> dict[str, Any]:
        ns = ("users", state["user"], "facts")
        n = len(store.search(ns, limit=1000))
        store.put(ns, f"fact-{n}", {"text": state["said"]})
        return {}

    def recall(state: S) -> dict[str, Any]:
        store = get_store()
        items = store.search(("users", state["user"], "facts"), limit=1000)
        return {"recalled": [i.value["text"] for i in items]}

    builder = StateGraph(S)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)

    d = tmp_path / ".ckpt"
    saver, store = CkptSaver.open(d), CkptStore.open(d)
    graph = builder.compile(checkpointer=saver, store=store)
    out1 = graph.invoke({"user": "ann", "said": "likes tea", "recalled": []}, {"configurable": {"thread_id": "t1"}})
    out2 = graph.invoke({"user": "ann", "said": "lives in Oslo", "recalled": []}, {"configurable": {"thread_id": "t2"}})
    assert out1["recalled"] == ["likes tea"]
    assert out2["recalled"] == ["likes tea", "lives in Oslo"]  # memories cross threads
    saver.close()
    store.close()

    # a new process's saver and store on the same directory: threads and memories are there
    saver, store = CkptSaver.open(d), CkptStore.open(d)
    graph = builder.compile(checkpointer=saver, store=store)
    assert graph.get_state({"configurable": {"thread_id": "t1"}}).values["recalled"] == ["likes tea"]

    async def third() -> Any:
        return await graph.ainvoke({"user": "ann", "said": "owns a cat", "recalled": []}, {"configurable": {"thread_id": "t3"}})

    out3 = asyncio.run(third())
    assert out3["recalled"] == ["likes tea", "lives in Oslo", "owns a cat"]
    assert store.list_namespaces() == [("users", "ann", "facts")]
    saver.close()
    store.close()
    assert api.verify(api.open_store(d), read_data=True).ok


def test_a_compaction_that_fails_halfway_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli) -> None:  # type: ignore[no-untyped-def]
    from ckptcli.errors import StoreIOError
    from ckptcli.store.repository import Store

    store = tmp_path / ".ckpt"
    s = CkptStore.open(store, compact_bytes=4096)
    i = 0
    while s.compactions < 1:
        s.put(("n",), f"k{i}", {"i": i, "pad": "x" * 100})
        i += 1
    base = Store.open(store).read_ref("refs/branches/langgraph-store")

    def fail(self: CkptStore, gen: int, snapshot: bytes | None) -> None:
        raise StoreIOError("disk full (simulated)")

    monkeypatch.setattr(CkptStore, "_create_log", fail)
    for _ in range(60):  # the snapshot is taken, then the new log cannot be written: the old one goes on
        s.put(("n",), f"k{i}", {"i": i, "pad": "x" * 100})
        i += 1
    assert s.compactions == 1 and any("could not compact" in w for w in s.store.warnings)
    assert Store.open(store).read_ref("refs/branches/langgraph-store") != base  # the branch moved to a snapshot no log starts from
    s.close()
    monkeypatch.undo()
    with CkptStore.open(store) as t:  # opening points the branch back at the live log's base
        assert Store.open(store).read_ref("refs/branches/langgraph-store") == base
        assert sorted(x.value["i"] for x in t.search(("n",), limit=10_000)) == list(range(i))
    pr = cli("prune", "--store", store, "--keep-last", "1", "--allow-remove-all")
    assert pr.code == 0, pr.err
    with CkptStore.open(store) as t:
        assert sorted(x.value["i"] for x in t.search(("n",), limit=10_000)) == list(range(i))


def test_a_missing_snapshot_is_reported_and_refused_in_one_line(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    from ckptcli.errors import CorruptError
    from ckptcli.store.repository import Store

    store = tmp_path / ".ckpt"
    with CkptStore.open(store, compact_bytes=4096) as s:
        i = 0
        while s.compactions < 1:
            s.put(("n",), f"k{i}", {"i": i, "pad": "x" * 100})
            i += 1
    base = Store.open(store).read_ref("refs/branches/langgraph-store")
    assert base is not None
    (store / "manifests" / base.hex()).unlink()  # removed by hand
    res = cli("verify", "--store", store)
    assert res.code == 5 and f"starts from the snapshot {base.hex()[:12]}" in res.out + res.err
    with pytest.raises(CorruptError) as info:
        CkptStore.open(store)
    assert "cannot be read" in info.value.message and "\n" not in info.value.message


MULTI_PUTTER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from ckptcli.adapters.langgraph.store import CkptStore
    who, rnd = sys.argv[1], sys.argv[2]
    s = CkptStore.open({store!r}, compact_bytes=4096)
    i = 0
    while True:
        s.put(("w", who, str(i % 4)), f"r{{rnd}}-k{{i}}", {{"i": i, "pad": "p" * (i % 200)}})
        if i % 7 == 0:
            s.delete(("w", who, str(i % 4)), f"r{{rnd}}-k{{i}}")
        print(i, flush=True)  # only once the put (and delete) returned
        i += 1
    """
)


@pytest.mark.slow
def test_two_writers_killed_at_random_moments_lose_nothing(tmp_path: Path) -> None:
    # small logs: the kills land in appends, in snapshots and between a snapshot and its new log
    store = tmp_path / ".ckpt"
    CkptStore.open(store).close()
    rng = random.Random(7)
    acked: dict[tuple[str, int], int] = {}
    for rnd in range(SCALE):
        kids = {
            who: subprocess.Popen(
                [sys.executable, "-c", MULTI_PUTTER.format(repo=str(REPO), store=str(store)), who, str(rnd)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for who in ("a", "b")
        }
        for who, kid in kids.items():  # the other writes meanwhile: the kills land at random points of both
            assert kid.stdout is not None
            acked[(who, rnd)] = -1
            stop = rng.randint(30, 150)
            for line in kid.stdout:
                acked[(who, rnd)] = int(line)
                if int(line) >= stop:
                    break
        for kid in kids.values():
            os.kill(kid.pid, signal.SIGKILL)
            kid.wait()
            for f in (kid.stdout, kid.stderr):
                if f is not None:
                    f.close()
        with CkptStore.open(store) as s:
            for (who, r), last in acked.items():
                for i in range(last + 1):
                    got = s.get(("w", who, str(i % 4)), f"r{r}-k{i}")
                    if i % 7 == 0:
                        assert got is None, (who, i)
                    else:
                        assert got is not None and got.value == {"i": i, "pad": "p" * (i % 200)}, (who, i)
        assert api.verify(api.open_store(store), read_data=True).ok
    from ckptcli.adapters.langgraph.store_log import generations, log_dir

    assert generations(log_dir(store))[-1] >= 2  # the writers compacted, more than once


def test_compact_makes_the_memories_browsable_with_ckpt(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    import json

    store = tmp_path / ".ckpt"
    with CkptStore.open(store) as s:
        s.put(("users", "ann"), "tea", {"text": "likes tea"})
        s.put(("users", "bob"), "cat", {"text": "owns a cat"}, ttl=10)
        cid = s.compact()
        assert s.get(("users", "ann"), "tea").value == {"text": "likes tea"}  # type: ignore[union-attr]
    res = cli("show", "--store", store, "workflow:langgraph-store", "--section", "memory", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["langgraph-store"] == 1
    got = {(tuple(n["namespace"]), it["key"]): (it["value"], it["ttl"]) for n in doc["namespaces"] for it in n["items"]}
    assert got == {(("users", "ann"), "tea"): ({"text": "likes tea"}, None), (("users", "bob"), "cat"): ({"text": "owns a cat"}, 10.0)}
    assert cli("ls", "--store", store, "--json").out.count(cid.hex()) == 1


@pytest.mark.parametrize("kind", ["dir", "symlink", "fifo", "bad-header", "no-base"])
def test_a_bogus_newest_log_is_refused_and_removes_nothing(tmp_path: Path, kind: str) -> None:
    from ckptcli.errors import CorruptError

    store = tmp_path / ".ckpt"
    with CkptStore.open(store) as s:
        s.put(("n",), "k", {"v": 1})
    d = store / "langgraph" / "store"
    live = d / "0000000000000000.log"
    kept = live.read_bytes()
    bogus = d / "0000000000000001.log"
    if kind == "dir":
        bogus.mkdir()
    elif kind == "symlink":
        bogus.symlink_to(live)
    elif kind == "fifo":
        os.mkfifo(bogus)
    elif kind == "bad-header":
        bogus.write_bytes(b"not a log at all")
    else:
        bogus.write_bytes(kept[:16])  # a header, no base record
    with pytest.raises(CorruptError) as info:
        CkptStore.open(store)
    assert str(bogus) in info.value.message and "\n" not in info.value.message
    assert live.read_bytes() == kept  # nothing removed
    (bogus.rmdir if kind == "dir" else bogus.unlink)()
    with CkptStore.open(store) as s:
        assert s.get(("n",), "k").value == {"v": 1}  # type: ignore[union-attr]


def test_a_malformed_record_is_refused_in_one_line_and_reported_by_verify(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    import msgpack

    from ckptcli.adapters.langgraph.journal import frame
    from ckptcli.errors import CorruptError

    v = msgpack.packb({"v": 1})
    bad: list[dict[str, Any]] = [
        {"op": "put", "items": "zzz"},
        {"op": "put", "items": [[["u", "x"], "k"]]},
        {"op": "put", "items": [["u", "k", v, 1, 1, None, None, 0, None]]},
        {"op": "put", "items": [[["u", "x"], "k", b"\xc1\xc1", 1, 1, None, None, 0, None]]},
        {"op": "put", "items": [[["u", "x"], "k", msgpack.packb([1, 2]), 1, 1, None, None, 0, None]]},
        {"op": "put", "items": [[["u", "x"], "k", v, "x", "y", None, None, 0, None]]},
        {"op": "put", "items": [[["u", "x"], "k", v, 1, 1, "5", "6", 0, None]]},
        {"op": "put", "items": [[["u", "x"], "k", v, 1, 1, None, None, 2**64 - 1, None]]},
        {"op": "put", "items": [[["u", "x"], "k", v, 1, 1, None, None, 0, "notmap"]]},
        {"op": "put", "items": [[["u", ""], "k", v, 1, 1, None, None, 0, None]]},
        {"op": "touch", "t": "x", "k": [[["u", "0"], "k"]]},
        {"op": "touch", "t": 1, "k": "abc"},
    ]
    store = tmp_path / ".ckpt"
    with CkptStore.open(store) as s:
        s.put(("u", "0"), "k", {"v": 0}, ttl=5)
    log = store / "langgraph" / "store" / "0000000000000000.log"
    good = log.read_bytes()
    for rec in bad:
        log.write_bytes(good + frame(rec, good[8:16]))
        with pytest.raises(CorruptError) as info:
            CkptStore.open(store)
        assert f"offset {len(good)}" in info.value.message and "\n" not in info.value.message, rec
        res = cli("verify", "--store", store)
        assert res.code == 5 and f"offset {len(good)} is malformed" in res.out + res.err, rec
    log.write_bytes(good)
    with CkptStore.open(store) as s:  # read by a store already open: refused too, and again
        log.write_bytes(good + frame(bad[0], good[8:16]))
        for _ in range(2):
            with pytest.raises(CorruptError):
                s.get(("u", "0"), "k")


def test_lone_surrogates_are_refused_in_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    with CkptStore.open(store) as s:
        log = next((store / "langgraph" / "store").glob("*.log"))
        size = log.stat().st_size
        for ns, key, value in [
            (("a",), "\ud800", {"x": 1}),
            (("a", "\udcff"), "k", {"x": 1}),
            (("a",), "k", {"\ud800": 1}),
            (("a",), "k", {"x": {"\udcff": [1]}}),
        ]:
            for put in (s.put, lambda *a: asyncio.run(s.aput(*a))):
                with pytest.raises(InvalidInputError) as info:
                    put(ns, key, value)
                assert "lone surrogate" in info.value.message and "\n" not in info.value.message
                assert repr(key) in info.value.message
        assert log.stat().st_size == size and s.search(()) == []


def test_a_damaged_last_record_is_warned_kept_and_reported_not_cut_as_torn(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / ".ckpt"
    with CkptStore.open(store) as s:
        for i in range(3):
            s.put(("n",), f"k{i}", {"i": i})
    log = store / "langgraph" / "store" / "0000000000000000.log"
    data = bytearray(log.read_bytes())
    data[-3] ^= 0xFF  # in the last record's payload: its CRC fails, all its bytes are there
    damaged = bytes(data)
    log.write_bytes(damaged)
    res = cli("verify", "--store", store)
    assert res.code == 5 and "last record" in res.out + res.err
    with CkptStore.open(store) as s:
        assert any("is damaged" in w for w in s.store.warnings)
        assert {i.key for i in s.search(("n",))} == {"k0", "k1"}
        s.put(("n",), "k3", {"i": 3})  # cuts the damaged record, after copying the log aside
    kept = log.with_name(log.name + ".damaged")
    assert kept.read_bytes() == damaged
    res = cli("verify", "--store", store)
    assert res.code == 5 and str(kept) in res.out + res.err
    # a torn last record (its declared length runs past the end) is cut quietly
    kept.unlink()
    with CkptStore.open(store) as s:
        s.put(("n",), "k4", {"i": 4})
    log.write_bytes(log.read_bytes()[:-3])
    assert cli("verify", "--store", store).code == 0
    with CkptStore.open(store) as s:
        s.put(("n",), "k5", {"i": 5})
        assert not any("damaged" in w for w in s.store.warnings) and not kept.exists()

"""The take cache (ckptcli/format/takecache.py; `take(cache=True)`, the default): a take
that reuses what the subject's last take made of its long lists writes exactly the
objects, packs, index files and manifest that a take encoding everything writes, whatever
the caller did to the state in between (appends, edits in place, deletions, moves, type
changes that compare equal), and never names an object the store no longer has (a prune
between two takes, a failed take, two stores)."""

from __future__ import annotations

import copy
import dataclasses
import random
import threading
import uuid
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptcli
from ckptcli import writer
from ckptcli.api import open_checkpoint, open_store, states_equal, take, verify
from ckptcli.errors import InvalidInputError
from ckptcli.format.encode import Encoder
from ckptcli.format.takecache import MIN_ITEMS, CachingEncoder, SubjectCache
from ckptcli.store import layout
from ckptcli.store.repository import Store
from ckptcli.writer import TakeResult
from tests.helpers_faults import run_cli
from tests.strategies import DictSink, scalars, texts, values

# -- helpers -------------------------------------------------------------------------------------


def _memory_store() -> Store:
    return ckptcli.init_store(f"memory://take-cache-{uuid.uuid4().hex}")


def _files(store: Store) -> dict[str, bytes]:
    """Every pack and index file of the store, by name (both are named by their content)."""
    return {p: store.backend.read(p) for d in (layout.PACKS, layout.INDEX) for p in store.backend.list(d)}


def _manifest_bytes(res: TakeResult) -> bytes:
    """The manifest as written, less what differs between two stores taking the same
    states one after the other: the time and the parents (ids of manifests with times)."""
    return dataclasses.replace(res.manifest, created_ns=0, parents=[]).encode()


class Pair:
    """One state taken into two stores: `cached` with the take cache, `plain` without."""

    def __init__(self, cached: Store | None = None, plain: Store | None = None, subject: str = "agent:a") -> None:
        self.cached = cached or _memory_store()
        self.plain = plain or _memory_store()
        self.subject = subject

    def take(self, state: Any) -> TakeResult:
        a = take(self.cached, state, subject=self.subject)
        b = take(self.plain, state, subject=self.subject, cache=False)
        assert _manifest_bytes(a) == _manifest_bytes(b)
        assert (a.new_objects, a.new_bytes) == (b.new_objects, b.new_bytes)
        assert _files(self.cached) == _files(self.plain)
        return a


def _message(rng: random.Random, i: int, size: int = 200) -> dict[str, Any]:
    return {"role": rng.choice(["user", "assistant"]), "content": rng.randbytes(size // 2).hex(), "n": i, "tags": [i % 3]}


def _history(n: int, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    return {
        "memory": {"messages": [_message(rng, i) for i in range(n)], "step": n},
        "tools": [{"id": f"call-{i}", "ok": True, "t": i * 0.5, "args": {"q": rng.randbytes(20).hex()}} for i in range(n)],
    }


# -- byte for byte what a take without the cache writes -----------------------------------------

item_values = st.one_of(
    scalars,
    st.dictionaries(st.sampled_from(["a", "b", "c", "role", "content"]), st.one_of(scalars, st.lists(scalars, max_size=4)), max_size=4),
    st.builds(lambda t, k: {"content": t * k, "k": k}, texts, st.integers(1, 12)),  # often past 128 bytes: an object of its own
    values(6),
)

equal_but_not_the_same = [
    (1, True),
    (1, 1.0),
    (0, False),
    (0.0, -0.0),
    (True, 1.0),
    (2**63, 2**63 + 0.0),
]

ops = st.one_of(
    st.tuples(st.just("append"), st.lists(item_values, min_size=1, max_size=6)),
    st.tuples(st.just("edit"), st.integers(0, 10**6), item_values),
    st.tuples(st.just("edit_field"), st.integers(0, 10**6), st.sampled_from(["a", "n", "content"]), item_values),
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, len(equal_but_not_the_same) - 1), st.booleans()),
    st.tuples(st.just("reorder_keys"), st.integers(0, 10**6)),
    st.tuples(st.just("nested_append"), st.integers(0, 10**6), scalars),
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(st.just("drop_front"), st.integers(1, 5)),
    st.tuples(st.just("insert_front"), item_values),
    st.tuples(st.just("move"), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("reverse")),
    st.tuples(st.just("new_list_object")),
    st.tuples(st.just("rename_path")),
    st.tuples(st.just("same")),
)


def _apply(state: dict[str, Any], op: tuple[Any, ...]) -> None:
    """Change `state` in place as a caller might between two takes."""
    mem = state["memory"]
    key = "messages" if "messages" in mem else "history"
    lst: list[Any] = mem[key]
    kind = op[0]
    if kind == "append":
        lst.extend(copy.deepcopy(op[1]))
        state["tools"].append({"n": len(lst)})
    elif kind == "rename_path":  # the same list under another key: nothing to reuse there
        mem["history" if key == "messages" else "messages"] = mem.pop(key)
    elif kind == "new_list_object":
        mem[key] = list(lst)
    elif kind == "reverse":
        lst.reverse()
    elif kind == "drop_front":
        del lst[: op[1]]
    elif kind == "insert_front":
        lst.insert(0, copy.deepcopy(op[1]))
    elif not lst or kind == "same":
        return
    elif kind == "edit":
        lst[op[1] % len(lst)] = copy.deepcopy(op[2])
    elif kind == "delete":
        del lst[op[1] % len(lst)]
    elif kind == "move":
        lst.insert(op[2] % len(lst), lst.pop(op[1] % len(lst)))
    else:
        item = lst[op[1] % len(lst)]
        if not isinstance(item, dict):
            return
        if kind == "edit_field":
            item[op[2]] = copy.deepcopy(op[3])
        elif kind == "flip":  # a value replaced in place by one that compares equal
            a, b = equal_but_not_the_same[op[2]]
            item["x"] = b if op[3] and item.get("x") == a else a
        elif kind == "reorder_keys" and item:
            first = next(iter(item))
            item[first] = item.pop(first)
        elif kind == "nested_append":
            item.setdefault("tags", [])
            if isinstance(item["tags"], list):
                item["tags"].append(op[2])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    first=st.lists(item_values, min_size=0, max_size=90),
    steps=st.lists(ops, min_size=1, max_size=10),
)
def test_a_cached_take_writes_exactly_what_an_uncached_one_writes(first: list[Any], steps: list[tuple[Any, ...]]) -> None:
    pair = Pair()
    state: dict[str, Any] = {"memory": {"messages": copy.deepcopy(first), "step": 0}, "tools": []}
    pair.take(state)
    for i, op in enumerate(steps):
        _apply(state, op)
        state["memory"]["step"] = i + 1
        pair.take(state)
    res = take(pair.cached, state, subject="agent:a")
    assert states_equal(open_checkpoint(res.id.hex(), pair.cached).state(), state)


class _Recorder:
    """A sink that remembers what it was given, in order, each object once (as a store)."""

    def __init__(self) -> None:
        self.known: set[bytes] = set()
        self.new: list[bytes] = []

    def put(self, oid: bytes, content: bytes, obj_type: int) -> None:
        if oid not in self.known:
            self.known.add(oid)
            self.new.append(oid)

    def take_new(self) -> list[bytes]:
        out, self.new = self.new, []
        return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), chunks=st.lists(st.integers(1, 60), min_size=1, max_size=25))
def test_a_growing_list_tree_puts_what_encoder_puts_in_its_order(seed: int, chunks: list[int]) -> None:
    """ListTree.ev(encoder_order=True) after each batch of appends puts exactly the new
    objects Encoder puts for the whole list, in the same order: deep trees (items of
    20-300 bytes, up to 1,500 of them), where a group closes above the root."""
    from ckptcli.format.encode import ListTree
    from ckptcli.format.ev import EXT_LIST, array_header

    rng = random.Random(seed)
    items: list[bytes] = []
    tree = ListTree()
    plain, grown = _Recorder(), _Recorder()
    for n in chunks:
        new = [rng.randbytes(rng.randint(20, 300)) for _ in range(n)]
        items.extend(new)
        tree.extend(new)
        want = Encoder(plain)._container(EXT_LIST, items, array_header)
        assert tree.ev(grown, encoder_order=True) == want
        assert grown.take_new() == plain.take_new()


def test_a_long_history_with_edits_is_byte_identical_and_restores_exactly(tmp_path: Path) -> None:
    """Real files: 120 steps of a growing history (two lists that become multi-level trees),
    with an edit in place, a deletion and a sliding window along the way."""
    pair = Pair(ckptcli.init_store(tmp_path / "a"), ckptcli.init_store(tmp_path / "b"))
    state = _history(40)
    rng = random.Random(7)
    pair.take(state)
    for step in range(80):
        state["memory"]["messages"].append(_message(rng, 100 + step))
        state["tools"].append({"id": f"call-x{step}", "ok": step % 2 == 0, "t": step * 0.25, "args": {}})
        if step % 17 == 3:
            state["tools"][5]["ok"] = 1  # was True: equal, not the same
        if step % 23 == 5:
            del state["memory"]["messages"][0]
        if step % 29 == 7:
            state["memory"]["messages"][-3]["tags"].append("late")
        pair.take(state)
    res = take(pair.cached, state, subject="agent:a")
    fresh = open_store(tmp_path / "a")
    assert states_equal(open_checkpoint(res.id.hex(), fresh).state(), state)
    assert verify(fresh, read_data=True).ok


def test_other_shapes_are_byte_identical_too() -> None:
    """A whole document that is a list; lists deeper on a path; an item holding a string
    long enough to be a chunk tree; a list inside items (not on a path: encoded with its
    item); a store of format version 1."""
    rng = random.Random(11)
    big = rng.randbytes(50_000).hex()  # 100,000 characters: a STR tree inside the item
    for pair in (
        Pair(),
        Pair(ckptcli.init_store(f"memory://v1-{uuid.uuid4().hex}", 1), ckptcli.init_store(f"memory://v1-{uuid.uuid4().hex}", 1)),
    ):
        doc: list[Any] = [{"i": i, "sub": [i] * (i % 40)} for i in range(40)]
        pair.take(doc)
        doc.append({"i": 40, "text": big})
        pair.take(doc)
        doc[3]["sub"].append("in place")
        pair.take(doc)
        state: dict[str, Any] = {"memory": {"a": {"b": {"log": [f"line {i} " * 20 for i in range(100)]}}, "n": 0}, "plan": []}
        pair.take(state)
        for i in range(5):
            state["memory"]["a"]["b"]["log"].append(f"more {i}")
            state["memory"]["a"]["b"]["log"][10] = big if i == 2 else f"edit {i}"
            state["plan"].append({"step": i, "lines": [big[:100]] * 20})
            pair.take(state)


# -- what is reused, what is checked ------------------------------------------------------------


def test_an_append_encodes_only_the_new_items_and_an_edit_only_the_edited_one() -> None:
    sink = DictSink()
    cache = SubjectCache()
    state = _history(200)
    ref = Encoder(DictSink())

    def encode() -> tuple[CachingEncoder, dict[str, bytes]]:
        enc = CachingEncoder(sink, cache)
        out = {name: enc.encode_section(value, name) for name, value in state.items()}
        assert out == {name: ref.encode_root(value, where=name) for name, value in state.items()}
        assert enc.logical_bytes == _logical(state)
        cache.commit(1 << 30)
        return enc, out

    first, _ = encode()
    assert (first.encoded_items, first.reused_items) == (400, 0)
    state["memory"]["messages"].append(_message(random.Random(2), 999))
    again, _ = encode()
    assert (again.encoded_items, again.reused_items) == (1, 400)
    state["tools"][17]["ok"] = 1  # equal to True, stored differently
    edited, _ = encode()
    assert (edited.encoded_items, edited.reused_items) == (1, 400)
    same, _ = encode()
    assert (same.encoded_items, same.reused_items) == (0, 401)


def _logical(state: dict[str, Any]) -> int:
    enc = Encoder(DictSink())
    for name, value in state.items():
        enc.encode_root(value, where=name)
    return enc.logical_bytes


@pytest.mark.parametrize(
    ("before", "after"),
    [(1, True), (True, 1), (1, 1.0), (0.0, -0.0), (-0.0, 0.0), (0, False), (b"x", "x"), (float("nan"), float("nan"))],
)
def test_a_value_replaced_in_place_by_an_equal_one_of_another_type_is_stored_as_it_is(tmp_path: Path, before: Any, after: Any) -> None:
    pair = Pair(ckptcli.init_store(tmp_path / "a"), ckptcli.init_store(tmp_path / "b"))
    state = _history(MIN_ITEMS + 20)
    state["tools"][3]["v"] = before
    pair.take(state)
    state["tools"][3]["v"] = after
    res = pair.take(state)
    got = open_checkpoint(res.id.hex(), open_store(tmp_path / "a")).state()
    assert states_equal(got["tools"][3]["v"], after)


def test_keys_reordered_in_place_are_stored_in_their_new_order() -> None:
    pair = Pair()
    state = _history(50)
    pair.take(state)
    msg = state["memory"]["messages"][10]
    msg["role"] = msg.pop("role")  # same keys, same values, another order
    res = pair.take(state)
    got = open_checkpoint(res.id.hex(), pair.cached).state()
    assert list(got["memory"]["messages"][10]) == ["content", "n", "tags", "role"]


def test_a_value_ckpt_refuses_is_refused_when_put_in_place_of_an_equal_one() -> None:
    pair = Pair()
    state = _history(50)
    pair.take(state)
    state["tools"][4]["t"] = Fraction(2, 1)  # == 2.0, and not a value ckpt stores
    with pytest.raises(InvalidInputError, match=r"tools\[4\]\.t: a value of type Fraction"):
        take(pair.cached, state, subject="agent:a")
    state["tools"][4]["t"] = 2.0
    pair.take(state)


def test_a_failed_take_leaves_nothing_reused_that_it_made() -> None:
    # the list grows (its tree's new nodes go into the failed take's transaction), then a
    # later section fails: the next take, of the same list, must write those nodes again
    pair = Pair()
    state = _history(60)
    pair.take(state)
    state["memory"]["messages"].append(_message(random.Random(3), 1000))
    state["tools"].append({"bad": object()})
    with pytest.raises(InvalidInputError):
        take(pair.cached, state, subject="agent:a")
    state["tools"].pop()
    pair.take(state)
    assert verify(pair.cached).ok


def test_lists_it_cannot_pack_exactly_are_encoded_each_time() -> None:
    pair = Pair()
    state = _history(40)
    state["memory"]["messages"][5]["big"] = 2**70  # beyond msgpack's 64 bits: a BIGINT
    state["tools"] = tuple(state["tools"])  # a tuple is stored as a list, and cached as one
    pair.take(state)
    state["memory"]["messages"].append({"n": 1})
    state["memory"]["messages"][5]["big"] += 1
    pair.take(state)


# -- the store under the cache ------------------------------------------------------------------


def test_a_prune_by_another_process_between_two_takes(tmp_path: Path) -> None:
    """The cache names objects of the last take; a prune in another process removes them
    all (the subject's every checkpoint). The next take must store them again."""
    store = ckptcli.init_store(tmp_path / "store")
    state = _history(80)
    take(store, state, subject="agent:a")
    take(store, {"memory": {"other": 1}}, subject="agent:b")
    r = run_cli("prune", "--keep-tag", "none", "-S", "agent:a", "--allow-remove-all", "--store", tmp_path / "store", "-q")
    assert r.returncode == 0, r.stderr
    state["memory"]["messages"].append({"n": "after the prune"})
    res = take(store, state, subject="agent:a")
    fresh = open_store(tmp_path / "store")
    assert states_equal(open_checkpoint(res.id.hex(), fresh).state(), state)
    assert verify(fresh, read_data=True).ok
    # and byte for byte what a store that never had a cache holds after the same steps
    plain = ckptcli.init_store(tmp_path / "plain")
    take(plain, _history(80), subject="agent:a", cache=False)
    take(plain, {"memory": {"other": 1}}, subject="agent:b", cache=False)
    r = run_cli("prune", "--keep-tag", "none", "-S", "agent:a", "--allow-remove-all", "--store", tmp_path / "plain", "-q")
    assert r.returncode == 0, r.stderr
    res_plain = take(plain, state, subject="agent:a", cache=False)
    assert _manifest_bytes(res) == _manifest_bytes(res_plain)
    assert _files(store) == _files(plain)


def test_a_prune_in_this_process_keeping_the_latest(tmp_path: Path) -> None:
    from ckptcli.store.prune import Policy, prune

    store = ckptcli.init_store(tmp_path / "store")
    state = _history(60)
    for i in range(4):
        state["memory"]["messages"].append({"n": i})
        take(store, state, subject="agent:a")
    prune(store, Policy(keep_last=1))
    state["memory"]["messages"].append({"n": "next"})
    res = take(store, state, subject="agent:a")
    assert states_equal(open_checkpoint(res.id.hex(), open_store(tmp_path / "store")).state(), state)
    assert verify(open_store(tmp_path / "store"), read_data=True).ok


def test_a_pack_lost_and_the_index_rebuilt_by_another_process(tmp_path: Path) -> None:
    """The last take's pack (the list's root) survives; the first take's pack (its older
    leaves and items) is lost and `ckpt repair index` rebuilds the index without it. The
    next take must store those again, as a take without the cache does, rather than trust
    the root it finds."""
    store = ckptcli.init_store(tmp_path / "store")
    state = _history(80)
    take(store, state, subject="agent:a")
    first_packs = set(store.backend.list(layout.PACKS))
    state["memory"]["messages"].append({"n": "second"})
    take(store, state, subject="agent:a")
    for name in first_packs:
        (tmp_path / "store" / name).unlink()
    r = run_cli("repair", "index", "--store", tmp_path / "store", "-q")
    assert r.returncode == 0, r.stderr
    state["memory"]["messages"].append({"n": "third"})
    res = take(store, state, subject="agent:a")
    fresh = open_store(tmp_path / "store")
    assert verify(fresh, [res.id.hex()]).ok
    assert states_equal(open_checkpoint(res.id.hex(), fresh).state(), state)


def test_a_cached_list_whose_objects_the_index_lost_is_not_used() -> None:
    """The witness check: a record whose tree root the store's index no longer names
    (whatever removed it) is dropped before it is used."""
    pair = Pair()
    state = _history(60)
    pair.take(state)
    sc = writer._CACHES[pair.cached].subjects["agent:a"]
    root = sc.lists[("tools",)].witnesses()[0]
    index = pair.cached.index()
    assert root in index
    index.pop(root)  # as if gone
    sc.check(index.__contains__)
    assert ("tools",) not in sc.lists and ("memory", "messages") in sc.lists


def test_an_inline_list_is_checked_by_every_object_it_names() -> None:
    # 20 items (not a tree): each names an object, one of them only from inside a small map
    state = {"memory": {"notes": [{"ref": "x" * 200} if i == 7 else "y" * (150 + i) for i in range(20)]}}
    sink = DictSink()
    cache = SubjectCache()
    enc = CachingEncoder(sink, cache)
    enc.encode_section(state["memory"], "memory")
    cache.commit(1 << 30)
    rec = cache.lists[("memory", "notes")]
    named = rec.witnesses()
    assert len(named) == 20 and set(named) <= set(sink.objects)
    gone = named[7]
    cache.check(lambda oid: oid != gone)
    assert cache.lists == {}


def test_two_stores_and_one_store_opened_twice(tmp_path: Path) -> None:
    one = ckptcli.init_store(tmp_path / "one")
    two = ckptcli.init_store(tmp_path / "two")
    one_again = open_store(tmp_path / "one")  # another Store of the same directory: its own cache
    ref = ckptcli.init_store(tmp_path / "ref")
    state = _history(50)
    rng = random.Random(5)
    for step in range(12):
        state["memory"]["messages"].append(_message(rng, step))
        if step == 6:
            state["memory"]["messages"][2]["content"] = "edited"
        a = take(one if step % 3 else one_again, state, subject="agent:a")
        b = take(two, state, subject="agent:a")
        c = take(ref, state, subject="agent:a", cache=False)
        assert _manifest_bytes(a) == _manifest_bytes(b) == _manifest_bytes(c)
    assert _files(one) == _files(two) == _files(ref)
    for st_ in (one, two):
        assert verify(st_, read_data=True).ok


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _memory_store()
    monkeypatch.setattr(writer, "CACHE_SUBJECTS", 2)
    for name in ("agent:a", "agent:b", "agent:c"):
        take(store, _history(30), subject=name)
    assert list(writer._CACHES[store].subjects) == ["agent:b", "agent:c"]
    # a subject whose lists are over CACHE_RECORD_BYTES keeps none
    monkeypatch.setattr(writer, "CACHE_RECORD_BYTES", 1000)
    take(store, _history(30), subject="agent:c")
    sc = writer._CACHES[store].subjects["agent:c"]
    assert sc.lists == {} and sc.too_big == {("memory", "messages"), ("tools",)}  # not packed again
    res = take(store, _history(31), subject="agent:c")
    assert states_equal(open_checkpoint(res.id.hex(), store).state(), _history(31))
    assert sc.lists == {}
    # and the store's total: the least recently taken subjects go first
    monkeypatch.setattr(writer, "CACHE_RECORD_BYTES", 1 << 30)
    monkeypatch.setattr(writer, "CACHE_BYTES", 1)
    take(store, _history(30), subject="agent:b")
    assert list(writer._CACHES[store].subjects) == []
    monkeypatch.setattr(writer, "CACHE_BYTES", 1 << 30)
    take(store, _history(30), subject="agent:b")
    writer.drop_take_cache(store)
    assert store not in writer._CACHES


def test_takes_of_one_subject_from_two_threads() -> None:
    store = _memory_store()
    base = _history(40)
    states = [copy.deepcopy(base) for _ in range(2)]
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            for i in range(15):
                states[k]["memory"]["messages"].append({"thread": k, "i": i})
                res = take(store, states[k], subject="agent:a")
                assert states_equal(open_checkpoint(res.id.hex(), store).state(), states[k])
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert verify(store, read_data=True).ok

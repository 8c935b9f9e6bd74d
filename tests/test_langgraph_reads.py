"""Reading a thread back from the store: after a restart, after another process wrote it.

A long conversation's checkpoints share their message lists' trees and items, and so
does reading them back: every stored item is decoded once for the whole history (not
once per checkpoint that holds it), the logs that hold the items are shared by the
checkpoints, the cache of tree nodes stays within its bound, and a value handed out is
the caller's own: changing it changes no other read. Histories are compared with
LangGraph's InMemorySaver on the same graph (a fork and an interrupt in a subgraph too).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from ckptcli.adapters.langgraph.saver import CkptSaver
from tests.langgraph_graphs import chat_builder, normalized, review_builder, subgraph_chat_builder
from tests.test_langgraph_threads import Worker

TURNS = 60  # ~500-byte messages: the list is a chunk tree long before that
CHAT = {"configurable": {"thread_id": "chat"}}
REVIEW = {"configurable": {"thread_id": "review"}}


def _history(graph: Any, config: Any) -> list[Any]:
    out = []
    for s in graph.get_state_history(config):
        md = dict(s.metadata or {})
        md.pop("parents", None)
        out.append((normalized(s.values), s.next, md, [t.name for t in s.tasks], s.parent_config is not None))
    return out


def _run(saver: Any) -> dict[str, Any]:
    """A long chat, forked in its middle (update_state) and run on from there; a review
    thread waiting at an interrupt inside its subgraph, then resumed."""
    chat = chat_builder(TURNS).compile(checkpointer=saver)
    chat.invoke({"messages": []}, {**CHAT, "recursion_limit": TURNS + 10})
    middle = next(s for s in chat.get_state_history(CHAT) if len(s.values["messages"]) == TURNS // 2)
    forked = chat.update_state(middle.config, {"messages": [HumanMessage(content="a question asked instead", id=f"m-{TURNS // 2}")]})
    chat.invoke(None, {**forked, "recursion_limit": TURNS + 10})
    review = review_builder().compile(checkpointer=saver)
    review.invoke({"messages": [HumanMessage(content="please review", id="h")], "notes": []}, REVIEW)
    out = {"review_waiting": _history(review, REVIEW)}
    review.invoke(Command(resume="yes"), REVIEW)
    return out


def _read(saver: Any) -> dict[str, Any]:
    chat = chat_builder(TURNS).compile(checkpointer=saver)
    review = review_builder().compile(checkpointer=saver)
    return {
        "chat": _history(chat, CHAT),
        "chat_state": normalized(chat.get_state(CHAT).values),
        "review": _history(review, REVIEW),
        "review_sub": sorted(
            str(t.checkpoint["channel_values"].get("notes")) for t in saver.list(REVIEW) if t.config["configurable"]["checkpoint_ns"]
        ),
    }


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    store = tmp_path_factory.mktemp("reads") / ".ckpt"
    saver = CkptSaver.open(store)
    _run(saver)
    saver.close()
    mem = InMemorySaver()
    _run(mem)
    return {"store": store, "memory": _read(mem)}


def _count_reads(saver: CkptSaver) -> list[bytes]:
    """The ids of the objects `saver` reads from its store from now on, in order."""
    reads: list[bytes] = []
    get = saver.store.get

    def counting(oid: bytes) -> bytes:
        reads.append(oid)
        return get(oid)

    saver.store.get = counting  # type: ignore[method-assign]
    return reads


def _reopened(written: dict[str, Any], tmp_path: Path, **options: Any) -> CkptSaver:
    store = tmp_path / ".ckpt"
    shutil.copytree(written["store"], store)
    return CkptSaver.open(store, **options)


def test_histories_read_back_after_a_restart_equal_in_memory_savers(written: dict[str, Any], tmp_path: Path) -> None:
    saver = _reopened(written, tmp_path)
    try:
        got = _read(saver)
        assert len(got["chat"]) > TURNS + TURNS // 2  # both branches of the fork
        assert any(x[1] == () and x[0]["messages"][TURNS // 2].content == "a question asked instead" for x in got["chat"])
        assert got == written["memory"]
        assert _read(saver) == written["memory"]  # and again, from what the first read left in memory
    finally:
        saver.close()


def test_every_stored_item_is_decoded_once_for_a_whole_history(written: dict[str, Any], tmp_path: Path) -> None:
    """Reading every state of the history reads each stored object a bounded number of
    times, not once per checkpoint that holds it (a checkpoint at step k holds k messages,
    so that would be ~TURNS**2 / 2 item reads)."""
    saver = _reopened(written, tmp_path)
    reads = _count_reads(saver)
    try:
        chat = chat_builder(TURNS).compile(checkpointer=saver)
        history = list(chat.get_state_history(CHAT))
        items = sum(len(s.values["messages"]) for s in history)
    finally:
        saver.close()
    assert items > TURNS * TURNS // 2
    # per checkpoint: its record and pending writes, its list's root, the sealed tree when
    # it changed; per distinct message: one read (two branches: ~1.5 * TURNS messages)
    assert len(reads) < 8 * len(history) + 2 * TURNS, (len(reads), len(history))
    assert len(reads) - len(set(reads)) < 6 * len(history)


def _writes(saver: Any, config: Any) -> list[tuple[str, str]]:
    """Each checkpoint's pending writes (every namespace's), by namespace (its node name:
    checkpoint and task ids differ from run to run), as a sorted list."""
    out = []
    for t in saver.list(config):
        ns = t.config["configurable"]["checkpoint_ns"].split(":")[0]
        out.append((ns, repr([(ch, normalized(v)) for _t, ch, v in t.pending_writes or []])))
    return sorted(out)


def test_long_lists_in_pending_writes_and_subgraphs_are_decoded_once(tmp_path: Path) -> None:
    """A subgraph's output (the whole message list) is a pending write of the root's
    checkpoint, and its checkpoints hold the whole list in their own namespace: read back,
    their items come from the logs the root's lists fill (one log per thread and channel,
    whatever the namespace), so each stored message is read a bounded number of times,
    not once per write or subgraph run that holds it. The history equals InMemorySaver's."""
    turns = 48
    config = {"configurable": {"thread_id": "sub"}, "recursion_limit": 4 * turns}
    saver = CkptSaver.open(tmp_path / ".ckpt")
    subgraph_chat_builder(turns).compile(checkpointer=saver).invoke({"messages": []}, config)
    saver.close()
    mem = InMemorySaver()
    subgraph_chat_builder(turns).compile(checkpointer=mem).invoke({"messages": []}, config)
    want = _history(subgraph_chat_builder(turns).compile(checkpointer=mem), config)
    want_writes = _writes(mem, config)
    long_writes = [t for t in mem.list(config) for _t, c, v in t.pending_writes or [] if c == "messages" and len(v) > turns // 2]
    assert len(long_writes) >= 3

    saver = CkptSaver.open(tmp_path / ".ckpt")
    reads = _count_reads(saver)
    try:
        assert _writes(saver, config) == want_writes
        item_reads = len(reads) - len(set(reads))
        assert _history(subgraph_chat_builder(turns).compile(checkpointer=saver), config) == want
    finally:
        saver.close()
    # a write or subgraph list decoded whole would read its ~turns/2 items again each time
    assert item_reads < 2 * turns, item_reads


def test_checkpoints_read_back_share_their_items(written: dict[str, Any], tmp_path: Path) -> None:
    """The values held in memory for a read-back history are O(messages), not
    O(messages x checkpoints): checkpoints that hold a prefix of another's list share it."""
    saver = _reopened(written, tmp_path)
    try:
        chat = chat_builder(TURNS).compile(checkpointer=saver)
        n = len(list(chat.get_state_history(CHAT)))
        logs = {id(b.log): len(b.log) for b in saver._blobs.values() if b.log is not None}
        assert n > TURNS and sum(logs.values()) < 3 * TURNS, logs
    finally:
        saver.close()


def test_the_node_cache_stays_within_its_bound(written: dict[str, Any], tmp_path: Path) -> None:
    saver = _reopened(written, tmp_path)
    saver._lists.max_bytes = 4096  # a few nodes: most are dropped again, and read again when needed
    try:
        got = _read(saver)
        assert saver._lists.held <= 4096 and saver._lists.misses > 0
    finally:
        saver.close()
    assert got == written["memory"]


def test_a_value_changed_by_its_reader_changes_no_other_read(written: dict[str, Any], tmp_path: Path) -> None:
    """As InMemorySaver (which deserializes at every read): the lists and messages handed
    out are the caller's own; changing them changes neither another checkpoint's values,
    nor a later read of the same checkpoint, nor what is stored."""
    saver = _reopened(written, tmp_path)
    try:
        tuples = list(saver.list(CHAT))
        newest, parent = tuples[0], tuples[1]
        a = newest.checkpoint["channel_values"]["messages"]
        b = parent.checkpoint["channel_values"]["messages"]
        before = normalized(b)
        assert a[0] is not b[0] and a is not b
        a[0].content = "changed in place"
        a.append(HumanMessage(content="appended", id="x"))
        del a[1]
        assert normalized(b) == before
        again = saver.get_tuple(newest.config)
        assert again is not None
        msgs = again.checkpoint["channel_values"]["messages"]
        assert msgs[0].content != "changed in place" and len(msgs) == len(a) and msgs[-1].id != "x"
        assert normalized(saver.get_tuple(parent.config).checkpoint["channel_values"]["messages"]) == before  # type: ignore[union-attr]
    finally:
        saver.close()
    saver = _reopened(written, tmp_path / "again")
    try:
        assert _read(saver) == written["memory"]
    finally:
        saver.close()


def test_a_thread_another_process_extended_reads_back_new(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reads a long thread (its logs and nodes cached), another process's
    saver adds turns to it, and this one reads the thread again: the new turns are there,
    and the whole history is SqliteSaver's for the same turns. Reading the thread again
    reads the manifests that are new since, not the store's catalog."""
    from ckptcli.store import catalog
    from tests.langgraph_worker import history

    store = tmp_path / ".ckpt"
    CkptSaver.open(store).close()
    ref = Worker("sqlite", tmp_path / "db.sqlite")
    other = Worker("ckpt", store)
    saver = CkptSaver.open(store, commit_interval=0.05)
    catalog_reads: list[int] = []
    manifest_reads: list[str] = []
    rows, read = catalog.rows, saver.store.backend.read
    monkeypatch.setattr(catalog, "rows", lambda s: catalog_reads.append(1) or rows(s))

    def reading(name: str) -> bytes:
        if name.startswith("manifests/"):
            manifest_reads.append(name)
        return read(name)

    monkeypatch.setattr(saver.store.backend, "read", reading)
    try:
        graph = _worker_graph(saver)

        def turns(texts: list[str]) -> None:
            for text in texts:
                assert other.call(op="turn", thread="t", text=text)["ok"]
                assert ref.call(op="turn", thread="t", text=text)["ok"]

        turns([f"q{i} " + "words " * 60 for i in range(8)])
        assert history(graph, "t") == ref.call(op="history", thread="t")["history"]
        turns(["one more", "and another"])
        mine = history(graph, "t")
        assert mine[0]["messages"][-2:] == [["HumanMessage", "and another"], ["AIMessage", "echo and another after 19"]]
        assert mine == ref.call(op="history", thread="t")["history"]
        assert other.call(op="history", thread="t")["history"] == mine
        # every manifest of the thread read about once (the history reads each record once
        # more), the catalog never: the saver read the whole store once, when it opened
        assert not catalog_reads
        assert len(set(manifest_reads)) == len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 3 * 10
    finally:
        saver.close()
        other.close()
        ref.close()


def _worker_graph(saver: Any) -> Any:
    from tests.langgraph_worker import chat_graph

    return chat_graph(saver)


def test_list_reader_gives_the_items_decoder_gives_and_checks_cached_nodes_too() -> None:
    """`ListReader.keys` is `Decoder`'s walk of a LIST tree without decoding the items;
    a node it has cached is still checked against what each new parent says of it."""
    import hashlib

    import msgpack

    from ckptcli.adapters.langgraph.read import ListReader, item_key
    from ckptcli.errors import CorruptError
    from ckptcli.format.values import EXT_LIST, OBJ_NODE, Decoder, Encoder, parse_tree_node, unpack_ev

    objects: dict[bytes, bytes] = {}

    class Sink:
        def put(self, oid: bytes, content: bytes, obj_type: int) -> None:
            objects[oid] = content

        def get(self, oid: bytes) -> bytes:
            return objects[oid]

    source = Sink()
    items = [{"i": i, "text": "x" * (i % 300)} for i in range(400)]
    ev = Encoder(source).encode(items)
    root = unpack_ev(ev, "test")
    reader = ListReader()
    want = [item_key(x) for x in Decoder(source).tree_items(root.oid, EXT_LIST)]
    assert reader.keys(Decoder(source), root, "test") == want and len(want) == 400
    assert [Decoder(source).walk(unpack_ev(k, "item")) for k in want] == items
    misses = reader.misses
    assert reader.keys(Decoder(source), root, "test") == want and reader.misses == misses  # from the cache
    # a root that says its first child holds one item more than it does (totals still add up)
    level, total, children = parse_tree_node(objects[root.oid], EXT_LIST, root.oid)
    assert level >= 1
    bad = [[children[0][0] + 1, children[0][1]], *children[1:]]
    content = msgpack.packb([EXT_LIST, level, total + 1, bad], use_bin_type=True)
    oid = hashlib.sha256(content).digest()
    source.put(oid, content, OBJ_NODE)
    with pytest.raises(CorruptError):
        reader.keys(Decoder(source), type(root)(EXT_LIST, oid), "test")  # its child is cached: checked all the same
    with pytest.raises(CorruptError):
        ListReader().keys(Decoder(source), type(root)(EXT_LIST, oid), "test")  # and read from the source


def test_a_thread_deleted_then_written_again_by_another_saver_reads_back_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two savers on one store: a thread one deletes and writes again, the other reads as
    it is now (the manifests gone forgotten, the new ones read), without the catalog."""
    from ckptcli.store import catalog

    store = tmp_path / ".ckpt"
    a = CkptSaver.open(store, commit_interval=0.05)
    b = CkptSaver.open(store, commit_interval=0.05)
    rows = catalog.rows
    calls: list[int] = []
    monkeypatch.setattr(catalog, "rows", lambda s: calls.append(1) or rows(s))
    try:
        ga, gb = chat_builder(12).compile(checkpointer=a), chat_builder(5).compile(checkpointer=b)
        ga.invoke({"messages": []}, CHAT)
        a.flush()
        assert len(gb.get_state(CHAT).values["messages"]) == 12
        assert len(list(gb.get_state_history(CHAT))) == 14
        b.delete_thread("chat")  # every revision: the ones b knows, and those new since it looked (their names)
        before = len(calls)
        gb.invoke({"messages": []}, CHAT)
        b.flush()
        assert normalized(ga.get_state(CHAT).values) == normalized(gb.get_state(CHAT).values)
        assert len(ga.get_state(CHAT).values["messages"]) == 5 and len(list(a.list(CHAT))) == 7
        assert len(calls) == before  # a read the thread again from the manifests' names
    finally:
        a.close()
        b.close()

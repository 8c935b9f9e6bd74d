"""`ckpt copy SRC DST [REF...]` (ckptcli/copy.py): checkpoints copied between stores with
their ids, only what DST lacks sent, every object re-hashed on the way; a damaged source
object refused, a killed copy leaving DST consistent. Real stores on disk; the CLI runs
as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import ckptcli
from ckptcli.copy import copy_checkpoints
from ckptcli.errors import CorruptError, ExitCode
from ckptcli.format.values import OBJ_NODE
from ckptcli.format.walk import walk_checkpoint
from ckptcli.store.layout import pack_path
from ckptcli.store.repository import Store
from tests import stress
from tests.helpers_faults import child_env, describe, fault_argv, flip_byte, run_cli, tree_snapshot

SIGKILLED = -9


def _state(i: int) -> dict[str, object]:
    """A state whose checkpoints share most objects with their predecessor: a large
    list that grows (shared chunks), a blob-sized value that changes (new chunks)."""
    return {
        "memory": {"step": i, "notes": [f"note {n} " * 40 for n in range(200 + 20 * i)]},
        "plan": {"payload": bytes((i * 7 + n) % 251 for n in range(150_000)), "steps": list(range(i))},
    }


def _take(store: Store, i: int, subject: str = "agent:bot", tmp: Path | None = None) -> bytes:
    blobs = None
    if tmp is not None:
        d = tmp / f"blobs{i}"
        d.mkdir(exist_ok=True)
        (d / "weights.bin").write_bytes(os.urandom(90_000) + bytes(i))
        blobs = {"ws": d}
    return ckptcli.take(store, _state(i), subject=subject, blobs=blobs).id


@pytest.fixture
def src(tmp_path: Path) -> Store:
    st = ckptcli.init_store(tmp_path / "src")
    for i in range(3):
        _take(st, i, tmp=tmp_path)
    _take(st, 0, subject="workflow:etl")
    return st


def _objects(store: Store, cid: bytes) -> set[bytes]:
    return set(walk_checkpoint(store, store.manifest(cid)).objects)


def _verify_clean(store: Store) -> None:
    report = ckptcli.verify(Store.open(Path(store.location)), read_data=True)
    assert report.ok, [p.message for p in report.problems]


def _copy_cli(*args: object) -> subprocess.CompletedProcess[bytes]:
    return run_cli("copy", *[str(a) for a in args])


def test_round_trip_keeps_ids_and_every_object_byte_for_byte(src: Store, tmp_path: Path) -> None:
    mid = ckptcli.init_store(tmp_path / "mid")
    back = ckptcli.init_store(tmp_path / "back")
    r1 = copy_checkpoints(src, mid)
    r2 = copy_checkpoints(Store.open(Path(mid.location)), back)
    ids = set(src.manifest_ids())
    assert len(ids) == 4 and len(r1.checkpoints) == 4 and not r1.already_present
    for dst, result in ((mid, r1), (back, r2)):
        dst = Store.open(Path(dst.location))
        assert set(dst.manifest_ids()) == ids
        needed: set[bytes] = set()
        for cid in ids:
            assert dst.manifest_bytes(cid) == src.manifest_bytes(cid)
            needed |= _objects(src, cid)
        assert result.objects_sent == len(needed) and result.objects_present == 0
        assert result.bytes_sent == sum(src.read_stored(oid)[0].stored_len for oid in needed)
        for oid in needed:  # stored bytes (compressed as SRC stored them) and their entry alike
            (se, sb), (de, db) = src.read_stored(oid), dst.read_stored(oid)
            assert sb == db and (se.obj_type, se.codec, se.raw_len) == (de.obj_type, de.codec, de.raw_len)
        for subject in ("agent:bot", "workflow:etl"):
            assert dst.resolve(subject) == src.resolve(subject)
        _verify_clean(dst)
    assert sorted(r1.latest_moved) == ["agent:bot", "workflow:etl"]


def test_second_copy_sends_nothing_and_writes_nothing(src: Store, tmp_path: Path) -> None:
    dst = ckptcli.init_store(tmp_path / "dst")
    first = _copy_cli(src.location, dst.location, "--json")
    assert first.returncode == 0, describe(first)
    assert json.loads(first.stdout)["objects_sent"] > 0
    before = tree_snapshot(Path(dst.location), skip=("locks", "tmp"))
    again = _copy_cli(src.location, dst.location, "--json")
    assert again.returncode == 0, describe(again)
    report = json.loads(again.stdout)
    assert (report["copied"], report["already_present"], report["objects_sent"], report["bytes_sent"]) == (0, 4, 0, 0)
    assert report["latest_moved"] == []
    assert tree_snapshot(Path(dst.location), skip=("locks", "tmp")) == before


def test_json_shape_and_dry_run_change_nothing(src: Store, tmp_path: Path) -> None:
    dst = ckptcli.init_store(tmp_path / "dst")
    before = tree_snapshot(Path(dst.location), skip=("locks", "tmp"))
    dry = _copy_cli(src.location, dst.location, "--dry-run", "--json")
    assert dry.returncode == 0, describe(dry)
    assert tree_snapshot(Path(dst.location), skip=("locks", "tmp")) == before
    real = _copy_cli(src.location, dst.location, "--json")
    assert real.returncode == 0, describe(real)
    d, r = json.loads(dry.stdout), json.loads(real.stdout)
    keys = {
        "checkpoints",
        "copied",
        "already_present",
        "objects_sent",
        "bytes_sent",
        "objects_present",
        "objects_repaired",
        "manifests_rewritten",
        "latest_moved",
        "refs_copied",
        "refs_skipped",
        "damaged",
        "dry_run",
    }
    assert set(d) == set(r) == keys
    assert (d["dry_run"], r["dry_run"]) == (True, False)
    assert d["latest_moved"] == [] and sorted(r["latest_moved"]) == ["agent:bot", "workflow:etl"]
    for k in ("checkpoints", "copied", "already_present", "objects_sent", "bytes_sent", "objects_present", "objects_repaired"):
        assert d[k] == r[k], k
    assert r["checkpoints"] == [c.hex() for c in sorted(src.manifest_ids(), key=lambda c: (src.manifest(c).created_ns, c))]
    text = _copy_cli(src.location, ckptcli.init_store(tmp_path / "other").location)
    assert text.returncode == 0 and b"copied 4 of 4 checkpoints" in text.stdout, describe(text)


def test_one_ref_copies_only_the_objects_it_needs(tmp_path: Path) -> None:
    src = ckptcli.init_store(tmp_path / "src")
    c = [_take(src, i) for i in range(3)]
    assert src.manifest(c[2]).parents == [c[1]]
    dst = ckptcli.init_store(tmp_path / "dst")
    r = _copy_cli(src.location, dst.location, c[1].hex()[:12], "--json")
    assert r.returncode == 0, describe(r)
    dst = Store.open(Path(dst.location))
    assert dst.manifest_ids() == [c[1]]  # its parent is not copied
    assert set(dst.index()) == _objects(src, c[1])  # nothing beyond what it needs
    assert dst.resolve("agent:bot") == c[1]
    _verify_clean(dst)
    # the child next: only what it does not share with c[1] is sent
    r = _copy_cli(src.location, dst.location, "agent:bot", "--json")
    report = json.loads(r.stdout)
    own, parent = _objects(src, c[2]), _objects(src, c[1])
    assert 0 < len(own & parent) < len(own)
    assert report["objects_sent"] == len(own - parent) and report["objects_present"] == len(own & parent)
    assert Store.open(Path(dst.location)).resolve("agent:bot") == c[2]
    # an older one later does not move latest back
    r = _copy_cli(src.location, dst.location, c[0].hex(), "--json")
    assert json.loads(r.stdout)["latest_moved"] == []
    assert Store.open(Path(dst.location)).resolve("agent:bot") == c[2]
    _verify_clean(dst)


def _damage_object(store: Store, oid: bytes) -> None:
    entry, _stored = store.read_stored(oid)
    flip_byte(Path(store.location) / pack_path(entry.pack), entry.offset + entry.stored_len // 2)


def test_flipped_byte_in_a_source_pack_is_refused_naming_object_and_checkpoint(src: Store, tmp_path: Path) -> None:
    newest = src.resolve("agent:bot")
    earlier = {cid for cid in src.manifest_ids() if cid != newest and src.manifest(cid).created_ns < src.manifest(newest).created_ns}
    own = _objects(src, newest) - set().union(*(_objects(src, cid) for cid in src.manifest_ids() if cid != newest))
    victim = max(own, key=lambda oid: src.read_stored(oid)[0].stored_len)  # a data object only the newest one has
    _damage_object(src, victim)
    dst = ckptcli.init_store(tmp_path / "dst")
    r = _copy_cli(src.location, dst.location)
    err = r.stderr.decode()
    assert r.returncode == ExitCode.CORRUPT, describe(r)
    assert victim.hex()[:12] in err and newest.hex()[:12] in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    dst = Store.open(Path(dst.location))
    assert newest not in dst.manifest_ids()
    assert set(dst.manifest_ids()) == earlier  # those before it (oldest first) are kept
    _verify_clean(dst)
    # the library says the same, and nothing of the checkpoint lands
    with pytest.raises(CorruptError, match=victim.hex()[:12]):
        copy_checkpoints(src, dst, [newest.hex()])
    assert newest not in Store.open(Path(dst.location)).manifest_ids()
    _verify_clean(dst)


def test_damaged_node_object_is_refused_too(tmp_path: Path) -> None:
    src = ckptcli.init_store(tmp_path / "src")
    cid = _take(src, 1)
    nodes = [oid for oid, (typ, _s) in walk_checkpoint(src, src.manifest(cid)).objects.items() if typ == OBJ_NODE]
    assert nodes
    _damage_object(src, nodes[0])
    dst = ckptcli.init_store(tmp_path / "dst")
    r = _copy_cli(src.location, dst.location)
    assert r.returncode == ExitCode.CORRUPT, describe(r)
    assert cid.hex()[:12] in r.stderr.decode() and nodes[0].hex()[:12] in r.stderr.decode(), describe(r)
    assert Store.open(Path(dst.location)).manifest_ids() == []
    _verify_clean(dst)


def _trace(src: Store, dst: Path, trace: Path) -> Counter[str]:
    r = subprocess.run(
        fault_argv("copy", src.location, str(dst)),
        capture_output=True,
        env=child_env({"CKPT_FAULT_TRACE": str(trace)}),
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, describe(r)
    return Counter(line.split(" ", 1)[0] for line in trace.read_text().splitlines())


@pytest.mark.slow
def test_sigkill_at_every_write_point_leaves_dst_consistent_and_the_next_copy_completes(src: Store, tmp_path: Path) -> None:
    # every file commit, before and after, at full size (CKPT_STRESS_SCALE=1: 20 kills or
    # more); bounded, the first, the middle and the last commit, before and after, and the
    # three pack appends either way (9 kills, each kind of point)
    ids = set(src.manifest_ids())
    traced = ckptcli.init_store(tmp_path / "traced")
    counts = _trace(src, Path(traced.location), tmp_path / "trace")
    assert counts["commit_temp"] >= 8 and counts["pack_add"] >= 20, counts
    commits = stress.sample(list(range(1, counts["commit_temp"] + 1)), 3)
    faults = [f"commit_temp:{n}:{when}" for n in commits for when in ("before", "after")]
    faults += [f"pack_add:{n}:before" for n in (1, counts["pack_add"] // 2, counts["pack_add"])]
    assert len(faults) >= stress.count(20, 9)
    for k, fault in enumerate(faults):
        dst = ckptcli.init_store(tmp_path / f"dst{k}")
        killed = subprocess.run(
            fault_argv("copy", src.location, dst.location),
            capture_output=True,
            env=child_env({"CKPT_FAULT": fault}),
            timeout=120,
            check=False,
        )
        assert killed.returncode == SIGKILLED, f"{fault}: {describe(killed)}"
        _verify_clean(dst)
        after = set(Store.open(Path(dst.location)).manifest_ids())
        assert after <= ids, fault
        again = _copy_cli(src.location, dst.location, "--json")
        assert again.returncode == 0, f"{fault}: {describe(again)}"
        assert json.loads(again.stdout)["already_present"] == len(after), fault
        dst = Store.open(Path(dst.location))
        assert set(dst.manifest_ids()) == ids, fault
        for subject in ("agent:bot", "workflow:etl"):
            assert dst.resolve(subject) == src.resolve(subject), fault
        _verify_clean(dst)


def test_checkpoint_file_as_source(src: Store, tmp_path: Path) -> None:
    cid = src.resolve("agent:bot")
    f = tmp_path / "bot.ckpt"
    ckptcli.export_checkpoint(ckptcli.open_checkpoint(cid.hex(), store_path=src.location), f)
    dst = ckptcli.init_store(tmp_path / "dst")
    r = _copy_cli(f, dst.location, "--json")
    assert r.returncode == 0, describe(r)
    assert json.loads(r.stdout)["checkpoints"] == [cid.hex()]
    dst = Store.open(Path(dst.location))
    assert dst.manifest_ids() == [cid] and dst.resolve("agent:bot") == cid
    assert set(dst.index()) == _objects(src, cid)
    _verify_clean(dst)
    r = _copy_cli(f, dst.location, "latest")
    assert r.returncode == ExitCode.USAGE and b"one checkpoint" in r.stderr, describe(r)


def test_refs_copied_only_with_refs_and_never_moved(src: Store, tmp_path: Path) -> None:
    bot, etl = src.resolve("agent:bot"), src.resolve("workflow:etl")
    src.set_tag("v1", bot)
    src.set_branch("exp", etl)
    src.set_tag("clash", bot)
    dst = ckptcli.init_store(tmp_path / "dst")
    r = _copy_cli(src.location, dst.location, "--json")
    assert json.loads(r.stdout)["refs_copied"] == []
    assert set(Store.open(Path(dst.location)).refs()) == {"latest/agent/bot", "latest/workflow/etl"}
    Store.open(Path(dst.location)).set_tag("clash", etl)
    r = _copy_cli(src.location, dst.location, "--refs", "--json")
    report = json.loads(r.stdout)
    assert report["refs_copied"] == ["tags/v1", "branches/exp"] and report["refs_skipped"] == ["tags/clash"]
    refs = Store.open(Path(dst.location)).refs()
    assert (refs["tags/v1"], refs["branches/exp"], refs["tags/clash"]) == (bot, etl, etl)
    # a tag naming a checkpoint not copied is not copied
    dst2 = ckptcli.init_store(tmp_path / "dst2")
    r = _copy_cli(src.location, dst2.location, "workflow:etl", "--refs", "--json")
    assert json.loads(r.stdout)["refs_copied"] == ["branches/exp"]


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("{src}", "{src}"), ExitCode.USAGE, "same store"),
        (("{src}", "{tmp}/nowhere"), ExitCode.NO_STORE, "not a ckpt store"),
        (("{tmp}/nowhere", "{dst}"), ExitCode.NO_STORE, "not a ckpt store"),
        (("{src}", "{dst}", "no-such-tag"), ExitCode.NOT_FOUND, "no-such-tag"),
        (("{tmp}/junk.ckpt", "{dst}"), ExitCode.UNSUPPORTED_VERSION, "not a ckpt file"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(src: Store, tmp_path: Path, args: tuple[str, ...], code: int, words: str) -> None:
    dst = ckptcli.init_store(tmp_path / "dst")
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint file at all" * 10)
    before = tree_snapshot(Path(dst.location), skip=("locks", "tmp"))
    r = _copy_cli(*(a.format(src=src.location, dst=dst.location, tmp=tmp_path) for a in args))
    err = r.stderr.decode()
    assert r.returncode == code, describe(r)
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert tree_snapshot(Path(dst.location), skip=("locks", "tmp")) == before
    assert not (tmp_path / "nowhere").exists()


def test_newer_format_than_dst_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    src = ckptcli.init_store(tmp_path / "src")  # the newest format
    _take(src, 0)
    old = ckptcli.init_store(tmp_path / "old", version=1)
    assert old.version < src.version
    before = tree_snapshot(Path(old.location), skip=("locks", "tmp"))
    r = _copy_cli(src.location, old.location)
    assert r.returncode == ExitCode.UNSUPPORTED_VERSION, describe(r)
    assert b"migrate --format" in r.stderr and len(r.stderr.strip().splitlines()) == 1, describe(r)
    assert tree_snapshot(Path(old.location), skip=("locks", "tmp")) == before
    # the other way round is fine: a version-1 checkpoint copies into a version-2 store, verbatim
    _take(Store.open(Path(old.location)), 1)
    new = ckptcli.init_store(tmp_path / "new")
    r = _copy_cli(old.location, new.location)
    assert r.returncode == 0, describe(r)
    assert Store.open(Path(new.location)).manifest_ids() == Store.open(Path(old.location)).manifest_ids()
    _verify_clean(new)


def test_damaged_manifest_in_src_is_named_and_the_others_are_copied(src: Store, tmp_path: Path) -> None:
    victim = src.resolve("workflow:etl")
    flip_byte(Path(src.location) / "manifests" / victim.hex(), 40)
    dst = ckptcli.init_store(tmp_path / "dst")
    r = _copy_cli(src.location, dst.location)
    assert r.returncode == ExitCode.CORRUPT, describe(r)
    assert victim.hex()[:12] in r.stderr.decode() and b"ckpt repair checkpoints --drop --force --store" in r.stderr, describe(r)
    others = sorted(c for c in src.manifest_ids() if c != victim)
    assert sorted(Store.open(Path(dst.location)).manifest_ids()) == others
    _verify_clean(dst)
    # named, the others copy with exit 0 (they are there already)
    r = _copy_cli(src.location, dst.location, "agent:bot", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["checkpoints"] == [src.resolve("agent:bot").hex()], describe(r)


@pytest.mark.parametrize("batch", [1, 2, 256])
def test_batches_commit_as_they_go_and_copy_the_same(src: Store, tmp_path: Path, batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import ckptcli.copy as copy_module

    monkeypatch.setattr(copy_module, "BATCH_CHECKPOINTS", batch)
    dst = ckptcli.init_store(tmp_path / "dst")
    result = copy_checkpoints(src, dst)
    dst = Store.open(Path(dst.location))
    assert set(dst.manifest_ids()) == set(src.manifest_ids())
    # one index file (and pack) per batch with something to send, not one per checkpoint
    seen: set[bytes] = set()
    sends = []
    for cid in result.checkpoints:  # oldest first, as copied
        sends.append(bool(_objects(src, cid) - seen))
        seen |= _objects(src, cid)
    batches_sending = sum(any(sends[i : i + batch]) for i in range(0, len(sends), batch))
    assert len(list((Path(dst.location) / "index").iterdir())) == batches_sending
    if batch >= len(sends):
        assert batches_sending == 1
    for cid in src.manifest_ids():
        for oid in _objects(src, cid):
            assert dst.read_stored(oid)[1] == src.read_stored(oid)[1]
    _verify_clean(dst)

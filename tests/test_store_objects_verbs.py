"""The verbs tests/test_store_objects.py does not cover, on a store on a real S3 server on
loopback (moto, tests/s3_server.py), through the real CLI: replay, fork, compat, tui (the
Textual app driven by its Pilot), the ref verbs (tag, branch, refs, reflog, log, reset),
doctor, export and import, repair, stats, bisect, ls-files and dump. Each checks what the
local-store test of that verb checks. A verb that takes a local path by design refuses a
URL there in one line with its exit code, writing nothing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.api import open_checkpoint, open_store, take
from ckptcli.errors import ExitCode
from ckptcli.format.jsonview import to_json
from ckptcli.history.events import LABEL_FORK_AT, LABEL_FORK_OF
from ckptcli.history.recorder import Recorder
from ckptcli.history.replay import load_tail, replay
from ckptcli.schema.compat import AFTER_MIGRATION, AS_IS, INCOMPATIBLE
from ckptcli.store.backends import open_backend
from ckptcli.tui.app import CkptApp, open_session
from ckptcli.tui.screens.checkpoint import CheckpointScreen
from ckptcli.tui.screens.history import HistoryScreen
from ckptcli.tui.screens.timeline import TimelineScreen
from ckptcli.tui.widgets import VirtualList
from tests.conftest import run_ckpt
from tests.replay_example import agent
from tests.s3_server import S3Bucket, fixture_s3_bucket, fixture_s3_env, fixture_s3_server  # noqa: F401 - pytest fixtures
from tests.tui_data import build_demo_store

MIGRATIONS = "tests.schema_example.migrations"
ADAPTER = "tests.schema_example.state:load"
NOTES = "the customer was promised a refund " * 20
V1 = {"memory": {"notes": NOTES, "user": "Ada Lovelace"}, "plan": ["check order"]}
V3 = {"memory": {"scratchpad": NOTES, "user": {"first": "Ada", "last": "Lovelace"}}, "plan": ["reply"]}


def _one_line(r: Any, code: int) -> str:
    err: str = r.err if hasattr(r, "err") else r.stderr.decode()
    got = r.code if hasattr(r, "code") else r.returncode
    assert got == code and err.count("\n") == 1 and err.startswith("ckpt: error: ") and "Traceback" not in err, (got, err)
    return err


# -- replay and fork ---------------------------------------------------------------------------------------
def test_replay_and_fork_on_an_s3_store(s3_bucket: S3Bucket, cli: Any, tmp_path: Path) -> None:
    """tests/test_replay.py's support bot, recorded live into the S3 store (its journal on
    local disk), replayed and forked through the CLI."""
    url = f"{s3_bucket.url}/bot"
    store = ckptcli.init_store(url)
    rec = Recorder.open(store, "agent:support-bot", tmp_path / "bot.journal", tools=agent.TOOLS)
    for text in ("where is A-1", "and where is A-2", "any news on A-1"):
        rec.step(agent.step, "message.append", message={"role": "user", "content": text}, sender="user")
    cid = rec.checkpoint().hex
    live = rec.state
    rec.close()
    r = cli("replay", cid, "--store", url)
    assert r.code == 0, r.err
    assert json.loads(r.out) == to_json(live)
    doc = json.loads(cli("replay", cid[:10], "--store", url, "--json", "--to", "4").out)
    assert (doc["id"], doc["base_seq"], doc["seq"], doc["applied"]) == (cid, 0, 4, 4)
    assert doc["state"] == to_json(replay(open_checkpoint(cid, store), to_seq=4))
    steps = cli("replay", cid, "--store", url, "--step", "--to", "4").out.splitlines()
    assert steps[0] == f"snapshot of {cid[:12]} at seq 0" and steps[-1] == "state at seq 4: 4 events applied"
    _one_line(cli("replay", cid, "--store", url, "--to", "99"), ExitCode.NOT_FOUND)

    r = cli("fork", cid[:12], "--at", "7", "--store", url, "--json", "--branch", "retry", "-m", "try again")
    assert r.code == 0, r.err
    forked = json.loads(r.out)
    assert (forked["parent"], forked["at"], forked["subject"], forked["branch"]) == (cid, 7, "agent:support-bot", "retry")
    again = open_store(url)
    new = open_checkpoint(forked["id"], again)
    assert new.manifest.parents == [bytes.fromhex(cid)] and new.manifest.message == "try again"
    assert new.manifest.labels[LABEL_FORK_OF] == cid and new.manifest.labels[LABEL_FORK_AT] == "7"
    assert load_tail(new).events == [] and load_tail(new).base_seq == 7
    assert json.loads(cli("replay", forked["id"], "--store", url).out) == json.loads(cli("replay", cid, "--to", "7", "--store", url).out)
    assert again.resolve("retry").hex() == forked["id"] and again.resolve("agent:support-bot").hex() == cid  # latest stays
    assert cli("verify", "--store", url, "--read-data").code == 0


# -- the ref verbs -----------------------------------------------------------------------------------------
def test_tag_branch_refs_reflog_log_and_reset_on_an_s3_store(s3_bucket: S3Bucket, cli: Any) -> None:
    url = f"{s3_bucket.url}/refs"
    store = ckptcli.init_store(url)
    a = take(store, {"memory": {"v": 1}}, subject="agent:bot", message="one").hex
    b = take(store, {"memory": {"v": 2}}, subject="agent:bot", message="two").hex
    assert cli("tag", "good", a, "--store", url).code == 0
    assert cli("branch", "exp", a, "--store", url).code == 0
    assert json.loads(cli("tag", "--store", url, "--json").out) == {"good": a}
    assert json.loads(cli("branch", "--store", url, "--json").out) == {"exp": a}
    assert json.loads(cli("refs", "--store", url, "--json").out) == {"branches/exp": a, "latest/agent/bot": b, "tags/good": a}
    _one_line(cli("tag", "good", b, "--store", url), ExitCode.CONFLICT)  # a tag does not move
    assert cli("branch", "exp", b, "--store", url).code == 0  # a branch does
    logged = json.loads(cli("log", "agent:bot", "--store", url, "--json").out)
    assert [(c["id"], c["message"]) for c in logged] == [(b, "two"), (a, "one")]

    r = cli("reset", "agent:bot", a, "--store", url)
    assert r.code == 0, r.err
    assert json.loads(cli("restore", "agent:bot", "--store", url).out) == {"memory": {"v": 1}}
    rows = json.loads(cli("reflog", "agent:bot", "--store", url, "--json").out)
    assert [(x["old"], x["new"]) for x in rows] == [(b, a), (a, b), (None, a)]
    assert rows[0]["reason"].startswith("reset") and "ckpt reset" in rows[0]["command"] and rows[0]["pid"] > 0
    r = cli("reset", "agent:bot", "agent:bot@{1}", "--store", url, "--json")
    assert json.loads(r.out) == {"subject": "agent:bot", "old": a, "new": b}
    every = json.loads(cli("reflog", "--store", url, "--json").out)
    assert {x["ref"] for x in every} == {"latest/agent/bot", "tags/good", "branches/exp"}
    assert [(x["old"], x["new"]) for x in every if x["ref"] == "branches/exp"] == [(a, b), (None, a)]
    assert cli("tag", "-d", "good", "--store", url).code == 0 and cli("branch", "-d", "exp", "--store", url).code == 0
    assert json.loads(cli("refs", "--store", url, "--json").out) == {"latest/agent/bot": b}
    assert [p for p in open_backend(url).list_paths("") if p.startswith(("locks/", "tmp/"))] == []


def _objects(url: str) -> dict[str, str]:
    return {i.path: i.etag for i in open_backend(url).list("") if not i.path.startswith("cache/")}


# -- compat ------------------------------------------------------------------------------------------------
def test_compat_checks_an_s3_store_without_writing_to_it(s3_bucket: S3Bucket, cli: Any) -> None:
    """tests/test_compat.py's store case, on S3."""
    url = f"{s3_bucket.url}/compat"
    store = ckptcli.init_store(url)
    a = take(store, V1, subject="agent:support-bot", schema_version=1)
    b = take(store, V3, subject="agent:support-bot", schema_version=3)
    c = take(store, {"memory": {"notes": "n", "user": 42}}, subject="agent:other", schema_version=1)
    before = _objects(url)
    r = cli("compat", "--store", url, "-M", MIGRATIONS, "--validator", ADAPTER, "--json")
    assert r.code == 1
    got = {x["checkpoint"]: (x["name"], x["status"]) for x in json.loads(r.out)["checkpoints"]}
    assert got == {
        a.hex: (f"{a.hex[:12]} agent:support-bot", AFTER_MIGRATION),
        b.hex: (f"{b.hex[:12]} agent:support-bot", AS_IS),
        c.hex: (f"{c.hex[:12]} agent:other", INCOMPATIBLE),
    }
    r = cli("compat", "--store", url, "-M", MIGRATIONS, "--validator", ADAPTER, "--subject", "agent:support-bot")
    assert r.code == 0 and "2 checkpoint(s) checked" in r.out
    r = cli("compat", b.hex[:10], "agent:support-bot~1", "--store", url, "-M", MIGRATIONS, "--json")
    assert r.code == 0 and [x["checkpoint"] for x in json.loads(r.out)["checkpoints"]] == [b.hex, a.hex]
    assert _objects(url) == before  # nothing written (but the catalog, a cache, as ckpt ls writes it)


# -- tui ---------------------------------------------------------------------------------------------------
def test_the_tui_browses_an_s3_store(s3_bucket: S3Bucket) -> None:
    """The demo store of tests/test_tui.py on S3, driven by Textual's Pilot: the history,
    a checkpoint's screen, its timeline, a blobs tab; the header names the store by its URL."""
    url = f"{s3_bucket.url}/demo"
    ids = build_demo_store(url)  # type: ignore[arg-type]
    app = CkptApp(open_session(open_store(url), prefill=False), blink=False)

    async def main() -> None:
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause()
            screen = pilot.app.screen
            assert isinstance(screen, HistoryScreen)
            lst = screen.query_one("#checkpoints", VirtualList)
            assert lst.count == 11
            assert lst.render_row(0).plain.startswith("  ▲") and ids["migrated"].hex()[:12] in lst.render_row(0).plain
            assert "all subjects: 11 checkpoints" in str(screen.query_one("#title").content)
            assert pilot.app.sub_title == url  # the store, by its URL as given
            await pilot.press("down", "down", "down")
            assert screen.rows[lst.cursor].id == ids["recorded"]
            await pilot.press("enter")
            await pilot.pause()
            top = pilot.app.screen
            assert isinstance(top, CheckpointScreen) and top.cid == ids["recorded"]
            await pilot.press("t")
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            assert isinstance(pilot.app.screen, TimelineScreen)
            await pilot.press("q")

    async def blobs() -> None:  # a checkpoint's blobs, listed from its tree in the S3 packs
        merge = CkptApp(open_session(open_store(url), prefill=False), checkpoint=ids["merge"], view="checkpoint", blink=False)
        async with merge.run_test(size=(120, 36)) as pilot:
            await pilot.pause()
            screen = pilot.app.screen
            await pilot.click("#--content-tab-blobs")
            await pilot.pause()
            listing = screen.query_one("#blobs-list", VirtualList)
            shown = [listing.render_row(i).plain for i in range(listing.count)]
            assert shown == ["out/  0755", "  report.csv  24 B  0644", "  latest -> report.csv", "  logs/  0755", "    run.log  3 B  0600"]
            assert str(screen.query_one("#blobs-note").content) == "2 files, 27 B"

    asyncio.run(main())
    asyncio.run(blobs())


def test_ckpt_tui_takes_a_store_url_as_it_takes_a_store_directory(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/tui"
    ckptcli.init_store(url)
    # without a terminal the command stops after opening the store, before Textual starts
    got = run_ckpt("tui", url, cwd=tmp_path)
    err = got.stderr.decode()
    assert got.returncode == ExitCode.USAGE and "draws on a terminal" in err and err.count("\n") == 1, err
    missing = run_ckpt("tui", f"{s3_bucket.url}/nothing-here", cwd=tmp_path)
    assert missing.returncode == ExitCode.NO_STORE and b"is not a ckpt store" in missing.stderr


# -- export, import, repair, stats, bisect, ls-files, dump ---------------------------------------------------
def _blobs(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "model.bin").write_bytes(os.urandom(300_000))
    (work / "notes.txt").write_text("line\n" * 500)
    return work


def test_export_and_import_between_s3_stores_and_files(s3_bucket: S3Bucket, cli: Any, tmp_path: Path) -> None:
    src, dst = f"{s3_bucket.url}/src", f"{s3_bucket.url}/dst"
    store = ckptcli.init_store(src)
    ckptcli.init_store(dst)
    work = _blobs(tmp_path)
    cid = take(store, {"memory": {"turn": 1}}, subject="agent:a", blobs={"work": work}).hex
    out = tmp_path / "a.ckpt"
    r = cli("export", cid, "-o", out, "--store", src)
    assert r.code == 0, r.err
    assert json.loads(cli("show", out, "--json").out)["id"] == cid  # the file reads on its own
    r = cli("import", out, "--store", dst)
    assert r.code == 0 and r.out.strip() == cid, r.err
    assert open_store(dst).manifest_bytes(bytes.fromhex(cid)) == store.manifest_bytes(bytes.fromhex(cid))
    assert cli("verify", "--store", dst, "--read-data").code == 0
    restored = tmp_path / "restored"
    assert cli("restore", cid, "--store", dst, "--no-state", "--blobs", restored).code == 0
    assert (restored / "work" / "model.bin").read_bytes() == (work / "model.bin").read_bytes()
    again = cli("import", out, "--store", dst, "--json")
    assert again.code == 0, again.err  # the same checkpoint again: nothing new


def test_repair_stats_bisect_ls_files_and_dump_on_an_s3_store(s3_bucket: S3Bucket, cli: Any, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/repair"
    store = ckptcli.init_store(url)
    work = _blobs(tmp_path)
    ids = [take(store, {"memory": {"some": {"key": int(n >= 3)}}}, subject="agent:bot", blobs={"work": work}).hex for n in range(5)]
    files = json.loads(cli("ls-files", "latest", "--store", url, "--json").out)
    assert {f["path"] for f in files} >= {"work/model.bin", "work/notes.txt"}
    dumped = cli("dump", "latest", "work/notes.txt", "--store", url)
    assert dumped.code == 0 and dumped.out == "line\n" * 500
    stats = json.loads(cli("stats", "--store", url, "--json").out)
    assert stats["location"] == url and stats["checkpoints"] == 5 and stats["packs"] >= 1 and stats["dedup_ratio"] > 4
    r = cli("bisect", "agent:bot", "--good", ids[0], "--expect", "/memory/some/key==0", "--json", "--store", url)
    assert r.code == 0 and json.loads(r.out)["first_bad"] == ids[3], (ids, r.out + r.err)
    # the index gone: repair index rebuilds it from the packs, and every checkpoint restores again
    backend = open_backend(url)
    for p in backend.list_paths("index/"):
        backend.delete(p)
    r = cli("repair", "index", "--store", url, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["index_files_after"] == 1
    assert cli("verify", "--store", url, "--read-data").code == 0
    # the latest ref lost: repair refs writes it again, naming the newest checkpoint
    backend.delete("refs/latest/agent/bot")
    assert "run `ckpt repair refs`" in cli("show", "agent:bot", "--store", url).err
    r = cli("repair", "refs", "--store", url)
    assert r.code == 0, r.err
    assert backend.exists("refs/latest/agent/bot") and open_store(url).resolve("agent:bot").hex() == ids[4]
    r = cli("repair", "checkpoints", "--store", url, "--force")
    assert r.code == 0 and "have every object they need" in r.out


# -- doctor ------------------------------------------------------------------------------------------------
def _checks(r: Any) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in json.loads(r.out)["checks"]}


def _plant_lock(url: str, host: str, age_s: float, exclusive: bool = True) -> None:
    """A lock a process on `host` took `age_s` seconds ago and lost (killed)."""
    from ckptcli.store import objlocks

    then = time.time() - age_s
    env = objlocks.LockEnv(host=host, pid=4242, user="ops", clock=lambda: then)
    held = objlocks.acquire(open_backend(url), exclusive, wait=0, env=env, command="ckpt prune", refresh_every=3600)
    held._stop.set()


def test_doctor_on_an_s3_store(s3_bucket: S3Bucket, cli: Any) -> None:
    url = f"{s3_bucket.url}/doc"
    store = ckptcli.init_store(url)
    take(store, {"memory": {"v": 1}}, subject="agent:bot")
    r = cli("doctor", "--store", url, "--json")
    assert r.code == 0, r.err
    checks = _checks(r)
    assert checks["store"]["status"] == "ok" and checks["store"]["detail"].startswith(f"{url}: reachable, format version ")
    assert checks["store structure"]["status"] == "ok" and "1 checkpoint(s)" in checks["store structure"]["detail"]
    assert checks["locks"]["status"] == "ok" and checks["locks"]["detail"] == "none held"
    assert checks["free space"]["status"] == "ok" and "not applicable" in checks["free space"]["detail"]
    # a live lock of another host, and a stale one: each named with host, pid and age
    _plant_lock(url, "host-c", age_s=40 * 60, exclusive=False)
    _plant_lock(url, "host-b", age_s=60)
    r = cli("doctor", "--store", url, "--json")
    assert r.code == 0, r.err  # warnings: the store works; commands wait for the live one
    checks = _checks(r)
    live = checks["lock store"]
    assert live["status"] == "warn" and "exclusive" in live["detail"] and "host host-b" in live["detail"]
    assert "pid 4242" in live["detail"] and re.search(r"refreshed \d+ s ago", live["detail"]), live
    stale = checks["stale locks"]
    assert stale["status"] == "warn" and "host host-c" in stale["detail"] and "not refreshed for 40 min" in stale["detail"], stale
    assert "ckpt unlock" in stale["hint"]
    human = cli("doctor", "--store", url)
    assert "host-b" in human.out and "host-c" in human.out and "ckpt unlock" in human.out
    assert cli("unlock", "--store", url, "--remove-all").code == 0
    assert _checks(cli("doctor", "--store", url, "--json"))["locks"]["detail"] == "none held"


def test_doctor_on_a_local_store_says_its_free_space(cli: Any, tmp_path: Path) -> None:
    ckptcli.init_store(tmp_path / "s")
    checks = _checks(cli("doctor", "--store", tmp_path / "s", "--json"))
    assert checks["free space"]["status"] in ("ok", "warn") and " free of " in checks["free space"]["detail"]


def test_doctor_without_a_reachable_store_is_one_line_and_exit_10(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    for url, env, what in (
        ("s3://no-such-bucket-here/x", None, "no such bucket"),
        (f"{s3_bucket.url}/x", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "get failed"),  # nothing listens on port 9
        (f"{s3_bucket.url}/never-initialised", None, "is not a ckpt store"),
    ):
        got = run_ckpt("doctor", "--store", url, "--json", env=env, cwd=tmp_path)
        err = got.stderr.decode()
        assert got.returncode == ExitCode.NO_STORE and err.count("\n") == 1 and what in err and "Traceback" not in err, (url, err)
        report = json.loads(got.stdout)
        assert report["status"] == "fail" and report["checks"][0]["name"] == "store"


# -- a local path where a URL was given ----------------------------------------------------------------------
def test_a_url_where_a_verb_takes_a_local_path_is_one_line(s3_bucket: S3Bucket, cli: Any, tmp_path: Path) -> None:
    url = f"{s3_bucket.url}/local-only"
    store = ckptcli.init_store(url)
    cid = take(store, {"memory": {"v": 1}}, subject="agent:bot", blobs={"work": _blobs(tmp_path)}).hex
    os.chdir(tmp_path)
    target = f"{s3_bucket.url}/out"
    cases = [
        ("export", cid, "-o", f"{target}/a.ckpt", "--store", url),
        ("import", f"{target}/a.ckpt", "--store", url),
        ("import", "langgraph", f"{target}/checkpoints.sqlite", "--store", url),
        ("restore", cid, "--blobs", target, "--no-state", "--store", url),
        ("restore", cid, "-o", f"{target}/state.json", "--store", url),
        ("compat", target, "--store", url),
        ("show", f"{target}/a.ckpt", "--store", url),
        ("diff", cid, f"{target}/a.ckpt", "--store", url),
        ("verify", f"{target}/a.ckpt", "--store", url),
        ("replay", f"{target}/a.ckpt", "--store", url),
        ("dump", cid, "work/notes.txt", "-o", f"{target}/notes.txt", "--store", url),
        ("take", f"{target}/state.json", "-S", "agent:bot", "--store", url),
        ("take", "-S", "agent:bot", "--blob", f"work={target}/work", "--store", url),
        # each of these took the URL for a relative path (./s3:/bucket/...)
        ("compat", "--junit", f"{target}/j.xml", "--store", url),
        ("doctor", "--journal-dir", f"{target}/jd", "--store", url),
        ("run", "-S", "process:p", "--state", f"{target}/x", "--store", url, "--", "true"),
        ("run", "-S", "process:p", "--state-root", target, "--store", url, "--", "true"),
        ("workflow", "ls", "--journal-dir", f"{target}/jd", "--store", url),
    ]
    for args in cases:
        err = _one_line(cli(*args), ExitCode.USAGE)
        assert target in err and "--store" in err, (args, err)
    assert sorted(os.listdir(tmp_path)) == ["work"]  # nothing written here (no "s3:" directory)
    assert [p for p in open_backend(url.rsplit("/", 1)[0]).list_paths("") if p.startswith("out/")] == []


@pytest.fixture(autouse=True)
def _keep_cwd() -> Any:
    here = os.getcwd()
    yield
    os.chdir(here)

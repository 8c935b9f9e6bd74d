"""The runbooks in docs/runbooks/ are run as written.

Each page gets a store built for it (a recorded agent whose bad value enters at a known
event, a damaged pack, a held lock, ...). Then every command line of the page's
```console blocks is run, in order, as a real `ckpt` subprocess, and at the end the store
and the files must be in the state the page promises.

How a page is read (docs/runbooks/README.md says the same to its readers):

- `$ ckpt ...` is run; it must exit 0, or N when the line's comment says `# exit N`.
- `$ export NAME=VALUE` sets NAME for the commands after it; `$ cd DIR` changes the
  directory they run in; `$ mkdir -p DIR` makes a directory.
- `$ NAME=VALUE` sets a variable the page took from the output just above: the test
  sets it to the value it knows from building the store, and fails unless the previous
  command's output shows that value (or, for a value the reader works out, such as the
  event before the one shown, what it is worked out from).
- Paths under /srv/ and /mnt/ are examples: they are mapped into the test's directory.
- Any other `$ ...` line (ps, kill, cp) is a step for a person: each page's test names
  them, and does what they say in Python; an unknown one fails the test.
- A ```python block is run as it stands (paths mapped the same way), from the directory
  the commands run in, with this repository on PYTHONPATH; it must exit 0.
- Lines without `$ ` are output shown to the reader and are not compared (ids and times
  differ in every run); the checks after each page say what must hold.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import ckptcli

REPO = Path(__file__).resolve().parent.parent
PAGES = REPO / "docs" / "runbooks"
RUNBOOKS = ["agent-misbehaved.md", "store-damaged.md", "migration-failed.md", "locked-or-full.md", "host-lost.md"]


# -- reading a page ------------------------------------------------------------------------------------
@dataclass
class Line:
    text: str  # without the "$ "
    lineno: int


def console_lines(page: str, python: bool = False) -> list[Line]:
    """The `$ ` lines of the page's ```console blocks, in order; with `python`, each
    ```python block too, as one Line starting with "python\n"."""
    out: list[Line] = []
    block: str | None = None
    code: list[str] = []
    start = 0
    for n, raw in enumerate(page.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            if block is None:
                block, code, start = stripped[3:], [], n
            else:
                if block == "python" and python:
                    out.append(Line("python\n" + "\n".join(code), start))
                block = None
            continue
        if block == "console" and stripped.startswith("$ "):
            out.append(Line(stripped[2:].strip(), n))
        elif block == "python":
            code.append(raw)
    return out


def expected_exit(text: str) -> int:
    comment = text.split("#", 1)[1] if " #" in text else ""
    m = re.search(r"\bexit (\d+)", comment)
    return int(m.group(1)) if m else 0


@dataclass
class Run:
    """What running a page did: every ckpt command with its result."""

    root: Path
    env: dict[str, str]
    cwd: Path
    results: list[tuple[str, subprocess.CompletedProcess[str]]] = field(default_factory=list)

    def output(self, needle: str) -> str:
        """The output of the last command whose line holds `needle`."""
        for text, proc in reversed(self.results):
            if needle in text:
                return proc.stdout + proc.stderr
        raise AssertionError(f"no command with {needle!r} was run")


def run_page(
    name: str,
    root: Path,
    known: dict[str, str | tuple[str, str]] | None = None,
    human: dict[str, Callable[[], None]] | None = None,
    page_text: str | None = None,
) -> Run:
    """Run the page's commands as documented (module docstring); fail at the first one
    that does not do what the page says."""
    text = page_text if page_text is not None else (PAGES / name).read_text()
    known, human = known or {}, human or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPT_")}
    env.update(NO_COLOR="1", COLUMNS="200", PYTHONPATH="")
    run = Run(root, env, root)
    variables: dict[str, str] = {}

    def subst(s: str) -> str:
        s = re.sub(r"(?<![\w.])/(srv|mnt)/", lambda m: f"{root}/{m.group(1)}/", s)
        return re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", lambda m: variables.get(m.group(1), m.group(0)), s)

    lines = console_lines(text, python=True)
    assert lines, f"{name} has no console lines"
    for line in lines:
        where = f"{name}:{line.lineno}: $ {line.text}"
        if line.text.startswith("python\n"):
            code = re.sub(r"(?<![\w.])/(srv|mnt)/", lambda m: f"{root}/{m.group(1)}/", line.text[7:])
            env = {**run.env, "PYTHONPATH": str(REPO)}
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=run.cwd, timeout=120)
            run.results.append((line.text, proc))
            assert proc.returncode == 0, f"{name}:{line.lineno}: the python block failed\n{proc.stdout}\n{proc.stderr}"
            continue
        words = shlex.split(subst(line.text), comments=True)
        if words[0] == "ckpt":
            env = {**run.env, "PYTHONPATH": str(REPO)}  # this checkout's ckpt, whichever one the venv installed
            proc = subprocess.run(
                [sys.executable, "-m", "ckptcli", *words[1:]], capture_output=True, text=True, env=env, cwd=run.cwd, timeout=120
            )
            run.results.append((line.text, proc))
            want = expected_exit(line.text)
            assert proc.returncode == want, f"{where}\nexit {proc.returncode}, the page says {want}\n{proc.stdout}\n{proc.stderr}"
            assert "Traceback" not in proc.stderr, f"{where}\n{proc.stderr}"
        elif words[0] == "export":
            key, _, value = words[1].partition("=")
            run.env[key] = value
            variables[key] = value
        elif words[0] == "cd":
            run.cwd = Path(words[1])
        elif words[:2] == ["mkdir", "-p"]:
            for d in words[2:]:
                Path(d).mkdir(parents=True, exist_ok=True)
        elif len(words) == 1 and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S+", words[0]):
            key = words[0].split("=", 1)[0]
            assert key in known, f"{where}: the test does not know {key}"
            value, shown = known[key] if isinstance(known[key], tuple) else (known[key], known[key])
            last = run.results[-1][1]
            assert shown in last.stdout + last.stderr, f"{where}: the output above does not show {shown}\n{last.stdout}{last.stderr}"
            variables[key] = value
        else:
            step = next((f for prefix, f in human.items() if line.text.startswith(prefix)), None)
            assert step is not None, f"{where}: not a ckpt command, and the test has no step for it"
            step()
    return run


def mutate_first_flag(text: str) -> str:
    """The page with the first `--flag` of its first ckpt command that has one misspelt."""
    for line in console_lines(text):
        if line.text.startswith("ckpt ") and " --" in line.text:
            flag = re.search(r" (--[a-z-]+)", line.text)
            assert flag is not None
            wrong = line.text.replace(flag.group(1), flag.group(1) + "x", 1)
            return text.replace("$ " + line.text, "$ " + wrong, 1)
    raise AssertionError("no ckpt command with a flag")


def refs(store: Path) -> dict[str, str]:
    return {name: cid.hex() for name, cid in ckptcli.open_store(store).refs().items()}


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# -- 1. agent-misbehaved -------------------------------------------------------------------------------
@dataclass
class Misbehaved:
    ids: list[str]
    workspaces: list[dict[str, str]]
    bad_seq: int


def build_misbehaved(root: Path) -> Misbehaved:
    """agent:support-bot, six checkpoints of four events each, taken with its workspace;
    event #15 (in the fourth checkpoint's tail) sets refund_limit from 100 to 5000, and
    from then on the agent writes refunds.csv."""
    store = ckptcli.init_store(root / "srv" / "ckpt")
    work = root / "srv" / "support-bot" / "work"
    work.mkdir(parents=True)
    memory: dict[str, object] = {"refund_limit": 100, "tickets": {}}
    snapshot = copy.deepcopy(memory)
    seq, ts = 0, time.time_ns() - 10**12
    ids, workspaces = [], []
    for n in range(6):
        events = []
        for _k in range(4):
            seq, ts = seq + 1, ts + 10**9
            if seq == 15:
                events.append({"seq": seq, "ts": ts, "kind": "memory.set", "path": ["refund_limit"], "value": 5000})
                memory["refund_limit"] = 5000
            else:
                events.append({"seq": seq, "ts": ts, "kind": "memory.set", "path": ["tickets", f"T-{seq}"], "value": "answered"})
                memory["tickets"][f"T-{seq}"] = "answered"  # type: ignore[index]
        state = {"notes.md": f"notes after batch {n}\n"}
        if memory["refund_limit"] != 100:
            state["refunds.csv"] = "order,amount\n" + "".join(f"A-{i},4000\n" for i in range(n))
        for p in work.iterdir():
            p.unlink()
        for fname, content in state.items():
            (work / fname).write_text(content)
        doc = {"memory": snapshot, "plan": [], "tools": [], "events": events}
        r = ckptcli.take(
            store, doc, subject="agent:support-bot", blobs={"workspace": work}, labels={"events.seq": str(seq)}, message=f"batch {n}"
        )
        ids.append(r.hex)
        workspaces.append(state)
        snapshot = copy.deepcopy(memory)
    return Misbehaved(ids, workspaces, 15)


def test_agent_misbehaved(tmp_path: Path) -> None:
    fx = build_misbehaved(tmp_path)
    good, bad = fx.ids[2], fx.ids[3]
    run = run_page(
        "agent-misbehaved.md",
        tmp_path,
        known={"LAST_GOOD": good[:12], "FIRST_BAD": bad[:12], "BEFORE_BAD": (str(fx.bad_seq - 1), f"first bad event    #{fx.bad_seq} ")},
    )
    store = tmp_path / "srv" / "ckpt"
    # the page found the event
    assert f"event #{fx.bad_seq} memory.set" in run.output("ckpt log")
    assert f"first bad event    #{fx.bad_seq}" in run.output("ckpt bisect")
    # latest is the known-good checkpoint, the workspace holds its files
    r = refs(store)
    assert r["latest/agent/support-bot"] == good
    work = tmp_path / "srv" / "support-bot" / "work"
    assert {k: v.decode() for k, v in files(work).items()} == fx.workspaces[2]
    # the evidence is kept
    assert r["tags/incident-4711-good"] == good and r["tags/incident-4711-first-bad"] == bad
    assert r["branches/incident-4711-bad"] == fx.ids[-1]
    exported = tmp_path / "srv" / "incidents" / "4711-first-bad.ckpt"
    assert ckptcli.open_checkpoint(str(exported)).hex == bad
    # the fork holds the state just before the bad event
    fork = ckptcli.open_checkpoint("incident-4711-retry", ckptcli.open_store(store))
    assert fork.manifest.parents[0].hex() == bad
    assert '"refund_limit": 100' in run.output("ckpt show incident-4711-retry")
    assert '"T-14"' in run.output("ckpt show incident-4711-retry")


# -- 2. store-damaged ----------------------------------------------------------------------------------
@dataclass
class Damaged:
    ids: dict[str, str]
    etl_files: dict[str, bytes]
    packs: dict[str, Path]


def _new_pack(store_dir: Path, before: set[Path]) -> Path:
    (pack,) = set((store_dir / "packs").glob("*/*")) - before
    return pack


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def build_damaged(root: Path) -> Damaged:
    """workflow:etl (three takes of a data directory, each adding a file) and
    agent:support-bot (three turns). Last night, after etl's second take, the store was
    copied to /mnt/replica/ckpt; after its third, etl's latest was exported to
    /srv/backup/etl.ckpt; the bot's turns came after both. Then a byte flips in the data
    of each of etl's last two takes (its second's pack is in the replica, its third's only
    in the export) and in the memory of the bot's third turn (in no copy)."""
    import random
    import shutil

    rng = random.Random(4711)
    store_dir = root / "srv" / "ckpt"
    store = ckptcli.init_store(store_dir)
    work = root / "srv" / "etl" / "data"
    work.mkdir(parents=True)
    ids, packs = {}, {}
    for n in range(3):
        (work / f"part-{n}.csv").write_bytes(bytes(rng.getrandbits(8) for _ in range(3000)))
        before = set((store_dir / "packs").glob("*/*"))
        ids[f"etl{n}"] = ckptcli.take(store, {"memory": {"step": n}}, subject="workflow:etl", blobs={"data": work}, message=f"step {n}").hex
        packs[f"etl{n}"] = _new_pack(store_dir, before)
        if n == 1:
            shutil.copytree(store_dir, root / "mnt" / "replica" / "ckpt")
    (root / "srv" / "backup").mkdir(parents=True)
    ckptcli.export_checkpoint(ckptcli.open_checkpoint("workflow:etl", store), root / "srv" / "backup" / "etl.ckpt")
    for n in range(3):
        before = set((store_dir / "packs").glob("*/*"))
        doc = {"memory": {"turn": n, "notes": " ".join(f"note-{rng.random()}" for _ in range(40))}}
        ids[f"bot{n}"] = ckptcli.take(store, doc, subject="agent:support-bot", message=f"turn {n}").hex
        packs[f"bot{n}"] = _new_pack(store_dir, before)
    _flip(packs["etl1"], 1500)
    _flip(packs["etl2"], 1500)
    _flip(packs["bot2"], packs["bot2"].stat().st_size // 2)
    return Damaged(ids, files(work), packs)


def test_store_damaged(tmp_path: Path) -> None:
    fx = build_damaged(tmp_path)
    store_dir = tmp_path / "srv" / "ckpt"
    replica = tmp_path / "mnt" / "replica" / "ckpt"
    pack = str(fx.packs["etl1"].relative_to(store_dir))
    assert (replica / pack).is_file() and not (replica / fx.packs["etl2"].relative_to(store_dir)).exists()

    def copy_the_pack() -> None:
        (store_dir / pack).write_bytes((replica / pack).read_bytes())

    steps = damaged_page_part(None, "## A damaged manifest")  # steps 1 to 6: the damaged packs
    run = run_page("store-damaged.md", tmp_path, known={"PACK": pack}, human={"cp /mnt/replica/ckpt/$PACK": copy_the_pack}, page_text=steps)
    # the first verify named the checkpoints that need each damaged object
    first = run.results[0][1].stdout
    needed = {frozenset(m.split(", ")) for m in re.findall(r"damaged object .*needed by \d+ checkpoint\(s\): ([0-9a-f, ]+)\)", first)}
    etl1, etl2 = fx.ids["etl1"][:12], fx.ids["etl2"][:12]
    assert needed == {frozenset({etl1, etl2}), frozenset({etl2}), frozenset({fx.ids["bot2"][:12]})}
    # the pack copied from the replica is whole again
    assert (store_dir / pack).read_bytes() == (replica / pack).read_bytes()
    store = ckptcli.open_store(store_dir)
    # etl's data came back whole, in every checkpoint
    for n in range(3):
        out = tmp_path / "check" / str(n)
        ckptcli.open_checkpoint(fx.ids[f"etl{n}"], store).restore_blobs(out)
        assert files(out / "data") == {k: v for k, v in fx.etl_files.items() if int(k[5]) <= n}
    # the bot's damaged turn was rewritten without its memory, the original forgotten,
    # and latest points at the newest intact turn
    repaired = [m for m in (store.manifest(c) for c in store.manifest_ids()) if m.labels.get("repaired.from") == fx.ids["bot2"]]
    assert len(repaired) == 1 and repaired[0].labels["repaired.dropped"] == "memory"
    assert bytes.fromhex(fx.ids["bot2"]) not in set(store.manifest_ids())
    assert refs(store_dir)["latest/agent/support-bot"] == fx.ids["bot1"]
    # the damaged bytes are gone from the store: the pack of etl's third take (its
    # damaged object imported again elsewhere) was rewritten, the bot's deleted
    assert "no problems found" in run.output("ckpt verify --read-data")
    assert not fx.packs["etl2"].exists() and not fx.packs["bot2"].exists()


def damaged_page_part(start: str | None, end: str | None) -> str:
    """The text of store-damaged.md from the heading `start` (None: its top) to the heading
    `end` (None: its end): its sections are run each on a store damaged as it says."""
    text = (PAGES / "store-damaged.md").read_text()
    begin = text.index(start) if start else 0
    stop = text.index(end) if end else len(text)
    assert begin < stop
    return text[begin:stop]


def test_store_damaged_manifest(tmp_path: Path) -> None:
    """The page's "A damaged manifest": a file in manifests/ that is no manifest (its
    name the hash of its bytes), a tag naming it; no copy has it."""
    import hashlib

    store_dir = tmp_path / "srv" / "ckpt"
    store = ckptcli.init_store(store_dir)
    ids = [ckptcli.take(store, {"memory": {"turn": n}}, subject="agent:support-bot").hex for n in range(3)]
    junk = b"this is not msgpack"
    bad = hashlib.sha256(junk).hexdigest()
    (store_dir / "manifests" / bad).write_bytes(junk)
    store.set_tag("suspect", bytes.fromhex(bad))
    section = damaged_page_part("## A damaged manifest", "## A damaged config")
    run = run_page("store-damaged.md", tmp_path, page_text=f"```console\n$ export CKPT_STORE=/srv/ckpt\n```\n{section}")
    verifies = [proc.stdout for text, proc in run.results if text.startswith("ckpt verify")]
    assert f"damaged manifest manifests/{bad}" in verifies[0] and "no problems found" in verifies[-1]
    assert (store_dir / "manifests").is_dir() and not (store_dir / "manifests" / bad).exists()
    assert "no problems found" in run.output("ckpt verify")
    assert sorted(p.name for p in (store_dir / "manifests").iterdir()) == sorted(ids)
    assert "tags/suspect" not in refs(store_dir)


def test_store_damaged_config(tmp_path: Path) -> None:
    """The page's "A damaged config", no copy of it: a new config from `ckpt init`."""
    store_dir = tmp_path / "srv" / "ckpt"
    store = ckptcli.init_store(store_dir)
    ids = [ckptcli.take(store, {"memory": {"turn": n}}, subject="agent:support-bot").hex for n in range(2)]
    (store_dir / "config").write_bytes(b"garbage")

    def copy_config() -> None:
        (store_dir / "config").write_bytes((tmp_path / "srv" / "fresh" / "config").read_bytes())

    section = damaged_page_part("## A damaged config", "## A damaged ref")
    page = f"```console\n$ export CKPT_STORE=/srv/ckpt\n```\n{section}"
    run = run_page("store-damaged.md", tmp_path, page_text=page, human={"cp /srv/fresh/config": copy_config})
    verifies = [proc for text, proc in run.results if text.startswith("ckpt verify")]
    assert "A damaged config" in verifies[0].stderr and "no problems found" in verifies[-1].stdout
    store = ckptcli.open_store(store_dir)
    assert sorted(c.hex() for c in store.manifest_ids()) == sorted(ids)
    assert ckptcli.open_checkpoint("agent:support-bot", store).state() == {"memory": {"turn": 1}}
    ckptcli.take(store, {"memory": {"turn": 2}}, subject="agent:support-bot")


# -- 3. migration-failed -------------------------------------------------------------------------------
BROKEN_SPLIT = """    first, _, last = state["memory"]["user"].partition(" ")"""
FIXED_SPLIT = """    first, _, last = (state["memory"]["user"] or "").partition(" ")"""


@dataclass
class Migration:
    ids: list[str]
    app: Path


def build_migration(root: Path) -> Migration:
    """The app's checkout at /srv/app: myapp/migrations.py (schema 3: the release's new
    step 2->3 splits memory.user, and breaks on an anonymous user, None), myapp/state.py
    (the adapter), myapp/orders.py (a recorded agent's step function). The store holds
    agent:support-bot at schema 1, 2, and 2 with an anonymous user (its latest), and
    agent:orders-bot recorded by a real Recorder running myapp.orders.step."""
    import importlib.util

    from ckptcli.history.recorder import CheckpointPolicy, Recorder

    app = root / "srv" / "app"
    (app / "myapp").mkdir(parents=True)
    (app / "myapp" / "__init__.py").write_text("")
    migrations = (REPO / "tests" / "schema_example" / "migrations.py").read_text()
    assert BROKEN_SPLIT in migrations
    (app / "myapp" / "migrations.py").write_text(migrations)
    (app / "myapp" / "state.py").write_text((REPO / "tests" / "schema_example" / "state.py").read_text())
    (app / "myapp" / "orders.py").write_text((REPO / "tests" / "replay_example" / "agent.py").read_text())
    store = ckptcli.init_store(root / "srv" / "ckpt")
    bot = "agent:support-bot"
    ids = [
        ckptcli.take(
            store, {"memory": {"notes": "refund promised", "user": "Ada Lovelace"}, "plan": ["check order"]}, subject=bot, schema_version=1
        ).hex,
        ckptcli.take(
            store,
            {"memory": {"scratchpad": "asked for the order", "user": "Grace Hopper"}, "plan": ["answer"]},
            subject=bot,
            schema_version=2,
        ).hex,
        ckptcli.take(store, {"memory": {"scratchpad": "anonymous chat", "user": None}, "plan": []}, subject=bot, schema_version=2).hex,
    ]
    spec = importlib.util.spec_from_file_location("runbook_orders", app / "myapp" / "orders.py")
    assert spec is not None and spec.loader is not None
    orders = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(orders)
    rec = Recorder.open(
        store, "agent:orders-bot", root / "orders.journal", tools=orders.TOOLS, policy=CheckpointPolicy(risky_tools={"payments.refund"})
    )
    for text in ("where is A-1", "and where is A-2"):
        rec.step(orders.step, "message.append", message={"role": "user", "content": text}, sender="user")
    rec.checkpoint(message="end of the conversation")
    rec.close()
    return Migration(ids, app)


def test_migration_failed(tmp_path: Path) -> None:
    fx = build_migration(tmp_path)
    store_dir = tmp_path / "srv" / "ckpt"
    before = refs(store_dir)

    def fix_the_migration() -> None:
        path = fx.app / "myapp" / "migrations.py"
        path.write_text(path.read_text().replace(BROKEN_SPLIT, FIXED_SPLIT))
        # the page's commands up to here changed no ref
        assert refs(store_dir) == before

    run = run_page("migration-failed.md", tmp_path, known={"BAD": fx.ids[2][:12]}, human={"vi myapp/migrations.py": fix_the_migration})
    report = run.results[0][1].stdout
    assert re.search(rf"incompatible +{fx.ids[2][:12]}.*raised AttributeError", report)
    assert (fx.app / "compat.xml").read_text().count("<testcase") == 3
    store = ckptcli.open_store(store_dir)
    # the migration was written (schema 3, its parent the old latest), and latest is back
    # on the schema-2 checkpoint the rolled-back code reads
    migrated = [ckptcli.open_checkpoint(c.hex(), store) for c in store.manifest_ids()]
    v3 = [c for c in migrated if c.manifest.schema_version == 3]
    assert len(v3) == 1 and v3[0].manifest.parents[0].hex() == fx.ids[2]
    assert v3[0].state()["memory"]["user"] == {"first": "", "last": ""}
    assert refs(store_dir)["latest/agent/support-bot"] == fx.ids[2]
    assert "check passed" in run.output("--check")


# -- 4. locked-or-full ---------------------------------------------------------------------------------
HOLDER = '''"""A nightly job that took the store lock and hangs (the runbook's culprit)."""
import sys, time
import ckptcli
store = ckptcli.open_store(sys.argv[1])
with store.backend.lock("store", shared=False):
    print("holding", flush=True)
    time.sleep(600)
'''


@dataclass
class Full:
    ids: list[str]
    holder: subprocess.Popen[str]


def build_full(root: Path) -> Full:
    """agent:support-bot with 12 checkpoints of a 64 KiB workspace file each (all
    different), the third tagged incident-4711-good; and a job holding the store lock."""
    store_dir = root / "srv" / "ckpt"
    store = ckptcli.init_store(store_dir)
    work = root / "srv" / "support-bot" / "work"
    work.mkdir(parents=True)
    ids = []
    for n in range(12):
        (work / "scratch.bin").write_bytes(os.urandom(64 * 1024))
        ids.append(ckptcli.take(store, {"memory": {"turn": n}}, subject="agent:support-bot", blobs={"workspace": work}).hex)
    store.set_tag("incident-4711-good", bytes.fromhex(ids[2]))
    script = root / "srv" / "app" / "nightly_compact.py"
    script.parent.mkdir(parents=True)
    script.write_text(HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), str(store_dir)], stdout=subprocess.PIPE, text=True, cwd=root)
    assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
    return Full(ids, holder)


def test_locked_or_full(tmp_path: Path) -> None:
    fx = build_full(tmp_path)
    store_dir = tmp_path / "srv" / "ckpt"
    try:

        def holder_is_the_named_one() -> None:
            assert fx.holder.poll() is None

        def kill_it() -> None:
            fx.holder.terminate()
            fx.holder.wait(30)

        run = run_page(
            "locked-or-full.md",
            tmp_path,
            known={"PID": (str(fx.holder.pid), f"(pid {fx.holder.pid} on host ")},
            human={"ps -p": holder_is_the_named_one, "kill $PID": kill_it, "df -h": lambda: None},
        )
    finally:
        if fx.holder.poll() is None:
            fx.holder.kill()
        fx.holder.communicate()
    notice = run.results[0][1].stderr
    assert f"nightly_compact.py {store_dir} (pid {fx.holder.pid} on host " in notice and "since " in notice
    doctor = run.results[1][1].stdout  # names the same holder, without waiting
    assert f"held exclusively by nightly_compact.py {store_dir} (pid {fx.holder.pid} on host " in doctor
    # prune kept the five newest and the tagged one; latest did not move
    store = ckptcli.open_store(store_dir)
    left = {c.hex() for c in store.manifest_ids()}
    assert left == set(fx.ids[-5:]) | {fx.ids[2]}
    r = refs(store_dir)
    assert r["latest/agent/support-bot"] == fx.ids[-1] and r["tags/incident-4711-good"] == fx.ids[2]
    # the space was given back: six of twelve 64 KiB files are gone from the packs
    packs = sum(p.stat().st_size for p in (store_dir / "packs").rglob("*") if p.is_file())
    assert packs < 7 * 64 * 1024


# -- 5. host-lost --------------------------------------------------------------------------------------
GRAPH_MODULE = '''"""The app's LangGraph graph (the support graph of the saver's tests)."""
from tests.langgraph_graphs import support_builder

builder = support_builder()
'''


@dataclass
class Lost:
    bot: list[str]
    workspace: dict[str, bytes]
    thread_latest: str


def build_lost(root: Path) -> Lost:
    """The lost host's store (outside /srv and /mnt: the page never sees it) held
    agent:support-bot (three checkpoints of a workspace) and the LangGraph thread
    support-42, paused at its human-approval interrupt. Last night's copy of the store
    (/mnt/replica/ckpt) has the bot's first two checkpoints only; the hourly exports
    (/mnt/backup/*.ckpt) have each subject's latest. The app's checkout is /srv/app."""
    import shutil

    from ckptcli.adapters.langgraph.saver import CkptSaver
    from tests.langgraph_graphs import ask, support_builder

    lost = root / "lost-host" / "ckpt"
    store = ckptcli.init_store(lost)
    work = root / "lost-host" / "support-bot" / "work"
    (work / "src").mkdir(parents=True)
    bot = []
    for n in range(3):
        (work / "src" / "reply.py").write_text(f"DRAFT = {n}\n")
        (work / f"ticket-{n}.md").write_text(f"ticket {n}\n")
        bot.append(ckptcli.take(store, {"memory": {"turn": n}}, subject="agent:support-bot", blobs={"workspace": work}).hex)
        if n == 1:
            shutil.copytree(lost, root / "mnt" / "replica" / "ckpt")
    with CkptSaver.open(lost) as saver:
        graph = support_builder().compile(checkpointer=saver)
        out = graph.invoke(ask("A-1001", 0), {"configurable": {"thread_id": "support-42"}})
        assert out["__interrupt__"]
    backup = root / "mnt" / "backup"
    backup.mkdir(parents=True)
    st = ckptcli.open_store(lost)
    ckptcli.export_checkpoint(ckptcli.open_checkpoint("agent:support-bot", st), backup / "support-bot.ckpt")
    thread = ckptcli.open_checkpoint("agent:support-42", st)
    ckptcli.export_checkpoint(thread, backup / "support-42.ckpt")
    app = root / "srv" / "app" / "myapp"
    app.mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "graph.py").write_text(GRAPH_MODULE)
    return Lost(bot, files(work), thread.hex)


def test_host_lost(tmp_path: Path) -> None:
    fx = build_lost(tmp_path)
    store_dir = tmp_path / "srv" / "ckpt"

    def copy_the_replica() -> None:
        import shutil

        shutil.copytree(tmp_path / "mnt" / "replica" / "ckpt", store_dir)

    run = run_page("host-lost.md", tmp_path, human={"cp -a /mnt/replica/ckpt /srv/ckpt": copy_the_replica})
    r = refs(store_dir)
    # each subject's latest is the newest any copy had
    assert r["latest/agent/support-bot"] == fx.bot[-1]
    assert fx.bot[-1][:12] in run.output("ckpt refs")
    # the bot's history: two checkpoints from the copy, the newest from the export
    store = ckptcli.open_store(store_dir)
    assert set(fx.bot) <= {c.hex() for c in store.manifest_ids()}
    # the workspace is back, at the new path, byte for byte
    assert files(tmp_path / "srv" / "support-bot" / "restored" / "workspace") == fx.workspace
    assert (tmp_path / "srv" / "support-bot" / "state.json").read_text().strip().startswith("{")
    # the LangGraph thread resumed from the imported checkpoint and finished its run
    out = run.results[-1][1].stdout
    assert "('approve',)" in out and "Your order is lost in transit." in out
    thread = ckptcli.open_checkpoint("agent:support-42", store)
    assert thread.manifest.created_ns > ckptcli.open_checkpoint(fx.thread_latest, store).manifest.created_ns


# -- the pages as a set, and the runner itself ---------------------------------------------------------
def test_every_runbook_is_tested_and_linked() -> None:
    on_disk = sorted(p.name for p in PAGES.glob("*.md") if p.name != "README.md")
    assert on_disk == sorted(RUNBOOKS)
    index = (PAGES / "README.md").read_text()
    readme = (REPO / "README.md").read_text()
    for name in RUNBOOKS:
        assert f"]({name})" in index, name
        assert f"](docs/runbooks/{name})" in readme, name


def _options(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b", help_text.split("Options:", 1)[1]))


@pytest.mark.parametrize("name", RUNBOOKS)
def test_every_option_on_the_page_exists(name: str) -> None:
    """Each `--option` of each `$ ckpt` line is one its command's help lists (a cheap
    check of every line; running the page checks what they do)."""
    from ckptcli.cli import docgen

    helps = docgen.command_help()
    for line in console_lines((PAGES / name).read_text()):
        words = shlex.split(line.text, comments=True)
        if words[0] != "ckpt":
            continue
        cmd = words[1]
        assert cmd in helps, f"{name}:{line.lineno}: no command ckpt {cmd}"
        known = _options(helps[cmd]) | _options(helps[""])
        for word in words[2:]:
            if word.startswith("-") and not re.fullmatch(r"-\d+", word):
                assert word.split("=", 1)[0] in known, f"{name}:{line.lineno}: ckpt {cmd} has no option {word}"


@pytest.mark.parametrize("name", RUNBOOKS)
def test_a_misspelt_option_fails_the_page(name: str, tmp_path: Path) -> None:
    """The runner is not fooled: the page with its first option misspelt fails at that
    line, with the usage error's exit status."""
    text = mutate_first_flag((PAGES / name).read_text())
    (tmp_path / "srv" / "app").mkdir(parents=True)  # where migration-failed.md cds first
    with pytest.raises(AssertionError, match=r"exit 2, the page says"):
        run_page(name, tmp_path, page_text=text, human={"": lambda: None})

"""The adapter contract (ckptcli/adapters/base.py) and its registry: every built-in adapter
and a third party's, installed by entry point (tests/adapter_plugin), pass the conformance
suite (tests/adapter_suite.py); the third party's shows up in `ckpt doctor`, `ckpt import`
and `ckpt capture` run as real subprocesses; a broken one is one line, not a crash."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli import plugins
from ckptcli.adapters import registry
from ckptcli.adapters.base import Adapter, Availability, Importer, NotSupported, Option
from ckptcli.errors import ExitCode, InvalidInputError, UsageError
from tests.adapter_suite import CHECKS, AdapterCase
from tests.conftest import REPO, run_ckpt

PLUGIN = Path(__file__).resolve().parent / "adapter_plugin"


@dataclass
class Agent:
    notes: dict[str, Any] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)


def load_memory(state: dict[str, Any]) -> Agent:
    """A project's validator (`ckpt compat --validator`): the state into its objects."""
    return Agent(notes=dict(state["memory"]))


def _same_agent(original: Agent, restored: Agent) -> None:
    assert restored == original and restored is not original


def _same_files(original: Path, restored: Path) -> None:
    assert sorted(p.name for p in restored.iterdir()) == ["a.txt", "b.bin"]  # "skip.me" was left out
    for name in ("a.txt", "b.bin"):
        assert (restored / name).read_bytes() == (original / name).read_bytes()


def _a_directory(tmp: Path) -> Path:
    d = tmp / "work"
    d.mkdir()
    (d / "a.txt").write_text("alpha\n")
    (d / "b.bin").write_bytes(bytes(range(256)) * 40)
    (d / "skip.me").write_text("not this\n")
    return d


#: the programs the process case started; the autouse fixture below ends them
_CHILDREN: list[subprocess.Popen[bytes]] = []


def _a_process(tmp: Path) -> str:
    """A running program (its PID, as the CLI gives it) that keeps its state in job.state."""
    (tmp / "job.state").write_bytes(b"step=41\n" + bytes(range(256)) * 8)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], cwd=tmp)
    _CHILDREN.append(child)
    return str(child.pid)


def _same_state(original: str, restored: dict[str, Any]) -> None:
    assert restored["blobs"] == ["state0"], restored
    assert (Path(restored["target"]) / "state0").read_bytes() == Path(restored["paths"]["state0"]).read_bytes()


@pytest.fixture(autouse=True)
def _end_children() -> Any:
    yield
    while _CHILDREN:
        child = _CHILDREN.pop()
        child.kill()
        child.wait()


def _empty_dir(tmp: Path) -> Path:
    d = tmp / "restored"
    d.mkdir()
    return d


_TEMPORAL_STATE: dict[str, Any] = {
    "tools": [{"call_id": "1", "tool": "say_hello", "args": "x", "status": "pending", "seq": 5, "ts": 0}],
    "ext": {
        "temporal": {
            "activities": {"5": {"activity_id": "1", "type": "say_hello", "status": "started"}},
            "timers": {"t1": {"status": "started"}},
        }
    },
}


def _temporal_event(name: str) -> dict[str, Any]:
    """A history event of type `name` whose attributes point at the activity and timer of _TEMPORAL_STATE."""
    attrs = {"scheduledEventId": "5", "timerId": "t1", "initiatedEventId": "7", "activityId": "1", "activityType": {"name": "say_hello"}}
    key = name[0].lower() + name[1:] + "EventAttributes"
    return {"eventId": "9", "eventTime": "2026-01-01T00:00:00Z", "eventType": name, key: attrs}


CASES = {
    "generic": AdapterCase(
        "generic",
        target=lambda tmp: Agent(notes={"user": "ada", "n": 3}, steps=["plan", "act"]),
        options={"memory": ("notes",), "plan": ("steps",)},
        restore_target=lambda tmp: Agent(),
        same=_same_agent,
    ),
    "langgraph": AdapterCase(
        "langgraph",
        events=[("langgraph:write", {"channel": "count", "value": 2, "type": "null"}, {"memory": {"count": 1}})],
    ),
    "compat": AdapterCase(
        "compat",
        options={"validator": "tests.test_adapters:load_memory"},
        document={"memory": {"v": 7}},
        restored=lambda got: assert_agent(got, {"v": 7}),
    ),
    "process": AdapterCase(
        "process",
        target=_a_process,
        options_for=lambda tmp: {"state": (tmp / "job.state",), "freeze": "none"},
        restore_target=_empty_dir,
        same=_same_state,
        events=[
            ("process:start", {"pid": 4242, "argv": ["python", "job.py"], "attempt": 1, "restored": None}, {}),
            ("process:exit", {"pid": 4242, "code": None, "signal": "SIGKILL", "uptime_seconds": 2.5}, {}),
            ("process:checkpoint", {"reason": "schedule", "consistency": "crash", "how": "sigstop", "take_seconds": 0.2}, {}),
            ("process:restart", {"attempt": 2, "delay_seconds": 0.5, "from": "ab" * 32}, {}),
            ("process:bad", {"checkpoint": "cd" * 32, "failures": 3}, {}),
        ],
    ),
    "temporal": AdapterCase(
        "temporal",
        # one event of each Temporal event type, on a state that has run an activity and a timer
        events=[
            (f"temporal:{name}", {"event": _temporal_event(name)}, _TEMPORAL_STATE)
            for name in __import__("ckptcli.adapters.temporal.events", fromlist=["EVENT_TYPES"]).EVENT_TYPES
        ],
    ),
    "dirsnap": AdapterCase(
        "dirsnap",
        target=_a_directory,
        options={"skip": ("skip.me",)},
        restore_target=_empty_dir,
        same=_same_files,
        events=[("dirsnap:touched", {"path": "a.txt"}, {"memory": {}})],
    ),
}


def assert_agent(got: Any, notes: dict[str, Any]) -> None:
    assert got == Agent(notes=notes)


@pytest.fixture
def third_party(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test package installed: its directory (module and .dist-info) on sys.path."""
    monkeypatch.syspath_prepend(str(PLUGIN))


def test_the_builtin_adapters_are_the_cases_and_the_third_party_is_not_builtin() -> None:
    assert set(plugins.BUILTIN[plugins.ADAPTERS]) == {"generic", "langgraph", "compat", "process", "temporal"} == set(CASES) - {"dirsnap"}
    assert "dirsnap" not in registry.names()  # installed only by the fixture below


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_adapter_passes_the_conformance_suite(name: str, check: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if name == "dirsnap":
        monkeypatch.syspath_prepend(str(PLUGIN))
    check(CASES[name], tmp_path)


# -- the contract ----------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [Adapter, Importer])
def test_every_method_of_the_contract_says_its_args_returns_and_raises(cls: type) -> None:
    for name, fn in inspect.getmembers(cls, predicate=lambda f: inspect.isfunction(f) or inspect.ismethod(f)):
        if name.startswith("_"):
            continue
        doc = inspect.getdoc(fn) or ""
        takes = [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]
        assert "Returns:" in doc and "Raises:" in doc, f"{cls.__name__}.{name}"
        if takes:
            assert "Args:" in doc, f"{cls.__name__}.{name} takes {takes}"


def test_what_an_adapter_does_not_do_is_a_usage_error_saying_what_it_does(tmp_path: Path) -> None:
    lg = registry.adapter("langgraph")
    with pytest.raises(NotSupported) as caught:
        lg.capture("anything")
    assert caught.value.exit_code == ExitCode.USAGE
    assert caught.value.message == "the langgraph adapter does not capture"
    assert caught.value.hint == "the langgraph adapter offers: ckpt import langgraph"


def test_an_undeclared_option_is_refused_naming_the_declared_ones(tmp_path: Path) -> None:
    store = ckptcli.init_store(tmp_path / "s")
    with pytest.raises(UsageError) as caught:
        registry.adapter("generic").take(store, Agent(), subject="agent:a", memroy=("notes",))
    assert "the generic adapter has no option 'memroy'" in str(caught.value) and "--memory" in (caught.value.hint or "")
    assert store.manifest_ids() == []


def test_option_declarations_are_checked() -> None:
    assert Option("ok_name", "Fine.", int, 1).problems() == []
    assert Option("Bad-Name", "x").problems() == ["option name 'Bad-Name' is not a lower-case identifier"]
    assert Option("x", "two\nlines").problems() == ["option 'x' needs a one-line help"]
    assert Option("x", "X.", dict).problems() == ["option 'x' has type 'dict', not one of str, int, float, bool, Path"]
    assert Option("x", "X.", str, None, multiple=True).problems() == ["option 'x' is multiple: its default must be a tuple"]
    assert Option("dry_run", "X.", bool, False).flag == "--dry-run"
    assert Option("no_color", "X.", bool, False).problems() == ["option 'no_color' would be --no-color, a flag of ckpt itself"]


def test_the_generic_adapter_behind_the_contract_captures_what_agentadapter_does(tmp_path: Path) -> None:
    from ckptcli.adapters.generic import AgentAdapter

    agent = Agent(notes={"token": "secret-value", "k": 1}, steps=["a"])
    by_contract = registry.adapter("generic").capture(agent, memory=("notes",), plan=("steps",))
    doc, labels = AgentAdapter(memory="notes", plan="steps").capture(agent)
    assert (by_contract.document, by_contract.labels, by_contract.blobs) == (doc, labels, {})


# -- the registry ----------------------------------------------------------------------------------
def test_names_are_listed_without_importing_any_adapter() -> None:
    code = (
        "import sys; from ckptcli.adapters import registry; print(registry.names()); "
        "print(sorted(m for m in sys.modules if m in ('ckptcli.adapters.compat', 'ckptcli.adapters.langgraph.adapter', "
        "'ckptcli.adapters.generic', 'ckptcli.adapters.langgraph', 'ckptcli.adapters.process', 'ckptcli.adapters.temporal', "
        "'ckpt_dirsnap')))"
    )
    env = {"PYTHONPATH": str(PLUGIN)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True).stdout
    assert out.splitlines() == ["['compat', 'dirsnap', 'generic', 'langgraph', 'process', 'temporal']", "[]"]


def test_an_unknown_adapter_is_a_usage_error_listing_the_installed_ones() -> None:
    with pytest.raises(UsageError) as caught:
        registry.adapter("nope")
    assert caught.value.message == "no adapter named 'nope' is installed"
    assert "installed: compat, generic, langgraph, process" in (caught.value.hint or "")


def _installed(monkeypatch: pytest.MonkeyPatch, **found: str) -> None:
    real = plugins._installed
    monkeypatch.setattr(plugins, "_installed", lambda group: list(found.items()) if group == plugins.ADAPTERS else real(group))


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("ckpt_no_such_module_here:Thing", "of the group ckptcli.adapters failed: ModuleNotFoundError"),
        ("json:dumps", "is a function, not a subclass of ckptcli.adapters.base.Adapter"),
        ("tests.test_adapters:Abstract", "does not implement available"),
        ("tests.test_adapters:WrongKind", "is malformed: its kind 'robot' is none of agent, workflow, process"),
    ],
)
def test_an_adapter_that_does_not_load_or_is_malformed_is_one_line(monkeypatch: pytest.MonkeyPatch, value: str, says: str) -> None:
    _installed(monkeypatch, thirdparty=value)
    with pytest.raises(InvalidInputError) as caught:
        registry.adapter("thirdparty")
    assert says in str(caught.value) and "\n" not in str(caught.value)
    (status,) = registry.survey(["thirdparty"])
    assert not status.loaded and not status.ok and says in status.availability.reason
    # the others still load
    assert [s.name for s in registry.survey() if s.loaded] == ["compat", "generic", "langgraph", "process", "temporal"]


class Abstract(Adapter):
    """Declares everything but available()."""

    name = "abstract"
    kind = "agent"
    summary = "nothing"


class WrongKind(Adapter):
    """A kind that is none of ckpt's."""

    name = "wrongkind"
    kind = "robot"
    summary = "nothing"

    @classmethod
    def available(cls) -> Availability:
        return Availability(True)


def test_an_importer_is_found_by_format_or_adapter_and_format(third_party: None) -> None:
    assert registry.find_importer("langgraph")[0] == "langgraph"
    assert registry.find_importer("dirsnap-json")[0] == "dirsnap"
    assert registry.find_importer("dirsnap:dirsnap-json")[0] == "dirsnap"
    with pytest.raises(UsageError) as caught:
        registry.find_importer("nope")
    assert caught.value.hint is not None and caught.value.hint.startswith("installed importers: dirsnap-json, langgraph, temporal;")


# -- the third party through a real `ckpt` ------------------------------------------------------
def _env(*dirs: Path) -> dict[str, str]:
    return {"PYTHONPATH": ":".join(str(d) for d in dirs)}


def _broken(tmp_path: Path) -> Path:
    """A package whose adapter's module raises on import."""
    d = tmp_path / "broken"
    (d / "ckpt_broken-1.0.dist-info").mkdir(parents=True)
    (d / "ckpt_broken-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: ckpt-broken\nVersion: 1.0\n")
    (d / "ckpt_broken-1.0.dist-info" / "entry_points.txt").write_text("[ckptcli.adapters]\nbroken = ckpt_broken:Broken\n")
    (d / "ckpt_broken.py").write_text("import ckpt_dependency_that_is_not_installed\n")
    return d


def test_a_third_party_adapter_shows_up_in_doctor_and_import_and_captures(tmp_path: Path) -> None:
    env = _env(PLUGIN)
    assert run_ckpt("init", cwd=tmp_path, env=env).returncode == 0
    doctor = run_ckpt("doctor", "--json", cwd=tmp_path, env=env)
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    (mine,) = [a for a in report["adapters"] if a["name"] == "dirsnap"]
    assert mine | {"details": None} == {
        "name": "dirsnap",
        "entry_point": "ckpt_dirsnap:DirSnap",
        "loaded": True,
        "kind": "workflow",
        "summary": "a directory a workflow writes, its files taken as blobs with their listing",
        "importers": ["dirsnap-json"],
        "ok": True,
        "reason": "needs nothing",
        "details": None,
    }
    assert {"name": "adapter dirsnap", "status": "ok", "detail": "workflow: needs nothing; imports dirsnap-json", "hint": ""} in report[
        "checks"
    ]

    helped = run_ckpt("import", "--help", cwd=tmp_path, env=env).stdout.decode()
    assert "dirsnap-json SOURCE" in helped and "(adapter dirsnap)" in helped and "--workflow NAME" in helped
    assert "langgraph SOURCE" in helped and "--thread ID" in helped

    listing = tmp_path / "listing.json"
    listing.write_text(json.dumps({"files": {"a.txt": "alpha"}}))
    imported = run_ckpt("import", "dirsnap-json", listing, "--workflow", "nightly", "--json", cwd=tmp_path, env=env)
    assert imported.returncode == 0, imported.stderr
    got = json.loads(imported.stdout)
    assert got["files"] == 1
    shown = json.loads(run_ckpt("show", got["id"], "--json", cwd=tmp_path, env=env).stdout)
    assert shown["subject"] == "workflow:nightly"

    work = _a_directory(tmp_path)
    cap = run_ckpt("capture", "dirsnap", work, "--skip", "skip.me", "--subject", "workflow:w", "--json", cwd=tmp_path, env=env)
    assert cap.returncode == 0, cap.stderr
    took = json.loads(cap.stdout)
    assert took["adapter"] == "dirsnap" and took["subject"] == "workflow:w"
    assert took["labels"] == {"adapter": "dirsnap", "dirsnap.files": "2"}
    out = tmp_path / "out"
    assert run_ckpt("restore", took["id"], "--blobs", out, "--no-state", cwd=tmp_path, env=env).returncode == 0
    _same_files(work, out)


def test_capture_takes_labels_and_a_message_as_take_does(tmp_path: Path) -> None:
    """`ckpt capture` had no --label or -m: an incident capture could not be marked."""
    env = _env(PLUGIN)
    assert run_ckpt("init", cwd=tmp_path, env=env).returncode == 0
    work = _a_directory(tmp_path)
    cap = run_ckpt(
        "capture", "dirsnap", work, "--skip", "skip.me", "-S", "workflow:w", "-l", "incident=INC-7", "--label", "adapter=other",
        "-m", "before the restart", "--json", cwd=tmp_path, env=env,
    )  # fmt: skip
    assert cap.returncode == 0, cap.stderr
    took = json.loads(cap.stdout)
    assert took["labels"] == {"adapter": "dirsnap", "dirsnap.files": "2", "incident": "INC-7"}  # the adapter label is the adapter's
    shown = json.loads(run_ckpt("show", took["id"], "--json", cwd=tmp_path, env=env).stdout)
    assert shown["message"] == "before the restart"
    bad = run_ckpt("capture", "dirsnap", work, "-S", "workflow:w", "-l", "no-equals", cwd=tmp_path, env=env)
    assert bad.returncode == ExitCode.INVALID_INPUT and bad.stderr.count(b"\n") == 1, bad.stderr
    assert len(json.loads(run_ckpt("ls", "--json", cwd=tmp_path, env=env).stdout)) == 1  # nothing taken by the refused one


def test_bad_input_to_a_third_party_importer_or_capture_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    env = _env(PLUGIN)
    run_ckpt("init", cwd=tmp_path, env=env)
    (tmp_path / "bad.json").write_text("{not json")
    cases = [
        (("import", "dirsnap-json", tmp_path / "bad.json"), ExitCode.INVALID_INPUT, "is not JSON"),
        (("import", "dirsnap-json", tmp_path / "gone.json"), ExitCode.NOT_FOUND, "does not exist"),
        (("import", "dirsnap-json", tmp_path / "bad.json", "--wrokflow", "x"), ExitCode.USAGE, "No such option: --wrokflow"),
        (("import", "dirsnap-json"), ExitCode.USAGE, "`ckpt import dirsnap-json` needs a JSON file"),
        (("import", "nope", "x"), ExitCode.USAGE, "no installed adapter imports 'nope'; installed importers: dirsnap-json, langgraph"),
        (("capture", "dirsnap", tmp_path / "gone", "-S", "workflow:w"), ExitCode.NOT_FOUND, "is not a directory"),
        (("capture", "dirsnap", tmp_path), ExitCode.USAGE, "ckpt capture needs --subject"),
        (("capture", "nope", "x", "-S", "workflow:w"), ExitCode.USAGE, "no adapter named 'nope' is installed; installed: compat, dirsnap"),
        (("capture", "langgraph", "x", "-S", "agent:w"), ExitCode.USAGE, "the langgraph adapter does not capture"),
    ]
    for args, code, says in cases:
        r = run_ckpt(*args, cwd=tmp_path, env=env)
        err = r.stderr.decode()
        assert r.returncode == code, (args, err)
        assert says in err and err.count("\n") == 1 and "Traceback" not in err, (args, err)
    assert json.loads(run_ckpt("ls", "--json", cwd=tmp_path, env=env).stdout) == []


def test_a_broken_third_party_adapter_is_one_line_in_doctor_not_a_crash(tmp_path: Path) -> None:
    env = _env(PLUGIN, _broken(tmp_path))
    run_ckpt("init", cwd=tmp_path, env=env)
    r = run_ckpt("doctor", cwd=tmp_path, env=env)
    out, err = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 1 and "Traceback" not in out + err
    (line,) = [ln for ln in out.splitlines() if "adapter broken" in ln]
    assert line.startswith("fail  adapter broken ")
    assert (
        "does not load: loading the entry point 'broken' (ckpt_broken:Broken) of the group ckptcli.adapters failed: ModuleNotFoundError"
        in line
    )
    assert "ok    adapter dirsnap " in out  # the others are still reported
    assert err.startswith("ckpt: error: 1 check(s) failed, first adapter broken: does not load") and err.count("\n") == 1
    # asked about a working one, the broken one does not matter; asked about it, it fails
    assert run_ckpt("doctor", "--adapter", "dirsnap", cwd=tmp_path, env=env).returncode == 0
    assert run_ckpt("doctor", "--adapter", "broken", cwd=tmp_path, env=env).returncode == 1
    # the commands that list adapters still work, and naming it is one line
    assert run_ckpt("import", "--help", cwd=tmp_path, env=env).returncode == 0
    cap = run_ckpt("capture", "broken", "x", "-S", "agent:a", cwd=tmp_path, env=env)
    assert cap.returncode == ExitCode.INVALID_INPUT and cap.stderr.decode().count("\n") == 1


_MISBEHAVING = """
import sys

from ckptcli.adapters.base import Adapter, Availability, Capture, Importer


class Fmt(Importer):
    name = "fmt"
    summary = "a format"

    def run(self, store, source, options, progress=None):
        return {}


class ExitingFmt(Importer):
    name = "exiting-fmt"
    summary = "a format whose importer calls sys.exit(0) when it runs"

    def run(self, store, source, options, progress=None):
        sys.exit(0)


class Base(Adapter):
    kind = "workflow"
    summary = "misbehaves"

    @classmethod
    def available(cls):
        return Availability(True, "needs nothing")


class Exits(Base):
    name = "exits"

    def importers(self):
        sys.exit(0)


class Raises(Base):
    name = "raises"

    def importers(self):
        raise RuntimeError("importers exploded")


class RunExits(Base):
    name = "runexits"

    def importers(self):
        return {"exiting-fmt": ExitingFmt()}


class CaptureExits(Base):
    name = "capexits"

    def capture(self, target, **options):
        sys.exit(0)


class BadOptions(Base):
    name = "badoptions"

    def importers(self):
        class Opts(Fmt):
            name = "opts-fmt"

            @property
            def options(self):
                sys.exit(0)

        return {"opts-fmt": Opts()}


class BadName(Base):
    name = "badname"

    def importers(self):
        return {"badname-fmt": Fmt()}
"""


def _misbehaving(tmp_path: Path) -> Path:
    """A third-party package whose adapters call sys.exit(0) or raise in their methods, and
    one registered under a name that is no adapter name."""
    d = tmp_path / "misbehaving"
    info = d / "ckpt_misbehaving-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ckpt-misbehaving\nVersion: 1.0\n")
    eps = {n: f"ckpt_misbehaving:{c}" for n, c in [("exits", "Exits"), ("raises", "Raises"), ("runexits", "RunExits")]}
    eps |= {
        "capexits": "ckpt_misbehaving:CaptureExits",
        "badoptions": "ckpt_misbehaving:BadOptions",
        "Bad_Name!": "ckpt_misbehaving:BadName",
    }
    (info / "entry_points.txt").write_text("[ckptcli.adapters]\n" + "".join(f"{n} = {v}\n" for n, v in eps.items()))
    (d / "ckpt_misbehaving.py").write_text(_MISBEHAVING)
    return d


def test_a_third_party_adapter_that_exits_or_raises_in_its_methods_is_one_line_and_a_failure(tmp_path: Path) -> None:
    env = _env(PLUGIN, _misbehaving(tmp_path))
    assert run_ckpt("init", cwd=tmp_path, env=env).returncode == 0
    (tmp_path / "x.json").write_text("{}")
    fix = "fix or remove the package that registers it"
    cases = [
        (("import", "exits:fmt", "x.json"), "the adapter 'exits': importers() failed: it called sys.exit(0); " + fix),
        (("import", "raises:fmt", "x.json"), "the adapter 'raises': importers() failed: RuntimeError: importers exploded; " + fix),
        (("import", "exiting-fmt", "x.json"), "the adapter 'runexits': the importer 'exiting-fmt': run() failed: it called sys.exit(0)"),
        (("import", "badoptions:opts-fmt", "x.json"), "the adapter 'badoptions': reading its importer failed: it called sys.exit(0)"),
        (("capture", "capexits", "x", "-S", "workflow:w"), "the adapter 'capexits': capture() failed: it called sys.exit(0)"),
        (
            ("capture", "Bad_Name!", "x", "-S", "workflow:w"),
            "the adapter entry point 'Bad_Name!' (ckpt_misbehaving:BadName) is malformed: its name is not lower-case letters",
        ),
        (("import", "Bad_Name!:badname-fmt", "x.json"), "the adapter entry point 'Bad_Name!' (ckpt_misbehaving:BadName) is malformed"),
    ]
    for args, says in cases:
        r = run_ckpt(*args, cwd=tmp_path, env=env)
        err = r.stderr.decode()
        assert r.returncode == ExitCode.INVALID_INPUT, (args, r.returncode, err)
        assert err.startswith("ckpt: error: " + says) and err.count("\n") == 1 and "Traceback" not in err, (args, err)
    assert json.loads(run_ckpt("ls", "--json", cwd=tmp_path, env=env).stdout) == []
    # the lists skip them, and the working adapters' importers are still there
    helped = run_ckpt("import", "--help", cwd=tmp_path, env=env)
    assert helped.returncode == 0 and "dirsnap-json SOURCE" in helped.stdout.decode()
    assert "badname-fmt" not in helped.stdout.decode() and "opts-fmt" not in helped.stdout.decode()
    helped = run_ckpt("capture", "--help", cwd=tmp_path, env=env)
    assert helped.returncode == 0 and "dirsnap TARGET" in helped.stdout.decode() and "Bad_Name!" not in helped.stdout.decode()
    # doctor: a failed row for each, the malformed name among them
    r = run_ckpt("doctor", cwd=tmp_path, env=env)
    out = r.stdout.decode()
    assert r.returncode == 1 and "Traceback" not in out + r.stderr.decode()
    rows = {ln.split()[2]: ln for ln in out.splitlines() if ln.startswith(("fail  adapter ", "warn  adapter ", "ok    adapter "))}
    assert rows["Bad_Name!"].startswith("fail  adapter Bad_Name! ")
    assert "is malformed: its name is not lower-case letters" in rows["Bad_Name!"]
    assert not rows["exits"].startswith("ok") and "importers() failed: it called sys.exit(0)" in rows["exits"]
    assert not rows["badoptions"].startswith("ok") and "reading its importer failed: it called sys.exit(0)" in rows["badoptions"]
    assert rows["dirsnap"].startswith("ok")
    assert run_ckpt("doctor", "--adapter", "Bad_Name!", cwd=tmp_path, env=env).returncode == 1
    assert run_ckpt("doctor", "--adapter", "dirsnap", cwd=tmp_path, env=env).returncode == 0


# -- doctor: asked about one adapter or backend ------------------------------------------------------
def _backend_package(where: Path, scheme: str, module: str, source: str | None) -> Path:
    """A package registering a backend for `scheme` in `module` (absent when `source` is None)."""
    info = where / f"ckpt_{scheme}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: ckpt-{scheme}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[ckptcli.backends]\n{scheme} = {module}:Backend\n")
    if source is not None:
        (where / f"{module}.py").write_text(source)
    return where


def test_doctor_answers_about_one_adapter_or_backend_by_its_exit_status(tmp_path: Path) -> None:
    # ftp:// needs a package that is not installed; bad:// names a module that is not there
    ftp = _backend_package(tmp_path / "ftp", "ftp", "ckpt_ftp", "import ckpt_ftp_dependency_not_installed\n")
    bad = _backend_package(tmp_path / "bad", "bad", "ckpt_bad_module_is_gone", None)
    env = _env(ftp, bad)
    # no store here: asked about an adapter or a backend, doctor does not look for one
    lg = run_ckpt("doctor", "--adapter", "langgraph", "--json", cwd=tmp_path, env=env)
    assert lg.returncode == 0, lg.stderr
    doc = json.loads(lg.stdout)
    assert [c["name"] for c in doc["checks"]] == ["adapter langgraph"]
    assert doc["adapters"][0]["details"] == {"langgraph-checkpoint": _version("langgraph-checkpoint")}
    asked = run_ckpt("doctor", "--backend", "ftp", "--json", cwd=tmp_path, env=env)
    assert asked.returncode == 1
    (row,) = json.loads(asked.stdout)["backends"]
    assert (row["state"], row["ok"]) == ("not installed", False)
    assert row["reason"].startswith(
        "the backend of ftp:// URLs is not installed (ModuleNotFoundError: No module named 'ckpt_ftp_dependency"
    )
    assert run_ckpt("doctor", "--backend", "bad", cwd=tmp_path, env=env).returncode == 1
    assert run_ckpt("doctor", "--backend", "file", "--backend", "memory", cwd=tmp_path, env=env).returncode == 0
    unknown = run_ckpt("doctor", "--backend", "gopher", cwd=tmp_path, env=env)
    assert unknown.returncode == 2
    assert "no backend is registered for gopher://; registered schemes: az, bad, file, ftp, gs, memory, s3" in unknown.stderr.decode()
    # in a full run an optional package not installed is said (ok); a broken package fails
    run_ckpt("init", cwd=tmp_path, env=env)
    full = run_ckpt("doctor", "--json", cwd=tmp_path, env=env)
    rows = {c["name"]: c for c in json.loads(full.stdout)["checks"]}
    assert rows["backend ftp://"]["status"] == "ok" and rows["backend ftp://"]["detail"].startswith("not installed: ")
    assert rows["backend bad://"]["status"] == "fail" and rows["backend bad://"]["detail"].startswith("broken: ")
    assert full.returncode == 1
    assert run_ckpt("doctor", cwd=tmp_path, env=_env(ftp)).returncode == 0


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def test_an_adapter_that_cannot_work_here_says_why_and_fails_when_asked_about(monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptcli import doctor
    from ckptcli.adapters.langgraph import adapter as lg

    real = lg.importlib.util.find_spec
    monkeypatch.setattr(lg.importlib.util, "find_spec", lambda name, *a: None if name.startswith("langgraph") else real(name, *a))
    assert lg.LangGraphAdapter.available() == Availability(
        False,
        "langgraph-checkpoint is not installed: pip install 'ckptcli[langgraph]'",
        {"langgraph-checkpoint": None, "missing": ["langgraph-checkpoint"]},
    )
    asked = doctor.run(None, adapters=["langgraph"])
    assert [(c.name, c.status) for c in asked.checks] == [("adapter langgraph", "fail")]
    assert "not usable here: agent: langgraph-checkpoint is not installed" in asked.checks[0].detail
    # in a full run an optional package not installed is said, not warned about (as the components)
    (row,) = [c for c in doctor.run(None).checks if c.name == "adapter langgraph"]
    assert (row.status, row.detail.split(":")[0]) == ("ok", "not installed")
    monkeypatch.setattr(lg, "_version", lambda dist: "3.9.1")
    monkeypatch.setattr(lg.importlib.util, "find_spec", real)
    assert lg.LangGraphAdapter.available().reason == "langgraph-checkpoint 3.9.1 is installed; CkptSaver is built for 4.x"


def test_doctor_reports_python_and_each_dependencys_version(tmp_path: Path) -> None:
    run_ckpt("init", cwd=tmp_path)
    r = run_ckpt("doctor", "--json", cwd=tmp_path)
    v = json.loads(r.stdout)["versions"]
    py = subprocess.run([sys.executable, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True)
    assert v["python"] == py.stdout.strip()
    for dist in ("typer", "rich", "textual", "msgpack", "deepdiff", "zstandard", "obstore", "langgraph-checkpoint", "temporalio"):
        assert v["packages"][dist] == _version(dist), dist
    text = run_ckpt("doctor", cwd=tmp_path).stdout.decode()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("ok    versions ")]
    assert f"typer {_version('typer')};" in line
    if _version("temporalio") is None:
        assert "temporalio not installed" in line


def test_compat_loads_its_validator_through_the_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptcli.adapters.compat import CompatAdapter

    calls: list[str] = []
    real = CompatAdapter.load

    def spy(spec: str) -> Any:
        calls.append(spec)
        return real(spec)

    monkeypatch.setattr(CompatAdapter, "load", staticmethod(spy))
    from ckptcli.cli.app import run

    store = ckptcli.init_store(tmp_path / "s")
    ckptcli.take(store, {"memory": {"v": 1}}, subject="agent:a", schema_version=1)
    code = run(
        ["compat", "--store", str(tmp_path / "s"), "--validator", "tests.test_adapters:load_memory", "--assume-version", "1", "--json"]
    )
    assert code == 0 and calls == ["tests.test_adapters:load_memory"]


class Sloppy(Adapter):
    """Breaks the contract where the suite looks: a reducer that changes its input, an
    importer that fails with a traceback's exception, a capture that is not a Capture."""

    name = "sloppy"
    kind = "agent"
    summary = "breaks the contract"

    @classmethod
    def available(cls) -> Availability:
        """Returns: ok. Raises: nothing."""
        return Availability(True)

    def capture(self, target: Any, **options: Any) -> Any:
        """A dict, not a Capture."""
        return {"memory": {}}

    def reducers(self) -> dict[str, Any]:
        """Returns: a reducer that appends to the state it was given."""

        def grow(state: Any, ev: Any) -> Any:
            state.setdefault("memory", {})["n"] = len(state["memory"])
            return state

        return {"sloppy:grow": grow}

    def importers(self) -> dict[str, Importer]:
        """Returns: an importer that raises ValueError."""
        return {"sloppy": SloppyImporter()}


class SloppyImporter(Importer):
    """Raises ValueError on every input."""

    name = "sloppy"
    summary = "raises"

    def run(self, store: Any, source: str, options: Any, progress: Any = None) -> dict[str, Any]:
        """Raises: ValueError."""
        raise ValueError("bad\nthing")


@pytest.mark.parametrize(
    ("check", "says"),
    [
        ("its_reducers_are_deterministic_and_change_no_input", "sloppy:grow: the reducer changed its input"),
        ("importers_refuse_bad_input_in_one_line", "bad\nthing"),
        ("capture_take_restore_round_trips", "an adapter that captures needs a target"),
        ("its_methods_say_what_they_take_return_and_raise", "Sloppy.capture does not say its Args and Returns"),
    ],
)
def test_the_suite_fails_an_adapter_that_breaks_the_contract(
    check: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tests.adapter_suite as suite

    _installed(monkeypatch, sloppy="tests.test_adapters:Sloppy")
    case = AdapterCase("sloppy", events=[("sloppy:grow", {}, {"memory": {"a": 1}})])
    with pytest.raises((AssertionError, ValueError)) as caught:
        getattr(suite, check)(case, tmp_path)
    assert says in str(caught.value)


def test_the_generic_adapter_captures_from_the_command_line_as_agentadapter_does(tmp_path: Path) -> None:
    from ckptcli.adapters.generic import AgentAdapter
    from ckptcli.api import open_checkpoint

    (tmp_path / "mybot.py").write_text(
        "class Bot:\n"
        "    def __init__(self):\n"
        "        self.notes = {'user': 'ada', 'api_key': 'sk-" + "A" * 24 + "'}\n"
        "        self.steps = ['look up', 'refund']\n"
        "BOT = Bot()\n"
    )
    env = {"REGION": "eu-1", "CRM_TOKEN": "t0k3n-value"}
    run_ckpt("init", cwd=tmp_path)
    r = run_ckpt(
        "capture", "generic", "mybot:BOT", "--memory", "notes", "--plan", "steps", "--env", "REGION", "--env", "CRM_TOKEN",
        "-S", "agent:bot", "--json", cwd=tmp_path, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    cid = json.loads(r.stdout)["id"]
    sys.path.insert(0, str(tmp_path))
    try:
        import mybot  # type: ignore[import-not-found]

        expected, labels = AgentAdapter(memory="notes", plan="steps", env=["REGION", "CRM_TOKEN"], environ=lambda: env).capture(mybot.BOT)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mybot", None)
    ck = open_checkpoint(cid, store_path=tmp_path / ".ckpt")
    assert ck.state() == expected
    assert expected["ext"]["ckpt.env"] == {"REGION": "eu-1", "CRM_TOKEN": "[REDACTED:secret-key]"}
    assert ck.manifest.labels == {"adapter": "generic", **labels}


class ImportersFail(WrongKind):
    """Loads, but its importers() raises."""

    kind = "agent"

    def importers(self) -> dict[str, Importer]:
        raise RuntimeError("importers exploded")


def test_an_adapter_whose_importers_fail_hides_no_other_importer(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, aaa="tests.test_adapters:ImportersFail")
    assert registry.find_importer("langgraph")[0] == "langgraph"
    assert sorted(registry.importers()) == ["langgraph", "temporal"]
    (status,) = registry.survey(["aaa"])
    assert status.loaded and not status.ok and status.availability.reason == "importers() failed: RuntimeError: importers exploded"


def test_the_example_of_docs_adapters_md_passes_the_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    import tests.adapter_suite as suite

    page = (REPO / "docs" / "adapters.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", page, re.S)
    (tmp_path / "docs_dirsnap.py").write_text(block)
    monkeypatch.syspath_prepend(str(tmp_path))
    _installed(monkeypatch, dirsnap="docs_dirsnap:DirSnap")
    case = AdapterCase("dirsnap", target=_a_directory, options={"skip": ("skip.me",)}, restore_target=_empty_dir, same=_same_files)
    for check in suite.CHECKS:
        if check is not suite.its_methods_say_what_they_take_return_and_raise:  # the page's example is kept short
            (tmp_path / check.__name__).mkdir()
            check(case, tmp_path / check.__name__)

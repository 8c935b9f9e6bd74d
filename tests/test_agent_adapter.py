"""The generic adapter for hand-built agents (ckptcli/adapters/generic.py, docs/agents.md):
capture through a declared mapping, restore back into the object, secrets redacted by
default and the redaction recorded in the metadata."""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ckptcli
from ckptcli.adapters.generic import AgentAdapter, Redaction, Redactor, from_plain, to_plain
from ckptcli.api import open_checkpoint
from ckptcli.errors import InvalidInputError
from tests.conftest import run_ckpt

OPENAI_KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
AWS_KEY = "AKIA" + "ABCDEFGHIJKLMNOP"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ"


class Status(enum.Enum):
    RUNNING = "running"
    DONE = "done"


@dataclass
class Step:
    name: str
    status: Status = Status.RUNNING


@dataclass
class ToolCall:
    tool: str
    args: dict[str, Any]
    result: Any = None


@dataclass
class Bot:
    goal: str
    notes: list[str] = field(default_factory=list)
    turn: int = 0
    plan: list[Step] = field(default_factory=list)
    tool_log: list[ToolCall] = field(default_factory=list)
    router: dict[str, float] = field(default_factory=dict)
    client: object = None  # not mapped: never captured


ADAPTER = AgentAdapter(memory=["goal", "notes", "turn"], plan="plan", tools="tool_log", ext={"acme.router": "router"})


def _bot() -> Bot:
    return Bot(
        goal="refund order A-1001",
        notes=["customer is polite"],
        turn=3,
        plan=[Step("look up order", Status.DONE), Step("refund")],
        tool_log=[
            ToolCall("orders.lookup", {"order": "A-1001", "api_key": "hunter2-very-secret"}, {"status": "lost"}),
            ToolCall(
                "http.get",
                {"url": "https://user:pa55word@api.example.com/x", "headers": {"Authorization": "Bearer abcdefghijklmnop1234"}},
                f"token was {OPENAI_KEY}",
            ),
        ],
        router={"billing": 0.75},
        client=object(),
    )


@pytest.fixture
def store(tmp_path: Path) -> ckptcli.Store:  # type: ignore[name-defined]
    return ckptcli.init_store(tmp_path / "store")


def test_capture_maps_attributes_onto_sections() -> None:
    doc, labels = ADAPTER.capture(_bot())
    assert doc["memory"] == {"goal": "refund order A-1001", "notes": ["customer is polite"], "turn": 3}
    assert doc["plan"] == [{"name": "look up order", "status": "done"}, {"name": "refund", "status": "running"}]
    assert doc["ext"]["acme.router"] == {"billing": 0.75}
    assert "client" not in json.dumps(doc)
    assert labels["redacted"] == "4"


def test_secrets_in_tool_calls_are_redacted_and_recorded(store: Any) -> None:
    result = ADAPTER.take(store, _bot(), subject="agent:bot")
    ck = open_checkpoint(result.hex, store)
    text = json.dumps(ck.state())
    for secret in ("hunter2-very-secret", "pa55word", "abcdefghijklmnop1234", OPENAI_KEY):
        assert secret not in text
    tools = ck.section("tools")
    assert tools[0]["args"]["api_key"] == "[REDACTED:secret-key]"
    assert tools[0]["args"]["order"] == "A-1001"  # only secrets go
    assert tools[1]["args"]["headers"]["Authorization"] == "[REDACTED:secret-key]"
    assert tools[1]["args"]["url"] == "https://[REDACTED:url-password]@api.example.com/x"
    assert tools[1]["result"] == "token was [REDACTED:openai-key]"
    # recorded in the metadata: labels, and the paths (never the values) in an ext section
    assert ck.manifest.labels["redacted"] == "4"
    assert ck.manifest.labels["redaction.rules"] == Redactor().fingerprint
    record = ck.section("ext:ckpt.redaction")
    assert {(r["path"], r["rule"]) for r in record["redacted"]} == {
        ("/tools/0/args/api_key", "secret-key"),
        ("/tools/1/args/url", "url-password"),
        ("/tools/1/args/headers/Authorization", "secret-key"),
        ("/tools/1/result", "openai-key"),
    }
    # the CLI shows it like any other checkpoint
    r = run_ckpt("show", result.hex, "--store", store.location, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["labels"]["redacted"] == "4"


def test_environment_is_captured_redacted_and_never_restored(store: Any) -> None:
    env = {"OPENAI_API_KEY": OPENAI_KEY, "REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": AWS_KEY}
    adapter = AgentAdapter(memory=["goal"], env=["OPENAI_API_KEY", "REGION", "AWS_ACCESS_KEY_ID", "ABSENT"], environ=lambda: env)
    bot = _bot()
    result = adapter.take(store, bot, subject="agent:env")
    captured = open_checkpoint(result.hex, store).section("ext:ckpt.env")
    assert captured == {"OPENAI_API_KEY": "[REDACTED:secret-key]", "REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "[REDACTED:aws-access-key]"}
    restored = adapter.restore(store, result.hex, into=Bot(goal="other"))
    assert restored.goal == bot.goal and not hasattr(restored, "OPENAI_API_KEY")


def test_redaction_is_configurable_and_can_be_turned_off(store: Any) -> None:
    custom = AgentAdapter(tools="tool_log", redactor=Redactor(extra_keys={"order-id": r"(?i)^order$"}, extra_values={"ticket": r"T-\d{4}"}))
    bot = _bot()
    bot.tool_log.append(ToolCall("crm.note", {"text": "see T-4711"}))
    doc, labels = custom.capture(bot)
    assert doc["tools"][0]["args"]["order"] == "[REDACTED:order-id]"
    assert doc["tools"][2]["args"]["text"] == "see [REDACTED:ticket]"
    assert labels["redaction.rules"] != Redactor().fingerprint
    off = AgentAdapter(tools="tool_log", redactor=None)
    doc, labels = off.capture(bot)
    assert doc["tools"][0]["args"]["api_key"] == "hunter2-very-secret" and labels == {}
    with pytest.raises(InvalidInputError, match="redaction pattern"):
        Redactor(extra_values={"bad": "("})


def test_restore_rebuilds_the_dataclass_by_its_type_hints(store: Any) -> None:
    bot = _bot()
    adapter = AgentAdapter(memory=["goal", "notes", "turn"], plan="plan", tools="tool_log", ext={"acme.router": "router"}, redactor=None)
    result = adapter.take(store, bot, subject="agent:bot")
    fresh = Bot(goal="")
    back = adapter.restore(store, result.hex, into=fresh)
    assert back is fresh
    assert back.plan == bot.plan and isinstance(back.plan[0], Step) and back.plan[0].status is Status.DONE
    assert back.tool_log == bot.tool_log and isinstance(back.tool_log[0], ToolCall)
    assert (back.goal, back.notes, back.turn, back.router) == (bot.goal, bot.notes, bot.turn, bot.router)
    assert back.client is None  # unmapped attributes are left alone
    # restoring from an exported file works the same
    out = store.location + "/../bot.ckpt"
    assert run_ckpt("export", result.hex, "-o", out, "--store", store.location).returncode == 0
    again = adapter.restore(Path(out), "latest", into=Bot(goal=""))
    assert again.plan == bot.plan


def test_restore_from_a_file_by_a_bare_name_reads_the_file_whatever_the_store_holds(
    store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file given as the source is the file, even when its bare name is also a tag of
    the store found from here (a CLI argument of that name is refused as ambiguous)."""
    adapter = AgentAdapter(memory=["goal"], redactor=None)
    first = adapter.take(store, Bot(goal="from the file"), subject="agent:bot")
    second = adapter.take(store, Bot(goal="from the tag"), subject="agent:bot")
    store.set_tag("good", second.id)
    assert run_ckpt("export", first.hex, "-o", tmp_path / "good", "--store", store.location).returncode == 0
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CKPT_STORE", store.location)
    assert adapter.restore(Path("good"), into=Bot(goal="")).goal == "from the file"


class Memo(pydantic.BaseModel):
    topic: str
    score: float = 0.0


class PydBot(pydantic.BaseModel):
    name: str
    memos: list[Memo] = []
    plan: list[str] = []
    secrets: dict[str, str] = {}


def test_pydantic_models_and_dicts(store: Any) -> None:
    adapter = AgentAdapter(memory=["name", "memos"], plan="plan", tools="secrets")
    bot = PydBot(name="p", memos=[Memo(topic="a", score=1.5)], plan=["x", "y"], secrets={"password": "pw-123456"})
    result = adapter.take(store, bot, subject="agent:pyd")
    back = adapter.restore(store, result.hex, into=PydBot(name="other"))
    assert back.memos == bot.memos and back.plan == bot.plan and back.name == "p"
    assert back.secrets == {"password": "[REDACTED:secret-key]"}
    as_dict = {"goal": "g", "plan": ["a"], "tools": [{"tool": "t", "args": {"token": "x" * 30}}]}
    d_adapter = AgentAdapter(memory=["goal"], plan="plan", tools="tools")
    r2 = d_adapter.take(store, as_dict, subject="agent:dict")
    target: dict[str, Any] = {}
    d_adapter.restore(store, r2.hex, into=target)
    assert target["tools"][0]["args"]["token"] == "[REDACTED:secret-key]" and target["plan"] == ["a"]


def test_frozen_dataclass_gets_a_new_instance(store: Any) -> None:
    @dataclass(frozen=True)
    class Frozen:
        goal: str
        steps: tuple[str, ...] = ()

    adapter = AgentAdapter(memory=["goal"], plan="steps")
    result = adapter.take(store, Frozen("g", ("a", "b")), subject="agent:frozen")
    back = adapter.restore(store, result.hex, into=Frozen("other"))
    assert back == Frozen("g", ("a", "b"))


def test_bad_mappings_and_values_are_clear_errors(store: Any) -> None:
    with pytest.raises(InvalidInputError, match="mapped to both"):
        AgentAdapter(memory=["goal"], plan="goal")
    with pytest.raises(InvalidInputError, match="names no attribute"):
        AgentAdapter()
    with pytest.raises(InvalidInputError, match="has no attribute 'missing'"):
        AgentAdapter(memory=["missing"]).capture(_bot())
    with pytest.raises(InvalidInputError, match=r"memory \(client\): a object cannot be stored"):
        AgentAdapter(memory=["client"]).capture(_bot())
    with pytest.raises(InvalidInputError, match="map key 1 is not a string"):
        to_plain({1: "x"})


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=30))
json_value = st.recursive(
    json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=20
)


@settings(max_examples=150, deadline=None)
@given(json_value)
def test_redaction_never_leaves_a_planted_secret(value: Any) -> None:
    """Whatever the surrounding data, a planted key or token is gone after redaction, and
    the report names one path per replacement."""
    planted = {"data": value, "api_key": "k" * 12, "note": f"use {AWS_KEY} please", "deep": [{"password": "p" * 9}]}
    report = Redaction()
    out = Redactor().redact(planted, "", report)
    text = json.dumps(out)
    assert AWS_KEY not in text and "k" * 12 not in text and "p" * 9 not in text
    assert {"/api_key", "/note", "/deep/0/password"} <= set(report.paths)
    assert out["data"] == Redactor().redact(value, "/data", Redaction())


SECRET_NAMES = (
    "PGPASSWORD", "DB_PASS", "db-pass", "PASS", "AUTH", "X_AUTH", "SLACK_WEBHOOK", "GITHUB_TOKEN", "MYSECRET", "DB_PWD",
    "MYSQL_PWD", "GPG_PASSPHRASE", "GOOGLE_CREDENTIALS", "aws_credential", "MYAPIKEY", "api_key", "client_secret", "Cookie",
)  # fmt: skip
PLAIN_NAMES = ("PWD", "OLDPWD", "PATH", "HOME", "BYPASS", "COMPASS", "AUTHOR", "MAX_TOKENS", "PASSENGER", "TOKENIZER", "keyword")


def test_the_key_rules_hide_names_that_end_in_a_secrets_word_and_not_the_working_directory() -> None:
    report = Redaction()
    out = Redactor().redact({name: "value" for name in SECRET_NAMES + PLAIN_NAMES}, "", report)
    assert [k for k, v in out.items() if v == "[REDACTED:secret-key]"] == list(SECRET_NAMES)
    assert {k: out[k] for k in PLAIN_NAMES} == {k: "value" for k in PLAIN_NAMES}
    assert report.paths == [f"/{k}" for k in SECRET_NAMES]


def test_the_value_rules_hide_slack_webhooks_authorization_headers_and_short_bearer_tokens() -> None:
    cases = {
        "post to https://hooks.slack.com/services/T000/B000/XXXX please": "post to [REDACTED:slack-webhook] please",
        "Authorization: Bearer tok": "[REDACTED:authorization-header]",
        "authorization: Basic dXNlcjpwYXNz": "[REDACTED:authorization-header]",
        "Authorization: Bearer abcdefghijklmnopqrstuvwxyz": "[REDACTED:authorization-header]",
        "curl -H 'Authorization: token x' http://h\nnext line": "curl -H '[REDACTED:authorization-header]\nnext line",
        "Bearer abcd1234": "[REDACTED:bearer-token]",
        "Bearer abc": "Bearer abc",  # too short to be a token
        "the bearer of bad news": "the bearer of bad news",
        "Authorization:": "Authorization:",
    }
    for text, want in cases.items():
        report = Redaction()
        assert Redactor().redact(text, "/s", report) == want, text
        assert report.count == (0 if want == text else 1), text


def test_plain_conversion_round_trips_nested_dataclasses() -> None:
    bot = _bot()
    plain = to_plain(dataclasses.replace(bot, client=None))
    assert from_plain(plain, Bot) == dataclasses.replace(bot, client=None)


def test_the_guide_example_runs(tmp_path: Path) -> None:
    """docs/agents.md's first example, extracted and run as a script, as it is written."""
    import os
    import re
    import subprocess
    import sys

    doc = (Path(__file__).resolve().parent.parent / "docs" / "agents.md").read_text()
    first = re.findall(r"```python\n(.*?)```", doc, re.S)[0]
    (tmp_path / "guide.py").write_text(first)
    env = {**os.environ, "CRM_API_KEY": "crm-live-8f3a9c2b", "REGION": "eu-west-1"}
    r = subprocess.run([sys.executable, "guide.py"], cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().startswith("took ") and r.stdout.decode().rstrip().endswith("redacted 2")
    st_ = ckptcli.open_store(tmp_path / "agent-store")
    ck = open_checkpoint("agent:support-bot", st_)
    assert ck.section("ext:ckpt.env") == {"REGION": "eu-west-1", "CRM_API_KEY": "[REDACTED:secret-key]"}
    assert "crm-live-8f3a9c2b" not in json.dumps(ck.state())

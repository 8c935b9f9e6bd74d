"""Redaction rules: secrets in plain data replaced by ``[REDACTED:<rule>]``, by key and by
value. The generic adapter (ckptcli/adapters/generic.py, docs/agents.md "Secrets") applies
them to what it captures, the process adapter to command lines and environments, and the
in-doubt report (ckptcli/indoubt.py) to the arguments it summarizes; they live here, below
every layer, so that all of them use the same rules."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptcli.errors import InvalidInputError

PLACEHOLDER = "[REDACTED:{rule}]"

#: Keys whose values are secrets, whatever they look like (matched against the whole key, case-insensitively):
#: names that end in a secret's word (PGPASSWORD, GITHUB_TOKEN, MYSECRET, SLACK_WEBHOOK), names that are or end in
#: PASS or AUTH after a separator (DB_PASS, X-AUTH), and PWD only after one (DB_PWD; not PWD, the working directory).
DEFAULT_KEY_PATTERNS: dict[str, str] = {
    "secret-key": r"(?i)^(?:(?:.*[_-])?(?:api[_-]?key|secret[_-]?key|client[_-]?secret|access[_-]?token|refresh[_-]?token|"
    r"id[_-]?token|auth[_-]?token|authorization|cookie|set-cookie|session[_-]?id|private[_-]?key|access[_-]?key|pass|auth)"
    r"|.*(?:password|passwd|passphrase|secret|token|apikey|credentials?|webhook)|.*[_-]pwd)$",
}

#: Strings that look like credentials wherever they appear (searched inside strings, in this order).
DEFAULT_VALUE_PATTERNS: dict[str, str] = {
    "openai-key": r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}",
    "anthropic-key": r"\bsk-ant-[A-Za-z0-9_-]{20,}",
    "aws-access-key": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    "github-token": r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}",
    "slack-token": r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
    "slack-webhook": r"(?i)\b(?:https?://)?hooks\.slack\.com/services/[A-Za-z0-9_/-]+",
    "google-api-key": r"\bAIza[0-9A-Za-z_-]{35}\b",
    "jwt": r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}",
    "authorization-header": r"(?i)\b(?:proxy-)?authorization:[ \t]*(?!\[REDACTED:)[^\s][^\r\n]*",
    "bearer-token": r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{8,}=*",
    "private-key-block": r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    "url-password": r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)",
}


@dataclass
class Redaction:
    """What one pass of redaction replaced: JSON pointers (into the state document) and rule names."""

    paths: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)

    def add(self, path: str, rule: str) -> None:
        self.paths.append(path)
        self.rules.append(rule)

    @property
    def count(self) -> int:
        return len(self.paths)


class Redactor:
    """Replaces secrets in plain data by ``[REDACTED:<rule>]``.

    Args:
        key_patterns: rule name -> regex matched against map keys; the whole value under a
            matching key is replaced.
        value_patterns: rule name -> regex searched in strings; each match is replaced.
        extra_keys / extra_values: added to the defaults (the usual way to configure).
    """

    def __init__(
        self,
        key_patterns: Mapping[str, str] | None = None,
        value_patterns: Mapping[str, str] | None = None,
        *,
        extra_keys: Mapping[str, str] | None = None,
        extra_values: Mapping[str, str] | None = None,
    ) -> None:
        keys = dict(DEFAULT_KEY_PATTERNS if key_patterns is None else key_patterns) | dict(extra_keys or {})
        values = dict(DEFAULT_VALUE_PATTERNS if value_patterns is None else value_patterns) | dict(extra_values or {})
        try:
            self.keys = {name: re.compile(p) for name, p in keys.items()}
            self.values = {name: re.compile(p) for name, p in values.items()}
        except re.error as exc:
            raise InvalidInputError(f"redaction pattern {exc.pattern!r}: {exc}") from None

    @property
    def fingerprint(self) -> str:
        """A short hash of the rules, recorded with each redaction (which rules ran)."""
        text = "\n".join(f"k {n} {p.pattern}" for n, p in sorted(self.keys.items()))
        text += "\n".join(f"v {n} {p.pattern}" for n, p in sorted(self.values.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def redact(self, value: Any, path: str, report: Redaction) -> Any:
        """A copy of `value` with secrets replaced; `path` is its JSON pointer."""
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                sub = f"{path}/{_escape(str(k))}"
                rule = next((n for n, p in self.keys.items() if isinstance(k, str) and p.search(k)), None)
                if rule is not None and v not in (None, "", [], {}):
                    out[k] = PLACEHOLDER.format(rule=rule)
                    report.add(sub, rule)
                else:
                    out[k] = self.redact(v, sub, report)
            return out
        if isinstance(value, list):
            return [self.redact(v, f"{path}/{i}", report) for i, v in enumerate(value)]
        if isinstance(value, str):
            for name, pat in self.values.items():
                if pat.search(value):
                    value = pat.sub(PLACEHOLDER.format(rule=name), value)
                    report.add(path, name)
            return value
        return value


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def redact_argv(argv: list[str], rules: Redactor | None = None) -> list[str]:
    """A command line as ckpt stores it: secrets in it replaced by the redactor's rules (the
    generic adapter's by default), as `describe` does for a running program's."""
    rules = rules if rules is not None else Redactor()
    report = Redaction()
    return redact_argv_flags(rules.redact(list(argv), "/argv", report), rules, "/argv", report)


#: options whose value is `user:password` (curl, wget, httpie, ...): what follows the first colon is secret
_USER_PASSWORD_OPTIONS = frozenset({"u", "user", "proxy-user", "U", "http-user", "auth", "a"})
#: programs whose `-pVALUE` (the value attached) is a password: the MySQL family
_ATTACHED_PASSWORD_PROGRAMS = frozenset(
    {"mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump", "mariadb", "mariadb-dump", "mariadb-admin"}
)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def redact_argv_flags(argv: list[str], rules: Redactor, where: str, report: Redaction) -> list[str]:
    """Redact what a command line passes as a secret, by the redactor's key rules and a few
    conventions: the value of an option whose name says it is secret (``--api-key=VALUE``,
    ``--api-key VALUE``, ``-password ...``); the password of ``-u user:password`` and
    ``--user=user:password``; the value of an environment assignment whose name says it is
    secret (``env PGPASSWORD=... psql``); and the MySQL family's ``-pPASSWORD``."""
    out = list(argv)
    program = os.path.basename(argv[0]) if argv else ""

    def put(i: int, text: str, rule: str) -> None:
        out[i] = text
        report.add(f"{where}/{i}", rule)

    def secret_rule(name: str) -> str | None:
        return next((n for n, p in rules.keys.items() if p.search(name)), None)

    for i, arg in enumerate(argv):
        if i == 0 or "[REDACTED:" in out[i]:
            continue
        if not arg.startswith("-"):
            if _ASSIGNMENT.match(arg):  # NAME=VALUE, as `env` and shells take them
                name, _, value = arg.partition("=")
                rule = secret_rule(name)
                if rule is not None and value and value != "***":  # *** : masked already (store options)
                    put(i, f"{name}={PLACEHOLDER.format(rule=rule)}", rule)
            continue
        if arg in ("-", "--"):
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if program in _ATTACHED_PASSWORD_PROGRAMS and arg.startswith("-p") and not arg.startswith("--") and len(arg) > 2:
            put(i, "-p" + PLACEHOLDER.format(rule="password-option"), "password-option")
            continue
        if name in _USER_PASSWORD_OPTIONS:
            at = i if eq else i + 1
            text = value if eq else (argv[at] if at < len(argv) else "")
            user, colon, password = text.partition(":")
            if colon and password and "/" not in user and "://" not in text and not password.startswith("[REDACTED:"):
                shown = f"{user}:{PLACEHOLDER.format(rule='user-password')}"
                put(at, arg[: len(arg) - len(value)] + shown if eq else shown, "user-password")
            continue
        rule = secret_rule(name)
        if rule is None:
            continue
        placeholder = PLACEHOLDER.format(rule=rule)
        if eq and value and not value.startswith("[REDACTED:"):
            put(i, arg[: len(arg) - len(value)] + placeholder, rule)
        elif not eq and i + 1 < len(argv) and not argv[i + 1].startswith(("-", "[REDACTED:")):
            put(i + 1, placeholder, rule)
    return out

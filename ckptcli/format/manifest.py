"""The manifest: a checkpoint's metadata and the roots of its sections.

A checkpoint's id is the SHA-256 of its manifest file, so the manifest (and through
it every object it names) is immutable. Writing the manifest is the commit point.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptcli.errors import CorruptError, InvalidInputError
from ckptcli.format import framing, limits

SUBJECT_KINDS = ("agent", "workflow", "process")
STANDARD_SECTIONS = ("memory", "plan", "tools", "events", "blobs")
EXT_PREFIX = "ext:"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
NAMESPACE_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
#: Readers accept subject kinds beyond SUBJECT_KINDS (a later version may add some),
#: but only ones that are safe as a path component.
KIND_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
LAYOUT_SECTIONS = "sections"
LAYOUT_DOCUMENT = "document"
DOC_SECTION_KEYS = ("memory", "plan", "tools", "events", "ext")
#: A checkpoint with one of these labels belongs to a nested run inside its subject's
#: history (a LangGraph subgraph's): it is the subject's `latest` only when the subject
#: has no checkpoint without them.
NESTED_LABELS = ("langgraph.ns",)


def is_nested(labels: Mapping[str, str]) -> bool:
    return any(k in labels for k in NESTED_LABELS)


def head_order(labels: Mapping[str, str], created_ns: int) -> tuple[int, int]:
    """How a subject's checkpoints rank for its `latest` ref, greatest first: by creation
    time, every nested checkpoint (see NESTED_LABELS) below every other."""
    return (0 if is_nested(labels) else 1, created_ns)


def check_name(value: str, what: str) -> str:
    if not NAME_RE.match(value):
        raise InvalidInputError(
            f"{what} {value!r} is not a valid name",
            hint="use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return value


def check_ref_name(value: str, what: str) -> str:
    """A tag or branch name: a valid name that can be reached as one. `latest` means the
    newest checkpoint, and a 64-hex-digit name is a checkpoint id, whatever refs exist."""
    check_name(value, what)
    if value == "latest":
        raise InvalidInputError(f"{what} 'latest' cannot be used: `latest` means the store's newest checkpoint", hint="choose another name")
    if len(value) == 64 and all(c in "0123456789abcdefABCDEF" for c in value):
        raise InvalidInputError(f"{what} {value[:12]}... reads as a checkpoint id", hint="choose a name that is not a checkpoint id")
    if value.lower().endswith(".ckpt"):  # `.CKPT` too: a file of that name on a case-folding disk
        raise InvalidInputError(
            f"{what} {value!r} ends in .ckpt: every command would read it as a checkpoint file",
            hint="choose a name that does not end in .ckpt",
        )
    return value


@dataclass(frozen=True)
class Subject:
    kind: str
    name: str

    @classmethod
    def parse(cls, text: str) -> Subject:
        """'agent:support-bot' -> Subject('agent', 'support-bot')."""
        kind, sep, name = text.partition(":")
        if not sep:
            raise InvalidInputError(f"subject {text!r} has no kind", hint="write it as KIND:NAME, e.g. agent:support-bot")
        if kind not in SUBJECT_KINDS:
            raise InvalidInputError(f"subject kind {kind!r} is not one of {', '.join(SUBJECT_KINDS)}")
        return cls(kind, check_name(name, "subject name"))

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass
class Manifest:
    subject: Subject
    sections: dict[str, bytes]  # section name -> EV bytes
    layout: dict[str, Any]
    parents: list[bytes] = field(default_factory=list)
    created_ns: int = field(default_factory=time.time_ns)
    producer: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    message: str = ""
    schema_version: int | str | None = None
    config_hash: str | None = None
    deps: dict[str, str] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    format_version: int = limits.FORMAT_VERSION

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "format": self.format_version,
            "parents": list(self.parents),
            "created": self.created_ns,
            "subject": {"kind": self.subject.kind, "name": self.subject.name},
            "producer": dict(self.producer),
        }
        # optional fields are left out when they hold their default (one checkpoint per
        # step of an agent makes every byte of a manifest count)
        if self.labels:
            body["labels"] = dict(self.labels)
        if self.message:
            body["message"] = self.message
        if self.schema_version is not None:
            body["schema_version"] = self.schema_version
        if self.config_hash is not None:
            body["config_hash"] = self.config_hash
        body["deps"] = dict(self.deps)
        body["layout"] = self.layout
        body["sections"] = dict(self.sections)
        body["stats"] = dict(self.stats)
        return body

    def encode(self) -> bytes:
        return framing.encode_record(framing.KIND_MANIFEST, self.to_body(), self.format_version)

    @classmethod
    def decode(cls, data: bytes, where: str) -> Manifest:
        version, body = framing.decode_record(data, framing.KIND_MANIFEST, where)
        return cls.from_body(body, version, where)

    @classmethod
    def from_body(cls, b: dict[str, Any], version: int, where: str) -> Manifest:
        def need(key: str, typ: type | tuple[type, ...], default: Any = None, required: bool = True) -> Any:
            if key not in b:
                if required:
                    raise CorruptError(f"{where}: manifest has no {key!r} field")
                return default
            v = b[key]
            # bool is an int in Python; the format keeps them apart
            if not isinstance(v, typ) or (isinstance(v, bool) and bool not in (typ if isinstance(typ, tuple) else (typ,))):
                raise CorruptError(f"{where}: manifest field {key!r} has the wrong type")
            return v

        def str_map(key: str) -> dict[str, str]:
            m = need(key, dict, {}, required=False)
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in m.items()):
                raise CorruptError(f"{where}: manifest {key} are malformed")
            return dict(m)

        parents = need("parents", list)
        if len(parents) > limits.MAX_PARENTS or not all(isinstance(p, bytes) and len(p) == 32 for p in parents):
            raise CorruptError(f"{where}: manifest parents are malformed")
        subj = need("subject", dict)
        kind, name = subj.get("kind"), subj.get("name")
        # both become path components of refs/latest/<kind>/<name>: nothing may escape
        if not (isinstance(kind, str) and KIND_RE.match(kind) and isinstance(name, str) and NAME_RE.match(name)):
            raise CorruptError(f"{where}: manifest subject {kind!r}:{name!r} is not a valid subject")
        sections = need("sections", dict)
        for k, v in sections.items():
            if not isinstance(k, str) or not isinstance(v, bytes):
                raise CorruptError(f"{where}: manifest section {k!r} is malformed")
            if not (k in STANDARD_SECTIONS or (k.startswith(EXT_PREFIX) and NAMESPACE_RE.match(k[len(EXT_PREFIX) :]))):
                raise CorruptError(f"{where}: manifest names unknown section {k!r}")
        layout = need("layout", dict)
        _check_layout(layout, where)
        labels = str_map("labels")
        fmt = need("format", int)
        if fmt != version:
            raise CorruptError(f"{where}: manifest says format {fmt}, file header says {version}")
        created = need("created", int)
        sv = b.get("schema_version")
        if sv is not None and (not isinstance(sv, (int, str)) or isinstance(sv, bool)):
            raise CorruptError(f"{where}: manifest schema_version has the wrong type")
        ch = b.get("config_hash")
        if ch is not None and not isinstance(ch, str):
            raise CorruptError(f"{where}: manifest config_hash has the wrong type")
        stats = need("stats", dict, {}, required=False)
        return cls(
            subject=Subject(kind, name),
            sections=sections,
            layout=layout,
            parents=parents,
            created_ns=created,
            producer=str_map("producer"),
            labels=labels,
            message=need("message", str, "", required=False),
            schema_version=sv,
            config_hash=ch,
            deps=str_map("deps"),
            stats={k: v for k, v in stats.items() if isinstance(k, str) and type(v) is int},
            format_version=version,
        )


def _check_layout(layout: dict[str, Any], where: str) -> None:
    kind = layout.get("kind")
    if kind == LAYOUT_DOCUMENT:
        return
    if kind != LAYOUT_SECTIONS:
        raise CorruptError(f"{where}: manifest layout kind {kind!r} is unknown")
    keys, ext = layout.get("keys", []), layout.get("ext", [])
    if not (isinstance(keys, list) and all(isinstance(k, str) and k in DOC_SECTION_KEYS for k in keys) and len(set(keys)) == len(keys)):
        raise CorruptError(f"{where}: manifest layout keys are malformed")
    if not (isinstance(ext, list) and all(isinstance(n, str) and NAMESPACE_RE.match(n) for n in ext) and len(set(ext)) == len(ext)):
        raise CorruptError(f"{where}: manifest layout ext namespaces are malformed")

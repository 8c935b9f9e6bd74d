"""The conformance suite of the adapter contract (ckptcli/adapters/base.py), run by every
adapter: the built-in ones and a third party's (tests/test_adapters.py).

Each check is a plain function `(case, tmp) -> None`; CHECKS lists them in order. A case
says which adapter and gives what its checks need: a live target to capture and a place
to restore it, how to compare the two, events of its own kinds, a state document for an
adapter that restores what it did not capture. A check an adapter does not support (an
adapter without capture) checks instead that asking for it is a clear NotSupported.
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.adapters import registry
from ckptcli.adapters.base import KINDS, NAME_RE, RESERVED_FLAGS, Adapter, Availability, Capture, Importer, NotSupported
from ckptcli.checkpoint import open_checkpoint
from ckptcli.errors import CkptError, ExitCode
from ckptcli.history.events import CUSTOM_KIND_RE, STANDARD_KINDS, Reducers, make_event


@dataclass
class AdapterCase:
    """What the suite needs of one adapter.

    Args:
        name: its registered name.
        target: a live target to capture (made under the test's directory); None when it does not capture.
        options: the options capture and restore get.
        options_for: instead, the options made under the test's directory (a state file's path).
        restore_target: a fresh place to restore into (made under the test's directory).
        same: asserts the restored thing is the captured one (original target, what restore returned).
        document: for an adapter that restores without capturing, a state document to take and restore.
        restored: asserts what restore returned for `document`.
        events: (kind, fields, state) of its own kinds, for the reducers' checks.
    """

    name: str
    target: Callable[[Path], Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    options_for: Callable[[Path], dict[str, Any]] | None = None
    restore_target: Callable[[Path], Any] = lambda tmp: None
    same: Callable[[Any, Any], None] | None = None
    document: dict[str, Any] | None = None
    restored: Callable[[Any], None] | None = None
    events: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    def adapter(self) -> Adapter:
        return registry.adapter(self.name)

    def opts(self, tmp: Path) -> dict[str, Any]:
        return self.options_for(tmp) if self.options_for is not None else self.options


def _one_line(exc: CkptError) -> None:
    assert exc.message and "\n" not in exc.message, exc.message
    assert "Traceback" not in str(exc)
    assert isinstance(exc.exit_code, ExitCode)


# -- the checks -----------------------------------------------------------------------------------
def it_is_registered_under_its_name(case: AdapterCase, tmp: Path) -> None:
    assert case.name in registry.names()
    cls = registry.adapter_class(case.name)
    assert issubclass(cls, Adapter)
    assert cls.name == case.name and NAME_RE.match(cls.name)
    assert cls.kind in KINDS
    assert cls.summary.strip() and "\n" not in cls.summary
    assert cls.problems() == []


def its_methods_say_what_they_take_return_and_raise(case: AdapterCase, tmp: Path) -> None:
    cls = registry.adapter_class(case.name)
    assert inspect.getdoc(cls), f"{cls.__name__} has no docstring"
    for method in ("available", "capture", "restore", "reducers", "importers"):
        impl = getattr(cls, method)
        doc = inspect.getdoc(impl) or ""
        assert doc.strip(), f"{cls.__name__}.{method} has no docstring"
        if getattr(Adapter, method) is not impl and method in ("capture", "restore"):
            # what it does differently from the contract: its own Args/Returns
            assert "Args:" in doc and "Returns:" in doc, f"{cls.__name__}.{method} does not say its Args and Returns"
    for imp in cls().importers().values():
        assert inspect.getdoc(type(imp).run), f"the importer {imp.name} has no docstring on run"


def available_says_yes_or_why_not(case: AdapterCase, tmp: Path) -> None:
    cls = registry.adapter_class(case.name)
    first, again = cls.available(), cls.available()
    for a in (first, again):
        assert isinstance(a, Availability)
        assert isinstance(a.ok, bool) and isinstance(a.reason, str) and isinstance(a.details, Mapping)
        assert "\n" not in a.reason
        json.dumps(a.to_dict())  # plain data: `ckpt doctor --json` prints it
    assert first.ok == again.ok
    if not first.ok:
        assert first.reason.strip(), "an adapter that cannot work here must say why"
    (status,) = registry.survey([case.name])
    assert status.loaded and status.availability.ok == first.ok


def its_options_are_well_formed(case: AdapterCase, tmp: Path) -> None:
    ad = case.adapter()
    declared = list(ad.options) + [o for imp in ad.importers().values() for o in imp.options]
    for o in declared:
        assert o.problems() == [], o.problems()
        assert o.flag not in RESERVED_FLAGS, f"{o.flag} is a flag of ckpt itself"
    assert len({o.flag for o in ad.options}) == len(ad.options)
    for imp in ad.importers().values():
        assert len({o.flag for o in imp.options}) == len(imp.options)


def its_reducers_are_deterministic_and_change_no_input(case: AdapterCase, tmp: Path) -> None:
    ad = case.adapter()
    found = dict(ad.reducers())
    for kind, fn in found.items():
        assert CUSTOM_KIND_RE.match(kind) and kind not in STANDARD_KINDS, kind
        assert callable(fn)
    assert {k for k, _f, _s in case.events} == set(found), "give an event of each of its kinds"
    reducers = Reducers(found, entry_points=False)
    for i, (kind, fields, state) in enumerate(case.events):
        ev = make_event(i + 1, 1_700_000_000_000 + i, kind, fields)
        before_state, before_fields = copy.deepcopy(state), copy.deepcopy(fields)
        raw = found[kind](state, ev)  # called directly, as a replay of the adapter's own may call it
        assert state == before_state and ev.fields == before_fields, f"{kind}: the reducer changed its input"
        again = found[kind](copy.deepcopy(state), ev)
        assert raw == again, f"{kind}: two runs on the same state and event differ"
        assert raw != state, f"{kind}: the event changed nothing (give an event that does)"
        assert reducers.apply(state, ev) == raw, f"{kind}: through ckpt's reducers it gives another state"


def capture_take_restore_round_trips(case: AdapterCase, tmp: Path) -> None:
    ad = case.adapter()
    if not ad.supports("capture"):
        with pytest.raises(NotSupported) as caught:
            ad.capture(None)
        _one_line(caught.value)
        assert caught.value.exit_code == ExitCode.USAGE
        assert case.target is None, "the case gives a target but the adapter does not capture"
        return
    assert case.target is not None and case.same is not None, "an adapter that captures needs a target and a comparison"
    target = case.target(tmp)
    cap = ad.capture(target, **case.opts(tmp))
    assert isinstance(cap, Capture) and isinstance(cap.document, dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in cap.labels.items())
    store = ckptcli.init_store(tmp / "suite-store")
    result = ad.take(store, target, subject=f"{ad.kind}:suite", **case.opts(tmp))
    ck = open_checkpoint(result.hex, store)
    assert ck.manifest.labels.get("adapter") == ad.name
    if not ad.supports("restore"):
        with pytest.raises(NotSupported):
            ad.restore(ck, case.restore_target(tmp))
        return
    back = ad.restore(ck, case.restore_target(tmp), **case.opts(tmp))
    case.same(target, back)


def restore_of_a_taken_document(case: AdapterCase, tmp: Path) -> None:
    ad = case.adapter()
    if not ad.supports("restore"):
        store = ckptcli.init_store(tmp / "restore-store")
        cid = ckptcli.take(store, {"memory": {"x": 1}}, subject=f"{ad.kind}:suite").hex
        with pytest.raises(NotSupported) as caught:
            ad.restore(open_checkpoint(cid, store), None)
        _one_line(caught.value)
        return
    if case.document is None:
        assert ad.supports("capture"), "an adapter that restores what it does not capture needs a document to restore"
        return  # the round trip restored what it captured
    assert case.restored is not None
    store = ckptcli.init_store(tmp / "restore-store")
    cid = ckptcli.take(store, case.document, subject=f"{ad.kind}:suite").hex
    case.restored(ad.restore(open_checkpoint(cid, store), case.restore_target(tmp), **case.opts(tmp)))


def importers_refuse_bad_input_in_one_line(case: AdapterCase, tmp: Path) -> None:
    ad = case.adapter()
    for fmt, imp in ad.importers().items():
        assert isinstance(imp, Importer) and imp.name == fmt
        assert imp.summary.strip() and "\n" not in imp.summary
        store = ckptcli.init_store(tmp / f"import-{fmt}")
        defaults = {o.name: o.default for o in imp.options}
        garbage = tmp / f"{fmt}.garbage"
        garbage.write_bytes(b"\x00\xffnot this format at all\n" * 10)
        for source in (tmp / "no-such-source", garbage, tmp):
            with pytest.raises(CkptError) as caught:
                imp.run(store, str(source), defaults)
            _one_line(caught.value)
            assert caught.value.exit_code != ExitCode.INTERNAL
        assert store.manifest_ids() == [], f"{fmt}: a refused import left checkpoints behind"


CHECKS: list[Callable[[AdapterCase, Path], None]] = [
    it_is_registered_under_its_name,
    its_methods_say_what_they_take_return_and_raise,
    available_says_yes_or_why_not,
    its_options_are_well_formed,
    its_reducers_are_deterministic_and_change_no_input,
    capture_take_restore_round_trips,
    restore_of_a_taken_document,
    importers_refuse_bad_input_in_one_line,
]

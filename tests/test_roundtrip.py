"""Property tests: take then restore gives exactly the same state; export -> import ->
export is byte-identical."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptcli
from ckptcli.api import export_checkpoint, import_checkpoint, open_checkpoint, split_document, states_equal, take
from ckptcli.format.values import Decoder, Encoder
from tests import strategies
from tests.strategies import DictSink

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
)


@SETTINGS
@given(strategies.values(60))
def test_encode_decode_round_trip(value: Any) -> None:
    sink = DictSink()
    ev = Encoder(sink).encode(value)
    assert states_equal(Decoder(sink).decode(ev), value)


@SETTINGS
@given(st.one_of(strategies.large, st.lists(strategies.large, max_size=2)))
def test_large_values_round_trip(value: Any) -> None:
    sink = DictSink()
    ev = Encoder(sink).encode(value)
    assert len(ev) < 200, "large values must become references, not inline bytes"
    assert states_equal(Decoder(sink).decode(ev), value)


@SETTINGS
@given(strategies.documents)
def test_take_restore_is_exact(doc: Any) -> None:
    with tempfile.TemporaryDirectory() as d:
        store = ckptcli.init_store(Path(d) / "s")
        cid = take(store, doc, subject="agent:prop").id
        back = open_checkpoint(cid.hex(), store).state()
        assert states_equal(back, doc), (doc, back)
        # and through a second, freshly opened store object (nothing cached)
        assert states_equal(open_checkpoint(cid.hex(), ckptcli.open_store(Path(d) / "s")).state(), doc)


@SETTINGS
@given(strategies.documents)
def test_export_import_export_is_byte_identical(doc: Any) -> None:
    with tempfile.TemporaryDirectory() as d:
        a = ckptcli.init_store(Path(d) / "a")
        b = ckptcli.init_store(Path(d) / "b")
        cid = take(a, doc, subject="workflow:prop").id
        first = io.BytesIO()
        export_checkpoint(open_checkpoint(cid.hex(), a), first)
        (Path(d) / "one.ckpt").write_bytes(first.getvalue())
        assert import_checkpoint(b, Path(d) / "one.ckpt") == cid
        second = io.BytesIO()
        export_checkpoint(open_checkpoint(cid.hex(), b), second)
        assert first.getvalue() == second.getvalue()
        # the file itself reads back to the same state
        assert states_equal(open_checkpoint(str(Path(d) / "one.ckpt")).state(), doc)


def test_document_layout_is_recorded() -> None:
    layout, sections = split_document({"memory": 1, "ext": {"acme.bot": 2}})
    assert layout["kind"] == "sections" and sections == {"memory": 1, "ext:acme.bot": 2}
    layout, sections = split_document({"memory": 1, "other": 2})
    assert layout["kind"] == "document" and sections == {"memory": {"memory": 1, "other": 2}}


def test_states_equal_is_strict() -> None:
    assert not states_equal(1, 1.0)
    assert not states_equal(True, 1)
    assert not states_equal(0.0, -0.0)
    assert states_equal(float("nan"), float("nan"))
    assert not states_equal({"a": 1, "b": 2}, {"b": 2, "a": 1})  # key order is kept

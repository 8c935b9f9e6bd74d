"""ckptcli.document writes exactly what serializing the decoded state writes: the JSON of
`ckpt restore` (api.write_document), its msgpack, and the JSON view of `ckpt cat`
(jsonview.to_json + json.dumps, indented or compact), whether each part is decoded whole
(the default sizes) or streamed piece by piece (SMALL_BYTES = SMALL_ITEMS = 0)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ckptcli import document as docstream
from ckptcli.api import join_document, split_document, write_document
from ckptcli.document import Section
from ckptcli.errors import CkptError, InvalidInputError
from ckptcli.format.jsonview import to_json
from ckptcli.format.values import Decoder, Encoder
from tests import strategies
from tests.strategies import DictSink

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.function_scoped_fixture,
    ],
)
DOLLAR = {"$only": [{"$inner": "x" * 70_000}] * 40, "other": {"$k": b"\x00" * 70_001}}


def _encode(doc: Any) -> tuple[DictSink, Any, Any]:
    """(source, skeleton, the decoded state) of `doc` taken as api.take splits it."""
    sink = DictSink()
    enc = Encoder(sink)
    layout, sections = split_document(doc)
    evs = {n: enc.encode_root(v, where=n) for n, v in sections.items()}
    skeleton = join_document(layout, {n: Section(ev, f"section {n}") for n, ev in evs.items()})
    dec = Decoder(sink)
    state = join_document(layout, {n: dec.decode(ev) for n, ev in evs.items()})
    return sink, skeleton, state


def _out(fn: Any) -> bytes | type[CkptError]:
    buf = io.BytesIO()
    try:
        fn(buf)
    except InvalidInputError:
        return InvalidInputError
    return buf.getvalue()


#: (SMALL_BYTES, SMALL_ITEMS): the defaults; everything streamed; small batches of a few items
MODES = {"whole": (docstream.SMALL_BYTES, docstream.SMALL_ITEMS), "streamed": (0, 0), "batched": (200, 4)}


@pytest.fixture(params=list(MODES))
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    small_bytes, small_items = MODES[request.param]
    monkeypatch.setattr(docstream, "SMALL_BYTES", small_bytes)
    monkeypatch.setattr(docstream, "SMALL_ITEMS", small_items)
    return str(request.param)


@SETTINGS
@given(st.one_of(strategies.documents, strategies.large, st.lists(strategies.large, max_size=3)))
@example(DOLLAR)
@example({"memory": DOLLAR, "ext": {"a": {"$one": "y" * 80_000}}})
@example([])
@example({})
def test_stream_equals_serializing_the_decoded_state(mode: str, doc: Any) -> None:
    sink, skeleton, state = _encode(doc)
    for fmt in ("json", "msgpack"):
        want = _out(lambda out, fmt=fmt: write_document(state, out, fmt))
        got = _out(lambda out, fmt=fmt: docstream.write_document(skeleton, sink, out, fmt))
        assert got == want, fmt
    for indent in (None, 2):
        view = {"id": "abc", "sections": {"memory": Section(skeleton.ev, "m")} if isinstance(skeleton, Section) else skeleton}
        want_view = (
            json.dumps(
                {
                    "id": "abc",
                    "sections": {"memory": to_json(state)} if isinstance(skeleton, Section) else {k: to_json(v) for k, v in state.items()},
                },
                indent=indent,
                ensure_ascii=False,
                allow_nan=False,
            )
            + "\n"
        )
        got_view = _out(lambda out, indent=indent, view=view: docstream.write_document(view, sink, out, "view", indent=indent))
        assert got_view == want_view.encode(), indent

"""Hypothesis strategies shared by the property tests: every kind of value a state holds."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import strategies as st

# Keys: any Unicode text without lone surrogates (which no state document can carry).
keys = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.integers(min_value=-(2**300), max_value=2**300),  # big integers beyond 64 bits
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
    st.binary(max_size=64),
)

# Occasionally something long enough to be chunked or stored as its own object.
# (Hypothesis cannot draw 70 KB directly, so a drawn seed expands into random content.)
large = st.one_of(
    st.builds(lambda seed, n: random.Random(seed).randbytes(n), st.integers(0, 2**32), st.integers(70_000, 200_000)),
    st.builds(
        lambda seed, alphabet, n: "".join(random.Random(seed).choices(alphabet, k=n)),
        st.integers(0, 2**32),
        st.lists(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=20),
        st.integers(70_000, 90_000),
    ),
)


def values(max_leaves: int = 40) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=8),
            st.dictionaries(keys, children, max_size=8),
            # long lists: exercise the chunk trees (more than TREE_MIN_ITEMS entries)
            st.lists(scalars, min_size=33, max_size=200),
            st.dictionaries(keys, scalars, min_size=33, max_size=80),
        ),
        max_leaves=max_leaves,
    )


documents = st.one_of(
    values(),
    st.fixed_dictionaries(
        {},
        optional={
            "memory": values(),
            "plan": st.lists(values(10), max_size=5),
            "tools": st.lists(values(10), max_size=40),
            "events": st.lists(values(10), max_size=40),
            "ext": st.dictionaries(st.from_regex(r"[a-z][a-z0-9_.-]{0,10}", fullmatch=True), values(10), max_size=3),
        },
    ),
)


class DictSink:
    """An ObjectSink (and source) in memory, for re-encoding."""

    def __init__(self) -> None:
        self.objects: dict[bytes, bytes] = {}

    def put(self, oid: bytes, content: bytes, obj_type: int) -> None:
        self.objects[oid] = content

    def get(self, oid: bytes) -> bytes:
        return self.objects[oid]

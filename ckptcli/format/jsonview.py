"""Decoded values as strict JSON, for `ckpt cat`, `ckpt show --json` and tools.

JSON has no byte strings and no NaN or infinities, so those are written as tagged
objects (formats/v1.md "JSON view"):

    {"$bytes": "<base64>"}               a byte string
    {"$blob": {"size": N, "id": "<hex>"}}  file data left in the store
    {"$float": "nan" | "inf" | "-inf"}   a non-finite float
    {"$map": {...}}                      a map of the state whose only key starts with "$"
                                         (so it cannot be mistaken for a tag)
"""

from __future__ import annotations

import base64
import math
from typing import Any

from ckptcli.format.values import LazyBytes


def to_json(value: Any) -> Any:
    t = type(value)
    if t is dict:
        out = {k: to_json(v) for k, v in value.items()}
        if len(out) == 1 and next(iter(out)).startswith("$"):
            return {"$map": out}
        return out
    if t is list:
        return [to_json(v) for v in value]
    if t is bytes:
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if t is LazyBytes:
        return {"$blob": {"size": value.size, "id": value.oid.hex()}}
    if t is float and not math.isfinite(value):
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    return value

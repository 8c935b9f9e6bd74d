"""The Python API the CLI is built on: open a store, take, get, list, restore, verify,
export and import. The verbs live in the core modules (checkpoint, writer, transfer,
document, listing) and are re-exported here; nothing inside ckptcli imports this module
but the facade (ckptcli/__init__.py), the CLI and the TUI. No UI imports here
(tests/test_import_hygiene.py).

    >>> import ckptcli
    >>> store = ckptcli.init_store("/tmp/demo/.ckpt")          # doctest: +SKIP
    >>> cid = ckptcli.take(store, {"memory": {"goal": "x"}}, subject="agent:bot").id  # doctest: +SKIP
    >>> ckptcli.open_checkpoint(cid.hex(), store).state()    # doctest: +SKIP
    {'memory': {'goal': 'x'}}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ckptcli.format import limits
from ckptcli.progress import NULL, Progress

if TYPE_CHECKING:
    from ckptcli.checkpoint import (
        Checkpoint,
        PathLike,
        Source,
        describe_section,
        describe_value,
        names_a_file,
        open_checkpoint,
        refuse_output_into_source,
        refuse_url,
        store_or_init,
    )
    from ckptcli.copy import CopyResult, copy_checkpoints
    from ckptcli.document import join_document, read_document, split_document, states_equal
    from ckptcli.document import write_value as write_document
    from ckptcli.format.manifest import Manifest, Subject
    from ckptcli.indoubt import InDoubt, InDoubtList, checkpoint_in_doubt, in_doubt
    from ckptcli.listing import ListFilter, format_time, info_dict, list_checkpoints, parse_labels
    from ckptcli.store.repository import Store
    from ckptcli.store.single import CheckpointFile
    from ckptcli.store.verify import Problem, VerifyReport
    from ckptcli.transfer import export_checkpoint, import_checkpoint
    from ckptcli.writer import TakeResult, origin_of, take

# Each name is imported from its module when first used, not when this module is: a
# command imports only what it calls (`ckpt restore` neither the writer nor copy nor
# transfer), and start-up is paid per verb. name -> (module, its name there)
_LAZY: dict[str, tuple[str, str]] = {
    **{
        n: ("ckptcli.checkpoint", n)
        for n in (
            "Checkpoint",
            "PathLike",
            "Source",
            "describe_section",
            "describe_value",
            "names_a_file",
            "open_checkpoint",
            "refuse_output_into_source",
            "refuse_url",
            "store_or_init",
        )
    },
    **{n: ("ckptcli.copy", n) for n in ("CopyResult", "copy_checkpoints")},
    **{n: ("ckptcli.document", n) for n in ("join_document", "read_document", "split_document", "states_equal")},
    "write_document": ("ckptcli.document", "write_value"),
    **{n: ("ckptcli.format.manifest", n) for n in ("Manifest", "Subject")},
    **{n: ("ckptcli.indoubt", n) for n in ("InDoubt", "InDoubtList", "checkpoint_in_doubt", "in_doubt")},
    **{n: ("ckptcli.listing", n) for n in ("ListFilter", "format_time", "info_dict", "list_checkpoints", "parse_labels")},
    **{n: ("ckptcli.store.repository", n) for n in ("Store", "store_location")},
    "CheckpointFile": ("ckptcli.store.single", "CheckpointFile"),
    **{n: ("ckptcli.store.verify", n) for n in ("Problem", "VerifyReport")},
    **{n: ("ckptcli.transfer", n) for n in ("export_checkpoint", "import_checkpoint")},
    **{n: ("ckptcli.writer", n) for n in ("TakeResult", "origin_of", "take")},
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value  # once: later uses are plain attribute lookups
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "Checkpoint",
    "CheckpointFile",
    "CopyResult",
    "InDoubt",
    "InDoubtList",
    "ListFilter",
    "Manifest",
    "PathLike",
    "Problem",
    "Source",
    "Store",
    "Subject",
    "TakeResult",
    "VerifyReport",
    "checkpoint_in_doubt",
    "copy_checkpoints",
    "describe_section",
    "describe_value",
    "export_checkpoint",
    "format_time",
    "import_checkpoint",
    "in_doubt",
    "info_dict",
    "init_store",
    "join_document",
    "list_checkpoints",
    "names_a_file",
    "open_checkpoint",
    "open_store",
    "origin_of",
    "parse_labels",
    "read_document",
    "refuse_output_into_source",
    "refuse_url",
    "split_document",
    "states_equal",
    "store_or_init",
    "take",
    "verify",
    "write_document",
]


# -- stores ------------------------------------------------------------------------
def open_store(path: PathLike | None = None) -> Store:
    """Open the store at `path` (a store directory or a directory holding `.ckpt/`),
    or find one as git does: CKPT_STORE, then `.ckpt/` in cwd or any parent."""
    from ckptcli.store.repository import Store, store_location

    return Store.open(store_location(path) if path is not None else None)


def init_store(path: PathLike, version: int = limits.FORMAT_VERSION, *, chunker: str | None = None) -> Store:
    """Create an empty store at `path` (a directory, or a URL such as s3://bucket/prefix),
    writing format `version` (the newest by default), its data cut by `chunker`
    (ckptcli.format.chunker.CHUNKERS; the newest by default)."""
    from ckptcli.store.repository import Store, store_location

    return Store.init(store_location(path), version, chunker=chunker)


# -- verify ----------------------------------------------------------------------------------


def verify(
    source: Source,
    refs: list[str] | None = None,
    *,
    read_data: bool = False,
    progress: Progress = NULL,
) -> VerifyReport:
    """Check checkpoints (all when `refs` is None). Structure always: every manifest,
    index, ref and node object parses and every referenced object exists. With
    `read_data`, every pack and every object is re-hashed too."""
    from ckptcli.store.single import CheckpointFile
    from ckptcli.store.verify import verify_file, verify_store

    if isinstance(source, CheckpointFile):
        return verify_file(source, read_data=read_data, progress=progress)
    with source.backend.reading_lock("store"):  # a prune repacking meanwhile is not damage
        return verify_store(source, refs, read_data=read_data, progress=progress)

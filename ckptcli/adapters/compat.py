"""The compat adapter behind the contract (ckptcli/adapters/base.py): restore a checkpoint's
state into a project's current objects through its validator, the MODULE:FUNCTION that
`ckpt compat --validator` loads (ckptcli/schema/compat.py).

`ckpt compat` loads its validator through this adapter (`CompatAdapter.load`), so the one
loader serves both; restoring with it is what `ckpt compat` calls compatible as-is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ckptcli.adapters.base import Adapter, Availability, Option
from ckptcli.errors import UsageError

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.schema.compat import Validator


class CompatAdapter(Adapter):
    """A project's own loader of state documents (its validator) as an adapter: restore only."""

    name = "compat"
    kind = "agent"
    summary = "a project's validator (MODULE:FUNCTION) that loads a state document into its current objects, as `ckpt compat` uses it"
    options = (
        Option("validator", "MODULE:FUNCTION that loads a state document into the current code's objects.", str, None, "MODULE:FUNC"),
    )

    @classmethod
    def available(cls) -> Availability:
        """Always: the validator is the project's, loaded when used.

        Returns:
            Availability(ok=True).
        """
        return Availability(True, "needs nothing beyond ckpt (the validator is the project's)")

    @staticmethod
    def load(spec: str) -> Validator:
        """The project's validator named by `spec` (what `ckpt compat --validator` loads).

        Args:
            spec: "module:function".

        Returns:
            the function: called with a state document, it returns the loaded objects and
            raises when it cannot.

        Raises:
            UsageError: a spec without ":NAME"; NotFoundError: no such module or function;
            InvalidInputError: importing it raised, or it is not callable.
        """
        from ckptcli.schema.compat import load_validator

        return load_validator(spec)

    def restore(self, checkpoint: Checkpoint, target: Any = None, **options: Any) -> Any:
        """Load `checkpoint`'s state with the validator.

        Args:
            checkpoint: an opened checkpoint.
            target: unused (the validator makes the objects); None.
            **options: validator="module:function" (required).

        Returns:
            what the validator returned.

        Raises:
            UsageError: no validator given; what load raises; what the validator raises
            (the project's code: the caller reports it).
        """
        spec = options.get("validator")
        if not spec:
            raise UsageError("the compat adapter restores through a validator", hint="give validator='myapp.state:load' (--validator)")
        return self.load(spec)(checkpoint.state())

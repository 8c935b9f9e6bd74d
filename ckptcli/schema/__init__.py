"""The subject's own state schema: the migrations users declare (`ckptcli.schema.migrations`)
and the check that old checkpoints still restore under the current code (`ckptcli.schema.compat`).

The names users declare migrations with (`migration`, `MigrationSet`, `load_migrations`, ...)
are re-exported here on first use: `from ckptcli.schema import migration` is the documented path.
"""

from __future__ import annotations

from typing import Any

# every public name the module had when it was `ckptcli.schema` (0.2)
_MIGRATIONS = (
    "AlreadyMigratedError",
    "ENTRY_POINT_GROUP",
    "EP_PREFIX",
    "Migration",
    "MigrationError",
    "MigrationSet",
    "PreparedMigration",
    "StateFunc",
    "Version",
    "cwd_importable",
    "import_object",
    "installed_migrations",
    "load_migrations",
    "migrate_checkpoint",
    "migrate_state",
    "migration",
    "parse_version",
    "prepare_migration",
    "storable_problem",
    "version_of",
)
__all__ = list(_MIGRATIONS)


def __getattr__(name: str) -> Any:
    if name in _MIGRATIONS:
        from ckptcli.schema import migrations

        return getattr(migrations, name)
    raise AttributeError(f"module 'ckptcli.schema' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_MIGRATIONS})

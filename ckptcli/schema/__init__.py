"""The subject's own state schema: the migrations users declare (`ckptcli.schema.migrations`)
and the check that old checkpoints still restore under the current code (`ckptcli.schema.compat`).

The names users declare migrations with (`migration`, `MigrationSet`, `load_migrations`, ...)
are re-exported here on first use: `from ckptcli.schema import migration` is the documented path.
"""

from __future__ import annotations

from typing import Any

_MIGRATIONS = (
    "AlreadyMigratedError",
    "Migration",
    "MigrationError",
    "MigrationSet",
    "PreparedMigration",
    "load_migrations",
    "migrate_checkpoint",
    "migrate_state",
    "migration",
    "parse_version",
    "prepare_migration",
    "version_of",
)


def __getattr__(name: str) -> Any:
    if name in _MIGRATIONS:
        from ckptcli.schema import migrations

        return getattr(migrations, name)
    raise AttributeError(f"module 'ckptcli.schema' has no attribute {name!r}")

"""Store backends: the object-storage contract (base) and its implementations, chosen by
the URL of a store (docs/design.md, "Backends")."""

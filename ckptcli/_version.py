"""The package version, in the lowest layer so that any module may record it (a
manifest's producer and deps) without importing the `ckptcli` facade."""

__version__ = "0.2.0"

"""The user-schema example of docs/migrations.md, run by tests/test_schema_migrations.py
and tests/test_compat.py: the doc shows these files verbatim (a test checks it)."""

"""`ckpt tui`: a terminal UI over ckptcli's library, built with Textual.

The models it draws (the history graph, the event timeline) are in ckptcli.history.timeline and
know nothing of Textual; this package holds the screens and widgets only. The core never
imports it (tests/test_import_hygiene.py)."""

"""The Temporal adapter: workflow histories as Temporal exports them, imported as
checkpoints of `workflow:<workflow id>` (`ckpt import temporal`), and the replay check of
a project's workflow code against them with temporalio's own Replayer (`ckpt replay
--check MODULE:Class`, `ckpt compat --workflow MODULE:Class`). docs/workflows.md,
"Temporal histories", is the guide.

Modules: `events` (the event kinds `temporal:<EventType>` and their reducers: the derived
state; needs nothing beyond ckpt), `reader` (a history file streamed event by event and
checked), `importer` (the import into a store, and the history read back), `check` (the
replay check), `adapter` (the adapter and its importer behind the contract). Importing
this package imports neither temporalio nor ijson; they are imported when a history is
read or replayed.
"""

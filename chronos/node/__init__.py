"""A node's components: ingest (reader, decoder process, writer), delete, checkpoints, the
metrics reporter; and a node alone's at-least-once delivery engine (push -> senders ->
progress). Roles that combine them are wired in ``chronos/runtime/``."""

"""The broker node: ingest, push, send, progress and delete components, and their roles."""

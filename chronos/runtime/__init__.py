"""Wiring: the only package that knows both ``node/`` and ``group/``; builds a node's role."""

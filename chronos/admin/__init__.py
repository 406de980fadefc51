"""A node's admin HTTP API: health, readiness and Prometheus metrics, loopback by default.

``view.py`` says what the API asks of a node (a Protocol; ``runtime/probes.py`` answers it),
``prometheus.py`` turns the node's counters into Prometheus metrics without touching the hot
path, and ``server.py`` serves them with uvicorn on a thread of the node.
"""

"""Integration tests: they run against a real Kafka-protocol broker (see ``tests/broker.py``)."""

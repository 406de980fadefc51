"""Thin typed wrappers over confluent-kafka: producer, error classes, topic admin, log routing."""

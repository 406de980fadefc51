"""The embedded local stack: a Kafka-compatible broker (Tansu) for development and tests."""

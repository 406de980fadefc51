"""chronos: a delay-message broker for Kafka (broker node, shared message model, CLI)."""

__version__ = "0.1.0"

"""Drivers of ``chronos.kafka.publisher.Publisher``: idempotent, transactional, and a stub."""

"""Test package; being a package lets integration tests import ``tests.broker``."""

"""Exception hierarchy: one root, one branch per boundary (config, input, store, Kafka)."""

from __future__ import annotations


class ChronosError(Exception):
    """Root of every error chronos raises on purpose."""


class ConfigError(ChronosError):
    """The settings file, environment or command line is wrong."""


class ValidationError(ChronosError):
    """A delay request breaks a rule; ``field`` names the offending field for the caller.

    ``status`` is the HTTP status the proxy answers with (422 for bad values, 413 for size).
    """

    def __init__(self, field: str, message: str, *, status: int = 422) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


class DecodeError(ChronosError):
    """A record or stored value could not be decoded; keeps the raw bytes' origin and the cause."""

    def __init__(self, reason: str, *, origin: str = "") -> None:
        super().__init__(f"{reason} ({origin})" if origin else reason)
        self.reason = reason
        self.origin = origin


class StoreError(ChronosError):
    """The RocksDB store is unusable (wrong format version, corrupt metadata)."""


class NotAcknowledged(ChronosError):
    """Kafka did not acknowledge a request (the inner topic) in time, or refused it: its outcome
    is unknown or negative, never "accepted"."""


class NotReady(ChronosError):
    """An answer is not available yet (a count being built at start-up): ask again soon."""

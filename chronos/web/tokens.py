"""Bearer tokens: who may call what, kept hashed in a file that is re-read when it changes.

A token is a random secret (``new_token``); the file holds only its SHA-256, its name, the
target topics it may schedule to (exact names, or prefixes written ``orders.*``), the
operations it may call and its request rate. A fast hash is right here: the secrets carry 256
random bits, so the hash need not slow a guesser down (as GitHub's and Stripe's API keys).
Rotating a token is editing the file: the guard re-reads it (``TokenBook.current``) within a
second, without a restart.

File format (TOML)::

    [[tokens]]
    name = "orders-service"
    sha256 = "9f86d0818..."          # chronos token prints it
    topics = ["orders.*", "payments.timeout"]
    operations = ["send", "cancel", "reschedule", "status"]
    requests_per_s = 500              # optional; 0 or absent: unlimited
    messages_per_s = 5000             # optional, the proxy's: messages scheduled (a batch of
                                      # 100 counts 100); 0 or absent: unlimited
    max_pending = 1000000             # optional; 0 or absent: unlimited (chronos/web/quota.py)
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args


def _log() -> Any:
    """This module's logger, imported when first needed: ``chronos token`` and ``--help``
    import this module and stay free of the logging libraries."""
    import structlog

    return structlog.get_logger(__name__)


Operation = Literal["send", "cancel", "reschedule", "status", "admin"]
OPERATIONS: tuple[str, ...] = get_args(Operation)
_KEYS = frozenset(
    {"name", "sha256", "topics", "operations", "requests_per_s", "messages_per_s", "max_pending"}
)
#: A token name used as is for its tenant: id characters but the tenant separator ``:``.
_TENANT = re.compile(r"[A-Za-z0-9._-]{1,32}")
#: How often the file's modification time is looked at.
_RELOAD_CHECK_S = 1.0


class TokenFileError(ValueError):
    """The tokens file cannot be used; the message says where and why."""


def new_token() -> str:
    """A fresh secret: 32 random bytes, URL-safe, prefixed so that a leaked one is greppable."""
    return "chronos_" + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """What the file holds for ``token``."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Token:
    """One token's rights."""

    name: str
    sha256: str
    topics: tuple[str, ...]
    operations: frozenset[str]
    requests_per_s: float = 0.0
    max_pending: int = 0
    messages_per_s: float = 0.0

    def may(self, operation: Operation) -> bool:
        return operation in self.operations

    @property
    def tenant(self) -> str:
        """Whose ids this token's requests use (proxy/http/tenancy.py): its name when that
        is a short id-safe word, else a digest of it."""
        if _TENANT.fullmatch(self.name):
            return self.name
        return "t" + hashlib.sha256(self.name.encode()).hexdigest()[:12]

    @property
    def every_topic(self) -> bool:
        """True when no topic is out of reach (``topics = ["*"]``)."""
        return "*" in self.topics

    def may_send_to(self, topic: str) -> bool:
        """Whether this token may schedule to ``topic``: a listed name, or a ``prefix*``."""
        for allowed in self.topics:
            if allowed.endswith("*"):
                if topic.startswith(allowed[:-1]):
                    return True
            elif topic == allowed:
                return True
        return False


def parse_tokens(text: str, origin: str) -> dict[str, Token]:
    """The tokens of a file's text by hash; TokenFileError naming the entry that is wrong."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TokenFileError(f"{origin}: not TOML: {exc}") from exc
    entries = document.get("tokens", [])
    if not isinstance(entries, list):
        raise TokenFileError(f"{origin}: 'tokens' must be an array of tables ([[tokens]])")
    allow_none = document.get("allow_none", False)
    if not isinstance(allow_none, bool):
        raise TokenFileError(f"{origin}: 'allow_none' must be true or false")
    if not entries and not allow_none:
        # An empty file parses, and would refuse everyone (operators and the metrics scraper
        # too) after one careless edit, logged only as a reload (issue 62): refused like a
        # broken file unless it says it means it.
        raise TokenFileError(
            f"{origin}: no tokens: every request would be refused; write allow_none = true "
            "at the top of the file to mean that"
        )
    book: dict[str, Token] = {}
    for n, entry in enumerate(entries):
        where = f"{origin}: tokens[{n}]"
        if not isinstance(entry, dict):
            raise TokenFileError(f"{where}: not a table")
        unknown = set(entry) - _KEYS
        if unknown:
            raise TokenFileError(f"{where}: unknown keys {sorted(unknown)}")
        name, digest = entry.get("name"), entry.get("sha256")
        if not isinstance(name, str) or not name:
            raise TokenFileError(f"{where}: 'name' must be a non-empty string")
        if not isinstance(digest, str) or len(digest) != 64:
            raise TokenFileError(f"{where} ({name}): 'sha256' must be 64 hex digits")
        operations = entry.get("operations", [])
        bad = [op for op in operations if op not in OPERATIONS]
        if not isinstance(operations, list) or bad:
            raise TokenFileError(f"{where} ({name}): operations must be among {OPERATIONS}")
        topics = entry.get("topics", [])
        if not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics):
            raise TokenFileError(f"{where} ({name}): 'topics' must be a list of names")
        rate = entry.get("requests_per_s", 0)
        if not isinstance(rate, int | float) or rate < 0:
            raise TokenFileError(f"{where} ({name}): 'requests_per_s' must be >= 0")
        messages = entry.get("messages_per_s", 0)
        if not isinstance(messages, int | float) or isinstance(messages, bool) or messages < 0:
            raise TokenFileError(f"{where} ({name}): 'messages_per_s' must be >= 0")
        max_pending = entry.get("max_pending", 0)
        if not isinstance(max_pending, int) or isinstance(max_pending, bool) or max_pending < 0:
            raise TokenFileError(f"{where} ({name}): 'max_pending' must be an integer >= 0")
        if digest.lower() in book:
            raise TokenFileError(f"{where} ({name}): the same token is listed twice")
        book[digest.lower()] = Token(
            name,
            digest.lower(),
            tuple(topics),
            frozenset(operations),
            float(rate),
            max_pending,
            float(messages),
        )
    return book


class TokenBook:
    """The tokens of a file, re-read when the file changes.

    A file that becomes unreadable, invalid or deleted keeps the last good tokens in force
    (and ``error`` says why), so a half-written edit never locks everyone out or lets anyone
    in; but a revocation that did not take must not go unnoticed: each new error is logged
    (``tokens_file_unusable``, an error), and so is the reload that ends it.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._mtime_ns = -1
        self._checked_at = 0.0
        self.error: str | None = None
        self._tokens = parse_tokens(path.read_text(), str(path))
        self._mtime_ns = path.stat().st_mtime_ns

    def _reload_if_changed(self) -> None:
        now = time.monotonic()
        if now - self._checked_at < _RELOAD_CHECK_S:
            return
        self._checked_at = now
        try:
            mtime = self._path.stat().st_mtime_ns
            if mtime == self._mtime_ns:
                return
            tokens = parse_tokens(self._path.read_text(), str(self._path))
        except (OSError, TokenFileError) as exc:
            if str(exc) != self.error:
                _log().error(
                    "tokens_file_unusable",
                    path=str(self._path),
                    error=str(exc),
                    kept="the last good tokens stay in force until the file is fixed",
                )
            self.error = str(exc)
            return
        _log().info("tokens_reloaded", path=str(self._path), tokens=len(tokens))
        self._tokens, self._mtime_ns, self.error = tokens, mtime, None

    def find(self, token: str) -> Token | None:
        """The rights of ``token``, None when no entry holds its hash."""
        digest = hash_token(token)
        with self._lock:
            self._reload_if_changed()
            found = self._tokens.get(digest)
        if found is None or not hmac.compare_digest(found.sha256, digest):
            return None
        return found

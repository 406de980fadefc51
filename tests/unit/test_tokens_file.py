"""A tokens file without tokens (issue 62): refused like a broken one, at start and on a
reload (the last good tokens stay in force), unless it says ``allow_none = true``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chronos.web.tokens import TokenBook, TokenFileError, hash_token, new_token, parse_tokens

TOKEN = new_token()
ENTRY = f'[[tokens]]\nname = "ops"\nsha256 = "{hash_token(TOKEN)}"\noperations = ["admin"]\n'


@pytest.mark.parametrize("text", ["", "\n# every token revoked\n", "tokens = []\n"])
def test_a_file_without_tokens_is_refused(text: str) -> None:
    with pytest.raises(TokenFileError, match="no tokens: every request would be refused"):
        parse_tokens(text, "tokens.toml")


def test_a_file_that_says_it_means_no_tokens_is_taken() -> None:
    assert parse_tokens("allow_none = true\n", "tokens.toml") == {}
    assert len(parse_tokens("allow_none = true\n" + ENTRY, "tokens.toml")) == 1
    with pytest.raises(TokenFileError, match="allow_none"):
        parse_tokens('allow_none = "yes"\n', "tokens.toml")


def test_emptying_the_file_keeps_the_last_tokens_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(ENTRY)
    book = TokenBook(path)
    assert book.find(TOKEN) is not None
    path.write_text("")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    book._checked_at = 0.0  # the next lookup reads the file again (about once a second)
    assert book.find(TOKEN) is not None, "an emptied file locked everyone out"
    assert book.error is not None and "no tokens" in book.error

"""``chronos token``: the secret it prints is the one its file entry holds the hash of, with the
rights asked for, and the entry parses as the guard reads it."""

from __future__ import annotations

import json

import pytest

from chronos.cli.main import main
from chronos.web.tokens import TokenFileError, hash_token, parse_tokens


def test_the_printed_entry_grants_exactly_what_was_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["token", "--name", "orders", "--topic", "orders.*", "--op", "send", "--op", "cancel"]
    assert main([*argv, "--requests-per-s", "50", "--max-pending", "1000"]) == 0
    printed = json.loads(capsys.readouterr().out)
    (token,) = parse_tokens(printed["tokens_file_entry"], "entry").values()
    assert token.name == "orders" and token.topics == ("orders.*",)
    assert token.operations == {"send", "cancel"}
    assert (token.requests_per_s, token.max_pending) == (50, 1000)
    assert token.sha256 == hash_token(printed["token"])


@pytest.mark.parametrize("bad", ["-1", "1.5", "true", '"10"'])
def test_max_pending_must_be_a_whole_number(bad: str) -> None:
    entry = f'[[tokens]]\nname = "x"\nsha256 = "{"0" * 64}"\nmax_pending = {bad}\n'
    with pytest.raises(TokenFileError, match="max_pending"):
        parse_tokens(entry, "entry")

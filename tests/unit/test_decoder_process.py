"""The decoder child process: a failed start raises the child's reason in the parent.

Reading through a child is covered end to end by the integration tests (every node there
decodes in child processes, the default).
"""

from __future__ import annotations

import pytest

from chronos.names import TopicNames
from chronos.node.decoder_process import DecoderProcess
from chronos.node.inner_reader import ReaderSpec
from chronos.settings import LimitSettings, LogSettings


def _spec(config: dict[str, str | int | float | bool]) -> ReaderSpec:
    return ReaderSpec(config, "chronos.inner", [0], LimitSettings(), TopicNames("chronos"), 10, 0.1)


def test_a_child_that_cannot_open_its_consumer_fails_the_open_and_exits() -> None:
    spec = _spec({"group.id": "g", "no.such.property": "x"})
    source = DecoderProcess("chronos-decoder-test", spec, LogSettings(level="error"))
    with pytest.raises(RuntimeError, match="no.such.property"):
        source.open({})


def test_a_source_cannot_be_read_before_it_is_opened() -> None:
    source = DecoderProcess("chronos-decoder-test", _spec({}), LogSettings())
    with pytest.raises(RuntimeError, match="before open"):
        source.read(0.01)
    source.close()  # closing what never opened is a no-op

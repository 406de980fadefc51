"""A cluster's partition count: what it was created with, read from its topics; a changed
count refused at start and reported while running."""

from __future__ import annotations

import pytest

from chronos.cluster.partitions import PartitionWatch, check_unchanged, created_with
from chronos.errors import ConfigError
from chronos.names import TopicNames

NAMES = TopicNames("ns")


def _progress(cluster: str, partitions: range) -> list[str]:
    return [NAMES.progress(NAMES.shard_group(cluster, p)) for p in partitions]


def test_a_cluster_was_created_with_as_many_partitions_as_it_has_progress_topics() -> None:
    """Mutants caught: another cluster's topics counted (``c`` and ``c2``); a partial set
    (a first start cut short) taken for a count."""
    topics = [*_progress("c", range(4)), *_progress("c2", range(8)), "ns.inner"]
    assert created_with(topics, NAMES, "c") == 4
    assert created_with(topics, NAMES, "c2") == 8
    assert created_with(topics, NAMES, "new") is None
    assert created_with(_progress("c", range(1, 4)), NAMES, "c") is None


def test_a_node_refuses_an_inner_topic_grown_since_its_cluster_was_created() -> None:
    topics = _progress("c", range(4))
    check_unchanged(4, topics, NAMES, "c")
    check_unchanged(6, [], NAMES, "c")  # a new cluster takes the topic's count
    with pytest.raises(ConfigError, match="has 6 partitions, but cluster c was created with 4"):
        check_unchanged(6, topics, NAMES, "c")


def test_a_running_node_reports_a_changed_count_until_it_is_back() -> None:
    """Mutant caught: the first answer kept for ever (a count put back still reported)."""
    answers: list[int | Exception] = [4, RuntimeError("Kafka away"), 6, 4]

    def count() -> int:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    watch = PartitionWatch(4, count, 0.0)
    watch.step()
    assert watch.problem() is None
    watch.step()  # no answer: nothing concluded
    assert watch.problem() is None
    watch.step()
    assert watch.changed_to == 6
    assert watch.problem() == (
        "the inner topic has 6 partitions, this node placed 4: see the inner_partitions_changed "
        "log line"
    )
    watch.step()
    assert watch.problem() is None

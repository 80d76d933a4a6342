"""The agent's one retry schedule, as the publisher and the collector restarts use it."""

from __future__ import annotations

from ranksight.agent.backoff import backoff_s


def test_publish_retries_double_from_a_tenth_of_a_second_up_to_the_ceiling() -> None:
    waits = [backoff_s(attempt, 0.1, 5.0) for attempt in range(8)]
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


def test_collector_restarts_double_from_one_second_up_to_a_minute() -> None:
    assert [backoff_s(restart, 1.0, 60.0) for restart in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]


def test_a_long_outage_stays_at_the_ceiling() -> None:
    assert backoff_s(10**6, 1.0, 60.0) == 60.0

"""The partition assignment every shard computes alike: complete, balanced, independent of order, and stable when a
member joins or leaves (few partitions move besides the joiner's or leaver's own)."""

from __future__ import annotations

import pytest

from ranksight.aggregator.shards import assignment

SIZES = [(p, n) for p in (1, 3, 6, 8, 12, 32, 100) for n in range(1, 9)]


def names(first: int, last: int) -> list[str]:
    return [f"shard-{i}" for i in range(first, last)]


@pytest.mark.parametrize(("partitions", "members"), SIZES)
def test_every_partition_has_one_owner_and_shares_differ_by_at_most_one(
    partitions: int, members: int
) -> None:
    owner = assignment(partitions, names(0, members))
    assert sorted(owner) == list(range(partitions))
    counts = [sum(1 for m in owner.values() if m == name) for name in names(0, members)]
    assert max(counts) - min(counts) <= 1
    assert sum(counts) == partitions


def test_the_same_members_give_the_same_assignment_in_any_order() -> None:
    members = ["b", "c", "a", "d"]
    assert assignment(12, members) == assignment(12, sorted(members)) == assignment(12, members[::-1])
    assert assignment(12, []) == {}


@pytest.mark.parametrize(("partitions", "members"), SIZES)
def test_a_member_joining_or_leaving_moves_little_more_than_its_share(partitions: int, members: int) -> None:
    before = assignment(partitions, names(0, members))
    joined = assignment(partitions, names(0, members + 1))
    share = sum(1 for m in joined.values() if m == f"shard-{members}")
    assert sum(before[p] != joined[p] for p in range(partitions)) <= 2 * share + 1
    left = assignment(partitions, names(1, members + 1))  # shard-0 gone
    share = sum(1 for m in joined.values() if m == "shard-0")
    assert sum(joined[p] != left[p] for p in range(partitions)) <= 2 * share + 1

"""Group membership on the in-memory layer (the Redis side: tests/audits/live/test_live_redis.py)."""

from __future__ import annotations

import asyncio

from channels.layers import InMemoryChannelLayer

from audits import membership


def test_in_memory_live_groups_are_those_with_a_member_and_a_rejoin_tells_a_lost_one():
    async def scenario() -> list:
        layer = InMemoryChannelLayer()
        await layer.group_add("watched", "page-1")
        seen = [await membership.live_groups(layer, ["watched", "nobody"])]
        seen.append(await membership.rejoin(layer, "watched", "page-1"))  # still a member
        await layer.group_discard("watched", "page-1")
        seen.append(await membership.live_groups(layer, ["watched"]))
        seen.append(await membership.rejoin(layer, "watched", "page-1"))  # it had been lost
        seen.append(await membership.live_groups(layer, ["watched"]))
        return seen

    assert asyncio.run(scenario()) == [{"watched"}, False, set(), True, {"watched"}]


def test_a_layer_that_cannot_tell_counts_every_group_as_watched():
    class OtherLayer:
        def __init__(self) -> None:
            self.added: list[tuple[str, str]] = []

        async def group_add(self, group: str, channel: str) -> None:
            self.added.append((group, channel))

    layer = OtherLayer()
    assert asyncio.run(membership.live_groups(layer, ["a", "b"])) == {"a", "b"}
    assert asyncio.run(membership.rejoin(layer, "a", "page")) is False
    assert layer.added == [("a", "page")]

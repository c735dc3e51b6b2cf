"""Channel-layer group membership the layers' public API does not tell: which groups have
a live member, and whether a member was still one when it joins again.

The in-memory layer answers from its group table. channels_redis keeps a group as a sorted
set of its channels scored by when they joined (a member older than the layer's
`group_expiry` is gone); it is read and written here as `group_add` writes it, one
pipelined round trip per Redis shard. Other layers: every group counts as watched, and a
rejoin cannot tell whether the member was lost.
"""

from __future__ import annotations

import time
from typing import Any

from channels.layers import InMemoryChannelLayer

try:
    from channels_redis.core import RedisChannelLayer
except ImportError:  # pragma: no cover - the `redis` extra

    class RedisChannelLayer:  # type: ignore[no-redef]
        """Stands for the Redis layer when channels_redis is not installed: never one."""


async def live_groups(layer: Any, groups: list[str]) -> set[str]:
    """The `groups` with at least one live member."""
    if isinstance(layer, InMemoryChannelLayer):
        return {group for group in groups if layer.groups.get(group)}
    if not isinstance(layer, RedisChannelLayer):
        return set(groups)
    since = time.time() - layer.group_expiry
    live: set[str] = set()
    for index, names in _shards(layer, groups).items():
        async with layer.connection(index).pipeline(transaction=False) as pipe:
            for group in names:
                pipe.zcount(layer._group_key(group), since, "+inf")
            counts = await pipe.execute()
        live.update(group for group, count in zip(names, counts, strict=True) if count)
    return live


async def rejoin(layer: Any, group: str, channel: str) -> bool:
    """Add `channel` to `group` again (as `group_add`: memberships expire, and a restarted
    Redis forgot them); True when it had not been a member any more."""
    if isinstance(layer, RedisChannelLayer):
        key = layer._group_key(group)
        async with layer.connection(layer.consistent_hash(group)).pipeline(
            transaction=False
        ) as pipe:
            pipe.zadd(key, {channel: time.time()})
            pipe.expire(key, layer.group_expiry)
            added, _ = await pipe.execute()
        return bool(added)
    missing = isinstance(layer, InMemoryChannelLayer) and channel not in layer.groups.get(group, {})
    await layer.group_add(group, channel)
    return missing


def _shards(layer: Any, groups: list[str]) -> dict[int, list[str]]:
    shards: dict[int, list[str]] = {}
    for group in groups:
        shards.setdefault(layer.consistent_hash(group), []).append(group)
    return shards

"""Session affinity: a consistent-hash ring with virtual nodes.

The key is the request's session key (the `x-session-id` header or the body's `user`)
or else the first `prefix_chars` characters of the prompt. Points on the ring come from
BLAKE2b, so the same key maps to the same replica in every process (the proxy and the
simulator agree), and removing a replica moves only the keys it held (about 1/N).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence

from servelab.errors import ServelabError
from servelab.routing.records import (
    NoFeedback,
    ReplicaView,
    RouteDecision,
    RouteRequest,
    healthy_replicas,
)


def stable_hash64(text: str) -> int:
    """A 64-bit hash of `text` that is the same in every process (unlike `hash`)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Virtual nodes of a fixed set of replica indices, sorted by their ring position."""

    def __init__(self, indices: Sequence[int], vnodes: int) -> None:
        points = sorted(
            (stable_hash64(f"replica-{i}#{v}"), i) for i in indices for v in range(vnodes)
        )
        self._hashes = [h for h, _ in points]
        self._owners = [i for _, i in points]

    def owner(self, key: str) -> int:
        """The replica index owning `key`: the first point clockwise of its hash."""
        pos = bisect.bisect_right(self._hashes, stable_hash64(key))
        return self._owners[pos % len(self._owners)]


class ConsistentHash(NoFeedback):
    """Sticks each session (or prompt prefix) to one replica while that replica is healthy."""

    name = "consistent_hash"

    def __init__(self, *, vnodes: int = 160, prefix_chars: int = 256) -> None:
        if vnodes < 1:
            raise ServelabError(f"consistent_hash: vnodes must be >= 1, got {vnodes}")
        if prefix_chars < 1:
            raise ServelabError(f"consistent_hash: prefix_chars must be >= 1, got {prefix_chars}")
        self._vnodes = vnodes
        self._prefix_chars = prefix_chars
        # One ring per set of healthy replicas seen; sets change only on health events.
        self._rings: dict[tuple[int, ...], HashRing] = {}

    def choose(
        self, req: RouteRequest, replicas: Sequence[ReplicaView], now_s: float
    ) -> RouteDecision:
        members = tuple(r.index for r in healthy_replicas(replicas))
        ring = self._rings.get(members)
        if ring is None:
            if len(self._rings) >= 64:
                self._rings.clear()
            ring = self._rings[members] = HashRing(members, self._vnodes)
        if req.session_key is not None:
            key, what = req.session_key, "session key"
        else:
            key, what = req.prompt[: self._prefix_chars], f"first {self._prefix_chars} prompt chars"
        index = ring.owner(key)
        return RouteDecision(index, f"consistent hash of the {what} -> replica {index}")

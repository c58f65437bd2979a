"""An approximate prefix tree of what each replica has been sent: hashed chunk chains.

A prompt is cut into chunks of `chunk_chars` characters; chunk k is named by the hash of
(name of chunk k-1, text of chunk k), so a name stands for the whole prefix up to it (a
node of a trie keyed by chunks). Each replica keeps the names it was sent in an LRU of at
most `max_chunks_per_replica`; a prompt matches a replica for as many leading chunks as
the replica holds. Paths are touched leaf first, so eviction takes leaves before their
ancestors and a kept name always has its ancestors. The tree is approximate: it knows
what the router sent, not what the engine kept, and ignores the partial last chunk.

Names use Python's `hash`, which varies between processes; only equality matters here.
"""

from __future__ import annotations

from collections import OrderedDict

from servelab.errors import ServelabError


class PrefixTree:
    """Per-replica LRU sets of chunk-chain names."""

    def __init__(
        self, *, chunk_chars: int = 64, max_prefix_chars: int = 16384,
        max_chunks_per_replica: int = 65536,
    ) -> None:
        if chunk_chars < 1:
            raise ServelabError(f"cache_aware: chunk_chars must be >= 1, got {chunk_chars}")
        if max_prefix_chars < chunk_chars:
            raise ServelabError(
                f"cache_aware: max_prefix_chars ({max_prefix_chars}) must be >= chunk_chars "
                f"({chunk_chars})"
            )
        if max_chunks_per_replica < 1:
            raise ServelabError(
                f"cache_aware: max_chunks_per_replica must be >= 1, got {max_chunks_per_replica}"
            )
        self.chunk_chars = chunk_chars
        self._max_chars = max_prefix_chars
        self._capacity = max_chunks_per_replica
        self._held: dict[int, OrderedDict[int, None]] = {}

    def names(self, prompt: str) -> list[int]:
        """The chain names of the prompt's whole chunks (at most `max_prefix_chars`)."""
        c = self.chunk_chars
        end = min(len(prompt), self._max_chars) // c * c
        out: list[int] = []
        h = 0
        for start in range(0, end, c):
            h = hash((h, prompt[start : start + c]))
            out.append(h)
        return out

    def match(self, names: list[int], index: int) -> int:
        """How many leading chunks of `names` replica `index` holds."""
        held = self._held.get(index)
        if not held:
            return 0
        n = 0
        for name in names:
            if name not in held:
                break
            n += 1
        return n

    def insert(self, names: list[int], index: int) -> None:
        """Record that replica `index` was sent this prefix (it becomes most recent)."""
        held = self._held.setdefault(index, OrderedDict())
        for name in reversed(names):
            if name in held:
                held.move_to_end(name)
            else:
                held[name] = None
        while len(held) > self._capacity:
            held.popitem(last=False)

    def size(self, index: int) -> int:
        """Chunks held for replica `index`."""
        held = self._held.get(index)
        return len(held) if held else 0

    def forget(self, index: int) -> None:
        """Drop everything held for `index` (its cache is gone, e.g. it restarted)."""
        self._held.pop(index, None)

"""The paged KV cache of one simulated engine: blocks, a free queue, automatic prefix caching.

Mirrors vLLM V1's `KVCacheManager` / `BlockPool` closely enough that the same workload gives
the same hit counts and the same admission decisions:

- the pool has `num_gpu_blocks` blocks of `block_size` tokens; block 0 is vLLM's reserved
  "null" block, so `num_gpu_blocks - 1` are usable;
- free blocks sit in one LRU queue (front = evicted first); a freed block goes to the tail,
  and a request frees its blocks tail-first so its last blocks are evicted first;
- with prefix caching, every *full* block of a prompt has a hash chained over
  (parent hash, block tokens); a full block that is allocated is registered under its hash
  at once (vLLM registers at scheduling time), keeps its hash while free, and loses it only
  when it is re-allocated (eviction);
- a lookup returns the longest chain of cached full blocks, capped so that at least one
  prompt token is computed (vLLM always recomputes the last token to get logits).

Block ids are ints and all state is in flat lists: no per-block objects, because the
simulator allocates hundreds of thousands of blocks per run.
"""

from __future__ import annotations

import struct
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Sequence


def prompt_block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of `token_ids` (one per full block): block k's is
    `hash((block k-1's, the tuple of its ids as Python ints))`, block 0's parent 0."""
    if isinstance(token_ids, array):
        # Offline requests keep their ids as arrays: `struct` makes each block's tuple
        # straight from the buffer in C (an array's ints must be made either way: making
        # them per block beats a list of all of them and a slice per block).
        full = len(token_ids) // block_size * block_size
        blocks: Iterator[tuple[int, ...]] = struct.iter_unpack(
            f"{block_size}{token_ids.typecode}", memoryview(token_ids)[:full])
    else:
        # one iterator zipped with itself: its consecutive n-length groups (the idiom
        # `zip`'s documentation gives), without a slice per block
        blocks = zip(*[iter(token_ids)] * block_size)
    hashes: list[int] = []
    parent = 0
    for block in blocks:
        parent = hash((parent, block))
        hashes.append(parent)
    return hashes


class BlockPool:
    """Free queue, reference counts and the hash -> block table of one KV pool."""

    def __init__(self, num_gpu_blocks: int, block_size: int, enable_caching: bool) -> None:
        if num_gpu_blocks < 2:
            raise ValueError(f"the KV pool needs at least 2 blocks (got {num_gpu_blocks})")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1 (got {block_size})")
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self._ref = [0] * num_gpu_blocks
        self._hash: list[int | None] = [None] * num_gpu_blocks
        self._cached: dict[int, int] = {}
        # Block 0 is the null block: never free, never allocated. (fromkeys builds the same
        # queue without a Python generator step per block: a fleet's pools hold ~10^5 each.)
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_gpu_blocks))

    @property
    def num_usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now (free, cached-but-unreferenced included)."""
        return len(self._free)

    @property
    def usage_frac(self) -> float:
        """Fraction of usable blocks referenced by requests (vLLM's `kv_cache_usage_perc`)."""
        return 1.0 - len(self._free) / self.num_usable_blocks

    def lookup(self, hashes: Sequence[int], max_blocks: int) -> list[int]:
        """The cached blocks for the longest prefix of `hashes` (at most `max_blocks`)."""
        if not self.enable_caching:
            return []
        found: list[int] = []
        cached = self._cached
        for h in hashes[:max_blocks]:
            block = cached.get(h)
            if block is None:
                break
            found.append(block)
        return found

    def num_evictable(self, blocks: Sequence[int]) -> int:
        """How many of `blocks` are free now (touching them takes them off the free queue)."""
        ref = self._ref
        return sum(1 for b in blocks if ref[b] == 0)

    def touch(self, blocks: Sequence[int]) -> None:
        """Take a reference on cache-hit blocks (off the free queue when they were free)."""
        ref, free = self._ref, self._free
        for b in blocks:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """Take `n` blocks from the front of the free queue, evicting their cached hashes."""
        if n > len(self._free):
            raise RuntimeError(f"allocate({n}) with {len(self._free)} free blocks")
        out: list[int] = []
        free, ref, hashes, cached = self._free, self._ref, self._hash, self._cached
        for _ in range(n):
            b, _unused = free.popitem(last=False)
            h = hashes[b]
            if h is not None:
                if cached.get(h) == b:
                    del cached[h]
                hashes[b] = None
            ref[b] = 1
            out.append(b)
        return out

    def register(self, block: int, block_hash: int) -> None:
        """Record that `block` holds the full block with chained hash `block_hash`."""
        if not self.enable_caching or self._hash[block] is not None:
            return
        self._hash[block] = block_hash
        # First writer wins, as in vLLM: a duplicate computed in parallel stays uncached.
        self._cached.setdefault(block_hash, block)

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference on each of `blocks`, releasing them to the queue tail-first."""
        ref, free = self._ref, self._free
        for b in reversed(blocks):
            r = ref[b] - 1
            if r < 0:
                raise RuntimeError(f"block {b} freed more often than referenced")
            ref[b] = r
            if r == 0:
                free[b] = None

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash, as vLLM's reset does: refused (False) while any block
        is referenced by a request, so a running request never loses its blocks."""
        if len(self._free) != self.num_usable_blocks:
            return False
        self._cached.clear()
        self._hash = [None] * self.num_gpu_blocks
        return True

    def check(self) -> None:
        """Assert the pool's invariants (tests and debugging; O(pool size))."""
        assert all(r >= 0 for r in self._ref), "negative reference count"
        assert self._ref[0] == 0 and 0 not in self._free, "null block in use"
        for b in range(1, self.num_gpu_blocks):
            assert (self._ref[b] == 0) == (b in self._free), f"block {b}: ref/free mismatch"
        for h, b in self._cached.items():
            assert self._hash[b] == h, f"block {b}: hash table out of sync"

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
simulator allocates hundreds of thousands of blocks per run. The free queue is a deque with
lazy removal (`BlockPool` says how), not an `OrderedDict`: a long run's steady churn made
the ordered dict rebuild its node index every few thousand frees (about 0.9 us a block
freed in a 64-replica fleet against 0.1 here).
"""

from __future__ import annotations

import struct
from array import array
from collections import deque
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
    """Free queue, reference counts and the hash -> block table of one KV pool.

    The free queue is vLLM's LRU order kept in a deque: a freed block goes to the back, an
    allocation takes the front. A free block that a prefix-cache hit takes back (`touch`)
    stays in the deque as a stale copy and is skipped when the front reaches it; a block
    is in the deque once per time it was freed, its stale copies always before its live
    one (a copy goes stale only when its block is taken, and the block's next copy is
    appended when it is freed again), so `_stale[b]` (how many of b's copies are stale)
    tells a popped copy apart."""

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
        # Block 0 is the null block: never free, never allocated.
        self._queue: deque[int] = deque(range(1, num_gpu_blocks))
        self._stale = [0] * num_gpu_blocks
        self._num_free = num_gpu_blocks - 1

    @property
    def num_usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now (free, cached-but-unreferenced included)."""
        return self._num_free

    @property
    def usage_frac(self) -> float:
        """Fraction of usable blocks referenced by requests (vLLM's `kv_cache_usage_perc`)."""
        return 1.0 - self._num_free / self.num_usable_blocks

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
        ref, stale = self._ref, self._stale
        for b in blocks:
            if ref[b] == 0:
                stale[b] += 1  # its copy in the queue is skipped when reached
                self._num_free -= 1
            ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """Take `n` blocks from the front of the free queue, evicting their cached hashes."""
        if n > self._num_free:
            raise RuntimeError(f"allocate({n}) with {self._num_free} free blocks")
        out: list[int] = []
        popleft, ref, stale, hashes, cached = self._queue.popleft, self._ref, self._stale, self._hash, self._cached
        while len(out) < n:
            b = popleft()
            if stale[b]:
                stale[b] -= 1
                continue
            h = hashes[b]
            if h is not None:
                if cached.get(h) == b:
                    del cached[h]
                hashes[b] = None
            ref[b] = 1
            out.append(b)
        self._num_free -= n
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
        ref = self._ref
        released = []
        for b in reversed(blocks):
            r = ref[b] - 1
            if r < 0:
                raise RuntimeError(f"block {b} freed more often than referenced")
            ref[b] = r
            if r == 0:
                released.append(b)
        self._queue.extend(released)
        self._num_free += len(released)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash, as vLLM's reset does: refused (False) while any block
        is referenced by a request, so a running request never loses its blocks."""
        if self._num_free != self.num_usable_blocks:
            return False
        self._cached.clear()
        self._hash = [None] * self.num_gpu_blocks
        return True

    def check(self) -> None:
        """Assert the pool's invariants (tests and debugging; O(pool size))."""
        assert all(r >= 0 for r in self._ref), "negative reference count"
        copies = [0] * self.num_gpu_blocks
        for b in self._queue:
            copies[b] += 1
        assert self._ref[0] == 0 and copies[0] == 0, "null block in use"
        for b in range(1, self.num_gpu_blocks):
            live = copies[b] - self._stale[b]
            assert live == (1 if self._ref[b] == 0 else 0), f"block {b}: ref/free mismatch"
        assert self._num_free == sum(1 for b in range(1, self.num_gpu_blocks) if self._ref[b] == 0)
        for h, b in self._cached.items():
            assert self._hash[b] == h, f"block {b}: hash table out of sync"

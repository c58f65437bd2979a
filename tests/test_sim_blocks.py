"""The KV pool's free queue against a plain LRU list: the same blocks handed out in the
same order under random allocations, frees and prefix-cache hits on free blocks."""

from __future__ import annotations

import random

import pytest

from servelab.sim.blocks import BlockPool


class _ListPool:
    """vLLM's free-block queue as the plainest thing: a list, front evicted first."""

    def __init__(self, n: int) -> None:
        self.queue = list(range(1, n))
        self.ref = [0] * n

    def touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref[b] == 0:
                self.queue.remove(b)
            self.ref[b] += 1

    def allocate(self, k: int) -> list[int]:
        out, self.queue = self.queue[:k], self.queue[k:]
        for b in out:
            self.ref[b] = 1
        return out

    def free(self, blocks: list[int]) -> None:
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.queue.append(b)


@pytest.mark.parametrize("seed", range(6))
def test_the_free_queue_hands_out_blocks_in_lru_order(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([6, 20, 64])
    pool, ref = BlockPool(n, 4, True), _ListPool(n)
    held: list[list[int]] = []
    for _ in range(600):
        op = rng.random()
        if op < 0.4 and pool.num_free_blocks:
            k = rng.randint(1, pool.num_free_blocks)
            got = pool.allocate(k)
            assert got == ref.allocate(k)
            held.append(got)
        elif op < 0.7 and held:
            blocks = held.pop(rng.randrange(len(held)))
            pool.free(blocks)
            ref.free(blocks)
        else:  # a prefix-cache hit takes blocks back, free ones off the queue (or shares)
            blocks = rng.sample(range(1, n), rng.randint(1, min(4, n - 1)))
            pool.touch(blocks)
            ref.touch(blocks)
            held.append(blocks)
        assert pool.num_free_blocks == len(ref.queue)
        pool.check()
    assert pool.allocate(pool.num_free_blocks) == ref.queue

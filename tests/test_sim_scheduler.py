"""The simulated engine's scheduler and KV blocks: invariants and hand-computed cases."""

from __future__ import annotations

import random
from array import array

import pytest

from servelab.sim.blocks import BlockPool, prompt_block_hashes
from servelab.sim.cost import AffineCost
from servelab.sim.engine import RequestRejected, SimConfig, SimEngine, SimRequest

# A cost model with round numbers: 10 ms per step + 1 ms per prefill token + 0.5 ms per
# decode sequence (no roofline max: memory is 0).
_COST = AffineCost(step_s=0.010, per_decode_seq_s=0.0005, per_prefill_token_s=0.001)


def _engine(blocks: int = 64, bs: int = 4, seqs: int = 4, budget: int = 32, mml: int = 128,
            caching: bool = True) -> SimEngine:
    # Synchronous admission: these tests place requests into specific steps (the async
    # one-step delay is tested in test_sim_async).
    return SimEngine(SimConfig(num_gpu_blocks=blocks, block_size=bs, max_num_seqs=seqs,
                               max_num_batched_tokens=budget, max_model_len=mml,
                               enable_prefix_caching=caching, async_scheduling=False), _COST)


def _random_requests(rng: random.Random, n: int, mml: int) -> list[SimRequest]:
    out = []
    for i in range(n):
        plen = rng.randrange(1, mml // 2)
        prompt = tuple(rng.randrange(8) for _ in range(plen))  # small alphabet: some hits
        out.append(SimRequest(f"r{i}", prompt, rng.randrange(1, mml - plen), 0.0))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("caching", [True, False])
def test_random_workload_keeps_every_invariant(seed: int, caching: bool) -> None:
    rng = random.Random(seed)
    eng = _engine(blocks=40, caching=caching)  # 156 usable tokens: preemptions happen
    reqs = _random_requests(rng, 60, 128)
    want = {r.request_id: r.max_tokens for r in reqs}
    got: dict[str, int] = {}
    pending = list(reqs)
    now = 0.0
    while pending or eng.has_work():
        for _ in range(rng.randrange(0, 4)):
            if pending:
                eng.add_request(pending.pop(0))
        if not eng.has_work():
            continue
        res = eng.step(now)
        now += res.duration_s
        assert res.num_prefill_tokens + res.num_decode_tokens <= 32
        assert res.num_running <= 4 and res.batch_size <= 4
        eng.pool.check()
        for ev in res.events:
            got[ev.request_id] = got.get(ev.request_id, 0) + ev.num_tokens
            assert ev.first == (got[ev.request_id] == 1)
            assert ev.finished == (got[ev.request_id] == want[ev.request_id])
    assert got == want  # nobody lost, every request got exactly max_tokens
    assert eng.stats.num_preemptions_total > 0  # the pool was tight enough to preempt
    assert eng.pool.num_free_blocks == eng.pool.num_usable_blocks
    assert eng.stats.generation_tokens_total == sum(want.values())


def test_chunked_prefill_splits_a_long_prompt_under_the_budget() -> None:
    eng = _engine(budget=32, mml=256, blocks=128)
    eng.add_request(SimRequest("a", tuple(range(100)), 2, 0.0))
    shapes = []
    while eng.has_work():
        res = eng.step(0.0)
        shapes.append((res.num_prefill_tokens, res.num_decode_tokens, len(res.events)))
    # 100 prompt tokens in chunks of 32, 32, 32, 4 (first token with the last chunk), 1 decode.
    assert shapes == [(32, 0, 0), (32, 0, 0), (32, 0, 0), (4, 0, 1), (0, 1, 1)]


def test_decodes_are_scheduled_before_waiting_prefills() -> None:
    eng = _engine(budget=8, blocks=128)
    eng.add_request(SimRequest("a", tuple(range(8)), 5, 0.0))
    eng.step(0.0)  # a: 8 prefill tokens, first token
    eng.add_request(SimRequest("b", tuple(range(100, 120)), 5, 0.0))
    res = eng.step(0.0)
    # a's decode (1 token) first, then b's prefill chunked into the 7 left.
    assert (res.num_decode_tokens, res.num_prefill_tokens) == (1, 7)


def test_prefix_cache_hits_count_full_blocks_and_keep_the_last_token() -> None:
    eng = _engine(bs=4, blocks=64)
    prefix = tuple(range(10))  # 2 full blocks + 2 tokens
    eng.add_request(SimRequest("a", prefix + (50, 51, 52), 1, 0.0))  # 13 tokens: 3 full blocks
    while eng.has_work():
        eng.step(0.0)
    eng.add_request(SimRequest("b", prefix + (60, 61), 1, 0.0))  # 12 tokens, shares 2 blocks
    eng.add_request(SimRequest("c", prefix + (50, 51, 52), 1, 0.0))  # same 13 as a: 3 blocks
    eng.add_request(SimRequest("d", tuple(range(8)), 1, 0.0))  # 8 tokens: 2 full blocks of a,
    # but the last token must be computed, so only 1 block (4 tokens) may hit
    res = eng.step(0.0)
    st = eng.stats
    assert st.prefix_cache_queries_total == 13 + 12 + 13 + 8
    assert st.prefix_cache_hits_total == 8 + 12 + 4
    assert res.num_prefill_tokens == 4 + 1 + 4  # b, c, d: only the misses


def test_freed_cached_blocks_are_evicted_lru_and_lose_their_hash() -> None:
    pool = BlockPool(num_gpu_blocks=4, block_size=2, enable_caching=True)  # 3 usable
    hashes = prompt_block_hashes([1, 2, 3, 4], 2)
    blocks = pool.allocate(2)
    for b, h in zip(blocks, hashes):
        pool.register(b, h)
    pool.free(blocks)
    assert pool.lookup(hashes, 2) == blocks  # cached while free
    pool.allocate(2)  # takes the never-used block, then the LRU of the freed (the tail one)
    assert pool.lookup(hashes, 2) == [blocks[0]]
    pool.check()


def test_a_request_longer_than_max_model_len_is_rejected_like_vllm() -> None:
    eng = _engine(mml=64)
    with pytest.raises(RequestRejected, match="maximum context length is 64 tokens"):
        eng.add_request(SimRequest("x", tuple(range(40)), 30, 0.0))
    with pytest.raises(RequestRejected, match="longer than the maximum model length of 64"):
        eng.add_request(SimRequest("y", tuple(range(64)), 1, 0.0))
    assert not eng.has_work()
    eng.add_request(SimRequest("z", tuple(range(40)), 24, 0.0))  # exactly 64: accepted
    assert eng.has_work()


def test_abort_frees_blocks() -> None:
    eng = _engine()
    eng.add_request(SimRequest("a", tuple(range(30)), 10, 0.0))
    eng.step(0.0)
    assert eng.pool.num_free_blocks < eng.pool.num_usable_blocks
    eng.abort("a")
    assert not eng.has_work()
    assert eng.pool.num_free_blocks == eng.pool.num_usable_blocks
    eng.pool.check()


def test_one_request_alone_costs_the_closed_form() -> None:
    eng = _engine(budget=64, blocks=128)
    eng.add_request(SimRequest("a", tuple(range(20)), 3, 0.0))
    durations = [eng.step(0.0).duration_s for _ in range(3)]
    # prefill: 10 ms + 20 x 1 ms; each decode: 10 ms + 0.5 ms.
    assert durations == pytest.approx([0.030, 0.0105, 0.0105])


def _hashes_by_slicing(ids: tuple[int, ...], block_size: int) -> list[int]:
    """The chained block hashes as vLLM defines them, block by block from a tuple."""
    out, parent = [], 0
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = hash((parent, ids[start:start + block_size]))
        out.append(parent)
    return out


@pytest.mark.parametrize(("typecode", "ids"), [
    ("H", tuple(range(30_000, 30_000 + 37))),
    ("I", tuple(range(151_000, 151_000 + 64))),  # a Qwen-sized vocabulary's ids
    ("q", (1 << 40, *range(1, 47))),  # a warm-up's first id
    ("q", (*range(5, 25), *range(-3_000_000, -3_000_020, -1))),  # padding ids
])
def test_prompt_ids_kept_as_arrays_hash_as_the_tuples_do(typecode: str, ids: tuple[int, ...]) -> None:
    """Offline requests keep their ids as arrays: the block hashes are the tuples' own,
    whole blocks only (a partial last block is not hashed)."""
    for block_size in (1, 7, 16):
        want = _hashes_by_slicing(ids, block_size)
        assert len(want) == len(ids) // block_size
        assert prompt_block_hashes(array(typecode, ids), block_size) == want
        assert prompt_block_hashes(ids, block_size) == want
        assert prompt_block_hashes(list(ids), block_size) == want
    assert prompt_block_hashes(array(typecode, ids[:15]), 16) == []
    assert prompt_block_hashes(array(typecode), 16) == []

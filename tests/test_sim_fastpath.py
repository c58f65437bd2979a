"""The offline driver's fast path against its stepwise reference (`simulate(stepwise=True)`).

Both must give the same records to the last bit (dataclass equality compares every float
exactly), the same step count and the same preemptions, on random small schedules: random
arrivals, prompt and output lengths, shared prefixes, chunked prefill, KV pools small
enough to preempt, several replicas behind routing policies, speculative decoding,
prefill/decode disaggregation, and API-server costs that make the event loop lag (chunks
that merge tokens) or keep up. Several cases make ties likely on purpose (round-number
costs, every request due at once on identical replicas; due times out of request order),
since ties are where a changed order of events would show.
"""

from __future__ import annotations

import random

import pytest

from servelab.disaggregation import KvLink, KvTransfer
from servelab.plan import EngineArgs
from servelab.routing.policies import make_policy
from servelab.sim.cluster import Cluster, DecodePool, NetworkCosts
from servelab.sim.cost import AffineCost
from servelab.sim.engine import SimConfig, SimEngine
from servelab.sim.offline import OfflineRequest, OfflineRun, simulate
from servelab.sim.setup import SimOptions, build_cluster
from servelab.speculation import SpeculativeConfig

_LINK = KvLink("test", 1.0, 100.0, "a test link")


def _network(rng: random.Random, round_numbers: bool, quiet: bool = False) -> NetworkCosts:
    """API-server costs from none to heavy enough that the loop lags behind the engine
    (`quiet`: light enough that the loop idles most of each step, so a request's intake
    fits in its idle time, as in a fleet's replicas)."""
    if quiet:
        return NetworkCosts(request_overhead_ms=rng.uniform(0.5, 5.0), router_hop_ms=0.5,
                            frontend_us_per_prompt_token=rng.uniform(0.0, 3.0),
                            frontend_us_per_output_token=rng.uniform(1.0, 10.0),
                            frontend_us_per_chunk=rng.uniform(5.0, 40.0),
                            frontend_us_per_request=rng.uniform(50.0, 600.0),
                            frontend_tokenize_us=rng.uniform(50.0, 900.0),
                            frontend_handoff_us=rng.uniform(50.0, 600.0))
    if round_numbers:  # multiples of the step costs below: equal event times are likely
        return NetworkCosts(request_overhead_ms=2.0, router_hop_ms=0.0,
                            frontend_us_per_prompt_token=10.0, frontend_us_per_output_token=1000.0,
                            frontend_us_per_chunk=1000.0, frontend_us_per_request=1000.0,
                            frontend_tokenize_us=1000.0, frontend_handoff_us=1000.0)
    heavy = rng.random() < 0.5
    scale = 20.0 if heavy else 1.0
    return NetworkCosts(request_overhead_ms=rng.uniform(0.0, 5.0), router_hop_ms=rng.uniform(0.0, 1.0),
                        frontend_us_per_prompt_token=rng.uniform(0.0, 5.0),
                        frontend_us_per_output_token=rng.uniform(1.0, 10.0) * scale,
                        frontend_us_per_chunk=rng.uniform(10.0, 60.0) * scale,
                        frontend_us_per_request=rng.uniform(0.0, 1200.0),
                        frontend_tokenize_us=rng.uniform(0.0, 900.0),
                        frontend_handoff_us=rng.uniform(0.0, 1000.0))


def _engine(rng: random.Random, round_numbers: bool, speculative: bool, seed: int) -> SimEngine:
    if round_numbers:
        cost = AffineCost(step_s=0.004, per_decode_seq_s=0.001, per_prefill_token_s=0.0001)
    else:
        cost = AffineCost(step_s=rng.uniform(1e-3, 8e-3), per_decode_seq_s=rng.uniform(0.0, 5e-4),
                          per_decode_context_token_s=rng.uniform(0.0, 1e-6),
                          per_prefill_token_s=rng.uniform(0.0, 2e-4),
                          per_prefill_context_token_s=rng.uniform(0.0, 1e-8))
    spec = None
    if speculative:
        k = rng.randint(1, 3)
        spec = SpeculativeConfig(method="ngram", num_speculative_tokens=k,
                                 acceptance=sorted((round(rng.uniform(0.3, 0.9), 2) for _ in range(k)),
                                                   reverse=True))
    blocks = rng.choice([48, 80, 400])  # 48 and 80 blocks of 16: preemptions under load
    return SimEngine(SimConfig(num_gpu_blocks=blocks, block_size=16, max_num_seqs=rng.choice([4, 8, 32]),
                               max_num_batched_tokens=rng.choice([64, 256, 2048]), max_model_len=600,
                               enable_chunked_prefill=True, async_scheduling=rng.random() < 0.8,
                               speculative=spec, seed=seed), cost)


def _requests(rng: random.Random, n: int) -> list[OfflineRequest]:
    prefixes = [tuple(range(50_000 + 100 * j, 50_000 + 100 * j + 64)) for j in range(3)]
    out = []
    for i in range(n):
        plen = rng.randint(1, 300)
        ids = tuple(range(i * 1000, i * 1000 + plen))
        if rng.random() < 0.3:  # a shared prefix: prefix-cache hits
            ids = rng.choice(prefixes) + ids
        out.append(OfflineRequest(i, ids, rng.randint(1, 120), route_text=f"p{i % 7}"))
    return out


def _build(seed: int, case: str) -> tuple[Cluster, list[OfflineRequest], list[float], int | None, int]:
    """A fresh cluster and schedule for (seed, case); called twice, it builds the same."""
    rng = random.Random(seed)
    round_numbers = case == "ties"
    speculative = case == "speculative"
    replicas = 1 if case in ("one", "backlog") else rng.randint(2, 4)
    if case == "quiet":
        replicas = rng.choice([1, 1, 3])
    engines = [_engine(random.Random(seed * 31 + (0 if case == "ties" else j)), round_numbers,
                       speculative, seed + j) for j in range(replicas)]
    if case in ("ties", "fleet", "split", "quiet"):  # one cost model and its decode-step memo, as build_cluster
        engines = [engines[0]] + [SimEngine(e.config, engines[0].cost, engines[0].decode_times)
                                  for e in engines[1:]]
    # "split": policies that read nothing of the replicas, no client limit: each replica
    # is simulated alone (`offline._independent`)
    names = ["round_robin", "random"] if case in ("split", "quiet") else ["round_robin", "least_requests"]
    policy = None if replicas == 1 else make_policy(rng.choice(names), random.Random(seed))
    decode = None
    if case == "pd":
        decode = DecodePool([_engine(rng, False, False, seed + 100 + j) for j in range(2)],
                            make_policy("round_robin", random.Random(seed)),
                            KvTransfer(1000, 10, _LINK, 1, rng.random() < 0.5))
    cluster = Cluster(engines, policy, _network(rng, round_numbers, case == "quiet"), decode)
    n = rng.randint(20, 80)
    reqs = _requests(rng, n)
    if case == "ties":  # identical requests due at once on identical replicas
        reqs = [OfflineRequest(i, tuple(range(i * 1000, i * 1000 + 64)), 40, route_text="x")
                for i in range(n)]
        intended = [0.0] * n
    else:
        rate = (2000.0 if case == "backlog" else rng.choice([20.0, 60.0]) if case == "quiet"
                else rng.choice([20.0, 200.0, 2000.0]))
        t, intended = 0.0, []
        for _ in range(n):
            t += rng.expovariate(rate)
            intended.append(t)
        if case == "unsorted":  # due times out of request order, some shared
            intended = [round(x, 2) for x in intended]
            rng.shuffle(intended)
    conc = rng.choice([None, 4, 16])
    if case == "split":
        conc = None
    elif case == "quiet":  # no client limit (arrivals come from the schedule), or one that binds
        conc = rng.choice([None, None, 3])
    elif case == "backlog":  # a client limit far below the offered load: completions send
        conc = rng.choice([1, 2, 4])
    warm = rng.choice([0, 0, 3])
    return cluster, reqs, intended, conc, warm


def _both(seed: int, case: str) -> tuple[tuple[OfflineRun, int], tuple[OfflineRun, int]]:
    runs = []
    for stepwise in (True, False):
        cluster, reqs, intended, conc, warm = _build(seed, case)
        run = simulate(cluster, reqs, intended, conc, warm, stepwise=stepwise)
        runs.append((run, sum(e.stats.num_preemptions_total for e in cluster.engines)))
    return runs[0], runs[1]


@pytest.mark.parametrize("case", ["one", "fleet", "ties", "speculative", "pd", "unsorted", "split",
                                  "backlog", "quiet"])
@pytest.mark.parametrize("seed", range(8))
def test_the_fast_path_gives_the_stepwise_records(seed: int, case: str) -> None:
    (ref, ref_pre), (got, got_pre) = _both(seed, case)
    assert got.num_steps == ref.num_steps and got_pre == ref_pre
    assert got.duration_s == ref.duration_s
    assert got.spec_decode == ref.spec_decode
    assert len(got.records) == len(ref.records)
    for a, b in zip(got.records, ref.records):
        assert a == b, f"request {b.index} differs"


def test_the_random_schedules_exercise_what_the_fast_path_shortcuts() -> None:
    # the comparison above means something only if these cases reach the shortcuts' edges:
    # preemptions, chunks that merge tokens behind a lagging event loop, speculative
    # multi-token chunks
    preempted = merged = multi = 0
    for seed in range(6):
        for case in ("one", "fleet", "ties", "speculative"):
            (ref, pre), _ = _both(seed, case)
            preempted += pre
            short = sum(1 for r in ref.records if r.chunks is not None and r.chunks < r.output_len)
            if case == "speculative":
                multi += short
            else:
                merged += short
    assert preempted > 0 and merged > 0 and multi > 0


@pytest.mark.parametrize("seed", range(2))
def test_the_fast_path_gives_the_stepwise_records_on_the_operator_model(seed: int) -> None:
    # the shipped H200 cost model and API-server figures, three replicas behind round robin
    opts = SimOptions("Qwen/Qwen3-0.6B", "H200", None, EngineArgs(max_num_seqs=16), replicas=3)
    rng = random.Random(seed)
    reqs = _requests(rng, 60)
    intended = sorted(rng.uniform(0.0, 0.5) for _ in reqs)
    ref = simulate(build_cluster(opts, random.Random(seed)), reqs, intended, 24, 2, stepwise=True)
    got = simulate(build_cluster(opts, random.Random(seed)), reqs, intended, 24, 2)
    assert got.num_steps == ref.num_steps and got.duration_s == ref.duration_s
    assert got.records == ref.records


def _decoding_twin(async_scheduling: bool) -> SimEngine:
    """An engine whose three running requests decode one token a step, with a fourth
    request received during the step in flight."""
    e = SimEngine(SimConfig(num_gpu_blocks=400, block_size=16, max_num_seqs=8,
                            max_num_batched_tokens=2048, max_model_len=600,
                            async_scheduling=async_scheduling),
                  AffineCost(step_s=0.004, per_decode_seq_s=0.001, per_decode_context_token_s=1e-6,
                             per_prefill_token_s=1e-5))
    for i in range(3):
        e.add(f"r{i}", tuple(range(i * 100, i * 100 + 40)), 20, 0.0)
    while not e.decode_ready():
        e.advance()
    e.add("late", tuple(range(5000, 5050)), 10, 0.0)
    return e


def test_a_request_held_through_a_step_leaves_that_step_a_plain_decode() -> None:
    # asynchronous scheduling: a request received during a step waits out the next step,
    # which `advance_holding` takes as the running batch's one-token decode, as `advance`
    # does; the step after admits it (a prefill of its 50 tokens) on both
    fast, ref = _decoding_twin(True), _decoding_twin(True)
    got = fast.advance_holding()
    dur, step, emitted, done = ref.advance()
    assert got is not None and step.prefill_tokens == 0
    assert got[0] == dur and got[2] == done == []
    assert [r.request_id for r in got[1]] == [r.request_id for r in emitted] == ["r0", "r1", "r2"]
    assert [(r.num_computed, r.num_output) for r in fast.scheduler.running] == \
        [(r.num_computed, r.num_output) for r in ref.scheduler.running]
    assert fast.advance_holding() is None  # the held request joins now: not a plain decode
    assert fast.advance()[1].prefill_tokens == ref.advance()[1].prefill_tokens == 50
    # without asynchronous scheduling the new request is waiting at once: no shortcut
    assert _decoding_twin(False).advance_holding() is None


@pytest.mark.parametrize("stepwise", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_speculative_chunks_carry_their_own_steps_tokens(seed: int, stepwise: bool) -> None:
    # every request runs to its max_tokens (no EOS in the simulator): however the API
    # server's loop lags behind the engine, the tokens it streams are the ones each step
    # accepted, so each record holds exactly max_tokens of them (the loop once read the
    # counts after the engine had applied its next step: 163 of 330 records were off)
    cluster, reqs, intended, conc, warm = _build(seed, "speculative")
    run = simulate(cluster, reqs, intended, conc, warm, stepwise=stepwise)
    ok = [r for r in run.records if r.error is None]
    assert ok and all(r.output_len == r.expected_output_len for r in ok)
    assert sum(r.output_len for r in ok if not r.warmup) == sum(q.output_len for q in reqs)


def test_replicas_are_simulated_alone_only_when_nothing_couples_them() -> None:
    # the per-replica split (`_run_any`) needs a policy that reads nothing of the replicas
    # and learns nothing, no client limit, no decode pool and no per-step observer
    from servelab.sim.offline import _independent

    def cluster(policy: str | None, replicas: int = 3) -> Cluster:
        engines = [_engine(random.Random(j), False, False, j) for j in range(replicas)]
        return Cluster(engines, make_policy(policy, random.Random(0)) if policy else None,
                       NetworkCosts())

    assert _independent(cluster("round_robin"), None, None)
    assert _independent(cluster("random"), None, None)
    assert not _independent(cluster("least_requests"), None, None)
    assert not _independent(cluster("round_robin"), 16, None)
    assert not _independent(cluster("round_robin"), None, lambda *a: None)
    assert not _independent(cluster(None, 1), None, None)

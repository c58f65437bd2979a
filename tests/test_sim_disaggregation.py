"""Prefill/decode disaggregation in the simulator: closed-form timings through a P/D pair,
the KV transfer's formula and link figures, the decode side's transferred KV, the arm and
the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.disaggregation import DisaggregatedConfig, KvLink, KvTransfer, PoolSpec, kv_link
from servelab.errors import ServelabError
from servelab.experiment import load_spec, run_experiment
from servelab.experiment.store import ExperimentStore
from servelab.hardware.catalog import get_gpu
from servelab.sim.blocks import BlockPool
from servelab.sim.cluster import Cluster, DecodePool, NetworkCosts
from servelab.sim.cost import AffineCost
from servelab.sim.engine import SimConfig, SimEngine
from servelab.sim.offline import OfflineRequest, simulate
from servelab.sim.scheduler import SchedRequest, Scheduler, SchedulerLimits

# 10 ms per step + 1 ms per prefill token + 0.5 ms per decode sequence.
_COST = AffineCost(step_s=0.010, per_decode_seq_s=0.0005, per_prefill_token_s=0.001)
_NET = NetworkCosts(request_overhead_ms=3.0, router_hop_ms=0.5)
# 1,000 B of KV per token over 1 GB/s with 100 us per transfer: a 40-token prompt moves in
# 100 us + 40 us.
_LINK = KvLink("test", 1.0, 100.0, "a test link")


def _engine() -> SimEngine:
    return SimEngine(SimConfig(num_gpu_blocks=256, block_size=16, max_num_seqs=8,
                               max_num_batched_tokens=256, max_model_len=512), _COST)


def _req(i: int, plen: int, out: int) -> OfflineRequest:
    return OfflineRequest(i, tuple(range(i * 1000, i * 1000 + plen)), out, route_text=f"p{i}")


def _pd(layerwise: bool = False) -> Cluster:
    return Cluster([_engine()], None, _NET,
                   DecodePool([_engine()], None, KvTransfer(1000, 10, _LINK, 1, layerwise)))


def test_one_request_costs_prefill_plus_transfer_plus_decode() -> None:
    run = simulate(_pd(), [_req(0, 40, 4)], [0.0])
    (rec,) = run.records
    # 3 ms + 0.5 ms proxy hop; prefill 10 + 40 ms; KV 0.14 ms; the decode replica's first
    # step computes the last prompt token (10 + 1 ms) and samples the first token.
    assert rec.ttft_ms == pytest.approx(3.5 + 50.0 + 0.14 + 11.0)
    assert rec.itl_ms == pytest.approx([10.5, 10.5, 10.5])  # decode steps on the decode replica
    assert rec.output_len == 4


def test_the_decode_replica_runs_no_prefill_and_the_prefill_replica_no_decode() -> None:
    cluster = _pd()
    steps: list[tuple[int, int, int]] = []
    simulate(cluster, [_req(0, 40, 4), _req(1, 20, 4)], [0.0, 0.0],
             on_step=lambda k, t, d, step, e: steps.append((k, step.prefill_tokens, step.decode_seqs)))
    assert {(p, d) for k, p, d in steps if k == 0} == {(60, 0)}  # one joint prefill, nothing else
    decode = [(p, d) for k, p, d in steps if k == 1]
    assert sum(p for p, _ in decode) == 2  # one recomputed prompt token per request
    assert sum(d for _, d in decode) == 6  # 3 decode tokens each
    prefill_engine, decode_engine = cluster.engines
    assert prefill_engine.stats.generation_tokens_total == 2  # the proxy's max_tokens 1
    assert decode_engine.stats.generation_tokens_total == 8


def test_a_request_too_long_for_the_decode_replica_is_refused_not_fatal() -> None:
    # 500 prompt + 20 output tokens exceed max_model_len 512; the prefill alone (max_tokens 1)
    # would fit, the whole request does not: vLLM's proxy gets the 400 up front
    run = simulate(_pd(), [_req(0, 500, 20), _req(1, 40, 4)], [0.0, 0.0])
    bad, good = run.records
    assert bad.error_kind == "http_400" and "max_tokens" in bad.error
    assert good.error is None and good.output_len == 4


def test_transfers_from_one_prefill_replica_share_its_link() -> None:
    slow = KvLink("slow", 0.001, 0.0, "1 MB/s")  # 40 kB per 40-token prompt: 40 ms each
    cluster = Cluster([_engine()], None, _NET, DecodePool([_engine()], None, KvTransfer(1000, 10, slow)))
    run = simulate(cluster, [_req(0, 40, 2), _req(1, 40, 2)], [0.0, 0.0])
    first, second = sorted(r.ttft_ms for r in run.records)
    # both prefill in one step (10 + 80 ms); the second KV waits for the first's 40 ms
    assert first == pytest.approx(3.5 + 90.0 + 40.0 + 11.0)
    assert second == pytest.approx(first + 40.0)


def test_replicated_kv_heads_are_moved_by_every_rank() -> None:
    from servelab.plan import EngineArgs
    from servelab.sim.setup import kv_transfer

    pd = DisaggregatedConfig(prefill=PoolSpec(tp=8), decode=PoolSpec(tp=8), link="infiniband")
    # Qwen3-14B: 8 KV heads split over 8 ranks, each moves an eighth
    split = kv_transfer("Qwen/Qwen3-14B", None, "H200", EngineArgs(), pd)
    assert split.kv_bytes_per_token == 40 * 2 * 8 * 128 * 2 and split.ranks == 8
    # Qwen3-235B-A22B: 4 KV heads over 8 ranks, replicated: every rank moves one whole head
    rep = kv_transfer("Qwen/Qwen3-235B-A22B", None, "H200", EngineArgs(), pd)
    assert rep.kv_bytes_per_token == 8 * 94 * 2 * 1 * 128 * 2


def test_layerwise_transfer_overlaps_all_but_the_last_layer() -> None:
    t = KvTransfer(1000, 10, _LINK, 1, layerwise=True)
    # 40 kB at 1 GB/s = 40 us; a 0 s prefill hides nothing but the layers after the first
    # still wait: max(4 us (one layer), 40 us - 0) + 100 us latency
    assert t.seconds(40, 0.0) == pytest.approx(140e-6)
    # a prefill of 30 us hides 30 us of it: 10 us left (> one layer's 4 us)
    assert t.seconds(40, 30e-6) == pytest.approx(110e-6)
    # a long prefill leaves one layer's share
    assert t.seconds(40, 1.0) == pytest.approx(104e-6)
    # two ranks (TP2 to TP2) move it twice as fast
    assert KvTransfer(1000, 10, _LINK, 2).seconds(40) == pytest.approx(120e-6)


def test_link_figures_come_from_the_gpu_and_the_fabric() -> None:
    h200 = kv_link("nvlink", get_gpu("H200"))
    assert h200.bandwidth_gbs == pytest.approx(get_gpu("H200").interconnect.bandwidth_gbs / 2)
    assert kv_link("pcie", get_gpu("H200")).bandwidth_gbs == 64.0
    l40s = kv_link("nvlink", get_gpu("L40S"))  # no NVLink: its PCIe link
    assert l40s.name == "pcie" and "no NVLink" in l40s.source
    assert kv_link("infiniband", get_gpu("H200")).bandwidth_gbs == 50.0
    assert kv_link("ethernet", get_gpu("H200")).bandwidth_gbs == 12.5


def test_transferred_kv_takes_blocks_but_no_compute_and_is_recomputed_after_preemption() -> None:
    pool = BlockPool(8, 16, True)
    sched = Scheduler(SchedulerLimits(8, 256, 512), pool)
    req = SchedRequest("r", 40, 4, 0.0, [1, 2])
    req.preloaded = 39
    sched.add(req)
    step = sched.schedule()
    assert step.num_new == [1] and step.prefill_context_tokens == 1 * 39 + 1
    assert len(req.blocks) == 3  # 40 tokens in blocks of 16
    assert sched.prefix_queries_tokens == 0  # not a prefix-cache lookup
    sched.finish_step(step)
    assert req.num_output == 1


def test_a_preempted_request_loses_its_transferred_kv_and_recomputes_the_prompt() -> None:
    pool = BlockPool(8, 16, False)  # 7 usable (vLLM keeps one null block)
    sched = Scheduler(SchedulerLimits(8, 256, 512), pool)
    first = SchedRequest("first", 60, 40, 0.0, [])  # 4 blocks, grows into a 5th
    moved = SchedRequest("moved", 40, 40, 0.0, [])  # 3 blocks, its KV transferred in
    moved.preloaded = 39
    sched.add(first)
    sched.add(moved)
    recomputed = None
    for _ in range(100):  # re-admitted once `first` finishes
        step = sched.schedule()
        if moved.num_preemptions and moved in step.reqs:
            recomputed = step.num_new[step.reqs.index(moved)]
            break
        sched.finish_step(step)
    assert moved.num_preemptions == 1 and moved.preloaded == 0
    # re-admitted, it computes its prompt and the tokens it had sampled, here, itself
    assert recomputed == 40 + moved.num_output


def test_cluster_needs_a_policy_for_several_decode_replicas() -> None:
    with pytest.raises(ValueError, match="decode pool"):
        Cluster([_engine()], None, _NET, DecodePool([_engine(), _engine()], None,
                                                    KvTransfer(1000, 10, _LINK)))


SPEC = """\
name: pd
engine: {engine}
hardware: {{gpu: H200}}
model: Qwen/Qwen3-0.6B
arms:
  - name: together
    replicas: 2
    routing: round_robin
    baseline: true
  - name: split
    disaggregated: {{prefill: {{replicas: 1, tp: 1}}, decode: {{replicas: 1, tp: 1}}, link: infiniband}}
workloads:
  - {{name: rnd, dataset_name: random, random_input_len: 512, random_output_len: 32}}
loads:
  request_rate: [8]
  num_prompts: {{per_rate_s: 4, min: 24, max: 24}}
seed: 1
"""


def test_a_disaggregated_arm_runs_on_the_simulator(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(engine="sim"))
    run_experiment(load_spec(path), tmp_path / "out")
    store = ExperimentStore(tmp_path / "out")
    split, together = (store.read_cell(a, "rnd", "r8") for a in ("split", "together"))
    assert split is not None and together is not None
    assert split.result.completed == together.result.completed == 24
    # a first token waits for a prefill, the KV's crossing and the decode replica's step
    assert split.result.mean_ttft_ms > together.result.mean_ttft_ms


def test_a_disaggregated_arm_on_vllm_is_refused_by_line(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(engine="vllm"))
    with pytest.raises(ServelabError, match=r"spec.yaml:\d+: arms\[1\].disaggregated: disaggregated arms run on the simulator"):
        load_spec(path)


def test_pools_wider_than_one_gpu_start_where_one_gpu_would_not(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    text = (SPEC.format(engine="sim").replace("Qwen/Qwen3-0.6B", "meta-llama/Llama-3.3-70B-Instruct")
            .replace("prefill: {replicas: 1, tp: 1}, decode: {replicas: 1, tp: 1}",
                     "prefill: {replicas: 1, tp: 2}, decode: {replicas: 2, tp: 2}")
            .replace("replicas: 2\n    routing: round_robin\n", "tensor_parallel_size: 2\n"))
    path.write_text(text)
    run_experiment(load_spec(path), tmp_path / "out")
    store = ExperimentStore(tmp_path / "out")
    cell = store.read_cell("split", "rnd", "r8")
    assert cell is not None and cell.result.completed == 24  # 70B bf16 fits two H200s, not one


def test_a_disaggregated_arm_keeps_its_replicas_in_its_pools(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(engine="sim").replace(
        "  - name: split\n", "  - name: split\n    replicas: 2\n"))
    with pytest.raises(ServelabError, match=r"arms\[1\].disaggregated: replicas and TP are set per pool"):
        load_spec(path)


def test_a_disaggregated_arm_needs_the_offline_simulator(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(engine="sim").replace("hardware:", "sim: {mode: online}\nhardware:"))
    with pytest.raises(ServelabError, match=r"arms\[1\].disaggregated: disaggregated arms run on the offline simulator"):
        load_spec(path)


def test_sim_run_refuses_replicas_with_disaggregated() -> None:
    pd = json.dumps({"prefill": {"replicas": 1}, "decode": {"replicas": 2}})
    res = subprocess.run([sys.executable, "-m", "servelab", "sim", "run", "--model", "Qwen/Qwen3-0.6B",
                          "--gpu", "H200", "--num-prompts", "4", "--replicas", "2",
                          "--disaggregated", pd], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--disaggregated: replicas and TP are set per pool" in res.stderr
    bad = subprocess.run([sys.executable, "-m", "servelab", "sim", "run", "--model", "Qwen/Qwen3-0.6B",
                          "--gpu", "H200", "--num-prompts", "4", "--disaggregated",
                          '{"prefill": {"replicas": 1}, "decode": {"replicas": 1}, "link": "carrier-pigeon"}'],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--disaggregated: link:" in bad.stderr


def test_pool_gpus_add_up() -> None:
    pd = DisaggregatedConfig(prefill=PoolSpec(replicas=3, tp=2), decode=PoolSpec(replicas=1, tp=4))
    assert pd.gpus == 10 and "3P (TP2) : 1D (TP4) over nvlink" == pd.describe()

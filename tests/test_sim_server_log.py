"""The simulator server's log lines: vLLM's exact wording, read back by servelab's parser."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servelab.engine.logparse import clean_line, parse_startup_log
from servelab.sim.serve.log import StartupFacts, StatsLine, VllmLog, log_listening, log_startup

DATA = Path(__file__).parent / "data" / "sim_server"

# The figures of the H200 run in vllm-0.25.1-h200-startup-A.log.
FACTS = StartupFacts(
    version="0.25.1", model="MODELS/qwen3-14b", served_model_name="Qwen/Qwen3-14B",
    non_default_args={"host": "127.0.0.1"}, max_model_len=40960, max_num_batched_tokens=8192,
    tensor_parallel_size=1, pipeline_parallel_size=1, quantization=None, kv_cache_dtype="auto",
    enable_prefix_caching=True, weights_gib=27.52, load_s=2.247763, kv_cache_gib=99.27,
    kv_cache_tokens=650560, max_concurrency=650560 / 40960)


def _lines(facts: StartupFacts) -> list[str]:
    out: list[str] = []
    log = VllmLog(out.append, pid=627, wall=lambda: 0.0)
    log_startup(log, facts)
    log_listening(log, "127.0.0.1", 8000)
    return out


def test_startup_lines_word_for_word_as_vllm() -> None:
    ours = {clean_line(line) for line in _lines(FACTS)}
    theirs = [clean_line(line) for line in (DATA / "vllm-0.25.1-h200-startup-A.log").read_text().splitlines()]
    for key in ("Model loading took", "Available KV cache memory", "GPU KV cache size",
                "Maximum concurrency for", "Using max model len", "Chunked prefill is enabled",
                "█  version", "Starting vLLM server on"):
        line = next(t for t in theirs if key in t)
        assert line in ours, line


def test_startup_lines_parse_back_to_the_figures() -> None:
    info = parse_startup_log("\n".join(_lines(FACTS)))
    assert info.engine == "vllm" and info.version == "0.25.1"
    assert info.model_loading_gib == 27.52 and info.model_loading_s == 2.247763
    assert info.available_kv_gib == 99.27
    assert info.kv_cache_tokens == 650560 and info.kv_cache_device == "gpu"
    assert info.max_concurrency == 15.88 and info.max_concurrency_context_tokens == 40960
    assert info.max_model_len == 40960 and info.kv_cache_dtype == "auto"
    assert info.conflicts == []


@dataclass(frozen=True)
class _Stats:
    running: int = 0
    waiting: int = 0
    kv_usage_frac: float = 0.0
    num_preemptions_total: int = 0
    prefix_cache_queries_total: int = 0
    prefix_cache_hits_total: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0


def test_stats_line_reports_the_interval_like_vllm() -> None:
    line = StatsLine(_Stats(prompt_tokens_total=1000, generation_tokens_total=50,
                            prefix_cache_queries_total=1000, prefix_cache_hits_total=100), 5.0)
    now = _Stats(running=3, kv_usage_frac=0.125, prompt_tokens_total=3000,
                 generation_tokens_total=550, prefix_cache_queries_total=3000,
                 prefix_cache_hits_total=600)
    assert line.next(now, waiting=2, now_s=15.0) == (
        "Engine 000: Avg prompt throughput: 200.0 tokens/s, Avg generation throughput: "
        "50.0 tokens/s, Running: 3 reqs, Waiting: 2 reqs, GPU KV cache usage: 12.5%, "
        "Prefix cache hit rate: 25.0%")
    # Nothing happened since: vLLM stays quiet.
    assert line.next(_Stats(**{**now.__dict__, "running": 0}), waiting=0, now_s=25.0) is None

"""Startup-log parser: real vLLM / SGLang logs in, the exact printed figures out."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.engine import LogFact, StartupLogParser, clean_line, parse_line, parse_startup_log

DATA = Path(__file__).parent / "data" / "engine"


def _log(name: str) -> str:
    return (DATA / name).read_text()


def test_vllm_0_25_1_h200_bf16_defaults() -> None:
    info = parse_startup_log(_log("vllm-0.25.1-h200-startup-A.log"))
    assert info.engine == "vllm"
    assert info.version == "0.25.1"
    assert info.max_model_len == 40960
    assert info.max_num_batched_tokens == 8192  # "Chunked prefill is enabled with ..."
    assert info.model_loading_gib == 27.52
    assert info.model_loading_s == 2.247763
    assert info.available_kv_gib == 99.27
    assert info.kv_cache_device == "gpu"
    assert info.kv_cache_tokens == 650_560
    assert info.max_concurrency == 15.88
    assert info.max_concurrency_context_tokens == 40_960
    assert info.cuda_graph_gib == 0.90
    assert info.cuda_graph_s == 6
    assert info.torch_compile_s == 41.60
    assert info.init_engine_s == 69.54
    assert info.kv_cache_dtype == "auto"
    # 0.25.1 prints no memory-budget breakdown: those are reported missing, not guessed.
    assert info.gpu_memory_utilization is None
    assert set(info.missing) == {
        "total_gpu_memory_gib", "gpu_memory_utilization", "memory_budget_gib", "non_torch_gib",
        "weights_non_torch_gib", "peak_activation_gib", "num_gpu_blocks", "block_size",
    }
    assert info.conflicts == []


def test_vllm_0_25_1_short_context_arm() -> None:
    # --max-num-seqs 8 --max-model-len 1024: same pool, concurrency quoted for 1,024 tokens.
    info = parse_startup_log(_log("vllm-0.25.1-h200-startup-arm2.log"))
    assert info.max_model_len == 1024
    assert info.kv_cache_tokens == 650_560
    assert info.max_concurrency_context_tokens == 1024
    assert info.max_concurrency == 635.31
    assert info.cuda_graph_gib == 0.14
    assert info.cuda_graph_s == 1
    assert info.torch_compile_s == 34.52
    assert info.init_engine_s == 56.60


def test_vllm_0_25_1_awq() -> None:
    info = parse_startup_log(_log("vllm-0.25.1-h200-startup-awq.log"))
    assert info.model_loading_gib == 9.62
    assert info.model_loading_s == 2.459375
    assert info.available_kv_gib == 117.17
    assert info.kv_cache_tokens == 767_872
    assert info.max_concurrency == 18.75
    assert info.cuda_graph_gib == 0.92


def test_vllm_0_32_0_cpu_build() -> None:
    info = parse_startup_log(_log("vllm-0.32.0-cpu-startup.log"))
    assert info.engine == "vllm"
    assert info.version == "0.32.0"
    assert info.kv_cache_device == "cpu"
    assert info.kv_cache_tokens == 2_097_152
    assert info.max_concurrency_context_tokens == 4096
    assert info.max_concurrency == 512.00
    assert info.available_kv_gib == 1.0  # "Explicitly set (1.0/15.09) GiB for KV cache"
    assert info.init_engine_s == 1.58
    # No "Model loading took", no CUDA graphs, no torch.compile on this CPU run.
    for field in ("model_loading_gib", "model_loading_s", "cuda_graph_gib", "torch_compile_s"):
        assert getattr(info, field) is None
        assert field in info.missing


def test_vllm_0_10_budget_breakdown() -> None:
    info = parse_startup_log(_log("vllm-0.10-excerpt.log"))
    assert info.model_loading_gib == 14.0786  # the first, more precise figure is kept
    assert info.model_loading_s == 10.247948
    assert info.torch_compile_s == 4.99  # "torch.compile takes ... in total"
    assert info.available_kv_gib == 55.15
    assert info.kv_cache_tokens == 451_744
    assert info.max_concurrency == 110.29
    assert info.max_concurrency_context_tokens == 4096
    assert info.total_gpu_memory_gib == 79.19
    assert info.gpu_memory_utilization == 0.9
    assert info.memory_budget_gib == 71.27
    assert info.peak_activation_gib == 1.97
    assert info.non_torch_gib == 0.07
    assert info.cuda_graph_gib == 0.67
    assert info.init_engine_s == 17.82  # "took 17.82 seconds"
    # 14.0786 vs 14.08 and 55.15 GiB vs 59212694937 bytes agree within the log's rounding.
    assert info.conflicts == []


def test_vllm_0_6_v0_memory_profile_and_blocks() -> None:
    text = _log("vllm-0.6-v0-excerpt.log")
    info = parse_startup_log(text)
    assert info.engine == "vllm"
    assert info.model_loading_gib == 8.5107  # "Loading model weights took 8.5107 GB"
    assert info.model_loading_s is None
    assert info.total_gpu_memory_gib == 79.25
    assert info.gpu_memory_utilization == 0.15
    assert info.memory_budget_gib == 11.89
    assert info.non_torch_gib == 0.26
    assert info.peak_activation_gib == 0.94
    assert info.available_kv_gib == 2.18
    assert info.num_gpu_blocks == 715
    assert info.max_concurrency_context_tokens == 2048
    assert info.max_concurrency == 5.59
    # The block size is not in the log: no token count unless the caller knows it.
    assert info.kv_cache_tokens is None and "kv_cache_tokens" in info.missing
    assert parse_startup_log(text, block_size=16).kv_cache_tokens == 715 * 16


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "INFO 05-30 06:40:55 executor_base.py:110] # CUDA blocks: 5517, # CPU blocks: 9362",
            [LogFact("num_gpu_blocks", 5517), LogFact("engine", "vllm")],
        ),
        (
            "INFO 08-12 22:32:11 [executor_base.py:113] # cuda blocks: 190100, # CPU blocks: 0",
            [LogFact("num_gpu_blocks", 190100), LogFact("engine", "vllm")],
        ),
        (
            "INFO 07-02 17:08:01 [model_runner.py:1146] Model loading took 8.6253 GB and 7.670299 seconds",
            [LogFact("engine", "vllm"), LogFact("model_loading_gib", 8.6253), LogFact("model_loading_s", 7.670299)],
        ),
        (
            "(EngineCore pid=326) INFO 10-06 17:00:11 [model_runner.py:407] Model loading took 15.0 GiB memory and 5.420225 seconds",
            [LogFact("engine", "vllm"), LogFact("model_loading_gib", 15.0), LogFact("model_loading_s", 5.420225)],
        ),
        (
            "INFO 07-02 17:08:07 [executor_base.py:116] Maximum concurrency for 512 tokens per request: 462.97x",
            [LogFact("max_concurrency_context_tokens", 512), LogFact("max_concurrency", 462.97)],
        ),
        (
            "(EngineCore pid=326) INFO 10-06 17:00:33 [kv_cache_utils.py:2464] GPU KV cache size: 460,496 tokens, "
            "Maximum concurrency for 131,072 tokens per request: 3.51x",
            [
                LogFact("engine", "vllm"), LogFact("kv_cache_tokens", 460_496), LogFact("kv_cache_device", "gpu"),
                LogFact("max_concurrency_context_tokens", 131_072), LogFact("max_concurrency", 3.51),
            ],
        ),
        (
            "(EngineCore pid=326) INFO 10-06 17:00:41 [gpu_worker.py:955] Free memory on device (78.84/79.25 GiB) "
            "on startup. Desired GPU memory utilization is (0.92, 72.91 GiB). Actual usage is 15.26 GiB for consumed "
            "memory (weights + non-torch), 1.44 GiB for peak activation, and 0.23 GiB for CUDAGraph memory.",
            [
                LogFact("total_gpu_memory_gib", 79.25), LogFact("engine", "vllm"),
                LogFact("gpu_memory_utilization", 0.92), LogFact("memory_budget_gib", 72.91),
                LogFact("weights_non_torch_gib", 15.26), LogFact("peak_activation_gib", 1.44),
                LogFact("cuda_graph_gib", 0.23),
            ],
        ),
        (
            "(APIServer pid=1) INFO 01-01 00:00:00 [api_utils.py:273] non-default args: {'model': 'm', "
            "'gpu_memory_utilization': 0.95, 'block_size': 32, 'kv_cache_dtype': 'fp8'}",
            [LogFact("kv_cache_dtype", "fp8"), LogFact("block_size", 32), LogFact("gpu_memory_utilization", 0.95)],
        ),
        ("INFO 03-01 10:00:00 api_server.py:590] vLLM API server version 0.6.3.post1",
         [LogFact("engine", "vllm"), LogFact("version", "0.6.3.post1")]),
        ("(APIServer pid=627) INFO 11-29 17:46:49 [launcher.py:46] Route: /health, Methods: GET", []),
        ("", []),
    ],
)
def test_single_lines(line: str, expected: list[LogFact]) -> None:
    assert parse_line(line) == expected


def test_sglang_tp4_excerpt() -> None:
    info = parse_startup_log(_log("sglang-0.4-tp4-excerpt.log"))
    assert info.engine == "sglang"
    assert info.model_loading_gib == 15.54  # "Load weight end. ... mem usage=15.54 GB."
    assert info.kv_cache_tokens == 46611  # "#tokens: 46611" and "max_total_num_tokens=46611"
    assert info.available_kv_gib == 2.84  # K 1.42 GB + V 1.42 GB
    assert info.cuda_graph_s == 7.23  # TP0's line comes first; TP1 says 7.25 (no conflict)
    assert info.cuda_graph_gib == 0.93
    assert info.max_model_len == 131072  # context_len
    assert info.max_concurrency is None  # SGLang prints no such figure
    assert info.conflicts == []


def test_sglang_mla_kv_line() -> None:
    facts = parse_line("[2025-09-01 10:00:00 TP0] KV Cache is allocated. #tokens: 1,234, KV size: 3.50 GB")
    assert facts == [LogFact("engine", "sglang"), LogFact("kv_cache_tokens", 1234), LogFact("available_kv_gib", 3.5)]


def test_unknown_log_gives_nothing_and_lists_everything_missing() -> None:
    info = parse_startup_log("hello\nStarting something else entirely\n12345 tokens\n")
    figures = [name for name in type(info).model_fields if name not in ("missing", "conflicts")]
    assert info.missing == figures
    assert all(getattr(info, name) is None for name in figures)


def test_ansi_colour_codes_are_stripped() -> None:
    line = (
        "\x1b[1;36m(EngineCore_DP0 pid=855)\x1b[0;0m \x1b[32mINFO\x1b[0m 11-29 17:46:23 "
        "[kv_cache_utils.py:2146] GPU KV cache size: \x1b[1m650,560\x1b[0m tokens"
    )
    assert clean_line(line) == "GPU KV cache size: 650,560 tokens"
    assert LogFact("kv_cache_tokens", 650_560) in parse_line(line)


def test_streaming_matches_whole_log_and_reports_line_facts() -> None:
    text = _log("vllm-0.25.1-h200-startup-A.log")
    parser = StartupLogParser()
    seen = [parser.feed(line) for line in text.splitlines()]
    assert parser.result() == parse_startup_log(text)
    assert [LogFact("available_kv_gib", 99.27), LogFact("engine", "vllm")] in seen


def test_disagreeing_ranks_are_flagged_first_value_kept() -> None:
    parser = StartupLogParser()
    parser.feed("(Worker_TP0 pid=1) INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 50.62 GiB")
    parser.feed("(Worker_TP1 pid=2) INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 48.10 GiB")
    info = parser.result()
    assert info.available_kv_gib == 50.62
    assert info.conflicts == ["available_kv_gib"]

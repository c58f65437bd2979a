"""`servelab plan` as a subprocess: JSON figures, what-ifs, MBU, clear errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SERVELAB = str(Path(sys.executable).with_name("servelab"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SERVELAB, "plan", *args], capture_output=True, text=True, timeout=60)


def plan_json(*args: str) -> dict:
    done = run("--model", "Qwen/Qwen3-14B", "--gpu", "L40S", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_l40s_default_plan_json():
    out = plan_json("--gpu-memory-utilization", "0.9")
    for key in ("weights_gib", "kv_bytes_per_token", "kv_cache_gib", "kv_cache_tokens",
                "max_concurrency", "decode_ceiling_tok_s"):
        assert key in out
    assert out["kv_bytes_per_token"] == 163_840
    assert out["weights_gib"] == pytest.approx(27.52, abs=0.005)
    assert 11.00 * 0.95 <= out["kv_cache_gib"] <= 11.57 * 1.05
    assert out["kv_cache_tokens"] % 16 == 0
    assert out["max_concurrency"] == pytest.approx(out["kv_cache_tokens"] / 40960)


def test_awq_tp2_and_short_context_arms():
    base = plan_json()
    awq = plan_json("--quantization", "awq")
    tp2 = plan_json("--tensor-parallel-size", "2")
    short = plan_json("--max-model-len", "1024", "--gpu-memory-utilization", "0.95")
    assert awq["weights_gib"] < 0.36 * base["weights_gib"]
    assert awq["kv_cache_tokens"] > 2 * base["kv_cache_tokens"]
    assert tp2["plan"]["kv_bytes_per_token_per_gpu"] == 163_840 // 2
    assert tp2["kv_cache_tokens"] > 2 * base["kv_cache_tokens"]
    assert short["plan"]["max_model_len"] == 1024
    assert short["max_concurrency"] == pytest.approx(short["kv_cache_tokens"] / 1024)
    assert awq["decode_ceiling_tok_s"] > 2.5 * base["decode_ceiling_tok_s"]


def test_what_if_and_mbu():
    out = plan_json("--what-if", "awq: --quantization awq", "--what-if",
                    "tp2: --tensor-parallel-size 2", "--what-if", "2rep: --replicas 2",
                    "--target-concurrency", "16", "--context", "2048",
                    "--mbu", "--tpot-ms", "40", "--batch", "8")
    assert [r["arm"] for r in out["what_if"]] == ["bf16", "awq", "tp2", "2rep"]  # the flags' own arm is named by them
    assert out["what_if"][3]["gpus"] == 2 and out["what_if"][3]["batch_per_replica"] == 8
    assert out["verdict"][0].startswith("rule (DOMAIN.md 7)")
    # Arms on the same GPU count are ranked by decode throughput (the table's figures).
    by_name = {r["arm"]: r["decode_tok_s"] for r in out["what_if"]}
    two = sorted(("tp2", "2rep"), key=lambda n: -by_name[n])
    assert (f"on 2 GPUs, decode tok/s (roofline): {two[0]} {by_name[two[0]]:,.0f} > "
            f"{two[1]} {by_name[two[1]]:,.0f}") in out["verdict"]
    assert 0 < out["mbu"] < 1


def test_human_table_renders():
    done = run("--model", "Qwen3-14B", "--gpu", "h200")
    assert done.returncode == 0 and "KV cache tokens" in done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("--model", "Qwen/Qwen3-15B", "--gpu", "L40S"), "unknown model"),
    (("--model", "Qwen/Qwen3-14B", "--gpu", "L40"), "unknown GPU"),
    (("--model", "Qwen/Qwen3-14B", "--gpu", "L40S", "--gpu-memory-utilization", "1.5"),
     "--gpu-memory-utilization"),
    (("--model", "Qwen/Qwen3-14B", "--gpu", "L40S", "--what-if", "broken"), "NAME: --flag"),
    (("--model", "Qwen/Qwen3-14B", "--gpu", "L40S", "--what-if", "x: --bogus 1"), "--what-if x"),
    (("--model", "Qwen/Qwen3-14B", "--gpu", "L40S", "--mbu"), "--mbu needs"),
])
def test_bad_input_exits_2_without_traceback(args, message):
    done = run(*args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_model_that_does_not_fit_is_reported():
    done = run("--model", "llama-3.3-70b", "--gpu", "L40S", "--json")
    assert done.returncode == 0
    out = json.loads(done.stdout)
    assert out["fits"] is False and "exceed the budget" in out["plan"]["reason"]

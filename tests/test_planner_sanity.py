"""Wrong answers refused or flagged: layouts vLLM refuses, quantizations that do not apply,
an MBU above 100 %, pydantic dumps for bad engine flags, and a calibration whose rebuilt
workload is not the one measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.hardware.catalog import get_gpu
from servelab.models import load_model
from servelab.plan import EngineArgs, plan_memory
from servelab.plan.memory import parallelism_error


def _servelab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize(("model", "tp", "pp", "refused"), [
    ("Qwen/Qwen3-14B", 3, 1, "attention heads (40) must be divisible by tensor parallel size (3)"),
    ("Qwen/Qwen3-14B", 5, 1, "8 KV heads cannot be split over tensor parallel size 5"),
    ("Qwen/Qwen3-0.6B", 1, 64, "pipeline parallel size 64 exceeds the model's 28 layers"),
    ("Qwen/Qwen3-14B", 2, 1, None),
    ("Qwen/Qwen3-30B-A3B", 8, 1, None),   # 4 KV heads replicated over 8 ranks
    ("Qwen/Qwen3-14B", 1, 3, None),       # 40 layers over 3 stages: uneven but allowed
])
def test_vllm_layout_rules(model: str, tp: int, pp: int, refused: str | None) -> None:
    m = load_model(model)
    got = parallelism_error(m, tp, pp)
    assert (got is None) if refused is None else (refused in got)
    plan = plan_memory(m, get_gpu("H200"), EngineArgs(tensor_parallel_size=tp, pipeline_parallel_size=pp))
    if refused is not None:
        assert not plan.fits and refused in plan.reason


def test_plan_says_tp3_of_a_40_head_model_does_not_start() -> None:
    proc = _servelab("plan", "--model", "Qwen/Qwen3-14B", "--gpu", "H200", "--tensor-parallel-size", "3")
    out = " ".join(proc.stdout.split())
    assert "vLLM refuses: total number of attention heads (40)" in out and not out.endswith("fits")


def test_mxfp4_is_refused_on_a_dense_model() -> None:
    with pytest.raises(ServelabError, match="mxfp4 applies to routed experts"):
        load_model("Qwen/Qwen3-14B", "mxfp4")
    assert load_model("Qwen/Qwen3-30B-A3B", "mxfp4").weight_format == "mxfp4"


def test_an_mbu_above_100_percent_says_the_figures_disagree() -> None:
    proc = _servelab("plan", "--model", "Qwen/Qwen3-14B", "--gpu", "H200", "--mbu", "--tpot-ms", "1",
                     "--batch", "1", "--json")
    data = json.loads(proc.stdout)
    assert data["mbu"] > 1 and "inconsistent" in data["mbu_note"]
    fine = json.loads(_servelab("plan", "--model", "Qwen/Qwen3-14B", "--gpu", "H200", "--mbu",
                                "--tpot-ms", "9", "--batch", "1", "--json").stdout)
    assert fine["mbu"] < 1 and "mbu_note" not in fine


@pytest.mark.parametrize(("flag", "value", "line"), [
    ("--max-num-seqs", "0", "error: --max-num-seqs 0: input should be >= 1"),
    ("--gpu-memory-utilization", "1.5", "error: --gpu-memory-utilization 1.5: input should be <= 1"),
])
def test_bad_engine_flags_are_one_line(flag: str, value: str, line: str) -> None:
    proc = _servelab("sim", "run", "--gpu", "H200", "--model", "Qwen/Qwen3-4B", "--dataset-name",
                     "random", "--num-prompts", "2", flag, value)
    assert proc.returncode == 2
    assert proc.stderr.strip() == line
    assert "pydantic" not in proc.stderr and "Traceback" not in proc.stderr


def test_calibrate_warns_when_the_rebuilt_workload_is_not_the_measured_one(tmp_path: Path) -> None:
    common = ["--gpu", "L40S", "--model", "Qwen/Qwen3-0.6B", "--dataset-name", "random",
              "--num-prompts", "6", "--random-output-len", "8", "--seed", "5", "--max-concurrency", "2"]
    proc = _servelab("sim", "run", *common, "--random-input-len", "256", "--save-result",
                     "--result-dir", str(tmp_path), "--result-filename", "m.json")
    assert proc.returncode == 0, proc.stderr
    same = _servelab("sim", "calibrate", str(tmp_path / "m.json"), *common, "--random-input-len", "256",
                     "--max-evals", "3", "--out", str(tmp_path / "a.json"))
    assert same.returncode == 0, same.stderr
    assert "warning:" not in same.stdout
    other = _servelab("sim", "calibrate", str(tmp_path / "m.json"), *common, "--random-input-len", "64",
                      "--max-evals", "3", "--out", str(tmp_path / "b.json"))
    assert other.returncode == 0, other.stderr
    text = " ".join(other.stdout.split())
    assert "warning: m.json: the rebuilt workload is not the measured one: total_input_tokens 384 rebuilt vs 1,536 measured (-75.0 %)" in text

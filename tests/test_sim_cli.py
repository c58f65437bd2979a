"""`servelab sim run` and `servelab sim calibrate` as subprocesses; the engine flags of `sim`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.metrics.records import RequestRecord
from servelab.metrics.result import RunInfo
from servelab.metrics.summary import SummaryOptions, summarize
from servelab.sim.cost import default_calibration

_BASE = ["--gpu", "L40S", "--model", "Qwen/Qwen3-14B", "--dataset-name", "random",
         "--num-prompts", "16", "--random-input-len", "64", "--random-output-len", "6",
         "--seed", "3"]


def _sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servelab", "sim", *args],
                          capture_output=True, text=True, timeout=120)


def _bench_keys() -> set[str]:
    rec = RequestRecord(index=0, prompt_len=4, intended_send_s=0.0, send_s=0.0, output_len=2,
                        ttft_ms=1.0, itl_ms=[1.0], e2el_ms=2.0)
    run = RunInfo(date="d", backend="vllm", model_id="m", tokenizer_id="t", num_prompts=1,
                  request_rate=float("inf"), max_concurrency=4, seed=1)  # as _BASE
    return set(summarize([rec], 1.0, SummaryOptions()).with_run(run).to_json_dict())


def test_run_json_has_bench_keys_and_the_trace_accounts_for_every_token(tmp_path: Path) -> None:
    trace = tmp_path / "steps.jsonl"
    proc = _sim("run", *_BASE, "--max-concurrency", "4", "--json", "--trace", str(trace))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == _bench_keys()
    assert data["completed"] == 16 and data["backend"] == "servelab-sim"
    assert data["total_input_tokens"] == 16 * 64 and data["total_output_tokens"] == 16 * 6
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
    # Random prompts share no full block, so every prompt token is prefilled once; every
    # request's first token comes from its prefill step, the other five from decode steps.
    assert sum(s["prefill_tokens"] for s in steps) == 16 * 64
    assert sum(s["decode_tokens"] for s in steps) == 16 * 5
    assert max(s["running"] for s in steps) <= 4
    assert "GPU KV cache size:" in proc.stderr


def test_run_saves_the_result_file(tmp_path: Path) -> None:
    proc = _sim("run", *_BASE, "--save-result", "--result-dir", str(tmp_path),
                "--result-filename", "r.json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["completed"] == 16 and data["servelab"]["seed"] == 3


def test_run_keeps_each_requests_itls_only_when_saving_detailed(tmp_path: Path) -> None:
    proc = _sim("run", *_BASE, "--save-detailed", "--save-result", "--result-dir", str(tmp_path),
                "--result-filename", "r.json", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert json.loads(proc.stdout)["itls"] == data["itls"]
    # 6 output tokens: 5 gaps each, in seconds, adding up to E2EL - TTFT
    assert [len(gaps) for gaps in data["itls"]] == [5] * 16
    for gaps, ttft, e2el in zip(data["itls"], data["ttfts"], data["latencies"]):
        assert sum(gaps) == pytest.approx(e2el - ttft)
    plain = json.loads(_sim("run", *_BASE, "--json").stdout)
    assert "itls" not in plain and "ttfts" not in plain


@pytest.mark.parametrize(("flags", "needle"), [
    (["--gpu", "NoSuchGPU"], "NoSuchGPU"),
    (["--replicas", "0"], "--replicas"),
    (["--router-policy", "nope"], "nope"),
    (["--calibration", "/nonexistent/cal.json"], "/nonexistent/cal.json"),
    (["--max-model-len", "0"], "--max-model-len 0: input should be >= 1"),
])
def test_bad_input_exits_2_with_a_message_and_no_traceback(flags: list[str], needle: str) -> None:
    args = list(_BASE)
    if flags[0] == "--gpu":
        args[1] = flags[1]
        flags = []
    proc = _sim("run", *args, *flags)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_calibration_file_names_the_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "cal.json"
    bad.write_text(json.dumps({"gpu_class": "L40S", "gpu_time_scale": 9.0}))
    proc = _sim("run", *_BASE, "--calibration", str(bad))
    assert proc.returncode == 2
    assert str(bad) in proc.stderr and "Traceback" not in proc.stderr


def test_calibrate_recovers_a_known_gpu_time_scale(tmp_path: Path) -> None:
    truth = tmp_path / "truth.json"
    truth.write_text(json.dumps({
        **default_calibration("L40S").model_dump(mode="json", include={"launch_us",
            "frontend_us_per_prompt_token", "frontend_us_per_output_token"}),
        "gpu_class": "L40S", "gpu_time_scale": 1.4, "step_overhead_ms": 2.0,
        "per_seq_us": 20.0, "per_prefill_token_us": 0.5, "request_overhead_ms": 3.0}))
    # 1,024-token prompts: TTFT holds a compute-bound prefill (x the scale) and ITL a decode
    # step (x the scale + the step overhead), so the two cannot trade against each other.
    common = ["--gpu", "L40S", "--model", "Qwen/Qwen3-14B", "--dataset-name", "random",
              "--num-prompts", "8", "--random-input-len", "1024", "--random-output-len", "16",
              "--seed", "5", "--max-concurrency", "2"]
    proc = _sim("run", *common, "--calibration", str(truth), "--save-result",
                "--result-dir", str(tmp_path), "--result-filename", "measured.json")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "fit.json"
    proc = _sim("calibrate", str(tmp_path / "measured.json"), *common, "--out", str(out),
                "--max-evals", "40")
    assert proc.returncode == 0, proc.stderr
    fit = json.loads(out.read_text())
    # The default L40S scale is 1.0; the data were made with 1.4, so the fit must move
    # most of the way there.
    assert abs(fit["gpu_time_scale"] - 1.4) < 0.1
    assert abs(fit["fit_error_pct"]["measured.json:mean_itl_ms"]) < 3.0
    assert "mean_itl_ms" in proc.stdout


def test_run_serve_and_calibrate_take_the_same_engine_flags_with_the_same_defaults() -> None:
    import typer
    import typer.main

    from servelab.cli.sim import calibrate_cmd, run_cmd
    from servelab.cli.sim_serve import serve_cmd

    group = typer.Typer()
    for name, cmd in (("run", run_cmd), ("serve", serve_cmd), ("calibrate", calibrate_cmd)):
        group.command(name)(cmd)
    sim = typer.main.get_command(group)

    def engine_flags(name: str) -> dict[tuple[str, ...], object]:
        return {tuple(sorted(p.opts + p.secondary_opts)): p.default
                for p in sim.commands[name].params if p.name in shared}

    shared = {"model", "gpu", "quantization", "max_num_seqs", "max_num_batched_tokens",
              "max_model_len", "gpu_memory_utilization", "enable_prefix_caching",
              "tensor_parallel_size", "pipeline_parallel_size", "block_size", "kv_cache_dtype"}
    run = engine_flags("run")
    assert len(run) == len(shared)
    assert run[("--tensor-parallel-size", "-tp")] == 1
    assert run[("--enable-prefix-caching", "--no-enable-prefix-caching")] is True
    assert run[("--kv-cache-dtype",)] is None
    assert engine_flags("serve") == run
    # calibrate's --model/--gpu may be left out (with --experiment); the rest are run's.
    calibrate = engine_flags("calibrate")
    assert calibrate.pop(("--model",)) is None and calibrate.pop(("--gpu",)) is None
    assert calibrate == {k: v for k, v in run.items() if k not in {("--model",), ("--gpu",)}}


def test_sim_run_names_the_kernel_family_and_the_source_of_its_figures() -> None:
    proc = _sim("run", *_BASE, "--quantization", "awq")
    assert proc.returncode == 0, proc.stderr
    assert "step costs: Marlin 4-bit GEMMs; datasheet L40S, not profiled" in proc.stdout
    proc = _sim("run", *[a if a != "L40S" else "H200" for a in _BASE])
    assert proc.returncode == 0, proc.stderr
    assert "step costs: cuBLAS bf16 GEMMs; profiled H200" in proc.stdout


def test_calibrate_across_models_reports_each_model_held_out(tmp_path: Path) -> None:
    # Two models' results made with one known residual; fitting on one and predicting the
    # other must come close (the kernels are the same physics), and each model is reported.
    truth = tmp_path / "truth.json"
    truth.write_text(json.dumps({**default_calibration("L40S").model_dump(mode="json"),
                                 "gpu_time_scale": 1.3, "fitted_on": [], "fit_error_pct": {}}))
    common = ["--gpu", "L40S", "--dataset-name", "random", "--num-prompts", "6",
              "--random-input-len", "512", "--random-output-len", "12", "--seed", "5",
              "--max-concurrency", "2"]
    files = []
    for model, name in (("Qwen/Qwen3-0.6B", "small.json"), ("Qwen/Qwen3-1.7B", "large.json")):
        proc = _sim("run", *common, "--model", model, "--calibration", str(truth), "--save-result",
                    "--result-dir", str(tmp_path), "--result-filename", name)
        assert proc.returncode == 0, proc.stderr
        files.append(str(tmp_path / name))
    out = tmp_path / "fit.json"
    proc = _sim("calibrate", *files, *common, "--model", "Qwen/Qwen3-0.6B",
                "--model-for", "large.json=Qwen/Qwen3-1.7B", "--leave-one-model-out",
                "--max-evals", "16", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "held out Qwen/Qwen3-0.6B" in proc.stdout and "held out Qwen/Qwen3-1.7B" in proc.stdout
    held = json.loads(out.read_text())["held_out_error_pct"]
    assert {k.split("/")[0] + "/" + k.split("/")[1] for k in held} == {"Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"}
    assert abs(held["Qwen/Qwen3-1.7B/large.json:mean_itl_ms"]) < 10.0


def test_calibrate_checks_its_output_before_fitting(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = _sim("calibrate", str(tmp_path / "none.json"), "--gpu", "L40S", "--model", "Qwen/Qwen3-0.6B",
                "--dataset-name", "random", "--out", str(blocker / "sub" / "fit.json"))
    assert proc.returncode == 2
    err = " ".join(proc.stderr.split())  # the console wraps long lines
    assert err.startswith("error: --out:") and "is a file, not a folder" in err
    assert "Traceback" not in proc.stderr

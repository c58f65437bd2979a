"""`servelab sim calibrate --experiment DIR`: fit on an experiment's cells in one command.

Known answer: a simulated experiment run with a calibration of known factors; calibrating
on its cells must recover them. Qwen3-14B on an H200: a c1 decode step is ~9 ms of kernels
x gpu_time_scale 1.3 plus the step overhead, so ITL pins the scale; c1 TTFT (request
overhead + one prefill of 512 tokens) then pins request_overhead_ms.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.experiment import load_spec, run_experiment
from servelab.hardware.catalog import get_gpu
from servelab.sim.cost import Calibration, default_calibration, shipped_profile

pytestmark = pytest.mark.slow

TRUTH = default_calibration("H200").model_copy(update={
    "gpu_time_scale": 1.3, "request_overhead_ms": 8.0})

SPEC = """\
name: calexp
engine: sim
hardware: {{gpu: H200}}
model: Qwen/Qwen3-14B
sim: {{calibration: {cal}}}
arms:
  - name: bf16
  - name: small
    args: {{max_num_seqs: 4}}
workloads:
  - name: rnd
    dataset_name: random
    random_input_len: 512
    random_output_len: 32
loads:
  concurrency: [1, 8]
  num_prompts: 24
seed: 5
"""


def _simulated(tmp_path: Path, spec: str, truth: Calibration | None = None) -> Path:
    """Run the simulated experiment `spec` (formatted with `cal`, a file holding `truth`)
    and return its directory."""
    spec_path = tmp_path / "spec.yaml"
    if truth is not None:
        truth.save(tmp_path / "truth.json")
        spec = spec.format(cal=tmp_path / "truth.json")
    spec_path.write_text(spec)
    run_experiment(load_spec(spec_path), tmp_path / "run")
    return tmp_path / "run"


def _calibrate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servelab", "sim", "calibrate", *args],
                          capture_output=True, text=True, timeout=600)


def test_calibrating_on_an_experiments_cells_recovers_its_factors(tmp_path: Path) -> None:
    _simulated(tmp_path, SPEC, TRUTH)

    out = tmp_path / "fit.json"
    proc = _calibrate("--experiment", str(tmp_path / "run"), "--out", str(out),
                      "--max-evals", "200")
    assert proc.returncode == 0, proc.stderr
    for cell in ("bf16/rnd/c1", "bf16/rnd/c8", "small/rnd/c1", "small/rnd/c8"):
        assert cell in proc.stdout
    fit = Calibration.load(out)
    assert set(fit.fitted_on) == {"bf16/rnd/c1", "bf16/rnd/c8", "small/rnd/c1", "small/rnd/c8"}
    # Noise-free data: every metric is reproduced closely ...
    assert max(abs(e) for e in fit.fit_error_pct.values()) < 2.0
    # ... and the factors the data pins down come back (see module docstring).
    assert fit.gpu_time_scale == pytest.approx(TRUTH.gpu_time_scale, rel=0.05)
    assert fit.request_overhead_ms == pytest.approx(TRUTH.request_overhead_ms, rel=0.15)


def test_a_given_profile_prices_the_experiments_cells(tmp_path: Path) -> None:
    """--profile with --experiment: every kernel of the profile 1.3x slower than the shipped
    one the cells were simulated on, so the fit's GPU scale comes back 1.3x smaller."""
    _simulated(tmp_path, SPEC, TRUTH)
    shipped = shipped_profile(get_gpu("H200"))
    assert shipped is not None
    slow = shipped.model_copy(update={
        family: [p.model_copy(update={"time_us": p.time_us * 1.3}) for p in getattr(shipped, family)]
        for family in ("gemm", "elementwise", "attention_decode", "attention_prefill", "moe")})
    (tmp_path / "slow.json").write_text(slow.to_json())
    out = tmp_path / "fit.json"
    proc = _calibrate("--experiment", str(tmp_path / "run"), "--profile", str(tmp_path / "slow.json"),
                      "--arm", "bf16", "--out", str(out), "--max-evals", "200")
    assert proc.returncode == 0, proc.stderr
    fit = Calibration.load(out)
    assert fit.gpu_time_scale == pytest.approx(TRUTH.gpu_time_scale / 1.3, rel=0.05)


def test_only_the_named_arm_and_loads_are_fitted_and_bad_names_are_refused(tmp_path: Path) -> None:
    _simulated(tmp_path, SPEC, TRUTH)
    out = tmp_path / "fit.json"
    proc = _calibrate("--experiment", str(tmp_path / "run"), "--arm", "small", "--cells", "c8",
                      "--out", str(out), "--max-evals", "3")
    assert proc.returncode == 0, proc.stderr
    assert Calibration.load(out).fitted_on == ("small/rnd/c8",)
    bad = _calibrate("--experiment", str(tmp_path / "run"), "--arm", "nope", "--out", str(out))
    assert bad.returncode == 2 and "--arm nope" in bad.stderr + bad.stdout
    bad = _calibrate("--experiment", str(tmp_path / "run"), "--cells", "c3", "--out", str(out))
    assert bad.returncode == 2 and "--cells c3" in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr
    json.loads(out.read_text())  # the earlier fit was not clobbered by a refused call


SPLIT_SPEC = """\
name: split
engine: sim
hardware: {gpu: H200}
model: Qwen/Qwen3-0.6B
arms:
  - name: direct
    replicas: 2
  - name: routed
    replicas: 2
    routing: round_robin
workloads:
  - name: rnd
    dataset_name: random
    random_input_len: 256
    random_output_len: 24
loads:
  concurrency: [5]
  num_prompts: 23
  num_warmups: 3
seed: 9
"""


def test_calibration_re_simulates_each_arm_as_the_experiment_ran_it(tmp_path: Path) -> None:
    # Known answer: re-simulating a simulated experiment's cells with the calibration it ran
    # with reproduces every fit metric exactly, a direct arm too (the client's split: odd
    # request, cap and warm-up counts, so the replicas' shares differ), not behind a router.
    from dataclasses import replace

    from servelab.sim.calibrate import simulated_metrics
    from servelab.experiment.simulation import measured_cells

    _simulated(tmp_path, SPLIT_SPEC)
    targets = {t.name: t for t in measured_cells(tmp_path / "run")}
    assert set(targets) == {"direct/rnd/c5", "routed/rnd/c5"}
    assert targets["direct/rnd/c5"].direct and not targets["routed/rnd/c5"].direct
    for t in targets.values():
        assert t.options is not None
        got = simulated_metrics(replace(t.options, calibration=default_calibration("H200")), t)
        assert got == pytest.approx(t.measured, rel=1e-9), t.name
    # The two arms' traffic differs in where it goes, so their figures differ.
    assert targets["direct/rnd/c5"].measured != targets["routed/rnd/c5"].measured


SPEC_TRUTH = default_calibration("H200").model_copy(update={"spec_step_us": 300.0, "spec_per_seq_us": 20.0})

SPECULATIVE_SPEC = """\
name: specexp
engine: sim
hardware: {{gpu: H200}}
model: Qwen/Qwen3-14B
sim: {{calibration: {cal}}}
arms:
  - name: nospec
  - name: ngram-k2
    speculative: {{method: ngram, num_speculative_tokens: 2, acceptance: [0.7, 0.5]}}
workloads:
  - name: rnd
    dataset_name: random
    random_input_len: 256
    random_output_len: 64
loads:
  concurrency: [1, 48]
  num_prompts: 96
seed: 5
"""


def test_the_speculative_fit_recovers_the_speculative_time_from_the_speculative_cells(tmp_path: Path) -> None:
    # A host whose speculative path costs 300 us a step and 20 us a sequence (the shipped
    # H200 figures are 740.5 and 94.61): c1 and c48 separate the two terms, and the fit
    # reads only the speculative arm's cells and moves only those two fields.
    _simulated(tmp_path, SPECULATIVE_SPEC, SPEC_TRUTH)

    out = tmp_path / "fit.json"
    proc = _calibrate("--experiment", str(tmp_path / "run"), "--fit", "speculative",
                      "--out", str(out), "--max-evals", "80")
    assert proc.returncode == 0, proc.stderr
    fit = Calibration.load(out)
    assert set(fit.fitted_on) == {"ngram-k2/rnd/c1", "ngram-k2/rnd/c48"}
    assert {k.split(":")[1] for k in fit.fit_error_pct} == {
        "total_token_throughput", "output_throughput", "mean_tpot_ms", "mean_itl_ms"}
    assert max(abs(e) for e in fit.fit_error_pct.values()) < 2.0
    assert fit.spec_per_seq_us == pytest.approx(SPEC_TRUTH.spec_per_seq_us, rel=0.15)
    assert fit.spec_step_us == pytest.approx(SPEC_TRUTH.spec_step_us, rel=0.3)
    held = default_calibration("H200")
    assert (fit.gpu_time_scale, fit.request_overhead_ms, fit.per_seq_us) == (
        held.gpu_time_scale, held.request_overhead_ms, held.per_seq_us)

    bad = _calibrate("--experiment", str(tmp_path / "run"), "--arm", "nospec", "--fit", "speculative",
                     "--out", str(out))
    assert bad.returncode == 2 and "--fit speculative" in bad.stderr + bad.stdout
    bad = _calibrate("--experiment", str(tmp_path / "run"), "--fit", "everything", "--out", str(out))
    assert bad.returncode == 2 and "--fit everything" in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr
    assert Calibration.load(out).fitted_on == fit.fitted_on  # the refused calls wrote nothing


DRAFT_TRUTH = default_calibration("H200").model_copy(update={"draft_layer_us": 250.0})

DRAFT_SPEC = """\
name: draftexp
engine: sim
hardware: {{gpu: H200}}
model: Qwen/Qwen3-14B
sim: {{calibration: {cal}}}
arms:
  - name: nospec
  - name: draft-k4
    speculative: {{method: draft_model, model: Qwen/Qwen3-0.6B, num_speculative_tokens: 4,
                   acceptance: [0.8, 0.7, 0.6, 0.5]}}
workloads:
  - name: rnd
    dataset_name: random
    random_input_len: 256
    random_output_len: 48
  - name: rnd-b
    dataset_name: random
    random_input_len: 128
    random_output_len: 48
loads:
  concurrency: [1, 16]
  num_prompts: 32
seed: 5
"""


def test_the_drafter_fit_recovers_a_draft_models_cpu_per_layer_from_one_low_load_cell(tmp_path: Path) -> None:
    # A host whose draft model costs 250 us per layer and forward (the shipped H200 figure is
    # 517.7): its four 28-layer forwards are most of a batch-1 step, so one c1 cell of one
    # workload pins it; the fit reads only that cell and moves only that field.
    _simulated(tmp_path, DRAFT_SPEC, DRAFT_TRUTH)

    out = tmp_path / "fit.json"
    proc = _calibrate("--experiment", str(tmp_path / "run"), "--fit", "drafter", "--arm", "draft-k4",
                      "--workload", "rnd", "--cells", "c1", "--out", str(out), "--max-evals", "40")
    assert proc.returncode == 0, proc.stderr
    fit = Calibration.load(out)
    assert fit.fitted_on == ("draft-k4/rnd/c1",)
    assert fit.draft_layer_us == pytest.approx(DRAFT_TRUTH.draft_layer_us, rel=0.05)
    held = default_calibration("H200")
    assert (fit.spec_step_us, fit.spec_per_seq_us, fit.gpu_time_scale) == (
        held.spec_step_us, held.spec_per_seq_us, held.gpu_time_scale)

    # --calibration: the fit starts from that file, whose other fields it keeps.
    start = tmp_path / "start.json"
    held.model_copy(update={"spec_step_us": 123.0, "fitted_on": ("ngram-k2/x/c1", "ngram-k2/x/c8")}).save(start)
    chained = tmp_path / "chained.json"
    proc = _calibrate("--experiment", str(tmp_path / "run"), "--fit", "drafter", "--arm", "draft-k4",
                      "--cells", "c1", "--calibration", str(start), "--out", str(chained),
                      "--max-evals", "3")
    assert proc.returncode == 0, proc.stderr
    got = Calibration.load(chained)
    assert got.spec_step_us == 123.0
    # the file's other fields came from the start's cells: those are listed first
    assert got.fitted_on == ("ngram-k2/x/c1", "ngram-k2/x/c8", "draft-k4/rnd/c1", "draft-k4/rnd-b/c1")

    bad = _calibrate("--experiment", str(tmp_path / "run"), "--arm", "nospec", "--fit", "drafter",
                     "--out", str(out))
    assert bad.returncode == 2 and "--fit drafter" in bad.stderr + bad.stdout
    bad = _calibrate("--experiment", str(tmp_path / "run"), "--workload", "nope", "--out", str(out))
    assert bad.returncode == 2 and "--workload nope" in bad.stderr + bad.stdout
    bad = _calibrate("--experiment", str(tmp_path / "run"), "--calibration", str(tmp_path / "missing.json"),
                     "--out", str(out))
    assert bad.returncode == 2 and "--calibration" in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr
    assert Calibration.load(out).fitted_on == fit.fitted_on  # the refused calls wrote nothing

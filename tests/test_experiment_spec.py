"""The experiment spec: validation messages name the field and its line; the cell grid and
its seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.experiment.arms import flag_tokens, gpu_memory_utilization
from servelab.experiment.cells import all_cells, cell_seed, load_points
from servelab.experiment.specfile import load_spec

GOOD = """\
name: t
engine: sim
hardware:
  gpu: L40S
model: Qwen/Qwen3-0.6B
arms:
  - name: base
  - name: tuned
    baseline: false
    args:
      max_num_seqs: 8
      max-model-len: 1024
workloads:
  - name: rnd
    dataset_name: random
    random_input_len: 32
    random_output_len: 8
  - name: pfx
    dataset_name: prefix_repetition
    prefix_repetition_num_prefixes: 4
loads:
  concurrency: [1, 4]
  request_rate: [2.5]
  max_concurrency: 8
  num_prompts: {per_concurrency: 5, min: 10, max: 40}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ServelabError) as exc:
        load_spec(_write(tmp_path, text))
    return str(exc.value)


def test_good_spec_loads_with_defaults(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, GOOD))
    assert spec.baseline.name == "base"
    assert spec.arm("tuned").args == {"max_num_seqs": 8, "max_model_len": 1024}
    assert gpu_memory_utilization(spec, spec.arm("base")) == 0.9
    assert spec.percentiles() == (50.0, 90.0, 99.0)


def test_unknown_key_is_named_with_its_line(tmp_path: Path) -> None:
    text = GOOD.replace("  - name: tuned\n", "  - name: tuned\n    colour: red\n")
    msg = _error(tmp_path, text)
    assert "spec.yaml:9: arms[1].colour: unknown key 'colour'" in msg


def test_bad_type_is_named_with_its_line(tmp_path: Path) -> None:
    text = GOOD.replace("  concurrency: [1, 4]", "  concurrency: [1, many]")
    msg = _error(tmp_path, text)
    assert "spec.yaml:22: loads.concurrency[1]:" in msg
    assert "'many'" in msg


def test_unknown_engine_argument_for_the_simulator_names_the_line(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("max_num_seqs: 8", "max_num_seq: 8"))
    assert "spec.yaml:11: arms[1].args.max_num_seq:" in msg
    assert "max_num_seqs" in msg  # the valid names are listed


def test_reserved_argument_points_to_the_arm_field(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("max_num_seqs: 8", "tensor_parallel_size: 2"))
    assert "spec.yaml:11: arms[1].args.tensor_parallel_size: set it with the arm's `tensor_parallel_size`" in msg


def test_duplicate_names_two_baselines_and_missing_gpu(tmp_path: Path) -> None:
    text = (GOOD.replace("name: tuned", "name: base").replace("baseline: false", "baseline: true")
            .replace("hardware:\n  gpu: L40S\n", ""))
    text = text.replace("  - name: base\n", "  - name: base\n    baseline: true\n", 1)
    msg = _error(tmp_path, text)
    assert "3 problems" in msg
    assert "arms[1].name: name 'base' is used twice" in msg
    assert "arms[1].baseline: only one arm may be the baseline" in msg
    assert "engine sim needs hardware.gpu" in msg


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("  concurrency: [1, 4]", "  concurrency: [1, 4"))
    # PyYAML notices the unclosed list on the next line, and says so.
    assert "spec.yaml:23: not valid YAML (expected ',' or ']'" in msg


def test_bad_engine_argument_value_names_the_line(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("max_num_seqs: 8", "max_num_seqs: 0"))
    assert "spec.yaml:11: arms[1].args.max_num_seqs: Input should be greater than or equal to 1" in msg


def test_workload_checked_at_every_load(tmp_path: Path) -> None:
    # 4 prefixes need >= 4 prompts; a fixed num_prompts of 2 breaks the prefix workload.
    text = GOOD.replace("  num_prompts: {per_concurrency: 5, min: 10, max: 40}", "  num_prompts: 2")
    msg = _error(tmp_path, text)
    assert "workloads[1]: at load c1:" in msg and "exceeds --num-prompts 2" in msg


def test_load_points_and_num_prompts_rule(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, GOOD))
    points = load_points(spec.loads)
    assert [(p.key, p.num_prompts, p.max_concurrency) for p in points] == [
        ("c1", 10, 1), ("c4", 20, 4), ("r2.5-c8", 40, 8)]  # 2.5 req/s x 30 s = 75 -> max 40


def test_cell_seeds_distinct_per_workload_and_load_equal_across_arms(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, GOOD))
    cells = all_cells(spec)
    assert len(cells) == 2 * 2 * 3
    assert len({c.key for c in cells}) == len(cells)
    per_arm = {arm: {(c.workload, c.load.key): c.seed for c in cells if c.arm == arm}
               for arm in ("base", "tuned")}
    assert per_arm["base"] == per_arm["tuned"]  # identical traffic for every arm
    assert len(set(per_arm["base"].values())) == 6  # no two cells on one server share prompts
    assert cell_seed(0, "rnd", "c1") != cell_seed(1, "rnd", "c1")


def test_flag_tokens() -> None:
    assert flag_tokens({"max_num_seqs": 8, "enforce_eager": True, "enable_prefix_caching": False,
                        "cuda_graph_sizes": [1, 2]}) == [
        "--max-num-seqs", "8", "--enforce-eager", "--no-enable-prefix-caching",
        "--cuda-graph-sizes", "1", "2"]


def test_sampling_is_checked_and_unset_by_default(tmp_path: Path) -> None:
    assert load_spec(_write(tmp_path, GOOD)).engine_defaults.sampling.fields() == {}
    text = GOOD.replace("model: Qwen/Qwen3-0.6B\n",
                        "model: Qwen/Qwen3-0.6B\nengine_defaults:\n  sampling: {temperature: 0, top_k: 20}\n")
    assert load_spec(_write(tmp_path, text)).engine_defaults.sampling.fields() == {"temperature": 0.0, "top_k": 20}
    msg = _error(tmp_path, text.replace("top_k: 20", "top_q: 20"))
    assert "spec.yaml:7: engine_defaults.sampling.top_q: unknown key 'top_q'" in msg

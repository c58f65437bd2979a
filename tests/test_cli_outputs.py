"""Every command checks its output paths before it measures, simulates or fits anything,
and a bad path is one `error:` line naming the flag (exit 2, no traceback); files written
get the mode the umask allows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.storage import write_atomic
from servelab.testing.ports import free_port_base

SPEC = """\
name: outcheck
engine: sim
hardware: {gpu: L40S}
model: Qwen/Qwen3-0.6B
arms: [{name: a}]
workloads: [{name: w, dataset_name: random, random_input_len: 16, random_output_len: 4}]
loads: {concurrency: [1], num_prompts: 2}
"""


def _servelab(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def _commands(port: int) -> dict[str, tuple[str, list[str]]]:
    rnd = ["--dataset-name", "random", "--num-prompts", "2", "--random-input-len", "16",
           "--random-output-len", "4"]
    sim = ["--gpu", "L40S", "--model", "Qwen/Qwen3-0.6B"]
    return {
        # nothing listens on the port: a run that started would fail on the connection
        "bench": ("--result-dir", ["bench", "--base-url", f"http://127.0.0.1:{port}", "--model", "m",
                                   *rnd, "--save-result", "--result-dir", "blocker/sub"]),
        "run": ("--out", ["run", "spec.yaml", "--out", "blocker/sub"]),
        "sweep": ("--out", ["sweep", "--sim", *sim, *rnd, "--out", "blocker/sub"]),
        "tune": ("--out", ["tune", "--sim", *sim, *rnd, "--param", "max_num_seqs=4,8",
                           "--slo", "ttft:500", "--out", "blocker/sub"]),
        "data inspect": ("--save-samples", ["data", "inspect", *rnd, "--save-samples", "blocker/s.jsonl"]),
        "sim run --trace": ("--trace", ["sim", "run", *sim, *rnd, "--trace", "blocker/t.jsonl"]),
        "sim run --result-dir": ("--result-dir", ["sim", "run", *sim, *rnd, "--save-result",
                                                  "--result-dir", "blocker/sub"]),
        "sim profile": ("--out", ["sim", "profile", "--out", "blocker/p.json"]),
    }


@pytest.mark.parametrize("name", list(_commands(0)))
def test_a_bad_output_path_is_refused_before_any_work(tmp_path: Path, name: str) -> None:
    (tmp_path / "blocker").write_text("a file where a folder is needed")
    (tmp_path / "spec.yaml").write_text(SPEC)
    flag, args = _commands(free_port_base(1))[name]
    proc = _servelab(tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    err = " ".join(proc.stderr.split())  # the console wraps long lines
    assert err.startswith(f"error: {flag}") and "blocker is a file, not a folder" in err, err
    assert "Traceback" not in proc.stderr
    # nothing was written anywhere else either (no default folder, no partial file)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker", "spec.yaml"]


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_follow_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "f.json", b"{}")
    finally:
        os.umask(old)
    assert (tmp_path / "f.json").stat().st_mode & 0o777 == mode
    assert (tmp_path / "f.json").read_bytes() == b"{}"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # no temporary file left


def test_run_refuses_a_missing_dataset_file_before_any_arm(servelab_cli, tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: t\nengine: sim\nhardware: {gpu: L40S}\nmodel: Qwen/Qwen3-14B\n"
        "arms: [{name: a, baseline: true}]\n"
        "workloads:\n  - {name: ok, dataset_name: random, random_input_len: 8, random_output_len: 4}\n"
        f"  - {{name: chats, dataset_name: sharegpt, dataset_path: {tmp_path / 'gone.json'}}}\n"
        "loads: {concurrency: [1], num_prompts: 4}\n")
    out = tmp_path / "out"
    proc = servelab_cli("run", str(spec), "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    assert f"workload chats: dataset_path {tmp_path / 'gone.json'}: no such file" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(out.glob("cells/*/*/*.json"))  # the good workload's cell did not run either

"""`servelab data inspect` as a subprocess, and the shared workload/load flags."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.main import get_command

from servelab.cli.flags import load_flags, workload_flags
from servelab.errors import ServelabError
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions

DATA = Path(__file__).parent / "data" / "workload"
JSONL = DATA / "inspect_requests.jsonl"
WORDS = DATA / "wordlevel_tokenizer.json"
SERVELAB = Path(sys.executable).parent / "servelab"
FIXTURE_ARGS = ["--dataset-name", "jsonl", "--dataset-path", str(JSONL), "--tokenizer", str(WORDS),
                "--jsonl-output-len", "30"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SERVELAB), "data", "inspect", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


def test_inspect_json_matches_hand_computed_figures(tmp_path: Path) -> None:
    samples, plot = tmp_path / "samples.jsonl", tmp_path / "lengths.png"
    proc = _run(*FIXTURE_ARGS, "--seed", "3", "--json", "--save-samples", str(samples),
                "--plot", str(plot))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # stdout holds only the JSON
    assert out["schema"] == "servelab.data.inspect/1"
    assert (out["dataset"], out["requests"], out["seed"]) == ("jsonl", 5, 3)
    assert out["tokenizer"] == {"name": str(WORDS), "source": str(WORDS), "vocab_size": 4}
    # prompts 2, 4, 6 (chat turns joined), 30, 8 words; outputs 10, 20, 40, 30 (default), 100
    p, o = out["prompt_len"], out["output_len"]
    assert (p["min"], p["max"], p["total"]) == (2, 30, 50)
    assert p["mean"] == pytest.approx(10.0) and p["median"] == pytest.approx(6.0)
    assert p["std"] == pytest.approx(math.sqrt(104))
    assert p["p90"] == pytest.approx(21.2) and p["p99"] == pytest.approx(29.12)
    assert (o["min"], o["max"], o["total"]) == (10, 100, 200)
    assert o["mean"] == pytest.approx(40.0) and o["median"] == pytest.approx(30.0)
    assert o["std"] == pytest.approx(math.sqrt(1000))
    assert o["p90"] == pytest.approx(76.0) and o["p99"] == pytest.approx(97.6)
    assert any("5 requests in file order" in n for n in out["notes"])
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert [(r["prompt_len"], r["output_len"]) for r in rows] == [
        (2, 10), (4, 20), (6, 40), (30, 30), (8, 100)]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_inspect_text_report() -> None:
    proc = _run(*FIXTURE_ARGS, "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for needle in ("dataset jsonl", "requests 5", "seed 3", "prompt length histogram",
                   "output length histogram", "p99"):
        assert needle in text


def test_without_seed_the_seed_is_vllms_default() -> None:
    assert json.loads(_run(*FIXTURE_ARGS, "--json").stdout)["seed"] == 0  # vllm bench serve's


def _bad_sharegpt(tmp: Path) -> str:
    path = tmp / "bad.json"
    path.write_text('[\n {"conversations": []},\n {"id": 1}\n]', encoding="utf-8")
    return str(path)


def _a_file(tmp: Path) -> Path:
    path = tmp / "a-file"
    path.write_text("not a folder")
    return path


def _bad_jsonl(tmp: Path) -> str:
    path = tmp / "bad.jsonl"
    path.write_text('{"prompt": "w"}\n{"prompt": "w", "output_len": -1}\n', encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    "make_args, needle",
    [
        (lambda t: ["--dataset-name", "sonnet"], "--dataset-name sonnet needs --dataset-path"),
        (lambda t: ["--dataset-name", "speed_bench"], "reads local files only"),
        (lambda t: ["--dataset-path", str(t / "x.json")], "--dataset-path is not used by --dataset-name random"),
        (lambda t: ["--num-prompts", "abc"], "--num-prompts abc"),
        (lambda t: ["--num-prompts", "0"], "--num-prompts 0"),
        (lambda t: ["--seed", "x1"], "--seed x1"),
        (lambda t: ["--dataset-name", "random", "--random-range-ratio", "2"], "--random-range-ratio 2"),
        (lambda t: ["--dataset-name", "jsonl"], "needs --dataset-path"),
        (lambda t: ["--dataset-name", "sharegpt", "--dataset-path", str(t / "absent.json")], "no such file"),
        (lambda t: ["--dataset-name", "sharegpt", "--dataset-path", _bad_sharegpt(t)], "byte 27 (line 3)"),
        (lambda t: ["--dataset-name", "jsonl", "--dataset-path", _bad_jsonl(t)], "bad.jsonl:2:"),
        (lambda t: ["--tokenizer", str(t / "nope")], "--tokenizer"),
        (lambda t: FIXTURE_ARGS + ["--plot", str(_a_file(t) / "dir.png")], "is a file, not a folder"),
        (lambda t: FIXTURE_ARGS + ["--plot", str(t / "p.xyz")], "--plot"),
    ],
)
def test_bad_input_exits_2_without_traceback(tmp_path: Path, make_args, needle: str) -> None:
    proc = _run(*make_args(tmp_path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    assert needle in " ".join(proc.stderr.split())


def _app(received: dict) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @workload_flags
    @load_flags
    def bench(*, dataset: DatasetOptions, seed: int, arrivals: ArrivalOptions,
              max_concurrency: int | None, num_warmups: int,
              model: str = typer.Option("m", "--model")) -> None:
        received.update(dataset=dataset, seed=seed, arrivals=arrivals,
                        max_concurrency=max_concurrency, num_warmups=num_warmups, model=model)

    @app.callback()
    def _root() -> None:
        pass

    return app


def _invoke(*args: str) -> dict:
    received: dict = {}
    get_command(_app(received)).main(["bench", *args], standalone_mode=False)
    return received


def test_flags_reach_the_command_as_typed_options() -> None:
    got = _invoke("--dataset-name", "random", "--random-input-len", "64", "--num-prompts", "8",
                  "--seed", "5", "--request-rate", "2.5", "--burstiness", "0.5",
                  "--max-concurrency", "4", "--num-warmups", "2", "--model", "tiny")
    assert got["dataset"] == DatasetOptions(dataset_name="random", random_input_len=64, num_prompts=8)
    assert got["seed"] == 5 and got["model"] == "tiny"
    assert got["arrivals"] == ArrivalOptions(request_rate=2.5, burstiness=0.5)
    assert (got["max_concurrency"], got["num_warmups"]) == (4, 2)


def test_flag_defaults_follow_vllm() -> None:
    got = _invoke()
    assert got["dataset"] == DatasetOptions()
    assert got["dataset"].num_prompts == 1000 and got["dataset"].random_input_len == 1024
    assert math.isinf(got["arrivals"].request_rate) and got["arrivals"].burstiness == 1.0
    assert got["max_concurrency"] is None and got["num_warmups"] == 0
    assert isinstance(got["seed"], int)


def test_ramp_up_flags() -> None:
    got = _invoke("--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1",
                  "--ramp-up-end-rps", "20")
    assert got["arrivals"].ramp_up_strategy == "linear"
    assert (got["arrivals"].ramp_up_start_rps, got["arrivals"].ramp_up_end_rps) == (1.0, 20.0)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--request-rate", "abc"], "--request-rate abc"),
        (["--request-rate", "0"], "--request-rate 0"),
        (["--request-rate", "nan"], "--request-rate nan"),
        (["--burstiness", "0"], "--burstiness 0"),
        (["--burstiness", "x"], "--burstiness x"),
        (["--max-concurrency", "0"], "--max-concurrency 0"),
        (["--max-concurrency", "two"], "--max-concurrency two"),
        (["--num-warmups", "-1"], "--num-warmups -1"),
        (["--ramp-up-strategy", "steep"], "--ramp-up-strategy steep"),
        (["--ramp-up-strategy", "linear"], "--ramp-up-start-rps"),
        (["--dataset-name", "nope"], "--dataset-name nope"),
    ],
)
def test_bad_flag_values_name_the_flag(args: list[str], needle: str) -> None:
    with pytest.raises(ServelabError) as info:
        _invoke(*args)
    assert needle in str(info.value)

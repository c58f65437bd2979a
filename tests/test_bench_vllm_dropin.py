"""`servelab bench` as a drop-in for `vllm bench serve`: its flags, its console layout, its
result keys, its checks, and the measurement traps, against real servers on 127.0.0.1
(servelab's simulator server as a process, and the test token server)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from conftest import start_sim_server, stop_sim_server

from servelab.cli import _register_all, app
from servelab.cli.bench_refused import REFUSED
from servelab.workload.sharegpt import packaged_sharegpt_path

DATA = Path(__file__).parent / "data"
# A script that parses vLLM's summary: "Label:   value" lines between the rules.
_ROW = re.compile(r"^(?P<label>[A-Za-z0-9 ().%/-]+:)\s+(?P<value>-?\d+(?:\.\d+)?)\s*$")


def vllm_flags() -> list[str]:
    lines = (DATA / "vllm-0.32.0-bench-serve-flags.txt").read_text().splitlines()
    return [x for x in lines if x.startswith("--")]


def bench_options() -> tuple[set[str], set[str]]:
    """(visible option strings, hidden ones) of the real `servelab bench` command."""
    _register_all()
    command = typer.main.get_command(app).commands["bench"]  # type: ignore[attr-defined]
    visible: set[str] = set()
    hidden: set[str] = set()
    for p in command.params:
        names = set(getattr(p, "opts", [])) | set(getattr(p, "secondary_opts", []))
        (hidden if getattr(p, "hidden", False) else visible).update(names)
    return visible, hidden


def test_every_vllm_flag_is_accepted_or_refused_with_a_reason() -> None:
    visible, hidden = bench_options()
    refused = {r.flag for r in REFUSED}
    assert refused <= hidden  # refused flags are parsed, not shown
    missing = [f for f in vllm_flags() if f not in visible and f not in refused]
    assert missing == []
    # A flag is either honoured or refused, never both.
    assert not refused & visible
    assert all(len(r.reason) > 20 for r in REFUSED)


@pytest.mark.parametrize("extra", [["--use-beam-search"], ["--probe-request-rate", "2"],
                                   ["--chat-template-kwargs", "{}"]])
def test_a_refused_flag_is_one_line_naming_it(servelab_cli, tmp_path: Path, extra: list[str]) -> None:
    proc = servelab_cli("bench", "--base-url", "http://127.0.0.1:9", "--num-prompts", "2", *extra)
    assert proc.returncode == 2
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and extra[0] in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def small_bench(url: str, out: Path, *extra: str, n: int = 8) -> list[str]:
    return ["bench", "--base-url", url, "--model", "M", "--dataset-name", "random",
            "--random-input-len", "16", "--random-output-len", "6", "--num-prompts", str(n),
            "--disable-tqdm", "--save-result", "--result-dir", str(out), "--result-filename",
            "r.json", *extra]


def test_headers_body_ids_logprobs_and_lora_reach_the_server(token_server, servelab_cli,
                                                             tmp_path: Path) -> None:
    srv = token_server(itl_ms=1)
    srv.reset()
    proc = servelab_cli(*small_bench(
        srv.url, tmp_path, "--header", "x-team=serve", "x-run=7", "--extra-body",
        '{"top_k": 5, "max_tokens": 6}', "--request-id-prefix", "abc-", "--logprobs", "2",
        "--lora-modules", "ad1", "ad2", "--lora-assignment", "round-robin", "--num-warmups", "1"))
    assert proc.returncode == 0, proc.stderr
    seen = get_json(srv.url + "/requests")
    assert isinstance(seen, list)
    # The initial test request, one warm-up, then the eight requests, in that order.
    ids = [s["headers"].get("x-request-id") for s in seen]
    assert ids == ["abc-test-0", "abc-warmup-0"] + [f"abc-{i}" for i in range(8)]
    for s in seen:
        assert s["headers"]["x-team"] == "serve" and s["headers"]["x-run"] == "7"
        assert s["body"]["top_k"] == 5 and s["body"]["logprobs"] == 2
    assert [s["body"]["model"] for s in seen[2:]] == ["ad1", "ad2"] * 4


def test_random_forces_ignore_eos_and_temperature_is_not_sent(token_server, servelab_cli,
                                                               tmp_path: Path) -> None:
    srv = token_server(itl_ms=1, eos_after=3)
    srv.reset()
    proc = servelab_cli(*small_bench(srv.url, tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "no --temperature" in proc.stderr
    seen = get_json(srv.url + "/requests")
    assert all(s["body"]["ignore_eos"] is True and "temperature" not in s["body"] for s in seen)
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["total_output_tokens"] == 8 * 6  # ignore_eos honoured: no early stop


def test_all_requests_failing_exits_1_with_the_first_error(token_server, servelab_cli,
                                                           tmp_path: Path) -> None:
    srv = token_server(itl_ms=1, fail_after=1)
    srv.reset()
    proc = servelab_cli(*small_bench(srv.url, tmp_path))
    assert proc.returncode == 1
    assert "error: all 8 requests failed; the first: http_500" in proc.stderr
    assert "injected failure after request 1" in proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["failed"] == 8  # still written


def test_ramp_up_records_rps_change_events(token_server, servelab_cli, tmp_path: Path) -> None:
    srv = token_server(itl_ms=1)
    proc = servelab_cli(*small_bench(srv.url, tmp_path, "--ramp-up-strategy", "linear",
                                     "--ramp-up-start-rps", "20", "--ramp-up-end-rps", "24", n=9))
    assert proc.returncode == 0, proc.stderr
    events = json.loads((tmp_path / "r.json").read_text())["rps_change_events"]
    # Rates 20, 20.5, ..., 24 over nine requests: each whole req/s from 20 to 24 once.
    assert [e["rps"] for e in events] == [20, 21, 22, 23, 24]
    stamps = [e["timestamp"] for e in events]
    assert stamps == sorted(stamps)


def test_profile_needs_the_servers_profiler(token_server, servelab_cli, tmp_path: Path) -> None:
    srv = token_server(itl_ms=1)
    proc = servelab_cli(*small_bench(srv.url, tmp_path, "--profile"))
    assert proc.returncode == 2
    assert "--profile" in proc.stderr and "start_profile answered HTTP 404" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_traps_reasoning_multi_token_chunks_and_short_outputs(token_server, servelab_cli,
                                                              tmp_path: Path) -> None:
    srv = token_server(itl_ms=2, reasoning_tokens=2, tokens_per_chunk=2, eos_after=4)
    proc = servelab_cli("bench", "--base-url", srv.url, "--model", "M", "--backend", "openai-chat",
                        "--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "8",
                        "--prefix-repetition-suffix-len", "8", "--prefix-repetition-num-prefixes", "2",
                        "--prefix-repetition-output-len", "10", "--num-prompts", "12", "--disable-tqdm",
                        "--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    traps = r["servelab"]["traps"]
    # eos_after=4: 4 tokens per answer, the first 2 reasoning, in chunks of 2.
    assert r["total_output_tokens"] == 48
    assert (traps["reasoning_tokens"], traps["answer_tokens"]) == (24, 24)
    assert traps["tokens_beyond_one_per_chunk"] == 24  # 2 chunks of 2 per answer: 2 extra tokens
    assert traps["short_outputs"] == 12  # asked for 10, got 4, without --ignore-eos
    notes = r["servelab"]["trap_notes"]
    assert any(n.startswith("reasoning model: 24 of 48") for n in notes)
    assert any(n.startswith("48 output tokens arrived in 24 chunks") for n in notes)
    assert any(n.startswith("12 of 12 requests stopped before") for n in notes)
    assert "warning: reasoning model" in proc.stdout


@pytest.fixture(scope="module")
def sim_server() -> Iterator[str]:
    """`servelab sim serve` for Qwen/Qwen3-14B on an H200, 200x faster than real time."""
    handle = start_sim_server("--model", "Qwen/Qwen3-14B", "--gpu", "H200", "--time-scale", "200")
    try:
        yield handle.url
    finally:
        stop_sim_server(handle)


def parse_vllm_console(text: str) -> dict[str, float]:
    """What a script written for vLLM's output reads: the rows of the result block."""
    block = text.split("=" * 12 + " Serving Benchmark Result " + "=" * 12, 1)[1]
    block = block.split("=" * 50, 1)[0]
    rows = {}
    for line in block.splitlines():
        m = _ROW.match(line)
        if m:
            rows[m["label"]] = float(m["value"])
    return rows


def acceptance_line(line: str, url: str, num_prompts: int) -> list[str]:
    """A `vllm bench serve` line as servelab bench arguments: --base-url pointed at `url`,
    and --num-prompts cut to `num_prompts` (the client keeps the line's request rate in
    real time, so the whole line takes minutes: the full lines' run is in the closing
    note of the issue, measured the same way)."""
    args = line.split()[3:]
    args[args.index("--base-url") + 1] = url
    args[args.index("--num-prompts") + 1] = str(num_prompts)
    return args


VLLM_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "latencies", "queue_times",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
} | {f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl") for s in ("mean", "median", "std", "p99")}


def test_acceptance_sharegpt_line(sim_server: str, servelab_cli, tmp_path: Path) -> None:
    shutil.copy(packaged_sharegpt_path(), tmp_path / "ShareGPT_V3_unfiltered_cleaned_split.json")
    cmd = acceptance_line(
        "vllm bench serve --backend vllm --base-url http://localhost:8000 --model Qwen/Qwen3-14B "
        "--dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json "
        "--num-prompts 2000 --request-rate 10 --burstiness 1.0 --max-concurrency 10 --seed 42 "
        "--save-result --result-filename result.json", sim_server, 100)
    proc = servelab_cli("bench", *cmd, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "result.json").read_text())
    assert VLLM_KEYS <= set(r)
    # vLLM reports client-queue statistics only when --percentile-metrics names them.
    assert "mean_client_queue_time_ms" not in r and "Client-side Queueing" not in proc.stdout
    assert (r["completed"], r["request_rate"], r["max_concurrency"]) == (100, 10.0, 10)
    rows = parse_vllm_console(proc.stdout)
    assert rows["Successful requests:"] == 100
    assert rows["Maximum request concurrency:"] == 10
    assert rows["Request rate configured (RPS):"] == 10.0
    assert rows["Total generated tokens:"] == r["total_output_tokens"]
    assert rows["Mean TTFT (ms):"] == round(r["mean_ttft_ms"], 2)
    assert rows["P99 ITL (ms):"] == round(r["p99_itl_ms"], 2)


def test_acceptance_prefix_repetition_line_appends(sim_server: str, servelab_cli, tmp_path: Path) -> None:
    cmd = acceptance_line(
        "vllm bench serve --backend vllm --base-url http://localhost:8000 --model Qwen/Qwen3-14B "
        "--dataset-name prefix_repetition --num-prompts 1000 --request-rate 5 "
        "--prefix-repetition-prefix-len 256 --prefix-repetition-suffix-len 256 "
        "--prefix-repetition-num-prefixes 10 --prefix-repetition-output-len 128 "
        "--max-concurrency 10 --seed 42 --save-result --append-result "
        "--result-filename test_serve_results.txt", sim_server, 40)
    for _ in range(2):
        proc = servelab_cli("bench", *cmd, cwd=tmp_path, timeout=240)
        assert proc.returncode == 0, proc.stderr
    lines = (tmp_path / "test_serve_results.txt").read_text().splitlines()
    assert len(lines) == 2
    for line in lines:
        r = json.loads(line)
        assert VLLM_KEYS <= set(r) and r["completed"] == 40
        assert r["total_input_tokens"] == 40 * 512


@pytest.mark.parametrize("tail", [
    "--random-output-len 128 --num-prompts 1000 --max-concurrency 64",
    "--random-output-len 256 --num-prompts 320 --max-concurrency 64 --goodput ttft:500 tpot:50",
])
def test_acceptance_wrong_model_fails_fast_with_the_servers_message(
        sim_server: str, servelab_cli, tmp_path: Path, tail: str) -> None:
    cmd = ("--model google/gemma-4-31B-it --dataset-name random --random-input-len 1024 " + tail).split()
    proc = servelab_cli("bench", "--base-url", sim_server, *cmd, cwd=tmp_path)
    assert proc.returncode == 2
    assert "The model `google/gemma-4-31B-it` does not exist." in proc.stderr
    assert "Starting main benchmark run" not in proc.stderr  # nothing but the test was sent
    assert "Traceback" not in proc.stderr


def test_queue_metrics_when_named_and_vllms_file_name(token_server, servelab_cli,
                                                       tmp_path: Path) -> None:
    srv = token_server(itl_ms=1)
    proc = servelab_cli("bench", "--base-url", srv.url, "--model", "org/M", "--num-prompts", "6",
                        "--random-input-len", "8", "--random-output-len", "4", "--request-rate",
                        "50", "--max-concurrency", "2", "--percentile-metrics",
                        "ttft,client_queue_time,e2el_including_client_queue", "--save-result",
                        "--result-dir", str(tmp_path), "--disable-tqdm")
    assert proc.returncode == 0, proc.stderr
    (path,) = tmp_path.glob("*.json")
    assert re.fullmatch(r"openai-50\.0qps-concurrency2-M-\d{8}-\d{6}\.json", path.name)
    r = json.loads(path.read_text())
    assert {"mean_client_queue_time_ms", "p99_e2el_including_client_queue_ms"} <= set(r)
    assert "mean_tpot_ms" not in r
    assert "Client-side Queueing" in proc.stdout and "Queue-inclusive End-to-end Latency" in proc.stdout


def test_ready_check_waits_for_a_server_that_is_still_starting(tmp_path: Path) -> None:
    from conftest import start_token_server_on, stop_process

    from servelab.testing.ports import free_port_base

    port = free_port_base()
    bench = subprocess.Popen(
        [sys.executable, "-m", "servelab", *small_bench(f"http://127.0.0.1:{port}", tmp_path,
                                                        "--ready-check-timeout-sec", "60")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # The client must be refused at least once before the server exists.
        assert bench.stderr is not None
        first = bench.stderr.readline()
        while "retrying" not in first:
            first = bench.stderr.readline()
            assert first, "bench ended without retrying"
        server = start_token_server_on(port, itl_ms=1)
        try:
            out, err = bench.communicate(timeout=120)
        finally:
            stop_process(server.proc)
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
    assert bench.returncode == 0, err
    assert "connection refused; retrying" in first
    assert json.loads((tmp_path / "r.json").read_text())["completed"] == 8

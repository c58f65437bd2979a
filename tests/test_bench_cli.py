"""`servelab bench` end to end: a subprocess against a token server subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import start_token_server, stop_process

VLLM_KEYS = [
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests",
] + [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl") for s in ("mean", "median", "std", "p99")]


def bench_args(url: str, out: Path, *extra: str, n: int = 16, out_len: int = 8) -> list[str]:
    return ["bench", "--base-url", url, "--model", "M", "--dataset-name", "random",
            "--random-input-len", "32", "--random-output-len", str(out_len),
            "--num-prompts", str(n), "--ignore-eos", "--no-progress", "--save-result",
            "--result-dir", str(out), "--result-filename", "r.json", *extra]


def test_acceptance_command_matches_the_server(token_server, servelab_cli, tmp_path: Path) -> None:
    srv = token_server(ttft_ms=50, itl_ms=20)
    d = tmp_path / "D"
    proc = servelab_cli(
        "bench", "--base-url", srv.url, "--model", "M", "--dataset-name", "random",
        "--random-input-len", "32", "--random-output-len", "32", "--num-prompts", "64",
        "--max-concurrency", "16", "--request-rate", "inf", "--ignore-eos", "--save-result",
        "--result-dir", str(d), "--result-filename", "r.json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads((d / "r.json").read_text())
    assert not set(VLLM_KEYS) - set(r)
    truth = srv.stats()
    assert truth["max_in_flight"] == 16
    assert (r["completed"], r["failed"]) == (64, 0)
    assert r["total_output_tokens"] == 64 * 32
    assert r["total_input_tokens"] == 64 * 32
    # Never below the server's truth (stamped before each write; test_client_accuracy.py),
    # and one timeline: with equal lengths, mean TPOT is the mean ITL. The first stream is
    # the initial test request, alone before the run.
    streams = [q["truth"] for q in srv.requests()][1:]
    assert len(streams) == 64
    assert 64 * r["mean_ttft_ms"] >= sum(t["ttft_ms"] for t in streams)
    assert r["mean_tpot_ms"] == pytest.approx(r["mean_itl_ms"])
    assert r["request_throughput"] == pytest.approx(64 / r["duration"])
    assert r["output_throughput"] == pytest.approx(64 * 32 / r["duration"])
    assert r["servelab"]["partial"] is False and isinstance(r["servelab"]["seed"], int)
    # The last of 4 waves of 16 waited about 3 requests' lifetimes (TTFT + 31 ITL each) for a
    # slot: that is the cap's doing, not the client falling behind its schedule.
    lifetime_ms = truth["mean_ttft_ms"] + 31 * truth["mean_chunk_gap_ms"]
    assert r["servelab"]["slot_wait_ms"]["max"] >= 2.9 * lifetime_ms
    assert r["servelab"]["client_fell_behind"] is False


def test_goodput_is_exact_on_both_sides_of_the_truth(token_server, servelab_cli, tmp_path: Path) -> None:
    srv = token_server(ttft_ms=50, itl_ms=20)
    for slo, all_good in (("ttft:75 tpot:30", True), ("ttft:25", False), ("tpot:10", False)):
        proc = servelab_cli(*bench_args(srv.url, tmp_path, "--max-concurrency", "4",
                                        "--goodput", *slo.split()))
        assert proc.returncode == 0, proc.stderr
        r = json.loads((tmp_path / "r.json").read_text())
        assert r["completed"] == 16
        expected = r["request_throughput"] if all_good else 0.0
        assert r["request_goodput"] == pytest.approx(expected), slo


def test_failures_are_grouped_and_the_result_written(token_server, servelab_cli, tmp_path: Path) -> None:
    srv = token_server(fail_every=4, break_every=6, break_after_tokens=2, itl_ms=1)
    proc = servelab_cli(*bench_args(srv.url, tmp_path, "--max-concurrency", "1", n=24))
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    # requests 4, 8, 12, 16, 20, 24 get HTTP 500; 6 and 18 (not multiples of 4) break.
    assert r["servelab"]["failed_by_reason"] == {"http_500": 6, "stream_broken": 2}
    assert (r["completed"], r["failed"]) == (16, 8)
    assert r["total_output_tokens"] == 16 * 8
    assert "failed" in proc.stdout and "http_500" in proc.stdout


def test_unreachable_target_exits_2_without_traceback(servelab_cli, tmp_path: Path) -> None:
    srv = start_token_server()
    stop_process(srv.proc)
    proc = servelab_cli(*bench_args(srv.url, tmp_path))
    assert proc.returncode == 2
    assert f"cannot reach {srv.url}: connection refused" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("extra, needle", [
    (["--backend", "nope"], "--backend"),
    (["--goodput", "latency:5"], "--goodput"),
    (["--request-rate", "fast"], "--request-rate"),
    (["--num-client-processes", "0"], "--num-client-processes"),
    (["--percentile-metrics", "ttft,speed"], "--percentile-metrics"),
    (["--top-p", "2"], "--top-p 2"),
    (["--temperature", "warm"], "--temperature warm"),
    (["--no-such-flag"], "--no-such-flag"),
])
def test_bad_flags_exit_2(servelab_cli, tmp_path: Path, extra: list[str], needle: str) -> None:
    proc = servelab_cli(*bench_args("http://127.0.0.1:9", tmp_path, *extra))
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_api_key_is_sent_and_never_written(token_server, servelab_cli, tmp_path: Path) -> None:
    srv = token_server(api_key="sk-SECRET-123", itl_ms=1)
    flag = servelab_cli(*bench_args(srv.url, tmp_path, "--api-key", "sk-SECRET-123",
                                    "--save-detailed", "--json", "--metadata", "run=a"))
    env = servelab_cli(*bench_args(srv.url, tmp_path, "--append-result", "--save-detailed"),
                       env={"OPENAI_API_KEY": "sk-SECRET-123"})
    missing = servelab_cli(*bench_args(srv.url, tmp_path / "x"), env={"OPENAI_API_KEY": ""})
    for proc in (flag, env):
        assert proc.returncode == 0, proc.stderr
        assert "SECRET" not in proc.stdout + proc.stderr
    text = (tmp_path / "r.json").read_text()
    results = [json.loads(line) for line in text.splitlines()]
    assert [r["completed"] for r in results] == [16, 16]
    assert "SECRET" not in text
    # The initial test request fails first: one request sent, the server's answer shown,
    # nothing written.
    assert missing.returncode == 2, missing.stderr
    assert "initial test request" in missing.stderr and "http_401" in missing.stderr
    assert "SECRET" not in missing.stderr and not (tmp_path / "x" / "r.json").exists()


def test_sampling_fields_are_sent_only_when_given_and_recorded(token_server, servelab_cli,
                                                               tmp_path: Path) -> None:
    from servelab.client.backends import BACKENDS, SamplingParams
    from servelab.workload.request import RequestSpec

    spec = RequestSpec(index=0, prompt="hi", messages=None, prompt_len=1, output_len=4)
    plain = json.loads(BACKENDS["openai"].body(spec, "m", True))
    # As vllm bench serve: no sampling field unless asked, the server's default applies.
    assert not {"temperature", "top_p", "top_k", "min_p"} & set(plain)
    given = json.loads(BACKENDS["openai"].body(spec, "m", True, SamplingParams(temperature=0.0, top_k=20)))
    assert (given["temperature"], given["top_k"]) == (0.0, 20) and "top_p" not in given
    srv = token_server(itl_ms=1)
    proc = servelab_cli(*bench_args(srv.url, tmp_path, "--temperature", "0", "--top-k", "20"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["servelab"]["sampling"] == {"temperature": 0.0, "top_k": 20}


def test_ctrl_c_writes_partial_results(token_server, tmp_path: Path) -> None:
    srv = token_server(ttft_ms=20, itl_ms=20)
    srv.reset()  # another test may have used this server
    args = bench_args(srv.url, tmp_path, "--request-rate", "20", "--seed", "1", n=400)
    proc = subprocess.Popen([sys.executable, "-m", "servelab", *args], stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        while line and not line.startswith("bench:"):
            line = proc.stderr.readline()
        deadline = time.monotonic() + 60
        # The server's streams: the initial test request, then five measured ones.
        while srv.stats()["streams"] < 6 and time.monotonic() < deadline:
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
    assert proc.returncode == 130, err
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["servelab"]["partial"] is True
    assert 5 <= r["completed"] < 400
    assert "partial" in out


def test_multi_process_bench(token_server, servelab_cli, tmp_path: Path) -> None:
    srv = token_server(ttft_ms=20, itl_ms=10)
    proc = servelab_cli(*bench_args(srv.url, tmp_path, "--num-client-processes", "2",
                                    "--max-concurrency", "8", "--num-warmups", "2", n=32))
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["completed"], r["total_output_tokens"]) == (32, 32 * 8)
    assert srv.stats()["max_in_flight"] <= 8


def test_model_from_the_server_and_vllms_seed(token_server, servelab_cli, tmp_path: Path) -> None:
    srv = token_server(itl_ms=1)
    seeds = []
    for _ in range(2):
        args = [a for a in bench_args(srv.url, tmp_path, "--append-result") if a not in ("--model", "M")]
        proc = servelab_cli(*args)
        assert proc.returncode == 0, proc.stderr
    results = [json.loads(x) for x in (tmp_path / "r.json").read_text().splitlines()]
    for r in results:
        assert r["model_id"] == "token-server" and r["completed"] == 16
        seeds.append(r["servelab"]["seed"])
    assert seeds == [0, 0]  # vllm bench serve's default seed


def test_a_detailed_save_needs_per_request_itls_and_is_refused_before_sending() -> None:
    from servelab.benchmark import BenchRequest, run_bench
    from servelab.client.backends import SamplingParams, get_backend
    from servelab.client.target import TargetConfig
    from servelab.metrics.summary import SummaryOptions
    from servelab.workload.arrivals import ArrivalOptions
    from servelab.workload.datasets import DatasetOptions

    be = get_backend("vllm")
    # port 9 (discard): nothing is ever sent, the request is refused first
    req = BenchRequest(
        target=TargetConfig(base_url="http://127.0.0.1:9", endpoint=be.default_endpoint, backend=be,
                            model="m"),
        dataset=DatasetOptions(num_prompts=1), seed=0, arrivals=ArrivalOptions(),
        sampling=SamplingParams(), summary=SummaryOptions(per_request_itls=False), save_detailed=True)
    with pytest.raises(ValueError, match=r"per_request_itls=True"):
        run_bench(req)

"""Timed traces (Mooncake-style JSONL, Azure CSV): send times, shared prefix blocks, and
`schedule_s`, down to the records of a real send over 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from servelab.client.backends import get_backend
from servelab.client.sender import send_schedule
from servelab.client.target import TargetConfig
from servelab.errors import ServelabError
from servelab.workload.arrivals import ArrivalOptions, arrival_times_s, schedule_s
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.tokenizer import load_tokenizer

DATA = Path(__file__).parent / "data" / "workload"
MOONCAKE = DATA / "mooncake_sample.jsonl"
TOK = load_tokenizer(None)


def _trace(path: Path = MOONCAKE, **kw) -> object:
    opts = DatasetOptions(dataset_name="timed_trace", dataset_path=path,
                          **{"timed_trace_sec_multiplier": 0.001, **kw})
    return build_workload(opts, TOK, 0)


def test_mooncake_times_at_a_speedup() -> None:
    wl = _trace(trace_speedup=2)
    assert wl.arrival_s == pytest.approx((0.0, 0.25, 0.75))
    assert schedule_s(wl, ArrivalOptions(), np.random.default_rng(0)) == pytest.approx([0.0, 0.25, 0.75])
    assert [(r.prompt_len, r.output_len) for r in wl.requests] == [(40, 5), (36, 7), (20, 3)]
    assert all(TOK.count(r.text) == r.prompt_len for r in wl.requests)


def test_shared_hash_ids_give_token_identical_blocks() -> None:
    wl = _trace(timed_trace_chunk_hash_size=16)
    a, b, c = (TOK.encode(r.text) for r in wl.requests)
    assert a[:16] == b[:16] and a[16:32] == b[16:32]  # hash ids 46, 47 shared
    assert a[32:36] != b[32:36]  # 48 against 49
    assert a[:16] != c[:16]  # 50: another block
    assert b[:32] == a[:32] and len(b) == 36  # the last block is partial (36 = 2 x 16 + 4)


def test_the_rate_flags_are_refused_on_the_trace_clock_and_used_without_it() -> None:
    wl = _trace()
    for opts in (ArrivalOptions(request_rate=4.0), ArrivalOptions(burstiness=0.5),
                 ArrivalOptions(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=2)):
        with pytest.raises(ServelabError, match="--no-self-timed"):
            schedule_s(wl, opts, np.random.default_rng(0))
    off = _trace(self_timed=False)
    assert off.arrival_s is None
    rate = ArrivalOptions(request_rate=4.0)
    assert schedule_s(off, rate, np.random.default_rng(5)) == pytest.approx(
        arrival_times_s(3, rate, np.random.default_rng(5)).tolist())


def test_azure_csv_times_from_its_datetimes() -> None:
    wl = build_workload(DatasetOptions(dataset_name="timed_trace",
                                       dataset_path=DATA / "azure_sample.csv"), TOK, 0)
    assert wl.arrival_s == pytest.approx((0.0, 0.5, 2.35))
    assert [(r.prompt_len, r.output_len) for r in wl.requests] == [(374, 44), (396, 109), (879, 1)]
    assert any("asked for 0 output tokens" in n for n in wl.notes)


@pytest.mark.parametrize(
    "rows, kw, needle",
    [
        ([{"timestamp": 5, "input_length": 3, "output_length": 2},
          {"timestamp": 4, "input_length": 3, "output_length": 2}], {}, "t.jsonl:2: timestamp goes back"),
        ([{"ts": 0, "input_length": 3, "output_length": 2}], {}, "t.jsonl:1: no 'timestamp'"),
        ([{"ts": 0, "input_length": 3, "output_length": 2}], {"timed_trace_label_timestamp": "ts"}, None),
        ([{"timestamp": 0, "input_length": -1, "output_length": 2}], {}, "'input_length' must be an integer >= 0"),
        ([{"timestamp": 0, "input_length": 3, "output_length": 2, "hash_ids": 7}], {}, "'hash_ids' must be a list"),
    ],
)
def test_bad_trace_lines_name_file_line_and_key(tmp_path: Path, rows, kw, needle) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if needle is None:
        assert len(_trace(path, **kw).requests) == 1
        return
    with pytest.raises(ServelabError) as info:
        _trace(path, **kw)
    assert needle in str(info.value)


def test_a_real_send_follows_the_trace_clock(token_server) -> None:
    srv = token_server()
    wl = _trace(trace_speedup=4)
    target = TargetConfig(base_url=srv.url, endpoint="/v1/completions", backend=get_backend("vllm"),
                          model="M", ignore_eos=True)
    intended = schedule_s(wl, ArrivalOptions(), np.random.default_rng(0))
    records = asyncio.run(send_schedule(target, wl.requests, intended))
    assert sorted(r.intended_send_s for r in records) == pytest.approx([0.0, 0.125, 0.375])
    assert all(r.send_s >= r.intended_send_s for r in records)
    assert [r.output_len for r in sorted(records, key=lambda r: r.index)] == [5, 7, 3]


def test_bench_and_sim_run_replay_a_trace(servelab_cli, token_server, tmp_path: Path) -> None:
    srv = token_server()
    args = ["--dataset-name", "timed_trace", "--dataset-path", str(MOONCAKE),
            "--timed-trace-sec-multiplier", "0.001", "--trace-speedup", "2"]
    proc = servelab_cli("bench", "--base-url", srv.url, "--model", "M", "--no-progress",
                        "--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json",
                        *args)
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["completed"], r["total_input_tokens"], r["total_output_tokens"]) == (3, 96, 15)
    assert r["duration"] >= 0.75  # the last request is due 0.75 s after the first
    bad = servelab_cli("bench", "--base-url", srv.url, "--model", "M", "--no-progress",
                       "--request-rate", "5", *args)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--request-rate, --burstiness and --ramp-up-* do not apply" in " ".join(bad.stderr.split())
    sim = servelab_cli("sim", "run", "--gpu", "L40S", "--model", "Qwen/Qwen3-14B", "--json", *args)
    assert sim.returncode == 0, sim.stderr
    assert json.loads(sim.stdout)["completed"] == 3

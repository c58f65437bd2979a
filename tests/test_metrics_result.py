"""The result schema's JSON keys (vLLM's) and the atomic result file."""

from __future__ import annotations

import json
import math

import pytest

from servelab import __version__
from servelab.errors import ServelabError
from servelab.metrics.records import RequestRecord
from servelab.metrics.result import (
    RunInfo,
    read_result,
    load_results,
    parse_metadata,
    write_result,
)
from servelab.metrics.summary import GoodputSLO, SummaryOptions, summarize

# The keys `vllm bench serve` writes for any run, before the per-metric statistics.
VLLM_CORE_KEYS = [
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "latencies",
    "queue_times",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
]
VLLM_RUN_KEYS = [
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
]
VLLM_DETAIL_KEYS = ["input_lens", "output_lens", "ttfts", "itls", "start_times",
                    "generated_texts", "errors"]


def stat_keys(metrics, percentiles):
    return [
        f"{stat}_{m}_ms" for m in metrics for stat in ("mean", "median", "std", *percentiles)
    ]


def result(opts=SummaryOptions()):
    recs = [
        RequestRecord(
            index=0, prompt_len=5, intended_send_s=0.0, send_s=0.0, output_len=3,
            ttft_ms=100.0, itl_ms=[10.0, 30.0], e2el_ms=140.0,
        ),
        RequestRecord(
            index=1, prompt_len=7, intended_send_s=0.0, send_s=0.0, error="HTTP 503",
            error_kind="http_503",
        ),
    ]
    return summarize(recs, 1.0, opts)


def run_info(**overrides):
    fields = dict(
        date="20260101-120000", backend="openai", model_id="org/tiny", tokenizer_id="org/tiny",
        num_prompts=2, request_rate=math.inf, seed=7, tokenizer="hf:org/tiny",
    )
    fields.update(overrides)
    return RunInfo(**fields)


def test_default_keys_are_vllms():
    keys = list(result().to_json_dict())
    expected = VLLM_CORE_KEYS + stat_keys(["ttft", "tpot", "itl"], ["p99"]) + ["servelab"]
    assert keys == expected


def test_chosen_metrics_and_fractional_percentiles():
    opts = SummaryOptions(percentile_metrics=("e2el", "ttft"), metric_percentiles=(50, 99.9))
    out = result(opts).to_json_dict()
    assert set(out) == set(VLLM_CORE_KEYS) | set(
        stat_keys(["ttft", "e2el"], ["p50", "p99.9"])
    ) | {"servelab"}
    # the order of metrics is vLLM's (ttft, tpot, itl, e2el), whatever order was asked
    assert list(out).index("mean_ttft_ms") < list(out).index("mean_e2el_ms")
    assert out["p50_e2el_ms"] == pytest.approx(140.0)


def test_run_keys_metadata_and_detail_lists():
    res = result(SummaryOptions(goodput=GoodputSLO(ttft_ms=100.0))).with_run(
        run_info(metadata={"tp": "2", "backend": "overridden", "request_rate": "x"})
    )
    out = res.to_json_dict(detailed=True)
    assert list(out)[:7] == VLLM_RUN_KEYS[:7]
    assert set(out) == (
        set(VLLM_RUN_KEYS) | {"tp"} | set(VLLM_CORE_KEYS) | set(VLLM_DETAIL_KEYS)
        | set(stat_keys(["ttft", "tpot", "itl"], ["p99"])) | {"servelab"}
    )
    assert out["tp"] == "2"
    # --metadata may overwrite set-up keys but not traffic keys, as in vLLM
    assert out["backend"] == "overridden"
    assert out["request_rate"] == "inf"
    assert out["request_goodput"] == pytest.approx(1.0)
    assert out["ttfts"] == [pytest.approx(0.1), 0.0]
    assert out["itls"] == [[pytest.approx(0.01), pytest.approx(0.03)], []]
    assert out["errors"] == ["", "HTTP 503"]
    assert out["output_lens"] == [3, 0]
    extras = out["servelab"]
    assert extras["version"] == __version__
    assert extras["seed"] == 7
    assert extras["tokenizer"] == "hf:org/tiny"
    assert extras["failed_by_reason"] == {"http_503": 1}
    assert extras["goodput_slo_ms"] == {"ttft": 100.0}
    assert extras["sched_lags_ms"] == [0.0, 0.0]
    assert extras["partial"] is False
    assert res.as_partial().to_json_dict()["servelab"]["partial"] is True


def test_finite_request_rate_is_a_number():
    out = result().with_run(run_info(request_rate=4.5, max_concurrency=8)).to_json_dict()
    assert out["request_rate"] == 4.5
    assert out["max_concurrency"] == 8
    assert "input_lens" not in out


def test_result_json_round_trips_through_a_file(tmp_path):
    out = result().with_run(run_info()).to_json_dict(detailed=True)
    path = tmp_path / "r.json"
    write_result(path, out, append=False)
    # the typed reader keeps every key the writer wrote, values as written
    assert read_result(path).to_json() == json.loads(json.dumps(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_write_creates_dirs_and_overwrites_without_append(tmp_path):
    path = tmp_path / "a" / "b" / "r.json"
    write_result(path, {"n": 1}, append=False)
    write_result(path, {"n": 2}, append=False)
    assert path.read_text() == '{"n": 2}'
    assert load_results(path) == [{"n": 2}]


def test_append_writes_one_json_object_per_line(tmp_path):
    path = tmp_path / "r.json"
    for n in range(3):
        write_result(path, {"n": n, "nested": {"k": [n]}}, append=True)
    text = path.read_text()
    # vLLM's --append-result: a newline before each later object, none at the start or end
    assert text == "\n".join(json.dumps({"n": n, "nested": {"k": [n]}}) for n in range(3))
    assert [json.loads(line)["n"] for line in text.splitlines()] == [0, 1, 2]
    assert [r["n"] for r in load_results(path)] == [0, 1, 2]
    assert load_results(path)[-1]["n"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "r.json"
    write_result(path, {"n": 1}, append=False)
    with pytest.raises(TypeError):
        write_result(path, {"bad": {1, 2}}, append=True)
    assert path.read_text() == '{"n": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_load_accepts_indented_json(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"completed": 3, "x": [1, 2]}, indent=2) + "\n")
    assert load_results(path) == [{"completed": 3, "x": [1, 2]}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1}\n{"b": ', "line 2"),
        ("", "empty"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_load_rejects_bad_files(tmp_path, text, message):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(ServelabError, match=message):
        load_results(path)


def test_load_missing_file_names_it(tmp_path):
    with pytest.raises(ServelabError, match="nope.json"):
        read_result(tmp_path / "nope.json")


def test_parse_metadata():
    assert parse_metadata(["tp=2", " gpu = H200 ", "eq=a=b"]) == {
        "tp": "2",
        "gpu": "H200",
        "eq": "a=b",
    }
    with pytest.raises(ServelabError, match="'tp' is not KEY=VALUE"):
        parse_metadata(["tp"])

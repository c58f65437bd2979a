"""vLLM's custom and spec_bench JSONL datasets, oversampling, and the general length flags."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import typer
from typer.main import get_command

from servelab.cli.flags import workload_flags
from servelab.errors import ServelabError
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.tokenizer import load_tokenizer

DATA = Path(__file__).parent / "data" / "workload"
WORDS = load_tokenizer(str(DATA / "wordlevel_tokenizer.json"))
PROMPTS = ["w", "w hello", "hello world w"]  # 1, 2 and 3 tokens of the word-level tokenizer


def _lines(tmp: Path, rows: list[dict], name: str = "c.jsonl") -> Path:
    path = tmp / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _custom(path: Path, seed: int = 0, **kw) -> object:
    opts = DatasetOptions(dataset_name="custom", dataset_path=path, **{"num_prompts": 3, **kw})
    return build_workload(opts, WORDS, seed)


def test_three_lines_give_exactly_those_prompts_and_lengths(tmp_path: Path) -> None:
    path = _lines(tmp_path, [{"prompt": p, "output_tokens": 10 * (i + 1)} for i, p in enumerate(PROMPTS)])
    wl = _custom(path, custom_output_len=-1, disable_shuffle=True)
    assert [(r.prompt, r.prompt_len, r.output_len) for r in wl.requests] == [
        ("w", 1, 10), ("w hello", 2, 20), ("hello world w", 3, 30)]
    fixed = _custom(path, disable_shuffle=True)  # --custom-output-len's default, 256
    assert [r.output_len for r in fixed.requests] == [256, 256, 256]
    assert any("no chat template is applied" in n for n in fixed.notes)
    assert not any("chat template" in n for n in _custom(path, skip_chat_template=True).notes)


def test_shuffled_as_vllm_shuffles(tmp_path: Path) -> None:
    rows = [{"prompt": " ".join(["w"] * (i + 1))} for i in range(12)]
    path = _lines(tmp_path, rows)
    order = list(range(12))
    random.Random(7).shuffle(order)  # vLLM: random.seed(seed); random.shuffle(data)
    wl = _custom(path, seed=7, num_prompts=5)
    assert [r.prompt_len for r in wl.requests] == [i + 1 for i in order[:5]]
    assert [r.index for r in wl.requests] == list(range(5))


def test_fewer_lines_than_asked_are_oversampled_unless_told_not_to(tmp_path: Path) -> None:
    path = _lines(tmp_path, [{"prompt": p} for p in PROMPTS])
    wl = _custom(path, num_prompts=7, disable_shuffle=True)
    assert len(wl.requests) == 7 and [r.index for r in wl.requests] == list(range(7))
    assert {r.prompt for r in wl.requests[3:]} <= set(PROMPTS)
    # The copies are vLLM's draws: random.seed(seed); random.choice(sampled) per missing one.
    rng = random.Random(0)
    assert [r.prompt for r in wl.requests[3:]] == [rng.choice(PROMPTS) for _ in range(4)]
    assert any("4 more were drawn" in n for n in wl.notes)
    only = _custom(path, num_prompts=7, no_oversample=True)
    assert len(only.requests) == 3
    assert any("--no-oversample sends those 3" in n for n in only.notes)


@pytest.mark.parametrize(
    "text, name, kw, needle",
    [
        ('{"prompt": "w"}\n{"prompt": 3}\n', "c.jsonl", {}, "c.jsonl:2: 'prompt' must be a string"),
        ('{"prompt": "w"}\n\n{"prompt": "w"}\n', "c.jsonl", {"custom_output_len": -1},
         "no 'output_tokens', which --custom-output-len -1 asks the file for"),
        ('{"prompt": "w", "output_tokens": "x"}\n', "c.jsonl", {"custom_output_len": -1},
         "c.jsonl:1: 'output_tokens' must be an integer"),
        ('{"prompt": "w"\n', "c.jsonl", {}, "c.jsonl:1: not valid JSON"),
        ('{"prompt": "w"}\n', "c.json", {}, "ending in .jsonl"),
    ],
)
def test_bad_custom_files_name_file_line_and_key(tmp_path: Path, text: str, name: str, kw: dict,
                                                 needle: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ServelabError, match=None) as info:
        _custom(path, **kw)
    assert needle in str(info.value)


def test_spec_bench_takes_first_turns_of_a_category(tmp_path: Path) -> None:
    rows = [
        {"question_id": 1, "category": "writing", "turns": ["w w", "hello"]},
        {"question_id": 2, "category": "math_reasoning", "turns": ["w w w"]},
        {"question_id": 3, "category": "writing", "turns": ["hello world w w"]},
    ]
    path = _lines(tmp_path, rows, "question.jsonl")
    opts = DatasetOptions(dataset_name="spec_bench", dataset_path=path, num_prompts=2,
                          spec_bench_category="writing", disable_shuffle=True)
    wl = build_workload(opts, WORDS, 0)
    assert [(r.prompt, r.output_len) for r in wl.requests] == [("w w", 256), ("hello world w w", 256)]
    with pytest.raises(ServelabError) as info:
        build_workload(opts.model_copy(update={"spec_bench_category": "coding"}), WORDS, 0)
    assert "categories: writing, math_reasoning" in str(info.value)
    bad = _lines(tmp_path, [{"question_id": 1, "turns": "w"}], "bad.jsonl")
    with pytest.raises(ServelabError, match=r"bad.jsonl:1: 'turns' must be"):
        build_workload(DatasetOptions(dataset_name="spec_bench", dataset_path=bad), WORDS, 0)


def _received(*args: str) -> DatasetOptions:
    got: dict = {}
    app = typer.Typer()

    @app.command()
    @workload_flags
    def cmd(*, dataset: DatasetOptions, seed: int) -> None:
        got["dataset"] = dataset

    @app.callback()
    def _root() -> None:
        pass

    get_command(app).main(["cmd", *args], standalone_mode=False)
    return got["dataset"]


def test_general_length_flags_map_as_vllm_maps_them() -> None:
    ds = _received("--input-len", "77", "--output-len", "9", "--random-output-len", "5")
    assert ds.random_input_len == 77
    for field in ("random_output_len", "sharegpt_output_len", "custom_output_len", "hf_output_len",
                  "spec_bench_output_len", "prefix_repetition_output_len"):
        assert getattr(ds, field) == 9, field
    assert ds.sonnet_output_len == 150 and ds.jsonl_output_len == 256  # not vLLM's mapping


def test_dataset_defaults_and_switches_follow_vllm() -> None:
    ds = _received()
    assert ds == DatasetOptions() and ds.dataset_name == "random"
    assert (ds.custom_output_len, ds.spec_bench_output_len, ds.timed_trace_chunk_hash_size) == (256, 256, 16)
    assert (ds.sonnet_input_len, ds.sonnet_output_len, ds.sonnet_prefix_len) == (550, 150, 200)
    assert ds.self_timed is None and ds.trace_speedup == 1.0
    on = _received("--dataset-name", "custom", "--dataset-path", "x.jsonl", "--disable-shuffle",
                   "--no-oversample", "--skip-chat-template", "--enable-multimodal-chat", "--no-stream")
    assert (on.disable_shuffle, on.no_oversample, on.skip_chat_template, on.enable_multimodal_chat,
            on.no_stream) == (True,) * 5


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--dataset-name", "random", "--dataset-path", "f.json"], "--dataset-path is not used by --dataset-name random"),
        (["--dataset-name", "random-mm", "--dataset-path", "f.json"], "--dataset-path is not used by --dataset-name random-mm"),
        (["--dataset-name", "custom"], "--dataset-name custom needs --dataset-path"),
        (["--dataset-name", "custom_image"], "--dataset-name custom_image: not supported"),
        (["--dataset-name", "random-rerank"], "not reranking"),
        (["--custom-output-len", "0"], "--custom-output-len 0: must be >= 1, or -1"),
        (["--output-len", "0"], "--output-len 0: must be >= 1"),
        (["--dataset-name", "random", "--multi-turn"], "--multi-turn applies to --dataset-name sharegpt"),
        (["--self-timed"], "only supported with --dataset-name timed_trace"),
        (["--trace-speedup", "2"], "--trace-speedup applies to --dataset-name timed_trace"),
    ],
)
def test_bad_dataset_flags_name_the_flag(args: list[str], needle: str) -> None:
    with pytest.raises(ServelabError) as info:
        _received(*args)
    assert needle in str(info.value)


def test_self_timed_is_a_vllm_boolean_optional_flag() -> None:
    trace = ["--dataset-name", "timed_trace", "--dataset-path", "t.jsonl"]
    assert _received(*trace).self_timed is None and _received(*trace).replays_trace_times
    off = _received(*trace, "--no-self-timed")
    assert off.self_timed is False and not off.replays_trace_times
    assert _received(*trace, "--self-timed", "--trace-speedup", "3").trace_speedup == 3.0


def test_sharegpt_with_too_few_passing_pairs_is_oversampled(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    conv = [{"id": str(i), "conversations": [{"from": "human", "value": " ".join(["w"] * (4 + i))},
                                             {"from": "gpt", "value": "w w w w"}]} for i in range(2)]
    path.write_text(json.dumps(conv), encoding="utf-8")
    opts = DatasetOptions(dataset_name="sharegpt", dataset_path=path, num_prompts=5)
    wl = build_workload(opts, WORDS, 0)
    assert len(wl.requests) == 5 and {r.prompt_len for r in wl.requests} == {4, 5}
    assert any("3 more were drawn from them with replacement" in n for n in wl.notes)
    only = build_workload(opts.model_copy(update={"no_oversample": True}), WORDS, 0)
    assert len(only.requests) == 2

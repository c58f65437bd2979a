"""sonnet (vLLM's historical SonnetDataset) and burstgpt (its CSV) with known answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.sonnet import BASE_PROMPT
from servelab.workload.tokenizer import load_tokenizer

DATA = Path(__file__).parent / "data" / "workload"
WORDS = load_tokenizer(str(DATA / "wordlevel_tokenizer.json"))
TOK = load_tokenizer(None)


def _lines_file(tmp: Path, n: int) -> Path:
    # Line i holds 5 words (5 word-level tokens; the newline is whitespace).
    path = tmp / "poem.txt"
    path.write_text("".join(f"l{i} a b c d\n" for i in range(n)), encoding="utf-8")
    return path


def test_sonnet_prompts_share_the_opening_lines_and_fit_the_input_len(tmp_path: Path) -> None:
    path = _lines_file(tmp_path, 20)
    base = WORDS.count(BASE_PROMPT)
    assert base == 11
    opts = DatasetOptions(dataset_name="sonnet", dataset_path=path, num_prompts=6,
                          sonnet_input_len=61, sonnet_prefix_len=21)
    wl = build_workload(opts, WORDS, 3)
    # (61 - 11) / 5 = 10 lines per prompt, of which (21 - 11) / 5 = 2 are the shared opening.
    head = BASE_PROMPT + "l0 a b c d\nl1 a b c d\n"
    for r in wl.requests:
        assert r.prompt.startswith(head)
        assert r.prompt.count("\n") == 11 and (r.prompt_len, r.output_len) == (61, 150)
    assert len({r.prompt for r in wl.requests}) > 1  # the other 8 lines are drawn
    assert [r.prompt for r in build_workload(opts, WORDS, 3).requests] == [r.prompt for r in wl.requests]
    assert any("no longer has this dataset" in n for n in wl.notes)


def test_sonnet_real_text_with_the_builtin_tokenizer() -> None:
    opts = DatasetOptions(dataset_name="sonnet", dataset_path=DATA / "sonnet_lines.txt",
                          num_prompts=5, sonnet_input_len=120, sonnet_prefix_len=40,
                          sonnet_output_len=20)
    wl = build_workload(opts, TOK, 0)
    assert all(r.prompt_len <= 120 and r.prompt_len == TOK.count(r.prompt) for r in wl.requests)
    assert all(r.prompt.startswith(BASE_PROMPT + "From fairest creatures") for r in wl.requests)
    assert {r.output_len for r in wl.requests} == {20}


def test_sonnet_input_len_must_exceed_the_base_prompt(tmp_path: Path) -> None:
    opts = DatasetOptions(dataset_name="sonnet", dataset_path=_lines_file(tmp_path, 3),
                          sonnet_input_len=10, sonnet_prefix_len=0)
    with pytest.raises(ServelabError, match="--sonnet-input-len 10: must exceed the base prompt's 11 tokens"):
        build_workload(opts, WORDS, 0)


def _burst(**kw) -> object:
    opts = DatasetOptions(dataset_name="burstgpt", dataset_path=DATA / "burstgpt_sample.csv", **kw)
    return build_workload(opts, TOK, 0)


def test_burstgpt_keeps_gpt4_rows_with_a_response() -> None:
    wl = _burst(num_prompts=3, disable_shuffle=True)
    # Of 6 rows: 2 ChatGPT rows and a GPT-4 row with 0 response tokens (failed) are dropped.
    assert [(r.prompt_len, r.output_len) for r in wl.requests] == [(1087, 230), (32, 7), (64, 12)]
    assert all(TOK.count(r.prompt) == r.prompt_len for r in wl.requests)
    assert any("3 of 6 rows are GPT-4" in n for n in wl.notes)
    drawn = _burst(num_prompts=8)  # more than the 3 rows: drawn with replacement, as vLLM
    assert len(drawn.requests) == 8
    assert {(r.prompt_len, r.output_len) for r in drawn.requests} <= {(1087, 230), (32, 7), (64, 12)}
    assert len(_burst(num_prompts=8, no_oversample=True).requests) == 3


def test_burstgpt_bad_files(tmp_path: Path) -> None:
    header = tmp_path / "h.csv"
    header.write_text("Timestamp,Model,Request tokens\n1,GPT-4,3\n", encoding="utf-8")
    with pytest.raises(ServelabError, match=r"h.csv:1: CSV header lacks 'Response tokens'"):
        build_workload(DatasetOptions(dataset_name="burstgpt", dataset_path=header), TOK, 0)
    value = tmp_path / "v.csv"
    value.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "1,GPT-4,3,4,7,API log\n2,GPT-4,many,4,7,API log\n", encoding="utf-8")
    with pytest.raises(ServelabError, match=r"v.csv:3: 'Request tokens' must be an integer"):
        build_workload(DatasetOptions(dataset_name="burstgpt", dataset_path=value), TOK, 0)

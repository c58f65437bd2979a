"""random and prefix_repetition: exact token counts, shared prefixes, ranges, seeding."""

from __future__ import annotations

from collections import Counter

import pytest

from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.tokenizer import load_tokenizer

TOK = load_tokenizer(None)


def _random(seed: int = 1, **kw):
    opts = DatasetOptions(dataset_name="random", **{"num_prompts": 40, **kw})
    return build_workload(opts, TOK, seed)


def test_random_lengths_within_range_and_true_counts() -> None:
    wl = _random(random_input_len=100, random_output_len=50, random_range_ratio=0.3)
    assert len(wl.requests) == 40 and wl.notes == []
    for r in wl.requests:
        assert 70 <= r.prompt_len <= 130
        assert 35 <= r.output_len <= 65
        assert r.prompt_len == TOK.count(r.prompt)
    assert len({r.prompt_len for r in wl.requests}) > 5  # lengths vary
    assert len({r.prompt for r in wl.requests}) == 40  # prompts are distinct


def test_random_exact_lengths_without_range() -> None:
    wl = _random(random_input_len=64, random_output_len=7)
    assert {(r.prompt_len, r.output_len) for r in wl.requests} == {(64, 7)}
    assert all(TOK.count(r.prompt) == 64 for r in wl.requests)


def test_random_prefix_is_shared_token_for_token() -> None:
    wl = _random(random_input_len=20, random_prefix_len=30)
    encoded = [TOK.encode(r.prompt) for r in wl.requests]
    assert len({tuple(ids[:30]) for ids in encoded}) == 1
    assert all(len(ids) == 50 == r.prompt_len for ids, r in zip(encoded, wl.requests))


def test_random_is_deterministic_under_the_seed() -> None:
    a = _random(seed=7, random_input_len=32, random_range_ratio=0.5)
    b = _random(seed=7, random_input_len=32, random_range_ratio=0.5)
    c = _random(seed=8, random_input_len=32, random_range_ratio=0.5)
    assert a.requests == b.requests
    assert [r.prompt for r in a.requests] != [r.prompt for r in c.requests]


def test_random_chat_requests() -> None:
    wl = _random(random_input_len=16, use_chat=True)
    r = wl.requests[0]
    assert r.prompt is None and r.messages[0].role == "user"
    assert r.prompt_len == TOK.count(r.messages[0].content) == 16


def test_prefix_repetition_shares_exact_prefixes() -> None:
    opts = DatasetOptions(dataset_name="prefix_repetition", num_prompts=24,
                          prefix_repetition_prefix_len=40, prefix_repetition_suffix_len=12,
                          prefix_repetition_num_prefixes=3, prefix_repetition_output_len=9)
    wl = build_workload(opts, TOK, seed=4)
    encoded = [TOK.encode(r.prompt) for r in wl.requests]
    prefixes = Counter(tuple(ids[:40]) for ids in encoded)
    assert sorted(prefixes.values()) == [8, 8, 8]
    for ids, r in zip(encoded, wl.requests):
        assert r.prompt_len == len(ids) == 52
        assert r.output_len == 9
    assert len({tuple(ids[40:]) for ids in encoded}) == 24  # unique suffixes
    # the text of each prefix is shared too (what a prefix cache sees)
    texts = Counter(r.prompt[: len(TOK.decode(list(ids[:40])))] for ids, r in zip(encoded, wl.requests))
    assert len(texts) == 3
    # interleaved, not grouped: the first three requests don't all share one prefix
    assert len({tuple(e[:40]) for e in encoded[:6]}) > 1
    assert build_workload(opts, TOK, seed=4).requests == wl.requests


def test_prefix_repetition_needs_enough_prompts() -> None:
    with pytest.raises(ValueError, match="--prefix-repetition-num-prefixes 5 exceeds --num-prompts 4"):
        DatasetOptions(dataset_name="prefix_repetition", num_prompts=4,
                       prefix_repetition_num_prefixes=5)


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"random_range_ratio": 1.0}, "random_range_ratio"),
        ({"random_range_ratio": -0.1}, "random_range_ratio"),
        ({"random_output_len": 0}, "random_output_len"),
        ({"num_prompts": 0}, "num_prompts"),
        ({"dataset_name": "random", "dataset_path": "x.json"}, "--dataset-path is not used"),
        ({"dataset_name": "jsonl"}, "needs --dataset-path"),
        ({"dataset_name": "sonnet"}, "dataset_name"),
        ({"random_imput_len": 3}, "random_imput_len"),
    ],
)
def test_bad_dataset_options(kw: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        DatasetOptions(**kw)

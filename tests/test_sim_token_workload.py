"""The random dataset built as token ids alone (no texts) for a routing policy that reads no
prompt: the same ids, lengths, send times and records as the workload with its texts."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from servelab.plan import EngineArgs
from servelab.routing.policies import POLICY_NAMES, reads_prompt
from servelab.sim.offline import prepare_workload, simulate_prepared
from servelab.sim.setup import SimOptions
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DatasetOptions, build_token_workload, build_workload
from servelab.workload.textfit import TextMaker, WindowFitter
from servelab.workload.tokenizer import load_tokenizer

SHAPES = [
    # spliced windows (the built-in tokenizer, no prefix)
    (dict(num_prompts=3000, random_input_len=220, random_output_len=200, random_range_ratio=0.9), 0),
    # long windows: more retries and cuts before a window's last bound
    (dict(num_prompts=300, random_input_len=2000, random_output_len=4, random_range_ratio=0.5,
          use_chat=True), 8),
    # a shared prefix: fitted from texts (batched), each text dropped
    (dict(num_prompts=300, random_input_len=60, random_output_len=9, random_range_ratio=0.5,
          random_prefix_len=7), 3),
    (dict(num_prompts=500, random_input_len=12, random_output_len=4, random_range_ratio=0.9,
          no_stream=True), 6),
]


@pytest.mark.parametrize(("flags", "seed"), SHAPES)
def test_token_workload_has_the_ids_and_lengths_of_the_workload(flags: dict, seed: int) -> None:
    tok = load_tokenizer(None)
    opts = DatasetOptions(dataset_name="random", **flags)
    full = build_workload(opts, tok, seed)
    ids = build_token_workload(opts, tok, seed)
    assert full.token_ids is not None
    assert ids.token_ids == full.token_ids
    assert {(type(i), i.typecode) for i in ids.token_ids} == {(array, "H")}
    assert [len(i) for i in ids.token_ids] == [r.prompt_len for r in full.requests]
    assert ids.output_lens == [r.output_len for r in full.requests]
    assert (ids.notes, ids.tokenizer, ids.seed, ids.dataset_name) == (
        full.notes, full.tokenizer, full.seed, full.dataset_name)


def test_token_workload_known_answer() -> None:
    """The first request of the fleet's shape at seed 0, as the workload with texts made it."""
    opts = DatasetOptions(dataset_name="random", num_prompts=2, random_input_len=220,
                          random_output_len=200, random_range_ratio=0.9)
    tok = load_tokenizer(None)
    ids = build_token_workload(opts, tok, 0)
    full = build_workload(opts, tok, 0)
    assert ids.output_lens == [r.output_len for r in full.requests]
    assert tok.decode(ids.token_ids[0].tolist()) == full.requests[0].text
    assert tok.encode(full.requests[1].text) == ids.token_ids[1].tolist()


def test_fit_ids_are_the_ids_of_fit() -> None:
    tok = load_tokenizer(None)
    rng_text, rng_ids = np.random.default_rng(2), np.random.default_rng(2)
    with_text = WindowFitter.build(TextMaker(tok, rng_text), tok)
    ids_only = WindowFitter.build(TextMaker(tok, rng_ids), tok)
    assert with_text is not None and ids_only is not None
    rng = np.random.default_rng(5)
    for start, n in zip(rng.integers(0, 30000, 400).tolist(), rng.integers(1, 500, 400).tolist()):
        assert ids_only.fit_ids(start, n) == with_text.fit(start, n).ids
    # the same draws: both generators end in one state
    assert rng_ids.integers(0, 1 << 30, 4).tolist() == rng_text.integers(0, 1 << 30, 4).tolist()


def test_only_the_random_dataset_is_built_without_texts() -> None:
    opts = DatasetOptions(dataset_name="prefix_repetition", num_prompts=4,
                          prefix_repetition_prefix_len=8, prefix_repetition_suffix_len=4,
                          prefix_repetition_num_prefixes=2)
    with pytest.raises(ValueError, match="built from texts"):
        build_token_workload(opts, load_tokenizer(None), 0)
    # prepare_workload keeps such a dataset's texts whatever it is asked
    wl = prepare_workload(opts, 0, ArrivalOptions(), texts=False)
    assert wl.texts and all(r.route_text for r in wl.requests)


def test_policies_that_read_prompts() -> None:
    assert [p for p in POLICY_NAMES if reads_prompt(p)] == ["consistent_hash", "cache_aware"]


def _random(n: int = 400) -> DatasetOptions:
    return DatasetOptions(dataset_name="random", num_prompts=n, random_input_len=220,
                          random_output_len=40, random_range_ratio=0.9)


def test_prepared_without_texts_gives_the_same_requests_times_and_records() -> None:
    arrivals = ArrivalOptions(request_rate=50.0)
    full = prepare_workload(_random(), 4, arrivals)
    bare = prepare_workload(_random(), 4, arrivals, texts=False)
    assert full.texts and not bare.texts
    assert [(r.index, r.prompt_token_ids, r.output_len, r.session_key) for r in bare.requests] == [
        (r.index, r.prompt_token_ids, r.output_len, r.session_key) for r in full.requests]
    assert all(r.route_text for r in full.requests)
    assert {r.route_text for r in bare.requests} == {""}
    assert np.array_equal(bare.intended_s, full.intended_s) and bare.notes == full.notes
    opts = SimOptions("Qwen/Qwen3-0.6B", "H200", None, EngineArgs(), replicas=3,
                      router_policy="least_requests")
    with_texts = simulate_prepared(opts, full, 4, None, 2)[0]
    without = simulate_prepared(opts, bare, 4, None, 2)[0]
    assert without.records == with_texts.records
    assert (without.duration_s, without.num_steps) == (with_texts.duration_s, with_texts.num_steps)


def test_a_policy_reading_prompts_refuses_a_workload_without_texts() -> None:
    bare = prepare_workload(_random(8), 0, ArrivalOptions(), texts=False)
    opts = SimOptions("Qwen/Qwen3-0.6B", "H200", None, EngineArgs(), replicas=2,
                      router_policy="cache_aware")
    with pytest.raises(ValueError, match="reads prompts"):
        simulate_prepared(opts, bare, 0, None, 0)


def test_random_shape_of_the_token_workload() -> None:
    """`build_token_workload` reads the same flags as the workload (`random_shape`)."""
    opts = DatasetOptions(dataset_name="random", num_prompts=50, random_input_len=30,
                          random_output_len=5, random_range_ratio=0.0)
    ids = build_token_workload(opts, load_tokenizer(None), 1)
    assert [len(i) for i in ids.token_ids] == [30] * 50 and ids.output_lens == [5] * 50

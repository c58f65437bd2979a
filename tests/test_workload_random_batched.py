"""The random dataset's batched fitting gives exactly the requests of the one-by-one loop.

`random_requests` decodes and encodes every request's first try in one batch and retries
the misses in order; the digests below were computed with the one-by-one loop before the
change (commit c3c60c1), and `random_requests_one_by_one` is that loop verbatim over the same
`TextMaker.fit`.
"""

from __future__ import annotations

import hashlib
from array import array

import numpy as np
import pytest

from servelab.sim.offline import offline_requests
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.request import RequestSpec
from servelab.workload.synthetic import (
    RandomShape,
    random_requests,
    random_requests_and_ids,
    random_requests_one_by_one,
)
from servelab.workload.textfit import TextMaker
from servelab.workload.tokenizer import load_tokenizer


def _one_by_one(opts: RandomShape, seed: int) -> list[RequestSpec]:
    return random_requests_one_by_one(opts, load_tokenizer(None), np.random.default_rng(seed))


def _digest(requests: list[RequestSpec]) -> str:
    h = hashlib.sha256()
    for r in requests:
        h.update(repr((r.index, r.prompt, r.messages, r.prompt_len, r.output_len)).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize(("shape", "seed", "digest"), [
    (RandomShape(300, 220, 200, 0.9), 0, "79a6f2f551d45e63"),
    (RandomShape(200, 64, 16, 0.5, prefix_len=37), 7, "13d4998fd89d88be"),
    (RandomShape(100, 5, 3, 0.0, use_chat=True), 3, "c8393b8bc9bb6ea7"),
    (RandomShape(50, 1024, 8, 0.25, prefix_len=100), 11, "06ed139f1f489d1d"),
])
def test_random_requests_match_the_digests_of_the_one_by_one_loop(
        shape: RandomShape, seed: int, digest: str) -> None:
    assert _digest(random_requests(shape, load_tokenizer(None), np.random.default_rng(seed))) == digest


@pytest.mark.parametrize(("shape", "seed"), [
    (RandomShape(400, 220, 200, 0.9), 5),
    (RandomShape(150, 30, 10, 0.5, prefix_len=12, use_chat=True), 2),
    # More than one chunk of batched first tries (4,096 requests).
    (RandomShape(4200, 4, 2, 0.5), 9),
])
def test_random_requests_equal_the_one_by_one_loop(shape: RandomShape, seed: int) -> None:
    batched = random_requests(shape, load_tokenizer(None), np.random.default_rng(seed))
    assert batched == _one_by_one(shape, seed)
    assert [r.index for r in batched] == list(range(shape.num_prompts))


def test_fit_many_draws_what_fit_draws() -> None:
    """After fitting the same texts, both generators are in the same state."""
    tok = load_tokenizer(None)
    one, many = TextMaker(tok, np.random.default_rng(4)), TextMaker(tok, np.random.default_rng(4))
    starts = [one.random_ids(n) for n in (40, 3, 90, 17)]
    assert [many.random_ids(n) for n in (40, 3, 90, 17)] == starts
    fitted = [one.fit(len(ids), None, ids) for ids in starts]
    assert many.fit_many([len(i) for i in starts], None, starts) == fitted
    assert one.random_ids(8) == many.random_ids(8)


def test_random_workload_keeps_the_encodings_of_its_texts() -> None:
    """`Workload.token_ids` are exactly the texts' encodings, so the simulator's requests
    built from them equal those built by encoding the texts again."""
    tok = load_tokenizer(None)
    opts = DatasetOptions(dataset_name="random", num_prompts=120, random_input_len=60,
                          random_output_len=9, random_range_ratio=0.5, random_prefix_len=7)
    work = build_workload(opts, tok, 3)
    assert work.token_ids is not None
    # compact: 2 bytes an id for the built-in tokenizer's 32,768 ids
    assert {(type(ids), ids.typecode) for ids in work.token_ids} == {(array, "H")}
    assert [ids.tolist() for ids in work.token_ids] == tok.encode_batch([r.text for r in work.requests])
    assert offline_requests(work.requests, tok, work.token_ids) == offline_requests(work.requests, tok)
    chat = build_workload(opts.model_copy(update={"use_chat": True}), tok, 3)
    assert chat.token_ids == work.token_ids


def test_other_datasets_leave_token_ids_unset() -> None:
    opts = DatasetOptions(dataset_name="prefix_repetition", num_prompts=4,
                          prefix_repetition_prefix_len=8, prefix_repetition_suffix_len=4,
                          prefix_repetition_num_prefixes=2)
    assert build_workload(opts, load_tokenizer(None), 0).token_ids is None


@pytest.mark.parametrize(("shape", "seed"), [
    (RandomShape(3000, 220, 200, 0.9), 1),
    (RandomShape(500, 12, 4, 0.9, use_chat=True), 6),
    (RandomShape(300, 2000, 4, 0.5), 8),
])
def test_spliced_windows_give_the_batched_requests_and_ids(shape: RandomShape, seed: int) -> None:
    tok = load_tokenizer(None)
    spliced = random_requests_and_ids(shape, tok, np.random.default_rng(seed))
    batched = random_requests_and_ids(shape, tok, np.random.default_rng(seed), spliced=False)
    assert spliced == batched

"""The metrics calculator's array paths give the per-request definitions' figures.

`summarize` gathers every record's fields and gaps into numpy arrays once; these tests
hold the paths that could round otherwise to the definitions: each request's token times
are its own running sum (never one running over all requests), and the latency figures
are numpy's on the pooled values.
"""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from servelab.metrics import summary
from servelab.metrics.summary import _Gaps, _latency_stats, _token_counts

PERCENTILES = (0.0, 1.0, 12.5, 33.3, 50.0, 90.0, 99.0, 99.9, 100.0)


def test_latency_stats_are_numpys_figures():
    values = np.random.default_rng(7).lognormal(2.5, 0.4, 10_001)
    stats = _latency_stats(values, PERCENTILES)
    assert stats.mean_ms == float(np.mean(values)) and stats.std_ms == float(np.std(values))
    assert stats.median_ms == float(np.median(values))
    assert [p.value_ms for p in stats.percentiles] == [float(np.percentile(values, p)) for p in PERCENTILES]


def _numpys(values: np.ndarray) -> tuple[float, float, float, list[float]]:
    return (float(np.mean(values)), float(np.median(values)), float(np.std(values)),
            np.percentile(values, PERCENTILES).tolist())


def _figures(values: np.ndarray) -> tuple[float, float, float, list[float]]:
    stats = _latency_stats(values, PERCENTILES)
    return stats.mean_ms, stats.median_ms, stats.std_ms, [p.value_ms for p in stats.percentiles]


def test_latency_stats_selected_without_a_copy_are_numpys_figures(monkeypatch: pytest.MonkeyPatch):
    # every size through the selection (small leaves, samples and blocks, so that sums split
    # and windows and blocks are many), the values left as they were
    monkeypatch.setattr(summary, "_SELECT_FROM", 0)
    monkeypatch.setattr(summary, "_PAIRWISE_LEAF", 1000)
    monkeypatch.setattr(summary, "_SAMPLE", 256)
    monkeypatch.setattr(summary, "_SELECT_BLOCK", 4096)
    rng = np.random.default_rng(11)
    for n in (1, 2, 3, 8, 9, 1_001, 123_457):
        for values in (rng.lognormal(2.0, 0.7, n), rng.integers(0, 40, n).astype(float),
                       np.sort(rng.random(n))[::-1].copy(), np.full(n, 8.5)):
            kept = values.copy()
            assert _figures(values) == _numpys(values), n
            assert np.array_equal(values, kept)


def test_latency_stats_of_many_values_are_numpys_figures():
    # the real leaf, sample and block sizes over a few million values
    values = np.random.default_rng(2).gamma(9.0, 1.0, 3_000_001)
    assert values.size > summary._SELECT_FROM
    assert _figures(values) == _numpys(values)


def test_a_sample_that_misses_a_rank_falls_back_to_the_same_figures(monkeypatch: pytest.MonkeyPatch):
    # every 4th value sampled from 1, 2, 3, 4, 1, 2, ...: the sample is all 1.0, its windows
    # [1, 1] hold no rank above the ones, and those ranks come from a partition of a copy
    monkeypatch.setattr(summary, "_SELECT_FROM", 0)
    values = np.tile([1.0, 2.0, 3.0, 4.0], 5_000)
    monkeypatch.setattr(summary, "_SAMPLE", values.size // 4)
    assert np.unique(values[:: values.size // summary._SAMPLE]).tolist() == [1.0]
    assert _figures(values) == _numpys(values)
    assert summary._order_stats(values, [0, 10_000, 19_999]) == {0: 1.0, 10_000: 3.0, 19_999: 4.0}


def test_compacting_in_place_is_np_delete(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(summary, "_COMPACT_BLOCK", 64)
    rng = np.random.default_rng(4)
    values = rng.random(1_000)
    drop = np.unique(rng.integers(0, 1_000, 300))
    want = np.delete(values, drop)
    got = summary._compact(values, drop)
    assert np.array_equal(got, want) and np.shares_memory(got, values)


def test_empty_values_give_zeros_as_vllm():
    stats = _latency_stats(np.zeros(0), (99.0,))
    assert (stats.mean_ms, stats.median_ms, stats.std_ms, stats.percentiles[0].value_ms) == (0, 0, 0, 0)


def test_accumulating_a_matrix_adds_each_row_in_order():
    # numpy's cumsum along an axis adds one value after another: each request's offsets
    # are the ones np.cumsum gives it alone (a cumsum over all requests would round
    # differently)
    rng = np.random.default_rng(5)
    matrix = rng.lognormal(2.0, 1.0, (300, 201)) * rng.choice([1e-3, 1.0, 1e3], (300, 201))
    by_row = np.cumsum(matrix, axis=1)
    for i, row in enumerate(matrix):
        assert np.array_equal(by_row[i], np.cumsum(row))
    # the shortcut: one running sum over all rows, less the sum before each row
    running = np.cumsum(matrix.ravel()).reshape(matrix.shape)
    before = np.concatenate([[0.0], running[:-1, -1]])
    assert not np.array_equal(running - before[:, None], by_row)


def test_token_counts_follow_each_request_alone():
    """Against the definition, request by request, with sends spread so tokens fall on
    many bucket edges (many requests of one length, a few long ones)."""
    rng = np.random.default_rng(11)
    lens = np.concatenate([np.full(515, 40), rng.integers(0, 9, 700),
                           [3000, 3001, 2999]])
    rng.shuffle(lens)
    gaps = [rng.choice([0.0, 0.25, 7.5, 12.0], n) * rng.choice([1.0, 1.0 / 3], n) for n in lens]
    sends = rng.integers(0, 400, lens.size) / 4.0  # quarter seconds: sums meet whole seconds
    ttfts = rng.choice([250.0, 500.0, 1000.0 / 3], lens.size)
    # and requests whose last token comes one float step before a whole second (400 ms +
    # 600 ms less 1e-13 ms) or on it: any other rounding moves one of them across the edge.
    below = np.nextafter(600.0, 0.0)
    edge = ([(400.0, [below]), (400.0, [600.0])] * 300
            + [(200.0, [200.0, below]), (200.0, [200.0, 600.0])] * 40)
    sends = np.concatenate([sends, np.zeros(len(edge))])
    ttfts = np.concatenate([ttfts, [t for t, _ in edge]])
    gaps += [np.array(g) for _, g in edge]
    start = float(sends.min())
    n_buckets = int(max(s + (t + g.sum()) / 1000 for s, t, g in zip(sends, ttfts, gaps)) - start) + 2
    want = np.zeros(n_buckets, dtype=np.int64)
    for s, t, g in zip(sends, ttfts, gaps):
        b = (s + np.cumsum([t, *g]) / 1000.0 - start).astype(np.int64)
        np.add.at(want, b[b < n_buckets], 1)
    got = _token_counts(sends, ttfts, _Gaps.gather([g.tolist() for g in gaps]), start, n_buckets)
    assert np.array_equal(got, want)


def test_gaps_gather_both_forms_end_to_end():
    # array('d') copied whole, lists (ints too) converted: one float64 array in record order
    per_record = [array("d", [1.5, 2.0]), [3.0], [], array("d", [4.25]), [5, 6]]
    gaps = _Gaps.gather(per_record)
    assert gaps.values.tolist() == [1.5, 2.0, 3.0, 4.25, 5.0, 6.0]
    assert gaps.values.dtype == np.float64
    assert gaps.lens.tolist() == [2, 1, 0, 1, 2] and gaps.starts.tolist() == [0, 2, 3, 3, 4]
    assert _Gaps.gather([[], []]).values.size == 0

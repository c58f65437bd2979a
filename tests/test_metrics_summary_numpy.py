"""The metrics calculator's array helpers give numpy's figures bit for bit.

`summarize` avoids numpy's copies of large arrays (np.median and np.percentile partition
a copy, np.std squares one, np.delete builds one): these tests hold each replacement to
the numpy call it stands for, on arrays large enough to take every path (pieces, brackets,
widened brackets) and on the small and awkward ones (one value, all equal, many ties,
infinities, NaN).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from servelab.metrics.summary import (
    _PIECE,
    _ROWS_FOR_COLUMNS,
    _SELECT_DIRECT,
    _Gaps,
    _drop_in_place,
    _latency_stats,
    _order_statistics,
    _std,
    _token_counts,
)

PERCENTILES = (0.0, 1.0, 12.5, 33.3, 50.0, 90.0, 99.0, 99.9, 100.0)
BIG = _SELECT_DIRECT + 3 * _PIECE + 12_345  # past every piece and sample size


def arrays():
    rng = np.random.default_rng(7)
    yield "one", np.array([4.25])
    yield "two", np.array([3.0, 1.0])
    yield "small", rng.normal(10, 3, 1001)
    yield "lognormal", rng.lognormal(2.5, 0.4, BIG)
    yield "ties", rng.integers(0, 5, BIG).astype(float)  # brackets full of equal values
    yield "all equal", np.full(BIG + 1, 12.0)
    yield "sorted", np.sort(rng.exponential(12, BIG))
    yield "descending", np.sort(rng.exponential(12, BIG))[::-1].copy()
    yield "heavy tail", rng.pareto(0.7, BIG) + np.where(np.arange(BIG) % 1000 == 0, 1e6, 0.0)
    yield "infinite", np.concatenate([rng.normal(0, 1, BIG), [np.inf]])


def same(a, b):
    """Equal, NaN included (an infinite value makes numpy's std NaN)."""
    return a == b or math.isnan(a) and math.isnan(b)


@pytest.mark.parametrize(("name", "values"), list(arrays()), ids=[n for n, _ in arrays()])
def test_latency_stats_are_numpys(name, values):
    with np.errstate(invalid="ignore"):
        stats = _latency_stats(values, PERCENTILES)
        want_std = float(np.std(values))
        want = [float(np.percentile(values, p)) for p in PERCENTILES]
    assert stats.mean_ms == float(np.mean(values))
    assert stats.median_ms == float(np.median(values))
    assert same(stats.std_ms, want_std)
    assert all(same(p.value_ms, w) for p, w in zip(stats.percentiles, want))


def test_interpolation_is_numpys_on_both_sides_of_the_middle():
    # np.percentile interpolates from the lower neighbour below a weight of 0.5 and from
    # the upper one above: the two round differently
    rng = np.random.default_rng(9)
    for _ in range(3000):
        a, b = np.sort(rng.lognormal(2.0, 1.0, 2))
        q = float(rng.uniform(0, 100))
        stats = _latency_stats(np.array([a, b]), (q,))
        assert stats.percentiles[0].value_ms == float(np.percentile([a, b], q))


def test_nan_takes_numpys_rules():
    values = np.concatenate([np.arange(BIG, dtype=float), [np.nan]])
    stats = _latency_stats(values, (50.0, 99.0))
    assert math.isnan(stats.median_ms) and math.isnan(stats.std_ms)
    assert all(math.isnan(p.value_ms) for p in stats.percentiles)


def test_empty_values_give_zeros_as_vllm():
    stats = _latency_stats(np.zeros(0), (99.0,))
    assert (stats.mean_ms, stats.median_ms, stats.std_ms, stats.percentiles[0].value_ms) == (0, 0, 0, 0)


@pytest.mark.parametrize(("name", "values"), list(arrays())[3:], ids=[n for n, _ in arrays()][3:])
def test_order_statistics_are_the_sorted_values(name, values):
    ranks = {0, 1, values.size // 2, values.size * 9 // 10, values.size - 2, values.size - 1}
    want = np.sort(values)
    assert _order_statistics(values, ranks) == {r: float(want[r]) for r in ranks}


@pytest.mark.parametrize("n", [1, 7, 129, _PIECE, _PIECE + 1, 5 * _PIECE + 77, 2 * BIG])
def test_std_is_numpys(n):
    values = np.random.default_rng(n).lognormal(3.0, 1.5, n)
    assert _std(values) == float(np.std(values))


def test_drop_in_place_is_np_delete():
    rng = np.random.default_rng(3)
    values = rng.random(3 * _PIECE + 5)
    at = np.unique(rng.integers(0, values.size, 5000))
    want = np.delete(values, at)
    assert np.array_equal(_drop_in_place(values, at), want)


def test_accumulating_a_matrix_adds_each_row_in_order():
    # numpy's cumsum along an axis adds one value after another, and adding row after row
    # of the transposed matrix makes the same additions: each request's offsets are the
    # ones np.cumsum gives it alone (a cumsum over all requests would round differently)
    rng = np.random.default_rng(5)
    matrix = rng.lognormal(2.0, 1.0, (300, 201)) * rng.choice([1e-3, 1.0, 1e3], (300, 201))
    by_row = np.cumsum(matrix, axis=1)
    by_column = np.ascontiguousarray(matrix.T)
    for j in range(1, by_column.shape[0]):
        np.add(by_column[j - 1], by_column[j], out=by_column[j])
    for i, row in enumerate(matrix):
        assert np.array_equal(by_row[i], np.cumsum(row))
        assert np.array_equal(by_column[:, i], np.cumsum(row))
    # the shortcut: one running sum over all rows, less the sum before each row
    running = np.cumsum(matrix.ravel()).reshape(matrix.shape)
    before = np.concatenate([[0.0], running[:-1, -1]])
    assert not np.array_equal(running - before[:, None], by_row)


def test_token_counts_follow_each_request_alone():
    """Both layouts (many requests of one length; a few long ones) against the definition,
    request by request, with sends spread so tokens fall on many bucket edges."""
    rng = np.random.default_rng(11)
    lens = np.concatenate([np.full(2 * _ROWS_FOR_COLUMNS + 3, 40), rng.integers(0, 9, 700),
                           [3000, 3001, 2999]])
    rng.shuffle(lens)
    gaps = [rng.choice([0.0, 0.25, 7.5, 12.0], n) * rng.choice([1.0, 1.0 / 3], n) for n in lens]
    sends = rng.integers(0, 400, lens.size) / 4.0  # quarter seconds: sums meet whole seconds
    ttfts = rng.choice([250.0, 500.0, 1000.0 / 3], lens.size)
    # and requests whose last token comes one float step before a whole second (400 ms +
    # 600 ms less 1e-13 ms) or on it: any other rounding moves one of them across the edge.
    # One gap: enough such requests for the column layout; two gaps: the row layout.
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

"""Records -> summary: the one metrics calculator (client and simulator runs alike).

Definitions follow `vllm bench serve` so figures compare one to one; docs/metrics.md
states each. Warm-up records are dropped first; failed requests are counted and grouped
by `error_kind` but enter no latency or throughput figure.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter

import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator

from servelab.errors import ServelabError
from servelab.metrics.records import RequestRecord
from servelab.metrics.result import (
    METRIC_NAMES,
    BenchResult,
    ClientHealth,
    GoodputSLO,
    LagStats,
    LatencyStats,
    MeasurementTraps,
    MetricName,
    QUEUE_METRIC_NAMES,
    QueueMetricName,
    PercentileValue,
    RequestDetails,
    SlotWaitStats,
)

# The client "fell behind" when the p99 scheduling lag exceeds
# min(LAG_LIMIT_MS, max(LAG_FLOOR_MS, LAG_GAP_FRACTION x mean intended gap)).
LAG_LIMIT_MS = 10.0
LAG_FLOOR_MS = 1.0
LAG_GAP_FRACTION = 0.05
UNKNOWN_ERROR_KIND = "unknown"


class SummaryOptions(BaseModel):
    """How to summarise: which metrics get percentiles, which percentiles, which SLOs, and
    whether the result keeps every request's inter-token gaps.

    `per_request_itls`: keep each request's gaps in `details.itls_s`, the ``itls`` list of a
    detailed result (``--save-detailed``, the experiment store's cells). They are the one
    detail list that grows with output length: a million requests of 200 tokens make 200 M
    Python floats (gigabytes, and minutes to build), where every figure is computed from
    numpy arrays without them. A caller that will not write a detailed result sets False;
    its result's `itls_s` is None and `to_json_dict(detailed=True)` refuses it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    percentile_metrics: tuple[MetricName | QueueMetricName, ...] = ("ttft", "tpot", "itl")
    metric_percentiles: tuple[float, ...] = (99.0,)
    goodput: GoodputSLO | None = None
    per_request_itls: bool = True

    @field_validator("metric_percentiles")
    @classmethod
    def _percentiles_in_range(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        for p in value:
            if not 0.0 <= p <= 100.0:
                raise ValueError(f"percentile {p} is outside [0, 100]")
        return value


def parse_goodput(items: list[str]) -> GoodputSLO:
    """Parse ``--goodput ttft:MS tpot:MS e2el:MS`` (any non-empty subset, values in ms)."""
    if not items:
        raise ServelabError("--goodput: give at least one KEY:MS pair (ttft, tpot, e2el)")
    values: dict[str, float] = {}
    for item in items:
        key, sep, raw = item.partition(":")
        key = key.strip().lower()
        if not sep:
            raise ServelabError(f"--goodput: {item!r} is not KEY:MS (e.g. ttft:250)")
        if key not in ("ttft", "tpot", "e2el"):
            raise ServelabError(
                f"--goodput: unknown metric {key!r} in {item!r}; use ttft, tpot or e2el"
            )
        if key in values:
            raise ServelabError(f"--goodput: {key} given twice")
        try:
            value = float(raw)
        except ValueError:
            raise ServelabError(
                f"--goodput: {raw!r} in {item!r} is not a number of milliseconds"
            ) from None
        if not math.isfinite(value) or value < 0:
            raise ServelabError(f"--goodput: {item!r} must be a finite number >= 0 ms")
        values[key] = value
    return GoodputSLO(**{f"{k}_ms": v for k, v in values.items()})


def parse_percentile_metrics(text: str) -> tuple[MetricName | QueueMetricName, ...]:
    """Parse ``--percentile-metrics ttft,tpot,itl,e2el[,client_queue_time,...]``."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    known = ", ".join((*METRIC_NAMES, *QUEUE_METRIC_NAMES))
    if not names:
        raise ServelabError(f"--percentile-metrics: give at least one of {known}")
    chosen: list[MetricName | QueueMetricName] = []
    for name in names:
        matched = next((m for m in (*METRIC_NAMES, *QUEUE_METRIC_NAMES) if m == name), None)
        if matched is None:
            raise ServelabError(f"--percentile-metrics: unknown metric {name!r}; use {known}")
        if matched not in chosen:
            chosen.append(matched)
    return tuple(chosen)


def parse_metric_percentiles(text: str) -> tuple[float, ...]:
    """Parse ``--metric-percentiles 50,90,99.9`` (each in [0, 100])."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise ServelabError("--metric-percentiles: give at least one percentile, e.g. 99")
    values: list[float] = []
    for part in parts:
        try:
            p = float(part)
        except ValueError:
            raise ServelabError(f"--metric-percentiles: {part!r} is not a number") from None
        if not 0.0 <= p <= 100.0:
            raise ServelabError(f"--metric-percentiles: {part} is outside [0, 100]")
        values.append(p)
    return tuple(values)


def summarize(
    records: Sequence[RequestRecord], duration_s: float, opts: SummaryOptions
) -> BenchResult:
    """Summarise one run's records over its wall-clock `duration_s` (seconds, > 0).

    Rates are per second of `duration_s`; latencies in ms. Empty metric lists give 0,
    as vLLM's do. The records' fields are gathered once into numpy arrays (one per field,
    and every gap end to end, in request order) and every figure is computed from them,
    numpy getting the values, in the order, that the per-record definitions give (a
    million records of 200 tokens: seconds, and no gap becomes a Python object unless
    `opts.per_request_itls` keeps them for a detailed result).
    """
    if not duration_s > 0:
        raise ServelabError(f"run duration must be > 0 s, got {duration_s}")
    measured = _measured(records)
    col = _Columns.gather(measured)
    missing = np.flatnonzero(col.ok & ~col.has_e2el)
    if missing.size:
        raise ValueError(f"request {measured[int(missing[0])].index} succeeded but has no e2el_ms")
    failed_by_reason = Counter(measured[i].error_kind or UNKNOWN_ERROR_KIND
                               for i in np.flatnonzero(~col.ok).tolist())
    ok_records = measured if col.ok.all() else list(compress(measured, col.ok.tolist()))
    gaps = _Gaps.gather([r.itl_ms for r in ok_records])

    ok = col.ok
    ttfts, e2els, out_lens, sends = col.ttft_ms[ok], col.e2el_ms[ok], col.output_len[ok], col.send_s[ok]
    queues = col.queue_ms[ok]
    with_tpot = out_lens >= 2
    # float64 elementwise: the IEEE results of each record's `tpot_ms`
    tpots = (e2els[with_tpot] - ttfts[with_tpot]) / (out_lens[with_tpot] - 1)
    ends_s = sends + e2els / 1000.0  # each request's last token (s)
    total_in = int(col.prompt_len[ok].sum())
    total_out = int(out_lens.sum())
    pct = opts.metric_percentiles
    peak_tokens, peak_conc = _peak_buckets(sends, ttfts, ends_s, gaps)
    good = None
    if opts.goodput is not None:
        tpot_or_zero = np.zeros(len(ttfts))
        tpot_or_zero[with_tpot] = tpots
        good = _count_good(ttfts, tpot_or_zero, e2els, opts.goodput)
    detail_gaps = None
    if opts.per_request_itls:  # every measured record's, failed ones included
        detail_gaps = (gaps if len(ok_records) == len(measured)
                       else _Gaps.gather([r.itl_ms for r in measured]))
    details = _details(measured, col, detail_gaps)
    itl, traps = _gap_figures(ok_records, out_lens, tpots, out_lens[with_tpot], gaps, pct)

    return BenchResult(
        duration_s=duration_s,
        completed=len(ok_records),
        failed=len(measured) - len(ok_records),
        failed_by_reason=dict(sorted(failed_by_reason.items())),
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=len(ok_records) / duration_s,
        request_goodput=None if good is None else good / duration_s,
        output_throughput=total_out / duration_s,
        total_token_throughput=(total_in + total_out) / duration_s,
        max_output_tokens_per_s=peak_tokens,
        max_concurrent_requests=peak_conc,
        peak_in_flight_requests=_peak_in_flight(sends, ends_s),
        ttft=_latency_stats(ttfts, pct),
        tpot=_latency_stats(tpots, pct),
        itl=itl,
        e2el=_latency_stats(e2els, pct),
        client_queue=_latency_stats(queues, pct),
        e2el_incl_queue=_latency_stats(e2els + queues, pct),
        traps=traps,
        percentile_metrics=opts.percentile_metrics,
        goodput_slo=opts.goodput,
        client=_client_health(col),
        details=details,
    )


def _measured(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """The records that count (warm-ups dropped), in request-index order; records with one
    index keep their order, as a stable sort leaves them."""
    measured = [r for r in records if not r.warmup]
    index = np.fromiter(map(attrgetter("index"), measured), np.int64, len(measured))
    if np.all(index[1:] >= index[:-1]):  # the usual case: already in order
        return measured
    return [measured[i] for i in np.argsort(index, kind="stable").tolist()]


@dataclass(frozen=True, slots=True)
class _Columns:
    """The measured records' fields as arrays, in request order. An optional time is 0.0
    where it is None (`has_e2el` says where E2EL is set); `ok` marks the successful ones
    (no error, a first token)."""

    ok: np.ndarray  # bool
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    ttft_ms: np.ndarray
    e2el_ms: np.ndarray
    has_e2el: np.ndarray  # bool
    send_s: np.ndarray
    slot_wait_ms: np.ndarray
    queue_ms: np.ndarray  # each record's `queue_ms`
    sched_lag_ms: np.ndarray  # each record's `sched_lag_ms`
    intended_send_s: np.ndarray

    @classmethod
    def gather(cls, measured: list[RequestRecord]) -> _Columns:
        n = len(measured)
        ttft, has_ttft = _optional_column(measured, "ttft_ms", np.float64)
        e2el, has_e2el = _optional_column(measured, "e2el_ms", np.float64)
        no_error = np.fromiter((r.error is None for r in measured), bool, n)
        send = _column(measured, "send_s", np.float64)
        intended = _column(measured, "intended_send_s", np.float64)
        slot_wait = _column(measured, "slot_wait_ms", np.float64)
        late_ms = (send - intended) * 1000.0
        lag_ms = late_ms - slot_wait
        return cls(
            ok=no_error & has_ttft,
            prompt_len=_column(measured, "prompt_len", np.int64),
            output_len=_column(measured, "output_len", np.int64),
            ttft_ms=ttft, e2el_ms=e2el, has_e2el=has_e2el, send_s=send, slot_wait_ms=slot_wait,
            # max(0.0, x) as the record's properties take it: x where x > 0, else 0.0
            queue_ms=np.where(late_ms > 0.0, late_ms, 0.0),
            sched_lag_ms=np.where(lag_ms > 0.0, lag_ms, 0.0),
            intended_send_s=intended,
        )


def _column(records: list[RequestRecord], name: str, dtype: type) -> np.ndarray:
    """One field of every record as an array of `dtype`."""
    return np.fromiter(map(attrgetter(name), records), dtype, len(records))


def _optional_column(records: list[RequestRecord], name: str,
                     dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """(values, set) of a field that may be None: values are 0 where it is None."""
    raw = np.fromiter(map(attrgetter(name), records), object, len(records))
    present = np.not_equal(raw, None)
    values = np.zeros(len(records), dtype)
    values[present] = raw[present].astype(dtype)
    return values, present


@dataclass(frozen=True, slots=True)
class _Gaps:
    """Several records' inter-token gaps end to end (ms): record i's are
    `values[starts[i] : starts[i] + lens[i]]`."""

    values: np.ndarray  # float64
    lens: np.ndarray  # int64
    starts: np.ndarray  # int64

    @classmethod
    def gather(cls, per_record: list[Sequence[float]]) -> _Gaps:
        """The gaps of each record's `itl_ms`, a list of floats or an `array('d')`."""
        lens = np.fromiter(map(len, per_record), np.int64, len(per_record))
        starts = np.cumsum(lens) - lens
        # One buffer of the final size, filled in place: an array('d') grown by `extend`
        # is reallocated as it grows, and its pages are mapped 4 KiB at a time where
        # numpy's large buffers are mapped in huge pages (200 M gaps: 3.3 -> 1.2 s here,
        # most of it the system's page faults).
        values = np.empty(int(lens.sum()))
        into = memoryview(values)
        for gaps, at, n in zip(per_record, starts.tolist(), lens.tolist()):
            # array('d'): one memcpy; a list: converted float by float in C. Either way no
            # Python float is made.
            into[at : at + n] = gaps if isinstance(gaps, array) else array("d", gaps)
        return cls(values, lens, starts)

    def seconds_per_record(self) -> tuple[tuple[float, ...], ...]:
        """Each record's gaps in seconds (g / 1000.0) as tuples of Python floats, a block of
        records at a time (no list of every gap at once)."""
        out: list[tuple[float, ...]] = []
        for a in range(0, len(self.lens), _DETAIL_BLOCK):
            lens = self.lens[a : a + _DETAIL_BLOCK]
            lo = int(self.starts[a])
            seconds = (self.values[lo : lo + int(lens.sum())] / 1000.0).tolist()
            at = 0
            for k in lens.tolist():
                out.append(tuple(seconds[at : at + k]))
                at += k
        return tuple(out)


_DETAIL_BLOCK = 4096  # records per block when building the per-request ITL tuples


def _gap_figures(ok: list[RequestRecord], out_lens: np.ndarray, tpots: np.ndarray,
                 tpot_lens: np.ndarray, gaps: _Gaps,
                 pct: tuple[float, ...]) -> tuple[LatencyStats, MeasurementTraps]:
    """(ITL stats, traps) of the successful records `ok` and their pooled `gaps`, whose
    values this overwrites (its last reader: the caller reads them no more)."""
    values = gaps.values
    firsts_at = gaps.starts[gaps.lens > 0]  # each request's first gap, where it has one
    mean_first_itl_ms = float(np.mean(values[firsts_at])) if firsts_at.size else None
    itl = _latency_stats(values, pct)
    # every gap but the first, in order (what np.delete gives), compacted within the values
    # themselves, which nothing reads afterwards: at 200 M gaps a second buffer would be
    # 1.6 GB of fresh pages (seconds of system time on a VM)
    later = _compact(values, firsts_at)
    excl_first = _latency_stats(later, pct)
    traps = _traps(
        ok, out_lens, tpots, tpot_lens,
        mean_first_itl_ms=mean_first_itl_ms,
        mean_later_itl_ms=excl_first.mean_ms if later.size else None,
        itl_excl_first=excl_first)
    return itl, traps


_COMPACT_BLOCK = 1 << 20  # values per block in `_compact` (8 MiB of float64)


def _compact(values: np.ndarray, drop_at: np.ndarray) -> np.ndarray:
    """`np.delete(values, drop_at)` (distinct positions) written over the start of `values`
    a block at a time, and returned as that view: np.delete, and np.compress even with
    `out`, make an index or a copy as large as the values."""
    keep = np.ones(values.size, bool)
    keep[drop_at] = False
    at = 0
    for a in range(0, values.size, _COMPACT_BLOCK):
        got = values[a : a + _COMPACT_BLOCK][keep[a : a + _COMPACT_BLOCK]]  # a copy
        values[at : at + got.size] = got
        at += got.size
    return values[:at]


# Requests whose TPOT is one or two gaps: "short" for the TPOT-skew trap.
SHORT_TPOT_MAX_TOKENS = 3


def _traps(ok: list[RequestRecord], out_lens: np.ndarray, tpots: np.ndarray,
           tpot_lens: np.ndarray, *, mean_first_itl_ms: float | None,
           mean_later_itl_ms: float | None, itl_excl_first: LatencyStats) -> MeasurementTraps:
    """The trap counts of the successful records `ok` (`out_lens` theirs, `tpots` those of
    the ones with 2+ tokens, whose output lengths are `tpot_lens`)."""
    reasoning_tokens = _column(ok, "reasoning_tokens", np.int64)
    reasoning = int(reasoning_tokens.sum())
    reasoned = [ok[i] for i in np.flatnonzero(reasoning_tokens > 0).tolist()]
    answer_ttfts = [r.answer_ttft_ms for r in reasoned if r.answer_ttft_ms is not None]
    chunks, has_chunks = _optional_column(ok, "chunks", np.int64)
    expected, has_expected = _optional_column(ok, "expected_output_len", np.int64)
    # Python's sum adds one by one, as the share always has; numpy's pairwise sum rounds
    # otherwise.
    tpot_sum = sum(tpots.tolist())
    short = tpots[tpot_lens <= SHORT_TPOT_MAX_TOKENS].tolist()
    return MeasurementTraps(
        reasoning_tokens=reasoning,
        answer_tokens=int(out_lens.sum()) - reasoning,
        reasoning_requests=len(reasoned),
        mean_answer_ttft_ms=float(np.mean(answer_ttfts)) if answer_ttfts else None,
        mean_first_itl_ms=mean_first_itl_ms,
        mean_later_itl_ms=mean_later_itl_ms,
        itl_excl_first=itl_excl_first,
        tokens_beyond_one_per_chunk=int((out_lens - chunks)[has_chunks].sum()),
        short_outputs=int(np.count_nonzero(has_expected & (out_lens < expected))),
        short_tpot_requests=len(short),
        short_tpot_share=sum(short) / tpot_sum if tpot_sum > 0 else 0.0,
    )


def _latency_stats(values_ms: np.ndarray, percentiles: tuple[float, ...]) -> LatencyStats:
    """Mean, median, population std and `percentiles` of `values_ms`: the figures np.mean,
    np.median, np.std and np.percentile give, as vLLM computes them, bit for bit.

    Above `_SELECT_FROM` finite values they are worked out without a copy of the values and
    without partitioning them all (at 200 M gaps a copy is 1.6 GB of fresh pages, each a
    fault on a VM, and each of np.median and np.percentile partitions all 200 M): the
    mean is numpy's pairwise sum / n; the std np.std's arithmetic, the deviations from that
    mean squared and summed pairwise as numpy splits the sum (`_sum_sq_dev`), / n, its
    root; the median and percentiles the order statistics np.median and np.percentile
    read (`_order_stats`), combined as they combine them (the mean of the middle two; the
    linear method's ranks and interpolation, `_percentile_ranks` and `_lerp`).
    tests/test_metrics_summary_numpy.py holds both ways to numpy's own figures."""
    # vLLM feeds numpy `values or 0`: an empty list yields 0 for every statistic.
    arr = np.asarray(values_ms, np.float64) if values_ms.size else np.zeros(1)
    n = arr.size
    mean = np.add.reduce(arr) / n
    if n <= _SELECT_FROM or not math.isfinite(mean):
        at = np.percentile(arr, percentiles).tolist() if percentiles else []
        median, std = float(np.median(arr)), float(np.std(arr))
    else:
        std = math.sqrt(_sum_sq_dev(arr, mean) / n)
        q = np.true_divide(np.asarray(percentiles, np.float64), 100)  # as np.percentile
        virtual = ((n - 1) * q).tolist()  # the linear method's index
        ranks = [_percentile_ranks(v, n) for v in virtual]
        mid = [n // 2 - 1, n // 2] if n % 2 == 0 else [(n - 1) // 2]
        value = _order_stats(arr, [*mid, *(r for pair in ranks for r in pair)])
        median = (value[mid[0]] + value[mid[1]]) / 2 if n % 2 == 0 else value[mid[0]]
        # (from n - 1 on both ranks are the largest value, which any weight returns)
        at = [_lerp(value[a], value[b], v - a) for v, (a, b) in zip(virtual, ranks)]
    return LatencyStats(
        mean_ms=float(mean),
        median_ms=median,
        std_ms=float(std),
        percentiles=tuple(PercentileValue(percentile=p, value_ms=v) for p, v in zip(percentiles, at)),
    )


# Values from which `_latency_stats` selects its order statistics rather than have numpy
# partition a copy (below it the copies are small and numpy's own calls are the figures).
_SELECT_FROM = 1 << 18
_PAIRWISE_LEAF = 1 << 16  # values a leaf of `_sum_sq_dev` squares in its buffer (512 KiB)


def _sum_sq_dev(arr: np.ndarray, mean: float) -> float:
    """np.add.reduce((arr - mean) ** 2), the squares never held at once: numpy sums a
    contiguous float64 array pairwise, halving it at n / 2 rounded down to a multiple of 8
    until 128 values or fewer remain; this splits the same way down to leaves of at most
    `_PAIRWISE_LEAF` values, each squared into one buffer and summed by numpy (the same
    sums, added in the same order)."""
    buf = np.empty(min(arr.size, _PAIRWISE_LEAF))

    def total(lo: int, n: int) -> float:
        if n <= _PAIRWISE_LEAF:
            work = buf[:n]
            np.subtract(arr[lo : lo + n], mean, out=work)
            np.multiply(work, work, out=work)
            return float(np.add.reduce(work))
        half = n // 2
        half -= half % 8
        return total(lo, half) + total(lo + half, n - half)

    return total(0, arr.size)


def _percentile_ranks(virtual: float, n: int) -> tuple[int, int]:
    """The order statistics np.percentile's linear method reads at index `virtual` of `n`
    values (numpy's `_get_indexes`): floor and floor + 1, both the largest from n - 1 on."""
    if virtual >= n - 1:
        return n - 1, n - 1
    lo = max(0, math.floor(virtual))
    return lo, lo + 1


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's `_lerp`: a + (b - a) t, or b - (b - a)(1 - t) from t = 0.5 on."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


_SAMPLE = 1 << 16  # values `_order_stats` samples to bound each rank
_SELECT_BLOCK = 1 << 20  # values per block of its pass (8 MiB)


def _order_stats(arr: np.ndarray, ranks: Sequence[int]) -> dict[int, float]:
    """The k-th smallest of `arr` (0-based) for each k in `ranks`, what a partition at k
    puts at k, from one pass over `arr` that neither copies nor reorders it: a sample of
    every (n / `_SAMPLE`)-th value bounds each rank by value (a margin of at least 8
    standard errors of the sample's quantile either side), the pass counts the values
    below each window and keeps those inside it, and only those are partitioned. A window
    that does not hold its rank (a sample aliasing some period of the values) leaves the
    ranks to a partition of a copy: slower, the same answer."""
    n = arr.size
    wanted = sorted(set(ranks))
    sample = np.sort(arr[:: max(1, n // _SAMPLE)])
    m = sample.size
    margin = 4 * math.isqrt(m) + 16
    windows: list[tuple[float, float, list[int]]] = []  # (low, high, its ranks)
    for k in wanted:
        at = k * m // n
        lo = float(sample[at - margin]) if at - margin >= 0 else -math.inf
        hi = float(sample[at + margin]) if at + margin < m else math.inf
        if windows and lo <= windows[-1][1]:  # overlapping: one window for both
            windows[-1] = (windows[-1][0], hi, [*windows[-1][2], k])
        else:
            windows.append((lo, hi, [k]))
    below = [0] * len(windows)
    inside: list[list[np.ndarray]] = [[] for _ in windows]
    ge = np.empty(min(n, _SELECT_BLOCK), bool)
    le = np.empty(min(n, _SELECT_BLOCK), bool)
    for a in range(0, n, _SELECT_BLOCK):
        block = arr[a : a + _SELECT_BLOCK]
        above_lo, in_window = ge[: block.size], le[: block.size]
        for w, (lo, hi, _) in enumerate(windows):
            np.greater_equal(block, lo, out=above_lo)
            below[w] += block.size - int(np.count_nonzero(above_lo))
            np.less_equal(block, hi, out=in_window)
            np.logical_and(above_lo, in_window, out=in_window)
            inside[w].append(block[in_window])
    out: dict[int, float] = {}
    for (_, _, mine), count, parts in zip(windows, below, inside):
        held = np.concatenate(parts)
        local = [k - count for k in mine]
        if not all(0 <= j < held.size for j in local):
            break
        held.partition(local)
        out.update((k, float(held[j])) for k, j in zip(mine, local))
    if len(out) < len(wanted):
        part = np.partition(arr, wanted)
        return {k: float(part[k]) for k in wanted}
    return out


def _count_good(ttfts: np.ndarray, tpots: np.ndarray, e2els: np.ndarray,
                slo: GoodputSLO) -> int:
    """Requests meeting every SLO given (value <= SLO). `tpots` is 0 for one-token
    requests: they meet any TPOT SLO, as in vLLM."""
    good = np.ones(len(ttfts), dtype=bool)
    for values, limit in ((ttfts, slo.ttft_ms), (tpots, slo.tpot_ms), (e2els, slo.e2el_ms)):
        if limit is not None:
            good &= ~(values > limit)
    return int(np.count_nonzero(good))


# Values per block of the token-time matrix in `_token_counts` (2 MiB).
_TOKEN_BLOCK = 1 << 18


def _peak_buckets(sends_s: np.ndarray, ttfts_ms: np.ndarray, ends_s: np.ndarray,
                  gaps: _Gaps) -> tuple[float, int]:
    """vLLM's peak figures over 1-second buckets from the first successful send.

    Returns (most output tokens completed in one bucket, most requests active in one
    bucket). A token's time is send + TTFT + the ITLs before it; a request is active in
    every bucket from the one holding its send to the one holding its last token (`ends_s`).
    """
    if not sends_s.size:
        return 0.0, 0
    start = sends_s.min()
    n_buckets = int(np.ceil(ends_s.max() - start)) + 1
    tokens = _token_counts(sends_s, ttfts_ms, gaps, start, n_buckets)
    first = (sends_s - start).astype(np.int64)  # int() of each: truncation
    stop = np.clip((ends_s - start).astype(np.int64) + 1, 0, n_buckets)
    spans = stop > first
    edges = (np.bincount(first[spans], minlength=n_buckets + 1)
             - np.bincount(stop[spans], minlength=n_buckets + 1))
    active = np.cumsum(edges[:n_buckets])
    return float(tokens.max()), int(active.max())


def _token_counts(sends_s: np.ndarray, ttfts_ms: np.ndarray, gaps: _Gaps, start: float,
                  n_buckets: int) -> np.ndarray:
    """Output tokens completed in each 1-second bucket from `start` (s).

    A request's token offsets are the running sum of [TTFT, gap, gap, ...] in its own
    order: a sum running over all requests would round differently and could move a token
    across a bucket edge. Requests with the same number of gaps make one matrix, a row
    each (in blocks of at most _TOKEN_BLOCK values), and `np.cumsum` along the rows adds
    each row in order, as it adds a request's offsets alone (a test holds the two equal).
    """
    counts = np.zeros(n_buckets, dtype=np.int64)
    order = np.argsort(gaps.lens, kind="stable")
    sorted_lens = gaps.lens[order]
    bounds = [0, *(np.flatnonzero(np.diff(sorted_lens)) + 1).tolist(), len(order)]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        n_gaps = int(sorted_lens[lo])
        step = max(1, _TOKEN_BLOCK // (n_gaps + 1))
        for a in range(lo, hi, step):
            rows = order[a : min(hi, a + step)]
            offsets = np.empty((len(rows), n_gaps + 1))
            offsets[:, 0] = ttfts_ms[rows]
            offsets[:, 1:] = gaps.values[gaps.starts[rows][:, None] + np.arange(n_gaps)]
            times = np.cumsum(offsets, axis=1)
            # send + offset / 1000 - start, in that order, as for each request alone
            times /= 1000.0
            times += sends_s[rows][:, None]
            times -= start
            buckets = times.astype(np.int64).ravel()  # truncation, as int() of each
            if buckets.min() < 0 or buckets.max() >= n_buckets:
                buckets = buckets[(buckets >= 0) & (buckets < n_buckets)]
            counts += np.bincount(buckets, minlength=n_buckets)
    return counts


_SAME_INSTANT_S = 1e-6


def _peak_in_flight(sends_s: np.ndarray, ends_s: np.ndarray) -> int:
    """Most successful requests in flight at one instant (send to last token, `ends_s`). A
    request ending at the instant another is sent does not overlap it; "the instant" allows
    `_SAME_INSTANT_S`, because an end is rebuilt as send + E2EL and the simulator's sends
    into a freed slot then differ from it by float rounding."""
    if not sends_s.size:
        return 0
    times = np.concatenate((sends_s, ends_s - _SAME_INSTANT_S))
    steps = np.concatenate((np.ones(len(sends_s), np.int64), np.full(len(ends_s), -1, np.int64)))
    order = np.lexsort((steps, times))  # by time; at equal times -1 first: finish before start
    return max(0, int(np.cumsum(steps[order]).max()))


def _client_health(col: _Columns) -> ClientHealth:
    lags = col.sched_lag_ms if col.sched_lag_ms.size else np.zeros(1)
    waits = col.slot_wait_ms if col.slot_wait_ms.size else np.zeros(1)
    gap_ms = _mean_intended_gap_ms(col.intended_send_s)
    threshold = LAG_LIMIT_MS
    if gap_ms is not None:
        threshold = min(LAG_LIMIT_MS, max(LAG_FLOOR_MS, LAG_GAP_FRACTION * gap_ms))
    p99 = float(np.percentile(lags, 99))
    return ClientHealth(
        sched_lag=LagStats(mean_ms=float(lags.mean()), p99_ms=p99, max_ms=float(lags.max())),
        slot_wait=SlotWaitStats(mean_ms=float(waits.mean()), max_ms=float(waits.max())),
        mean_intended_gap_ms=gap_ms,
        sched_lag_threshold_ms=threshold,
        client_fell_behind=p99 > threshold,
    )


def _mean_intended_gap_ms(intended_s: np.ndarray) -> float | None:
    """Mean gap between intended sends (ms); None when all were meant to go at once."""
    if len(intended_s) < 2:
        return None
    span_s = float(intended_s.max()) - float(intended_s.min())
    if span_s <= 0:
        return None
    return span_s * 1000.0 / (len(intended_s) - 1)


def _details(measured: list[RequestRecord], col: _Columns, gaps: _Gaps | None) -> RequestDetails:
    """The per-request lists; each request's ITLs from `gaps` (every measured record's),
    None when not kept."""
    ok = col.ok
    return RequestDetails(
        input_lens=tuple(col.prompt_len.tolist()),
        output_lens=tuple(np.where(ok, col.output_len, 0).tolist()),
        ttfts_s=tuple((col.ttft_ms / 1000.0).tolist()),  # 0.0 where no first token came
        itls_s=gaps.seconds_per_record() if gaps is not None else None,
        latencies_s=tuple((np.where(ok, col.e2el_ms, 0.0) / 1000.0).tolist()),
        start_times_s=tuple(col.send_s.tolist()),
        queue_times_s=tuple((col.queue_ms / 1000.0).tolist()),
        generated_texts=tuple(r.generated_text or "" for r in measured),
        errors=tuple(r.error or "" for r in measured),
        error_kinds=tuple(
            None if success else (r.error_kind or UNKNOWN_ERROR_KIND)
            for r, success in zip(measured, ok.tolist())
        ),
        sched_lags_ms=tuple(col.sched_lag_ms.tolist()),
        slot_waits_ms=tuple(col.slot_wait_ms.tolist()),
    )


__all__ = [
    "GoodputSLO",
    "LAG_FLOOR_MS",
    "LAG_GAP_FRACTION",
    "LAG_LIMIT_MS",
    "SummaryOptions",
    "parse_goodput",
    "parse_metric_percentiles",
    "parse_percentile_metrics",
    "summarize",
]

"""How fast and lean the metrics calculator is: `summarize` on N synthetic records of
~200 output tokens, today's implementation against the one at 03acd83, in one process.

Records look like `servelab sim run --dataset-name random --random-input-len 220
--random-output-len 200 --random-range-ratio 0.9`: 180-220 output tokens (1 % of them 1-3
tokens, so the TPOT traps have something to count), lognormal TTFTs and gaps, Poisson sends
at 280 req/s, 0.5 % failed, 8 warm-ups. Their ITLs come in both forms a `RequestRecord`
holds (`--forms`): `array('d')` (the simulator's) and `list[float]` (the HTTP client's).

Three implementations run on the same records, each timed alone and then, unless
`--no-memory`, again under tracemalloc for its peak of traced memory (numpy's buffers
included; the records themselves are built before and not counted):
- `03acd83`: the baseline, `summarize` as it was at commit 03acd83, copied below rather
  than imported from a worktree of that commit (one file, nothing to check out, and the
  copy cannot drift: it is the old text with its helpers renamed `_old_*`). Its
  `RequestDetails` validated `itls_s` with pydantic; the copy builds the old schema
  (`_OldRequestDetails`) so it pays that as it did.
- `new, ITLs kept`: `summarize` with `SummaryOptions(per_request_itls=True)` (what
  `--save-detailed` and the experiment store use).
- `new, ITLs skipped`: `per_request_itls=False` (`sim run` and `bench` without
  `--save-detailed`, calibration, fleet evaluation).
Every figure of the new results is checked against the baseline's, bit for bit (each
top-level field's JSON text; the detail lists by equality; the skipped variant's
`itls_s` is None by design): any difference is printed and the script exits 1.

At a million records the baseline needs more memory than a 24 GiB machine has (200 M
Python floats, twice, and a tuple per request), and so does keeping the ITLs of list-form
records: `--runs kept,skipped` / `--runs skipped` time the new code alone.

    .venv/bin/python bench/summary_speed.py [--num-requests 200000] [--forms array,list]
        [--runs baseline,kept,skipped] [--no-memory] [--seed 0]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import time
import tracemalloc
from array import array
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from servelab.metrics.records import RequestRecord
from servelab.metrics.result import (
    BenchResult,
    ClientHealth,
    GoodputSLO,
    LagStats,
    LatencyStats,
    MeasurementTraps,
    PercentileValue,
    RequestDetails,
    SlotWaitStats,
)
from servelab.metrics.summary import (
    LAG_FLOOR_MS,
    LAG_GAP_FRACTION,
    LAG_LIMIT_MS,
    UNKNOWN_ERROR_KIND,
    SummaryOptions,
    summarize,
)
from servelab.errors import ServelabError

RATE_RPS = 280.0
FAILED_SHARE = 0.005
SHORT_SHARE = 0.01
WARMUPS = 8


def make_records(n: int, seed: int, form: str) -> list[RequestRecord]:
    """`n` measured records (and WARMUPS warm-ups) whose ITLs are `form` ("array", "list")."""
    rng = np.random.default_rng(seed)
    out_lens = rng.integers(180, 221, n)
    short = rng.random(n) < SHORT_SHARE
    out_lens[short] = rng.integers(1, 4, int(short.sum()))
    failed = rng.random(n) < FAILED_SHARE
    prompt_lens = rng.integers(198, 243, n)
    intended = np.cumsum(rng.exponential(1.0 / RATE_RPS, n))
    sends = intended + rng.exponential(0.0002, n)
    ttfts = rng.lognormal(math.log(80.0), 0.5, n)
    lens = np.where(failed, 0, out_lens - 1)
    gaps = rng.lognormal(math.log(12.0), 0.3, int(lens.sum()))
    starts = np.cumsum(lens) - lens
    records = [RequestRecord(index=-1 - i, prompt_len=10, intended_send_s=0.0, send_s=0.0,
                             output_len=2, ttft_ms=5.0, itl_ms=[1.0], e2el_ms=6.0, warmup=True)
               for i in range(WARMUPS)]
    for i in range(n):
        if failed[i]:
            records.append(RequestRecord(
                index=i, prompt_len=int(prompt_lens[i]), intended_send_s=float(intended[i]),
                send_s=float(sends[i]), expected_output_len=200, error="HTTP 500",
                error_kind="http_500"))
            continue
        row = gaps[starts[i] : starts[i] + lens[i]]
        itl: Sequence[float] = array("d", row.tobytes()) if form == "array" else row.tolist()
        records.append(RequestRecord(
            index=i, prompt_len=int(prompt_lens[i]), intended_send_s=float(intended[i]),
            send_s=float(sends[i]), expected_output_len=200, output_len=int(out_lens[i]),
            ttft_ms=float(ttfts[i]), itl_ms=itl, e2el_ms=float(ttfts[i]) + float(row.sum())))
    return records


def differences(base: BenchResult, new: BenchResult, itls_kept: bool) -> list[str]:
    """The fields where `new` differs from `base`: each top-level figure compared as JSON
    text (bit for bit: a float's repr round-trips), each detail list by equality."""
    out = []
    a, b = base.model_dump(exclude={"details"}), new.model_dump(exclude={"details"})
    for key in a.keys() | b.keys():
        if json.dumps(a.get(key)) != json.dumps(b.get(key)):
            out.append(key)
    for key in RequestDetails.model_fields:
        want = getattr(base.details, key)
        if key == "itls_s" and not itls_kept:
            want = None
        if getattr(new.details, key) != want:
            out.append(f"details.{key}")
    return sorted(out)


Summarize = Callable[[list[RequestRecord], float, SummaryOptions], BenchResult]


def timed(fn: Summarize, records: list[RequestRecord], duration_s: float,
          opts: SummaryOptions) -> tuple[BenchResult, float]:
    gc.collect()
    t = time.perf_counter()
    res = fn(records, duration_s, opts)
    return res, time.perf_counter() - t


def traced_peak(fn: Summarize, records: list[RequestRecord], duration_s: float,
                opts: SummaryOptions) -> int:
    """Peak traced bytes while `fn` runs (its result is dropped after)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn(records, duration_s, opts)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=200_000)
    ap.add_argument("--forms", default="array,list", help="ITL forms: array, list (comma-separated)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default="baseline,kept,skipped",
                    help="which to run: baseline (03acd83), kept, skipped (the new code's ITLs)")
    ap.add_argument("--no-memory", action="store_true", help="no tracemalloc passes")
    args = ap.parse_args()
    opts = SummaryOptions(percentile_metrics=("ttft", "tpot", "itl", "e2el"),
                          metric_percentiles=(50.0, 90.0, 99.0),
                          goodput=GoodputSLO(ttft_ms=150.0, tpot_ms=14.0, e2el_ms=3000.0))
    every: dict[str, tuple[str, Summarize, SummaryOptions]] = {
        "baseline": ("03acd83", old_summarize, opts),
        "kept": ("new, ITLs kept", summarize, opts),
        "skipped": ("new, ITLs skipped", summarize,
                    opts.model_copy(update={"per_request_itls": False})),
    }
    runs = [every[key] for key in every if key in args.runs.split(",")]
    failed = False
    for form in args.forms.split(","):
        failed |= measure(form, args.num_requests, args.seed, runs, memory=not args.no_memory)
    if failed:
        raise SystemExit(1)


def measure(form: str, n: int, seed: int, runs: list[tuple[str, Summarize, SummaryOptions]],
            memory: bool) -> bool:
    """Time (and trace) each run on `n` records with `form` ITLs and print a table; True
    when a result differs from the baseline's."""
    t = time.perf_counter()
    records = make_records(n, seed, form)
    duration_s = max(r.send_s for r in records) + 10.0
    n_gaps = sum(len(r.itl_ms) for r in records if not r.warmup)
    print(f"\n{n:,} records, ITLs as {form} ({n_gaps:,} gaps; built in "
          f"{time.perf_counter() - t:.1f} s)")
    print(f"{'implementation':<20} {'wall s':>8} {'x faster':>9} {'peak MiB':>10} {'x less':>7}")
    base_res: BenchResult | None = None
    base_wall = base_peak = 0.0
    failed = False
    for name, fn, o in runs:
        res, wall = timed(fn, records, duration_s, o)
        peak = traced_peak(fn, records, duration_s, o) / 2**20 if memory else 0.0
        faster = f"{base_wall / wall:9.1f}" if base_res is not None else f"{'':9}"
        less = f"{base_peak / peak:7.1f}" if base_res is not None and peak else f"{'':7}"
        print(f"{name:<20} {wall:8.2f} {faster} {f'{peak:10,.0f}' if memory else '':>10} {less}",
              flush=True)
        if name == "03acd83":
            base_res, base_wall, base_peak = res, wall, peak
        elif base_res is not None:
            diff = differences(base_res, res, o.per_request_itls)
            if diff:
                failed = True
                print(f"  DIFFERS from 03acd83 in: {', '.join(diff)}")
        del res
    if base_res is not None:
        print("figures identical to 03acd83: " + ("NO" if failed else "yes"))
    return failed


# ---------------------------------------------------------------------------------------
# The baseline: servelab.metrics.summary at 03acd83, copied (helpers renamed _old_*).


class _OldRequestDetails(BaseModel):
    """RequestDetails as it was at 03acd83: every field validated, `itls_s` included."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    ttfts_s: tuple[float, ...]
    itls_s: tuple[tuple[float, ...], ...]
    latencies_s: tuple[float, ...]
    start_times_s: tuple[float, ...]
    queue_times_s: tuple[float, ...]
    generated_texts: tuple[str, ...]
    errors: tuple[str, ...]
    error_kinds: tuple[str | None, ...]
    sched_lags_ms: tuple[float, ...]
    slot_waits_ms: tuple[float, ...]


def old_summarize(
    records: Sequence[RequestRecord], duration_s: float, opts: SummaryOptions
) -> BenchResult:
    """servelab.metrics.summary.summarize as of 03acd83 (the baseline).

    Rates are per second of `duration_s`; latencies in ms. Empty metric lists give 0,
    as vLLM's do.
    """
    if not duration_s > 0:
        raise ServelabError(f"run duration must be > 0 s, got {duration_s}")
    measured = sorted((r for r in records if not r.warmup), key=lambda r: r.index)
    ok = [r for r in measured if r.success]
    for r in ok:
        if r.e2el_ms is None:
            raise ValueError(f"request {r.index} succeeded but has no e2el_ms")
    failed_by_reason = Counter(r.error_kind or UNKNOWN_ERROR_KIND for r in measured if not r.success)

    ttfts = [_old_req(r.ttft_ms) for r in ok]
    tpots = [t for t in (r.tpot_ms for r in ok) if t is not None]
    itls = [gap for r in ok for gap in r.itl_ms]
    e2els = [_old_req(r.e2el_ms) for r in ok]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_len for r in ok)
    pct = opts.metric_percentiles
    peak_tokens, peak_conc = _old_peak_buckets(ok)
    good = _old_count_good(ok, opts.goodput) if opts.goodput is not None else None

    return BenchResult(
        duration_s=duration_s,
        completed=len(ok),
        failed=len(measured) - len(ok),
        failed_by_reason=dict(sorted(failed_by_reason.items())),
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=len(ok) / duration_s,
        request_goodput=None if good is None else good / duration_s,
        output_throughput=total_out / duration_s,
        total_token_throughput=(total_in + total_out) / duration_s,
        max_output_tokens_per_s=peak_tokens,
        max_concurrent_requests=peak_conc,
        peak_in_flight_requests=_old_peak_in_flight(ok),
        ttft=_old_latency_stats(ttfts, pct),
        tpot=_old_latency_stats(tpots, pct),
        itl=_old_latency_stats(itls, pct),
        e2el=_old_latency_stats(e2els, pct),
        client_queue=_old_latency_stats([r.queue_ms for r in ok], pct),
        e2el_incl_queue=_old_latency_stats([_old_req(r.e2el_ms) + r.queue_ms for r in ok], pct),
        traps=_old_traps(ok, pct),
        percentile_metrics=opts.percentile_metrics,
        goodput_slo=opts.goodput,
        client=_old_client_health(measured),
        details=RequestDetails.model_construct(**dict(_old_details(measured))),
    )


# Requests whose TPOT is one or two gaps: "short" for the TPOT-skew trap.
_OLD_SHORT_TPOT_MAX_TOKENS = 3


def _old_traps(ok: list[RequestRecord], pct: tuple[float, ...]) -> MeasurementTraps:
    reasoning = sum(r.reasoning_tokens for r in ok)
    reasoned = [r for r in ok if r.reasoning_tokens > 0]
    answer_ttfts = [r.answer_ttft_ms for r in reasoned if r.answer_ttft_ms is not None]
    firsts = [r.itl_ms[0] for r in ok if r.itl_ms]
    later = [g for r in ok for g in r.itl_ms[1:]]
    tpots = [(r.output_len, t) for r in ok if (t := r.tpot_ms) is not None]
    tpot_sum = sum(t for _, t in tpots)
    short = [t for n, t in tpots if n <= _OLD_SHORT_TPOT_MAX_TOKENS]
    return MeasurementTraps(
        reasoning_tokens=reasoning,
        answer_tokens=sum(r.output_len for r in ok) - reasoning,
        reasoning_requests=len(reasoned),
        mean_answer_ttft_ms=float(np.mean(answer_ttfts)) if answer_ttfts else None,
        mean_first_itl_ms=float(np.mean(firsts)) if firsts else None,
        mean_later_itl_ms=float(np.mean(later)) if later else None,
        itl_excl_first=_old_latency_stats(later, pct),
        tokens_beyond_one_per_chunk=sum(r.output_len - r.chunks for r in ok if r.chunks is not None),
        short_outputs=sum(1 for r in ok if r.expected_output_len is not None
                          and r.output_len < r.expected_output_len),
        short_tpot_requests=len(short),
        short_tpot_share=sum(short) / tpot_sum if tpot_sum > 0 else 0.0,
    )


def _old_req(value: float | None) -> float:
    assert value is not None  # guaranteed for successful records (checked above)
    return value


def _old_latency_stats(values_ms: list[float], percentiles: tuple[float, ...]) -> LatencyStats:
    # vLLM feeds numpy `values or 0`: an empty list yields 0 for every statistic.
    arr = np.asarray(values_ms if values_ms else [0.0], dtype=np.float64)
    return LatencyStats(
        mean_ms=float(np.mean(arr)),
        median_ms=float(np.median(arr)),
        std_ms=float(np.std(arr)),
        percentiles=tuple(
            PercentileValue(percentile=p, value_ms=float(np.percentile(arr, p)))
            for p in percentiles
        ),
    )


def _old_count_good(ok: list[RequestRecord], slo: GoodputSLO) -> int:
    """Requests meeting every SLO given (value <= SLO). A one-token request's TPOT counts
    as 0, as in vLLM."""
    good = 0
    for r in ok:
        if slo.ttft_ms is not None and _old_req(r.ttft_ms) > slo.ttft_ms:
            continue
        if slo.tpot_ms is not None and (r.tpot_ms or 0.0) > slo.tpot_ms:
            continue
        if slo.e2el_ms is not None and _old_req(r.e2el_ms) > slo.e2el_ms:
            continue
        good += 1
    return good


def _old_peak_buckets(ok: list[RequestRecord]) -> tuple[float, int]:
    """vLLM's peak figures over 1-second buckets from the first successful send.

    Returns (most output tokens completed in one bucket, most requests active in one
    bucket). A token's time is send + TTFT + the ITLs before it; a request is active in
    every bucket from the one holding its send to the one holding its last token.
    """
    if not ok:
        return 0.0, 0
    start = min(r.send_s for r in ok)
    end = max(r.send_s + _old_req(r.e2el_ms) / 1000.0 for r in ok)
    n_buckets = int(np.ceil(end - start)) + 1
    tokens = np.zeros(n_buckets)
    active = np.zeros(n_buckets, dtype=np.int64)
    for r in ok:
        offsets_ms = np.cumsum([_old_req(r.ttft_ms), *r.itl_ms])
        buckets = (r.send_s + offsets_ms / 1000.0 - start).astype(np.int64)
        buckets = buckets[(buckets >= 0) & (buckets < n_buckets)]
        np.add.at(tokens, buckets, 1)
        first = int(r.send_s - start)
        last = int(r.send_s + _old_req(r.e2el_ms) / 1000.0 - start)
        active[first : last + 1] += 1
    return float(tokens.max()), int(active.max())


_OLD_SAME_INSTANT_S = 1e-6


def _old_peak_in_flight(ok: list[RequestRecord]) -> int:
    """Most successful requests in flight at one instant (send to last token). A request
    ending at the instant another is sent does not overlap it; "the instant" allows
    `_OLD_SAME_INSTANT_S`, because an end is rebuilt as send + E2EL and the simulator's sends
    into a freed slot then differ from it by float rounding."""
    events: list[tuple[float, int]] = []
    for r in ok:
        events.append((r.send_s, 1))
        events.append((r.send_s + _old_req(r.e2el_ms) / 1000.0 - _OLD_SAME_INSTANT_S, -1))
    events.sort()  # at equal times -1 sorts before +1: finish before start
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def _old_client_health(measured: list[RequestRecord]) -> ClientHealth:
    lags = np.asarray([r.sched_lag_ms for r in measured] or [0.0])
    waits = np.asarray([r.slot_wait_ms for r in measured] or [0.0])
    gap_ms = _old_mean_intended_gap_ms(measured)
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


def _old_mean_intended_gap_ms(measured: list[RequestRecord]) -> float | None:
    """Mean gap between intended sends (ms); None when all were meant to go at once."""
    if len(measured) < 2:
        return None
    times = [r.intended_send_s for r in measured]
    span_s = max(times) - min(times)
    if span_s <= 0:
        return None
    return span_s * 1000.0 / (len(measured) - 1)


def _old_details(measured: list[RequestRecord]) -> _OldRequestDetails:
    return _OldRequestDetails(
        input_lens=tuple(r.prompt_len for r in measured),
        output_lens=tuple(r.output_len if r.success else 0 for r in measured),
        ttfts_s=tuple((r.ttft_ms or 0.0) / 1000.0 for r in measured),
        itls_s=tuple(tuple(g / 1000.0 for g in r.itl_ms) for r in measured),
        latencies_s=tuple((r.e2el_ms or 0.0) / 1000.0 if r.success else 0.0 for r in measured),
        start_times_s=tuple(r.send_s for r in measured),
        queue_times_s=tuple(r.queue_ms / 1000.0 for r in measured),
        generated_texts=tuple(r.generated_text or "" for r in measured),
        errors=tuple(r.error or "" for r in measured),
        error_kinds=tuple(
            None if r.success else (r.error_kind or UNKNOWN_ERROR_KIND) for r in measured
        ),
        sched_lags_ms=tuple(r.sched_lag_ms for r in measured),
        slot_waits_ms=tuple(r.slot_wait_ms for r in measured),
    )




if __name__ == "__main__":
    main()

"""How fast and lean the metrics calculator is: `summarize` on N synthetic records of
~200 output tokens, this checkout against `--baseline-rev` (default 03acd83, before it was
vectorised), each in its own process (`baseline_rev`: the old `src/` from `git archive`).

Records look like `servelab sim run --dataset-name random --random-input-len 220
--random-output-len 200 --random-range-ratio 0.9`: 180-220 output tokens (1 % of them 1-3
tokens, so the TPOT traps have something to count), lognormal TTFTs and gaps, Poisson sends
at 280 req/s, 0.5 % failed, 8 warm-ups, built from `--seed` the same in every process.
Their ITLs come in both forms a `RequestRecord` holds (`--forms`): `array('d')` (the
simulator's) and `list[float]` (the HTTP client's).

Runs (`--runs`), each timed, then (unless `--no-memory`) run again under tracemalloc for
its peak of traced memory (numpy's buffers included; the records are built before and not
counted):
- `baseline`: `summarize` at `--baseline-rev`;
- `kept`: this checkout with `SummaryOptions(per_request_itls=True)` (what `--save-detailed`
  and the experiment store use);
- `skipped`: `per_request_itls=False` (`sim run` and `bench` without `--save-detailed`,
  calibration, fleet evaluation).
Each result is checked against the baseline's, bit for bit, by digests of its JSON figures
(every field but the details), of its detail lists and, where kept, of every request's
ITLs: any difference is printed and the script exits 1.

At a million records the baseline needs more memory than a 24 GiB machine has (200 M
Python floats, twice, and a tuple per request), and so does keeping the ITLs of list-form
records: `--runs kept,skipped` / `--runs skipped` time this checkout alone.

    .venv/bin/python bench/summary_speed.py [--num-requests 200000] [--forms array,list]
        [--runs baseline,kept,skipped] [--baseline-rev 03acd83] [--no-memory] [--seed 0]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import time
import tracemalloc
from array import array
from collections.abc import Sequence
from itertools import chain

import numpy as np

from baseline_rev import REPO, run_child, source_of

RATE_RPS = 280.0
FAILED_SHARE = 0.005
SHORT_SHARE = 0.01
WARMUPS = 8


def make_records(n: int, seed: int, form: str) -> list:
    """`n` measured records (and WARMUPS warm-ups) whose ITLs are `form` ("array", "list")."""
    from servelab.metrics.records import RequestRecord

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


def _digest(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def _child(args: argparse.Namespace) -> None:
    """One run in this process: its figures, as one JSON line."""
    from servelab.metrics.result import GoodputSLO
    from servelab.metrics.summary import SummaryOptions, summarize

    options = dict(percentile_metrics=("ttft", "tpot", "itl", "e2el"),
                   metric_percentiles=(50.0, 90.0, 99.0),
                   goodput=GoodputSLO(ttft_ms=150.0, tpot_ms=14.0, e2el_ms=3000.0))
    if args.run != "baseline":  # (the option is this checkout's)
        options["per_request_itls"] = args.run == "kept"
    opts = SummaryOptions(**options)
    records = make_records(args.num_requests, args.seed, args.form)
    duration_s = max(r.send_s for r in records) + 10.0
    gc.collect()
    t = time.perf_counter()
    res = summarize(records, duration_s, opts)
    wall_s = time.perf_counter() - t
    details = res.details
    itls = details.itls_s
    out = {
        "wall_s": wall_s,
        "gaps": sum(len(r.itl_ms) for r in records if not r.warmup),
        "figures": _digest(json.dumps(res.model_dump(exclude={"details"}), sort_keys=True)),
        "details": _digest(json.dumps(details.model_dump(exclude={"itls_s"}), sort_keys=True)),
        "itls": None if itls is None else _digest(
            np.fromiter(chain.from_iterable(itls), np.float64).tobytes()
            + np.fromiter(map(len, itls), np.int64).tobytes()),
    }
    del res, details, itls
    if args.memory:
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        summarize(records, duration_s, opts)
        out["peak_mib"] = (tracemalloc.get_traced_memory()[1] - base) / 2**20
        tracemalloc.stop()
    print(json.dumps(out))


def measure(form: str, args: argparse.Namespace, runs: list[str]) -> bool:
    """Each run of `runs` on `args.num_requests` records with `form` ITLs, a table; True
    when a result differs from the baseline's."""
    child_args = ["--num-requests", str(args.num_requests), "--seed", str(args.seed),
                  "--form", form] + ([] if args.no_memory else ["--memory"])
    names = {"baseline": args.baseline_rev, "kept": "new, ITLs kept", "skipped": "new, ITLs skipped"}
    got: dict[str, dict] = {}
    with source_of(args.baseline_rev) as old_src:
        for run in runs:
            src = old_src if run == "baseline" else REPO / "src"
            got[run] = run_child(__file__, [*child_args, "--run", run], src)
    first = next(iter(got.values()))
    print(f"\n{args.num_requests:,} records, ITLs as {form} ({first['gaps']:,} gaps)")
    print(f"{'implementation':<20} {'wall s':>8} {'x faster':>9} {'peak MiB':>10} {'x less':>7}")
    base = got.get("baseline")
    failed = False
    for run, r in got.items():
        faster = f"{base['wall_s'] / r['wall_s']:9.1f}" if base and run != "baseline" else " " * 9
        peak = f"{r['peak_mib']:10,.0f}" if "peak_mib" in r else " " * 10
        less = (f"{base['peak_mib'] / r['peak_mib']:7.1f}"
                if base and run != "baseline" and "peak_mib" in r else " " * 7)
        print(f"{names[run]:<20} {r['wall_s']:8.2f} {faster} {peak} {less}")
        if base and run != "baseline":
            differs = [key for key in ("figures", "details", "itls")
                       if r[key] != base[key] and not (key == "itls" and r[key] is None)]
            if differs:
                failed = True
                print(f"  DIFFERS from {args.baseline_rev} in: {', '.join(differs)}")
    if base:
        print(f"figures identical to {args.baseline_rev}: " + ("NO" if failed else "yes"))
    return failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=200_000)
    ap.add_argument("--forms", default="array,list", help="ITL forms: array, list (comma-separated)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default="baseline,kept,skipped",
                    help="which to run: baseline (--baseline-rev), kept, skipped (this checkout's ITLs)")
    ap.add_argument("--baseline-rev", default="03acd83",
                    help="the commit to compare with (default: before summarize was vectorised)")
    ap.add_argument("--no-memory", action="store_true", help="no tracemalloc passes")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--form", help=argparse.SUPPRESS)
    ap.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    runs = [r for r in ("baseline", "kept", "skipped") if r in args.runs.split(",")]
    failed = False
    for form in args.forms.split(","):
        failed |= measure(form, args, runs)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

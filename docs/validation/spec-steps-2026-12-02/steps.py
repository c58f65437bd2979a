"""Engine steps read back from what the client saw, per cell of the spec-steps run.

    .venv/bin/python docs/validation/spec-steps-2026-12-02/steps.py RESULTS/exp

With speculative decoding a step hands each running request one chunk of 1 + accepted
tokens, and the client records a k-token chunk as k ITLs of gap / k
(`servelab.client.tally`), so each request's ITL list splits back into chunks: a run of
equal values is one chunk (its tokens: the run's length, or one more for the first chunk,
whose earlier tokens came with the first token), its gap the value times the run length.
While a request decodes it gets a chunk every step, so its chunk gaps are the step
durations it lived through (prefill steps of other requests included); the chunk's token
count is the client's even split when the server sends usage only at the end (the
`openai` backend here), so sizes say little, gaps are exact. Prints the engine logs'
CUDA-graph mode counts per arm, then per cell:
chunks, mean tokens per chunk, the share of chunks with K + 1 tokens, the mean gap of
chunks by size, and the median gap.
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

from servelab.experiment.store import ExperimentStore


def chunks(itls_s: list[float]) -> list[tuple[int, float]]:
    """(tokens, gap s) of each chunk after the first, from one request's ITLs (s)."""
    out: list[tuple[int, float]] = []
    i = 0
    while i < len(itls_s):
        j = i
        while j + 1 < len(itls_s) and itls_s[j + 1] == itls_s[i]:
            j += 1
        n = j - i + 1
        if itls_s[i] == 0.0:  # the first chunk's later tokens: no gap of their own
            i = j + 1
            continue
        out.append((n, itls_s[i] * n))
        i = j + 1
    return out


def graph_modes(log: Path) -> Counter[str]:
    """Steps by vLLM's runtime CUDA-graph mode and kind, summed over the engine log's
    `--cudagraph-metrics` tables: decode steps of 7 tokens per sequence, other decode-sized
    steps (under 128 tokens), and larger ones (prefills)."""
    out: Counter[str] = Counter()
    row = re.compile(r"\| (\d+)\s+\| (\d+)\s+\| \d+\s+\| (FULL|PIECEWISE|NONE)\s+\| (\d+)")
    for line in log.read_text(errors="replace").splitlines():
        m = row.search(line)
        if m:
            tokens, mode, count = int(m.group(1)), m.group(3), int(m.group(4))
            kind = "7 per seq" if tokens % 7 == 0 and tokens < 128 else "other < 128" if tokens < 128 else ">= 128"
            out[f"{mode} {kind}"] += count
    return out


LAYERS = 40  # Qwen3-14B's decoder layers
STEADY_MS = 40.0  # chunk gaps above this span another request's prefill: left out


def mean_gap_ms(store: ExperimentStore, arm: str, load: str) -> float:
    """A cell's mean chunk gap (ms), gaps over STEADY_MS left out."""
    rec = store.read_cell(arm, "prefix", load)
    assert rec is not None and rec.result.itls is not None, (arm, load)
    gaps = [g * 1e3 for row in rec.result.itls for _, g in chunks(row) if g * 1e3 < STEADY_MS]
    return statistics.fmean(gaps)


def piecewise_layer_us(store: ExperimentStore) -> tuple[list[tuple[str, float, float, float]], float]:
    """Per load (load, full ms, piecewise ms, us per layer) and their mean: what a step on
    piecewise graphs costs over the same step on full ones, per layer, with vLLM forced to
    each (`servelab.sim.cost.H200_SYNC_PIECEWISE_LAYER_US`, rounded to 0.1 us)."""
    rows = []
    for load in ("c1", "c2", "c4", "c8", "c16"):
        full, piece = mean_gap_ms(store, "k6-full", load), mean_gap_ms(store, "k6-piecewise", load)
        rows.append((load, full, piece, (piece - full) / LAYERS * 1e3))
    return rows, round(statistics.fmean(r[3] for r in rows), 1)


def main() -> None:
    store = ExperimentStore(Path(sys.argv[1]))
    rows, mean = piecewise_layer_us(store)
    print("| load | full graphs: mean step ms | piecewise: mean step ms | us per layer |")
    print("|---|---:|---:|---:|")
    for load, full, piece, per in rows:
        print(f"| {load} | {full:.2f} | {piece:.2f} | {per:.0f} |")
    print(f"\nmean: {mean} us per layer\n")
    print("| arm | steps by CUDA-graph mode (engine log) |")
    print("|---|---|")
    for log in sorted(store.root.glob("arms/*/logs/*-replica0.log")):
        modes = graph_modes(log)
        print(f"| {log.parent.parent.name} | {', '.join(f'{k}: {v}' for k, v in sorted(modes.items()))} |")
    print()
    print("| cell | chunks | tokens/chunk | share with 7 | mean gap by tokens (ms) | median gap ms | TPOT ms |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for _, rec in store.cells():
        res = rec.result
        itls = res.model_extra.get("itls") if res.itls is None else res.itls
        if not itls:
            continue
        got = [c for row in itls for c in chunks(row)]
        by = defaultdict(list)
        for n, gap in got:
            by[n].append(gap)
        size = statistics.fmean(n for n, _ in got)
        share7 = sum(n == 7 for n, _ in got) / len(got)
        gaps = " ".join(f"{n}:{statistics.fmean(v) * 1e3:.1f}" for n, v in sorted(by.items()))
        med = statistics.median(g for _, g in got) * 1e3
        print(f"| {rec.name} | {len(got)} | {size:.2f} | {share7:.2f} | {gaps} | {med:.2f} | "
              f"{res.mean_tpot_ms:.2f} |")


if __name__ == "__main__":
    main()

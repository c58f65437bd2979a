"""Served vs offline n-gram K = 4 steps at the same shapes, one machine (device2.sh's run).

    python3 compare.py RESULTS_DIR      (the device's /tmp/g2run, or results2/ here)

Served: the engine core's `schedule()` starts (hook `sch` records); a step's time is the
interval to the next start, kept when it holds the whole wave (B = the bench's concurrency)
and no prefill (tokens <= B x (K + 1)). Offline: runner_probe.py's steps with B requests and
no prefill, each as its wall from `schedule()` to `post_step()` (t1 - t0) and as the interval
to the next step's start (t0 to t0, which adds the offline loop's own output handling).
Medians, and the steps' mean scheduled tokens (the verified drafts change them).
"""
import json
import statistics
import sys
from pathlib import Path

K = 4


def served(root: Path):
    sch = []
    for f in (root / "hook").glob("*.jsonl"):
        recs = [json.loads(x) for x in f.read_text().splitlines() if x.startswith('["sch"')]
        if recs:
            sch = recs
    out = {}
    for a, b in zip(sch, sch[1:]):
        dt, tokens, n = b[1] - a[1], a[3], a[4]
        if dt < 0.5 and n in (16, 64, 128, 256) and tokens <= n * (K + 1):
            out.setdefault(n, []).append((dt * 1e3, tokens))
    return out


def offline(root: Path):
    d = json.loads((root / "offline-k4.json").read_text())
    out = {}
    for b, entry in d["batches"].items():
        steps = entry["steps"]
        rows = []
        for r, nxt in zip(steps, steps[1:] + [None]):
            if r.get("reqs") == int(b) and not r.get("prefill"):
                gap = (nxt["t0"] - r["t0"]) * 1e3 if nxt is not None else None
                rows.append(((r["t1"] - r["t0"]) * 1e3, gap, r["tokens"]))
        out[int(b)] = rows
    return out


def phases(path: Path):
    """Per B of a runner_probe.py JSON: medians of the step (schedule to post_step), the GPU's
    span (forward start to sampler end, CUDA events), the serial CPU (step - span), the gap to
    the next step's start, and the step's tokens."""
    d = json.loads(path.read_text())
    out = {}
    for b, entry in d["batches"].items():
        steps = entry["steps"]
        rows = [((r["t1"] - r["t0"]) * 1e3, r["gpu_fwd_sample_ms"],
                 (n["t0"] - r["t1"]) * 1e3 if n is not None else None, r["tokens"])
                for r, n in zip(steps, steps[1:] + [None])
                if r.get("reqs") == int(b) and not r.get("prefill") and "gpu_fwd_sample_ms" in r]
        if rows:
            med = [statistics.median(x[i] for x in rows if x[i] is not None) for i in range(4)]
            out[int(b)] = (med[0], med[1], med[0] - med[1], med[2], med[3])
    return out


def main(root: Path) -> None:
    s, o = served(root), offline(root)
    print("| B | served steps | served step ms | tokens | offline steps | offline step ms (schedule to post_step) | offline start to start ms | tokens | served - offline (start to start) ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b in (16, 64, 128, 256):
        sv, of = s.get(b, []), o.get(b, [])
        if not sv or not of:
            continue
        sm = statistics.median(x for x, _ in sv)
        st = statistics.mean(t for _, t in sv)
        om = statistics.median(x for x, _, _ in of)
        og = statistics.median(g for _, g, _ in of if g is not None)
        ot = statistics.mean(t for _, _, t in of)
        print(f"| {b} | {len(sv)} | {sm:.2f} | {st:.0f} | {len(of)} | {om:.2f} | {og:.2f} | {ot:.0f} | {sm - og:+.2f} |")
    print()
    other = Path(__file__).resolve().parent.parent / "spec-cpu-2026-12-03" / "results" / "llama-k4.json"
    a, b_ = phases(other), phases(root / "offline-k4.json")
    print("Offline, the same probe and shapes on two machines (../spec-cpu-2026-12-03's, this run's):")
    print()
    print("| B | tokens | step ms | GPU span ms | serial CPU ms | gap to next step ms |")
    print("|---:|---:|---|---|---|---|")
    for b in sorted(set(a) & set(b_)):
        x, y = a[b], b_[b]
        print(f"| {b} | {y[4]:.0f} | {x[0]:.2f} / {y[0]:.2f} | {x[1]:.2f} / {y[1]:.2f} | "
              f"{x[2]:.2f} / {y[2]:.2f} (x{y[2] / x[2]:.2f}) | {x[3]:.2f} / {y[3]:.2f} |")
    print()
    third = root.parent / "results3"
    if third.is_dir():
        print("A third machine (device3.sh: its probe's host figure in results3/probe-*.json), "
              "serial CPU ms, ../spec-cpu-2026-12-03's machine / this one:")
        print()
        print("| model | B | step ms | GPU span ms | serial CPU ms |")
        print("|---|---:|---|---|---|")
        for model, name in (("llama-k4.json", "llama-3.1-8b-k4.json"), ("qwen3-14b-k4.json", "qwen3-14b-k4.json")):
            x_, y_ = phases(other.parent / model), phases(third / name)
            for b in sorted(set(x_) & set(y_)):
                x, y = x_[b], y_[b]
                print(f"| {name.split('-k4')[0]} | {b} | {x[0]:.2f} / {y[0]:.2f} | {x[1]:.2f} / {y[1]:.2f} | "
                      f"{x[2]:.2f} / {y[2]:.2f} (x{y[2] / x[2]:.2f}) |")
        print()
    print("| result | output tok/s | mean TPOT ms |")
    print("|---|---:|---:|")
    for f in sorted((root / "cells").glob("*.json"), key=lambda p: int(p.name[1:].split("-")[0])):
        m = json.loads(f.read_text())
        print(f"| {f.stem} | {m['output_throughput']:,.0f} | {m['mean_tpot_ms']:.2f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

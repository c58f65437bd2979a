"""gemma-3-12b's random 1024/128 cells re-simulated with the API server's per-output time
that vLLM measured on them (issue 14, 2026-12-06; a diagnosis, nothing shipped changes).

    .venv/bin/python docs/validation/sim-detok-2026-12-06/check.py > docs/validation/sim-detok-2026-12-06/check.md

../sim-waves-2026-12-03's hook timed vLLM's `OutputProcessor.process_outputs` on the
served models: per output, in calls of 32 or more outputs (median), gemma-3-12b 171.7 us,
OLMoE-1B-7B 13.0, Qwen3-4B 14.1, all with the kit's Qwen tokenizer and 1,024-token
prompts. detok.py shows why: gemma emits ids beyond that tokenizer, and vLLM's
detokenizer then decodes the whole prompt again at every output. The simulator's API
server prices an output at `frontend_us_per_output_token` (9.77 us, from Qwen3-0.6B's
probes). Here gemma's cells get the difference on top: gemma's figure less the mean of
the other two (158.1 us). Each GPU's cells use its shipped profile and residual; the H100's API server was
not timed, so the H200 host's figure stands in for it.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

from servelab.sim.cost import default_calibration

HERE = Path(__file__).resolve().parent
V = HERE.parent
HOOK = V / "sim-waves-2026-12-03" / "results"
METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")
RUNS = (("H200, 2026-12-01 (sim_validate's cells)", V / "sim-transfer-2026-12-01" / "results", "H200"),
        ("H200, 2026-12-06 repeats", V / "sim-repeats-h200-2026-12-06" / "results", "H200"),
        ("H100, 2026-12-06", V / "sim-transfer-h100-2026-12-06" / "results", "H100-SXM"))


def _load(name: str, path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


h100 = _load("h100check", V / "sim-transfer-h100-2026-12-06" / "check.py")


def per_output_us(model: str) -> float:
    """Median us per output of vLLM's process_outputs over its calls of >= 32 outputs
    (the hook's `out1` records: start, end, outputs, ...), one served model."""
    got = []
    for f in sorted((HOOK / model / "hook").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r[0] == "out1" and r[3] >= 32:
                got.append((r[2] - r[1]) / r[3] * 1e6)
    return statistics.median(got)


def main() -> None:
    gemma, others = per_output_us("gemma-3-12b"), [per_output_us(m) for m in ("olmoe-1b-7b", "qwen3-4b")]
    extra_us = gemma - sum(others) / len(others)
    print(f"process_outputs per output (../sim-waves-2026-12-03's hook): gemma-3-12b {gemma:.1f} us, "
          f"OLMoE-1B-7B {others[0]:.1f}, Qwen3-4B {others[1]:.1f}. API server per output: shipped "
          f"{default_calibration('H200').frontend_us_per_output_token:.2f} us; gemma's cells here "
          f"+{extra_us:.1f} us.\n")
    print("| run | cell | metric | measured | shipped | err | + measured per-output time | err |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for label, results, gpu in RUNS:
        cells = [t for t in h100.targets(results, gpu)
                 if t.name.startswith("gemma-3-12b/rnd_")]
        base = default_calibration(gpu)
        more = base.model_copy(update={"frontend_us_per_output_token": base.frontend_us_per_output_token + extra_us})
        a = {(r["cell"], r["metric"]): r for r in h100.cell_rows(cells, base, "shipped")}
        b = {(r["cell"], r["metric"]): r for r in h100.cell_rows(cells, more, "measured")}
        for key in sorted(a):
            if key[1] not in METRICS:
                continue
            ra, rb = a[key], b[key]
            print(f"| {label} | {key[0].split('/')[1]} | {key[1]} | {ra['measured']:,.1f} | {ra['simulated']:,.1f} | "
                  f"{ra['error_pct']:+.1f} % | {rb['simulated']:,.1f} | {rb['error_pct']:+.1f} % |")


if __name__ == "__main__":
    main()

"""The cells of this folder's run (device.sh) against the simulator (issue 14, 2026-12-07).

    .venv/bin/python docs/validation/sim-gil-2026-12-07/check.py --gpu GPU > docs/validation/sim-gil-2026-12-07/table.md

Every cell under results/<dir>/ is re-simulated with its own seed and prompts, on the served
directory's config.json (gemma's with the vocabulary it was served with), the GPU's shipped
profile and residual; nothing is fitted on these cells. Then the per-cell table and, per cell
drawn more than once, the error of the simulated mean on the measured mean (one reader and
one table with ../sim-transfer-h100-2026-12-06/check.py). Then OLMoE's measured figures under
the two GIL switch intervals side by side, and its prefill-heavy TTFT over every draw committed
from an H200 host (OLMOE_DRAWS), against the simulated mean. The cells name the tokenizer at its device path:
link the kit's payload there (`ln -sfn $PWD/.gpu/dl/payload /tmp/gpu-x/payload`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from servelab.plan import EngineArgs
from servelab.sim.calibrate import evaluate
from servelab.sim.cost import default_calibration
from servelab.sim.setup import SimOptions

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


h100 = _load("h100check", HERE.parent / "sim-transfer-h100-2026-12-06" / "check.py")
METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")


def switch_table(results: Path) -> list[str]:
    """OLMoE's cells measured under the default (5 ms) and the short (0.5 ms) switch interval."""
    out = ["### OLMoE-1B-7B: the GIL's switch interval (measured)", "",
           "| cell | 5 ms: out tok/s | TTFT ms | TPOT ms | 0.5 ms: out tok/s | TTFT ms | TPOT ms | TTFT change |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    a, b = results / "olmoe-1b-7b-default", results / "olmoe-1b-7b-short"
    for f in sorted(a.glob("rnd_*.json")):
        g = b / f.name
        if not g.exists():
            continue
        x, y = json.loads(f.read_text()), json.loads(g.read_text())
        row = [f.stem] + [f"{x[m]:,.1f}" for m in METRICS] + [f"{y[m]:,.1f}" for m in METRICS]
        row.append(f"{100 * (y['mean_ttft_ms'] / x['mean_ttft_ms'] - 1):+.1f} %")
        out.append("| " + " | ".join(row) + " |")
    return out + [""]


# Every OLMoE-1B-7B random 1024/128 draw at 32 and 64 in flight measured on an H200 host and
# committed (folder under docs/validation, served-model folder, cell files).
OLMOE_DRAWS = (
    ("sim-transfer-2026-12-01", "olmoe-1b-7b", ("rnd_c32", "rnd_c64")),
    ("sim-frontend-2026-12-01", "olmoe-1b-7b", ("rnd_c32", "rnd_c32_b", "rnd_c64", "rnd_c64_b")),
    ("sim-waves-2026-12-03", "olmoe-1b-7b", ("rnd_c32", "rnd_c64", "rnd_c64_c")),
    ("sim-repeats-h200-2026-12-06", "olmoe-1b-7b", ("rnd_c32_1", "rnd_c32_2", "rnd_c32_3",
                                                    "rnd_c64_1", "rnd_c64_2", "rnd_c64_3")),
    ("sim-gil-2026-12-07", "olmoe-1b-7b-default", ("rnd_c32_1", "rnd_c32_2", "rnd_c64_1", "rnd_c64_2")),
    ("sim-gil-2026-12-07", "olmoe-1b-7b-short", ("rnd_c32_1", "rnd_c32_2", "rnd_c64_1", "rnd_c64_2")),
)


def pooled_table(gpu: str) -> list[str]:
    """OLMoE's prefill-heavy TTFT over every committed H200 draw: each draw re-simulated with
    its own seed, then the error of the simulated mean on the measured mean."""
    val = HERE.parent
    draws: dict[str, list[tuple[str, float, float]]] = {"rnd_c32": [], "rnd_c64": []}
    for folder, mdir, cells in OLMOE_DRAWS:
        d = val / folder / "results" / mdir
        opts = SimOptions(str(d / "config.json"), gpu, None, EngineArgs())
        for cell in cells:
            t = h100.simcheck.measured_cell(d / f"{cell}.json", f"{mdir}/{cell}", opts)
            assert t is not None
            sim = {m: v for _, m, _, v in evaluate(t.options, [t], default_calibration(gpu))}
            draws[cell[:7]].append((f"{folder}/{mdir}/{cell}", t.measured["mean_ttft_ms"], sim["mean_ttft_ms"]))
    out = ["### OLMoE-1B-7B prefill-heavy TTFT, every committed H200 draw", "",
           "| cell | draws | measured ms: min / mean / max | simulated mean | err of the means |",
           "|---|---:|---|---:|---:|"]
    for cell, rows in draws.items():
        meas = [m for _, m, _ in rows]
        sim = sum(s for _, _, s in rows) / len(rows)
        mean = sum(meas) / len(meas)
        out.append(f"| {cell} | {len(rows)} | {min(meas):.1f} / {mean:.1f} / {max(meas):.1f} | {sim:.1f} | "
                   f"{100 * (sim / mean - 1):+.1f} % |")
    return out + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", required=True, help="the servelab GPU name of the machine the cells ran on")
    a = ap.parse_args()
    results = HERE / "results"
    # no model folder here is one of the residual's fit models: cell_rows marks every row held out
    rows = h100.cell_rows(h100.targets(results, a.gpu), default_calibration(a.gpu), "shipped")
    print("\n".join([f"{a.gpu}, shipped profile and residual (`default_calibration('{a.gpu}')`).", "",
                     *h100._cell_table(rows, "shipped"), *switch_table(results), *pooled_table(a.gpu)]))


if __name__ == "__main__":
    main()

"""The second H100 run's cells with every API-server figure of the shipped residual scaled
(issue 14): does a slower simulated API server close the prefill-heavy TTFT gap?

    .venv/bin/python docs/validation/sim-transfer-h100-2026-12-06/frontend_scale.py [SCALE ...]

Re-simulates every cell of this host (the second run: all but OLMoE and gemma's first three
draws) as check.py does, with the residual's `frontend_*` figures times each SCALE (default
1, 1.5, 2, 3), and prints the mean / max absolute error per figure and each cell's TTFT error.

`--on-loop` asks another question, on every prefill-heavy cell of both hosts (random
1,024-token prompts at c32 / c64): what if the tokeniser's work were the event loop's (as if
it held the loop, e.g. through the GIL) instead of a worker's beside it? Its cost for a
1,024-token prompt moves into the loop's per-request intake.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from servelab.sim.calibrate import evaluate
from servelab.sim.cost import Calibration, default_calibration

HERE = Path(__file__).resolve().parent
_SPEC = importlib.util.spec_from_file_location("check", HERE / "check.py")
assert _SPEC is not None and _SPEC.loader is not None
check = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(check)
FRONTEND = ("frontend_us_per_prompt_token", "frontend_us_per_output_token", "frontend_us_per_chunk",
            "frontend_us_per_request", "frontend_handoff_us", "frontend_tokenize_us")
FIRST_HOST = ("olmoe-1b-7b/", "gemma-3-12b/rnd_c32_1", "gemma-3-12b/rnd_c64_1", "gemma-3-12b/rnd_c64_2")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scales", nargs="*", type=float, default=[1.0, 1.5, 2.0, 3.0])
    ap.add_argument("--on-loop", action="store_true", help="the tokeniser on the event loop instead")
    a = ap.parse_args()
    base = default_calibration(check.GPU)
    if a.on_loop:
        on_loop(base)
        return
    cells = [t for t in check.targets(HERE / "results") if not t.name.startswith(FIRST_HOST)]
    for scale in a.scales:
        cal = base.model_copy(update={f: getattr(base, f) * scale for f in FRONTEND})
        errs: dict[str, list[tuple[str, float]]] = {}
        for t in cells:
            for _, metric, meas, sim in evaluate(t.options, [t], cal):
                if metric in check.METRICS:
                    errs.setdefault(metric, []).append((t.name, check.simcheck.error_pct(sim, meas)))
        print(f"x{scale:g}: " + "; ".join(
            f"{m} mean {sum(abs(e) for _, e in v) / len(v):.1f} % max {max(abs(e) for _, e in v):.1f} %"
            for m, v in errs.items()))
        print("  TTFT " + ", ".join(f"{n} {e:+.0f} %" for n, e in errs["mean_ttft_ms"]))


def on_loop(base: Calibration) -> None:
    """The prefill-heavy cells with the tokeniser's worker (as shipped) and on the loop."""
    cells = [t for t in check.targets(HERE / "results") if "/rnd_c32" in t.name or "/rnd_c64" in t.name]
    tokenise_us = base.frontend_tokenize_us + base.frontend_us_per_prompt_token * 1024
    moved = base.model_copy(update={"frontend_us_per_request": base.frontend_us_per_request + tokenise_us,
                                    "frontend_tokenize_us": 0.0, "frontend_us_per_prompt_token": 0.0})
    for label, cal in (("tokeniser beside the loop (shipped)", base), ("tokeniser on the loop", moved)):
        errs = [(t.name, check.simcheck.error_pct(sim, meas)) for t in cells
                for _, metric, meas, sim in evaluate(t.options, [t], cal) if metric == "mean_ttft_ms"]
        print(f"{label}: TTFT mean {sum(abs(e) for _, e in errs) / len(errs):.1f} %; "
              + ", ".join(f"{n} {e:+.0f} %" for n, e in errs))


if __name__ == "__main__":
    main()

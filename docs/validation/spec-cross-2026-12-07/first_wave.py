"""The first wave of each nospec cell: measured against simulated TTFT (a lead for issue 14).

    .venv/bin/python docs/validation/spec-cross-2026-12-07/first_wave.py > docs/validation/spec-cross-2026-12-07/first_wave.md

Every cell of `results/exp`'s nospec arm starts C requests at once. Per load: the TTFT of the
first C requests to start (min / mean / max, ms) and their prompt tokens, measured (the
cell's `start_times`, `ttfts`, `input_lens`) and simulated (the cell re-simulated with this
machine's profile and its GPU's shipped figures, as ../spec-perhost-2026-12-05/check.py does).
Then the cell's mean TTFT over all its requests: measured, simulated, and simulated with the
API server's costs set to zero (a diagnostic: every request of a burst reaches the engine at
once). Needs the kit's payload at /tmp/gpu-x/payload.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from servelab.experiment.simulation import measured_cells
from servelab.metrics.records import RequestRecord
from servelab.sim.calibrate import priced_with
from servelab.sim.cost import default_calibration
from servelab.sim.kernel_profile import KernelProfile
from servelab.sim.offline import simulate_prepared

HERE = Path(__file__).resolve().parent
EXP = HERE / "results" / "exp"


def _row(ttfts_ms: list[float], tokens: int) -> str:
    return f"{min(ttfts_ms):.0f} / {statistics.mean(ttfts_ms):.0f} / {max(ttfts_ms):.0f} | {tokens:,}"


# the API server's figures (servelab.sim.cost.H200_API_SERVER) set to zero
NO_FRONTEND = {k: 0.0 for k in ("frontend_tokenize_us", "frontend_us_per_prompt_token",
                                "frontend_us_per_request", "frontend_handoff_us")}


def main() -> None:
    profile = KernelProfile.load(HERE / "results" / "profile.json")
    targets = priced_with(measured_cells(EXP, arms=["nospec"]), profile)
    out = ["| load | measured TTFT min / mean / max, ms | prompt tokens | simulated TTFT min / mean / max, ms | prompt tokens |",
           "|---|---|---:|---|---:|"]
    means = ["| load | measured mean TTFT, ms | simulated | simulated, no API-server costs |", "|---|---:|---:|---:|"]
    for t in sorted(targets, key=lambda t: t.max_concurrency or 0):
        c = t.max_concurrency
        if c is None or c < 2:
            continue
        res = json.loads((EXP / "cells" / "nospec" / "sharegpt" / f"c{c}.json").read_text())["result"]
        first = sorted(zip(res["start_times"], res["ttfts"], res["input_lens"]))[:c]
        assert t.options is not None
        run, *_ = simulate_prepared(t.options, t.workload, t.seed, c, t.num_warmups)
        sim = sorted((r for r in run.records if not r.error and not r.warmup), key=lambda r: r.send_s)[:c]
        out.append(f"| c{c} | {_row([f[1] * 1e3 for f in first], sum(f[2] for f in first))} | "
                   f"{_row([r.ttft_ms for r in sim], sum(r.prompt_len for r in sim))} |")
        bare = default_calibration(t.options.gpu).model_copy(update=NO_FRONTEND)
        direct, *_ = simulate_prepared(dataclasses.replace(t.options, calibration=bare), t.workload, t.seed, c,
                                       t.num_warmups)
        means.append(f"| c{c} | {res['mean_ttft_ms']:.0f} | {_mean_ttft(run.records):.0f} | "
                     f"{_mean_ttft(direct.records):.0f} |")
    print("\n".join(out + [""] + means))


def _mean_ttft(records: list[RequestRecord]) -> float:
    return statistics.mean(r.ttft_ms for r in records if not r.error and not r.warmup)


if __name__ == "__main__":
    main()

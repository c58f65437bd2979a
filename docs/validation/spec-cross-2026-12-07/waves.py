"""How this run's closed loops refill, and what that does to the report's payoff (issue 17).

    .venv/bin/python docs/validation/spec-cross-2026-12-07/waves.py > docs/validation/spec-cross-2026-12-07/waves.md

1. Per arm and load of `results/exp`: the requests' start times, sorted and cut into groups
   of C (one wave each where the loop runs in waves), and the time each group after the
   first spans, ms. A loop in waves starts each group within a few steps.
2. The low-acceptance arm's payoff at each load (`fit/host.json`, `results/profile.json`)
   under three pricings of the refill, against the measured speed-up: waves for both arms
   (what the report does for these cells), Poisson prefills at the mean prompt (what it did
   before), and Poisson prefills averaged over the prompts' deciles (a diagnostic: both arms'
   steps priced at each decile of the cells' prompt lengths, then averaged).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from servelab.experiment.spec import ExperimentSpec
from servelab.report.data import load_experiment
from servelab.report.speculation import payoff_model, pooled_acceptance, refill_of
from servelab.sim.spec_payoff import Refill

HERE = Path(__file__).resolve().parent
EXP = HERE / "results" / "exp"
ARM, BASE, WORKLOAD = "ngram-k6-low", "nospec", "sharegpt"


def spreads() -> list[str]:
    out = ["| arm | load | spans of the 2nd, 3rd, 4th groups of C starts, ms |", "|---|---|---|"]
    for arm in (BASE, ARM):
        for path in sorted((EXP / "cells" / arm / WORKLOAD).glob("c*.json"), key=lambda p: int(p.stem[1:])):
            c = int(path.stem[1:])
            if c == 1:
                continue  # a group of one request spans nothing
            starts = sorted(json.loads(path.read_text())["result"]["start_times"])
            groups = [starts[i * c:(i + 1) * c] for i in range(1, len(starts) // c)]
            out.append(f"| {arm} | c{c} | " + ", ".join(f"{(g[-1] - g[0]) * 1e3:.0f}" for g in groups) + " |")
    return out


def payoffs() -> list[str]:
    data = load_experiment(EXP)
    stored = ExperimentSpec.from_stored(data.manifest["spec"])
    spec = stored.model_copy(update={
        "model": stored.model.model_copy(update={"path": None}),
        "sim": stored.sim.model_copy(update={"calibration": HERE / "fit" / "host.json",
                                             "profile": HERE / "results" / "profile.json"})})
    cells = [c for c in data.cells if c.arm == ARM and c.workload == WORKLOAD]
    model = payoff_model(spec, ARM, BASE, data.manifest["gpu"], pooled_acceptance(cells))
    context = sum(c.mean_input_len + c.mean_output_len / 2 for c in cells) / len(cells)
    waves = refill_of(cells)
    assert waves is not None and waves.waves
    mean = Refill(waves.prompt_tokens, waves.cached_tokens, waves.output_tokens)
    lens = sorted(n for p in (EXP / "cells" / BASE / WORKLOAD).glob("c*.json")
                  for n in json.loads(p.read_text())["result"]["input_lens"])
    deciles = [lens[int(len(lens) * (i + 0.5) / 10)] for i in range(10)]
    by_decile = [Refill(q * waves.prompt_tokens / mean_len(lens), q * waves.cached_tokens / mean_len(lens),
                        waves.output_tokens) for q in deciles]
    k, t = model.k, model.tokens_per_step(model.k)
    out = [f"Prompt deciles (tokens): {', '.join(map(str, deciles))}; mean {mean_len(lens):.0f}.", "",
           "| load | measured | waves | Poisson, mean prompt | Poisson, prompt deciles |", "|---|---:|---:|---:|---:|"]
    for c in sorted(cells, key=lambda x: x.concurrency or 0):
        b = data.cell(BASE, WORKLOAD, c.load)
        assert b is not None and c.concurrency is not None
        n = c.concurrency

        def speedup(refills: list[Refill]) -> float:
            base = statistics.mean(model.base_step_s(n, context, r) for r in refills)
            spec_s = statistics.mean(model.spec_step_s(n, context, k, r) for r in refills) / t
            return base / spec_s

        out.append(f"| {c.load} | x{c.output_tok_s / b.output_tok_s:.3f} | x{speedup([waves]):.3f} | "
                   f"x{speedup([mean]):.3f} | x{speedup(by_decile):.3f} |")
    return out


def mean_len(lens: list[int]) -> float:
    return sum(lens) / len(lens)


def main() -> None:
    print("\n".join(["# Waves in this run's loops", "", *spreads(), "", "## The payoff under three refills", "",
                     *payoffs()]))


if __name__ == "__main__":
    main()

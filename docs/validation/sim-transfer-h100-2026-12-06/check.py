"""Transfer check on a GPU no figure was fitted on: real vLLM 0.25.1 cells of H100 SXMs
(issue 14), re-simulated on the shipped H100 kernel profile
(src/servelab/data/profiles/h100-sxm.json; since 2026-12-07 the fine-grid one, measured on
another H100) with the shipped residual, which was fitted on H200 cells of two other models.

    .venv/bin/python docs/validation/sim-transfer-h100-2026-12-06/check.py [--out NAME]
        [--profile FILE] [--cal FILE [--fit]]

Reads results/<model>/ (the served directory's config.json and `servelab bench` cells:
rnd_c1, rnd_c32_N, rnd_c64_N = random 1024/128 at 1, 32, 64 in flight, N the draw, each its
own seed; sg_r10 = ShareGPT at 10 req/s with 10 in flight; sg_c64 = ShareGPT at 64 in
flight), re-simulates each with its own seed, prompts, load and warm-ups, and writes
NAME.md and NAME.json (default `table`; run from a checkout without the H100 profile,
the same script gives the datasheet's figures). Per cell with several draws it also gives
the error on their mean and the draws' spread.

--profile prices the H100 with that kernel profile instead of the shipped one, and --cal reads
(with --fit: writes) the H100 fit at that path instead of this folder's cal-h100.json. This
folder's tables are of the H100 profile shipped on 2026-12-06, which
../sim-grid-2026-12-07 replaced; that file is `git show 3fec5cc:src/servelab/data/profiles/h100-sxm.json`.

The cells record the tokenizer and ShareGPT file at their device paths: link the kit's
payload there (`ln -sfn $PWD/.gpu/dl/payload /tmp/gpu-x/payload`, after
`bash ../shared/gpu/build.sh .gpu`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from servelab.plan import EngineArgs
from servelab.sim.calibrate import MeasuredCell, calibrate, evaluate, leave_one_model_out
from servelab.sim.cost import SHIPPED_PROFILES, Calibration, default_calibration
from servelab.sim.kernel_profile import KernelProfile
from servelab.sim.setup import SimOptions
from servelab.storage import write_atomic

HERE = Path(__file__).resolve().parent
GPU = "H100-SXM"
# The H100 residual is fitted on the same two models as the H200's (../sim-transfer-2026-12-01);
# every other model is held out of it.
FIT_MODELS = ("qwen3-4b", "llama-3.1-8b")
SHIPPED = "shipped (H200 fit)"
FITTED = "H100 fit"
# The 12-01 transfer check reads cells the same way (cell names, datasets, warm-ups): one
# reader, its `measured_cell`.
_SPEC = importlib.util.spec_from_file_location(
    "simcheck", HERE.parent / "sim-transfer-2026-12-01" / "simcheck.py")
assert _SPEC is not None and _SPEC.loader is not None
simcheck = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(simcheck)
METRICS = simcheck.METRICS


def targets(results: Path, gpu: str = GPU, profile: KernelProfile | None = None) -> list[MeasuredCell]:
    """Every measured cell under `results` (each draw its own), on its own served model,
    simulated on `gpu` (priced with `profile`; None: the GPU's shipped one)."""
    out = []
    for mdir in sorted(p for p in results.iterdir() if (p / "config.json").exists()):
        opts = SimOptions(str(mdir / "config.json"), gpu, None, EngineArgs(), profile=profile)
        for f in sorted(mdir.glob("*.json")):
            if f.name == "config.json":
                continue
            got = simcheck.measured_cell(f, f"{mdir.name}/{f.stem}", opts)
            if got is not None:
                out.append(got)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="table", help="NAME of the NAME.md / NAME.json written here")
    ap.add_argument("--fit", action="store_true",
                    help="fit the H100 residual on FIT_MODELS' cells first (writes cal-h100.json)")
    ap.add_argument("--max-evals", type=int, default=80)
    ap.add_argument("--leave-one-model-out", action="store_true",
                    help="fit on every model but one, for each model, and report that one's error "
                         "(writes lomo.md) instead of the table")
    ap.add_argument("--profile", type=Path, help="price with this kernel profile instead of the shipped one")
    ap.add_argument("--cal", type=Path, default=HERE / "cal-h100.json",
                    help="the H100 fit's file (read; written with --fit)")
    a = ap.parse_args()
    profile = KernelProfile.load(a.profile) if a.profile else None
    cells = targets(HERE / "results", GPU, profile)
    base = SimOptions(str(HERE / "results" / FIT_MODELS[0] / "config.json"), GPU, None, EngineArgs(),
                      profile=profile)
    if a.leave_one_model_out:
        write_atomic(HERE / "lomo.md", lomo(base, cells, a.max_evals).encode())
        return
    cal_path = a.cal
    if a.fit or not cal_path.exists():
        fit = calibrate(base, [t for t in cells if _model(t.name) in FIT_MODELS],
                        max_evals=a.max_evals, progress=print)
        print("\n".join(fit.report_lines()))
        fit.calibration.save(cal_path)
    rows = [*cell_rows(cells, default_calibration(GPU), SHIPPED),
            *cell_rows(cells, Calibration.load(cal_path), FITTED)]
    write_atomic(HERE / f"{a.out}.json", (json.dumps(rows, indent=1) + "\n").encode())
    how = (f"the kernel profile {a.profile}" if a.profile else "the shipped H100 profile"
           if GPU in SHIPPED_PROFILES else "its datasheet (no H100 profile shipped)")
    text = render(rows, how, a.cal.name)
    write_atomic(HERE / f"{a.out}.md", text.encode())
    print(text)


def cell_rows(cells: list[MeasuredCell], cal: Calibration, label: str) -> list[dict]:
    """One row per cell and figure of METRICS, each cell simulated on its own model under
    `cal` (residual `label`); a cell of FIT_MODELS is "fit", any other "held out"."""
    rows = []
    for t in cells:
        for _, metric, meas, sim in evaluate(t.options, [t], cal):
            if metric in METRICS:
                rows.append({"cell": t.name, "metric": metric, "residual": label,
                             "role": "fit" if _model(t.name) in FIT_MODELS else "held out",
                             "measured": meas, "simulated": sim,
                             "error_pct": simcheck.error_pct(sim, meas)})
    return rows


def lomo(base: SimOptions, cells: list[MeasuredCell], max_evals: int) -> str:
    """Leave-one-model-out: per model, the residual fitted on the other models' H100 cells
    and its error on this model's (throughput, mean TTFT, mean TPOT)."""
    got = leave_one_model_out(base, cells, max_evals, progress=print)
    lines = ["| held-out model | fitted on | throughput mean / max | TTFT mean / max | TPOT mean / max |",
             "|---|---:|---|---|---|"]
    for model, errs in got.items():
        parts = []
        for m in METRICS:
            e = [abs(v) for k, v in errs.items() if k.endswith(":" + m)]
            parts.append(f"{sum(e) / len(e):.1f} / {max(e):.1f} %" if e else "-")
        lines.append(f"| {Path(model).parent.name} | {len(got) - 1} models | " + " | ".join(parts) + " |")
    return "\n".join(lines) + "\n"


def _model(name: str) -> str:
    return name.split("/")[0]


def _group(name: str) -> str:
    """rnd_c64_2 -> rnd_c64: the draws of one cell."""
    model, cell = name.split("/")
    parts = cell.split("_")
    return f"{model}/{'_'.join(parts[:2])}"


def render(rows: list[dict], how: str, cal: str) -> str:
    """The tables of `rows`, titled with what priced the H100 (`how`) and the H100 fit's file."""
    lines = [f"H100-SXM priced from {how}. Residuals: the shipped one (`default_calibration('{GPU}')`, "
             f"fitted on H200 cells) and the H100 fit ({cal}, fitted on the H100 cells of "
             f"{' and '.join(FIT_MODELS)}).", ""]
    for label in (SHIPPED, FITTED):
        lines += _cell_table([r for r in rows if r["residual"] == label], label)
    lines += ["| residual | set | metric | cells | mean abs error | max abs error | within 10 % | within 25 % |",
              "|---|---|---|---:|---:|---:|---:|---:|"]
    for label in (SHIPPED, FITTED):
        for role in ("fit", "held out"):
            sel = [r for r in rows if r["residual"] == label and r["role"] == role]
            lines += simcheck.summary_rows(f"{label} | {role}", sel, (10, 25))
    return "\n".join(lines) + "\n"


def _cell_table(rows: list[dict], label: str) -> list[str]:
    """Measured vs simulated per cell under one residual, then the cells drawn more than once."""
    lines = [f"### Residual: {label}", "",
             "| cell | role | out tok/s meas | sim | err | TTFT ms meas | sim | err | TPOT ms meas | sim | err |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(r["cell"], r["metric"]): r for r in rows}
    role = {r["cell"]: r["role"] for r in rows}
    order = sorted({r["cell"] for r in rows}, key=lambda c: (role[c] != "fit", c))
    for cell in order:
        parts = [cell, role[cell]]
        for m in METRICS:
            r = by.get((cell, m))  # (a result without the figure leaves it blank)
            parts += ([f"{r['measured']:,.1f}", f"{r['simulated']:,.1f}", f"{r['error_pct']:+.1f} %"]
                      if r else ["", "", ""])
        lines.append("| " + " | ".join(parts) + " |")
    lines += ["", "Cells drawn more than once: error of the simulated mean on the measured mean, "
              "and the draws' spread ((max - min) / mean of the measured).", "",
              "| cell | draws | metric | measured mean | simulated mean | err | spread |",
              "|---|---:|---|---:|---:|---:|---:|"]
    groups: dict[str, list[str]] = {}
    for cell in order:
        groups.setdefault(_group(cell), []).append(cell)
    for g, members in groups.items():
        if len(members) < 2:
            continue
        for m in METRICS:
            if any((c, m) not in by for c in members):
                continue
            meas = [by[(c, m)]["measured"] for c in members]
            sim = [by[(c, m)]["simulated"] for c in members]
            mm, sm = sum(meas) / len(meas), sum(sim) / len(sim)
            lines.append(f"| {g} | {len(members)} | {m} | {mm:,.1f} | {sm:,.1f} | {simcheck.error_pct(sm, mm):+.1f} % | "
                         f"{100 * (max(meas) - min(meas)) / mm:.1f} % |")
    return lines + [""]


if __name__ == "__main__":
    main()

"""One report from one experiment directory: tables, diagnosis, plots; written as
`report.md`, `report.html` and `plots/*.png` in the directory (atomically)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from servelab.report.data import ExperimentData, load_experiment
from servelab.experiment.spec import ExperimentSpec
from servelab.report.diagnose import ArmDiagnosis, diagnose_arms
from servelab.report.html import render_html
from servelab.report.plots import Plot, make_plots
from servelab.report.speculation import speculation_section
from servelab.report.tables import Table, all_tables
from servelab.storage import write_atomic


@dataclass(frozen=True, slots=True)
class Report:
    title: str
    intro: tuple[str, ...]
    tables: tuple[Table, ...]
    diagnoses: tuple[ArmDiagnosis, ...]
    plots: tuple[Plot, ...]
    speculation: tuple[str, ...] = ()  # advice lines on speculative arms

    def to_markdown(self, with_plots: bool = True) -> str:
        parts = [f"# {self.title}", "", *self.intro, ""]
        parts += [t.to_markdown() + "\n" for t in self.tables]
        if self.diagnoses:
            parts += ["## Diagnosis", ""] + [d.to_markdown() + "\n" for d in self.diagnoses]
        if self.speculation:
            parts += ["## Speculative decoding", ""] + [f"- {x}" for x in self.speculation] + [""]
        if with_plots and self.plots:
            parts += ["## Plots", ""] + [f"![{p.title}](plots/{p.name}.png)" for p in self.plots]
        return "\n".join(parts) + "\n"

    def to_html(self) -> str:
        return render_html(self.title, list(self.intro), list(self.tables), list(self.diagnoses),
                           list(self.plots), list(self.speculation))


def _intro(data: ExperimentData) -> tuple[str, ...]:
    m = data.manifest
    spec = m["spec"]
    engine = spec["engine"]
    if engine == "sim":
        engine += f" ({spec.get('sim', {}).get('mode', 'offline')}, simulated {m.get('gpu')})"
    versions = {k: v for k, v in (m.get("engine_versions") or {}).items() if v}
    done = len(data.cells)
    lines = [
        f"Model {spec['model']['name']}, engine {engine}, baseline arm {data.baseline}; "
        f"{done} cells measured; servelab {m.get('servelab_version')}.",
    ]
    if versions:
        lines.append("Engine versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".")
    return tuple(lines)


def _speculation(data: ExperimentData, calibration: Path | None,
                 profile: Path | None) -> tuple[list[Table], list[str]]:
    """The speculative-decoding section, when some arm speculates; its simulated payoff
    under `calibration` (the host's figures from `sim calibrate`) and `profile` (a kernel
    profile from `sim profile`, e.g. measured on the machine that ran the cells) where
    given, else the spec's `sim.calibration` and `sim.profile`, else the GPU's shipped ones."""
    if not any(a.spec.get("speculative") for a in data.arms):
        return [], []
    try:
        spec = ExperimentSpec.from_stored(data.manifest["spec"])
    except ValidationError as exc:
        return [], [f"speculative arms: the manifest's spec does not validate "
                    f"({exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}), no payoff computed."]
    given = {k: v for k, v in (("calibration", calibration), ("profile", profile)) if v is not None}
    if given:
        spec = spec.model_copy(update={"sim": spec.sim.model_copy(update=given)})
    tables, lines = speculation_section(data, spec, data.manifest.get("gpu"))
    return tables, [f"The simulated payoff uses the {k} {v}." for k, v in given.items()] + lines


def build_report(root: Path, plots: bool = True, calibration: Path | None = None,
                 profile: Path | None = None) -> Report:
    """The report of the experiment in `root` (`calibration`, `profile`: the simulator's
    figures and kernel profile for the speculative payoff, see `_speculation`)."""
    data = load_experiment(root)
    spec_tables, spec_lines = _speculation(data, calibration, profile)
    return Report(
        title=f"servelab report: {data.manifest['spec']['name']}",
        intro=_intro(data),
        tables=tuple(all_tables(data) + spec_tables),
        diagnoses=tuple(diagnose_arms(data)),
        plots=tuple(make_plots(data)) if plots else (),
        speculation=tuple(spec_lines),
    )


def write_report(root: Path, report: Report) -> list[Path]:
    """Write report.md, report.html and the PNGs into `root`; returns the paths."""
    root = Path(root)
    paths = []
    for p in report.plots:
        path = root / "plots" / f"{p.name}.png"
        write_atomic(path, p.png)
        paths.append(path)
    for name, text in (("report.md", report.to_markdown()), ("report.html", report.to_html())):
        write_atomic(root / name, text.encode("utf-8"))
        paths.append(root / name)
    return paths

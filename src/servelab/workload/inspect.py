"""Inspecting a workload: length statistics, histograms, samples and a plot.

Statistics use numpy's definitions, as `vllm bench serve` does: population standard
deviation (ddof=0) and linearly interpolated percentiles.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from servelab.errors import ServelabError
from servelab.storage import write_atomic
from servelab.workload.datasets import Workload
from servelab.workload.tokenizer import TokenizerInfo

SCHEMA = "servelab.data.inspect/1"


@dataclass(frozen=True, slots=True)
class LengthStats:
    """Distribution of a length in tokens over the requests."""

    min: int
    max: int
    mean: float
    median: float
    std: float
    p90: float
    p99: float
    total: int

    @classmethod
    def of(cls, values: list[int]) -> LengthStats:
        a = np.asarray(values, dtype=np.float64)
        return cls(
            min=int(a.min()), max=int(a.max()), mean=float(a.mean()),
            median=float(np.median(a)), std=float(a.std()),
            p90=float(np.percentile(a, 90)), p99=float(np.percentile(a, 99)),
            total=int(a.sum()),
        )


@dataclass(frozen=True, slots=True)
class HistogramBin:
    """Requests whose length lies in [lo, hi) tokens (the last bin includes hi)."""

    lo: float
    hi: float
    count: int


@dataclass(frozen=True, slots=True)
class WorkloadSummary:
    """What `servelab data inspect` reports about one workload."""

    dataset: str
    requests: int
    seed: int
    tokenizer: TokenizerInfo
    notes: list[str]
    prompt_len: LengthStats
    output_len: LengthStats
    sessions: int | None = None  # multi-turn: how many conversations the requests form
    images: int = 0  # random-mm: images attached in all
    own_schedule_s: float | None = None  # a timed trace on its clock: last send time (s)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict with stable keys (`schema` names its version)."""
        return {"schema": SCHEMA, **asdict(self)}


def summarize(workload: Workload) -> WorkloadSummary:
    """Length statistics of `workload`'s prompts and outputs."""
    if not workload.requests:
        raise ServelabError("the workload has no requests")
    return WorkloadSummary(
        dataset=workload.dataset_name,
        requests=len(workload.requests),
        seed=workload.seed,
        tokenizer=workload.tokenizer,
        notes=list(workload.notes),
        prompt_len=LengthStats.of([r.prompt_len for r in workload.requests]),
        output_len=LengthStats.of([r.output_len for r in workload.requests]),
        sessions=len(workload.sessions) if workload.sessions is not None else None,
        images=sum(len(r.images) for r in workload.requests),
        own_schedule_s=workload.arrival_s[-1] if workload.arrival_s else None,
    )


def histogram(values: list[int], bins: int) -> list[HistogramBin]:
    """`bins` equal-width bins over [min, max] (numpy.histogram's edges)."""
    counts, edges = np.histogram(np.asarray(values), bins=bins)
    return [HistogramBin(float(edges[i]), float(edges[i + 1]), int(c)) for i, c in enumerate(counts)]


def save_samples(workload: Workload, path: Path) -> None:
    """Write the requests as JSON Lines (loadable again with --dataset-name jsonl, and by
    `vllm bench serve --dataset-name custom`, which reads `prompt` and `output_tokens`).

    Multi-turn rows add `session_id` and `turn` (their `messages` are the turn's own user
    message; the history is only known at run time), timed-trace rows `send_s`, random-mm
    rows the number of `images`."""

    turn_of = {t.index: (s.session_id, k) for s in workload.sessions or ()
               for k, t in enumerate(s.turns)}
    lines = []
    for r in workload.requests:
        row: dict[str, object] = {"index": r.index}
        if r.index in turn_of:
            row["session_id"], row["turn"] = turn_of[r.index]
        if workload.arrival_s is not None:
            row["send_s"] = workload.arrival_s[r.index]
        if r.prompt is not None:
            row["prompt"] = r.prompt
        else:
            assert r.messages is not None
            row["messages"] = [{"role": m.role, "content": m.content} for m in r.messages]
        row["prompt_len"] = r.prompt_len
        row["output_len"] = r.output_len
        row["output_tokens"] = r.output_len  # vLLM's custom dataset's name for it
        if r.images:
            row["images"] = len(r.images)  # how many, not the pixels (megabytes of base64)
        lines.append(json.dumps(row, ensure_ascii=False) + "\n")
    write_atomic(path.expanduser(), "".join(lines).encode("utf-8"))


def plot_lengths(workload: Workload, path: Path, bins: int = 40) -> None:
    """Save histograms of prompt and output lengths as an image (format from the suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in (
        (axes[0], "prompt_len", "prompt length (tokens)"),
        (axes[1], "output_len", "output length (tokens)"),
    ):
        values = [getattr(r, key) for r in workload.requests]
        ax.hist(values, bins=bins, color="#4c72b0")
        ax.axvline(float(np.mean(values)), color="#c44e52", linestyle="--", label="mean")
        ax.axvline(float(np.median(values)), color="#55a868", linestyle=":", label="median")
        ax.set_xlabel(label)
        ax.set_ylabel("requests")
        ax.legend()
    fig.suptitle(
        f"{workload.dataset_name}: {len(workload.requests)} requests, seed {workload.seed}, "
        f"tokenizer {workload.tokenizer.name}"
    )
    fig.tight_layout()
    fmt = path.suffix.lstrip(".").lower() or "png"
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=fmt, dpi=100)
    except ValueError as exc:  # matplotlib: unsupported format
        raise ServelabError(f"--plot {path}: {exc}") from None
    finally:
        plt.close(fig)
    write_atomic(path.expanduser(), buf.getvalue())

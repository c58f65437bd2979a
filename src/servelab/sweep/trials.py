"""The tuner's trials on disk: one JSON file per configuration, written atomically when the
trial ends, so an interrupted search resumes where it stopped (done trials are read back,
not re-run). `search.json` records the settings; a different search refuses the folder."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from servelab.errors import ServelabError
from servelab.storage import write_json_atomic
from servelab.sweep.space import Value


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    """One measured level of a trial: per-user tokens/s (1000 / mean TPOT), output tokens/s
    per GPU, the level, whether it met the SLO."""

    per_user_tok_s: float
    tok_s_per_gpu: float
    level: float
    meets_slo: bool


@dataclass(frozen=True, slots=True)
class Trial:
    """One configuration's outcome. `status` ``ok`` or ``infeasible`` (the planner or the
    engine refused it, or it crashed: `reason`). `objective` is the goodput (req/s) or
    output throughput (tok/s) at the SLO capacity; 0 when no level met the SLO."""

    params: dict[str, Value]
    status: str
    objective: float
    reason: str
    capacity_level: float | None
    output_tok_s: float | None
    request_goodput_rps: float | None
    levels_measured: int
    points: tuple[ParetoPoint, ...]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["points"] = [asdict(p) for p in self.points]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Trial:
        return cls(**{**d, "points": tuple(ParetoPoint(**p) for p in d["points"])})


def trial_key(params: dict[str, Value]) -> str:
    """A file-safe name: the sorted params, or ``defaults`` for the engine's defaults."""
    if not params:
        return "defaults"
    text = ",".join(f"{k}={params[k]}" for k in sorted(params))
    safe = "".join(c if c.isalnum() or c in "._=-" else "_" for c in text.replace(",", "__"))
    return safe if len(safe) <= 150 else hashlib.sha256(text.encode()).hexdigest()[:20]


class TrialStore:
    """`root/search.json` and `root/trials/<key>.json`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def bind(self, settings: dict[str, Any]) -> None:
        """Record the search's settings, or refuse a folder holding a different search."""
        path = self.root / "search.json"
        if path.exists():
            try:
                old = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ServelabError(f"{path}: unreadable ({exc})") from None
            if old != json.loads(json.dumps(settings)):
                raise ServelabError(f"{self.root} holds trials of a different search (target, "
                                    "workload, SLO or space differ); choose another --out")
            return
        write_json_atomic(path, settings)

    def path(self, params: dict[str, Value]) -> Path:
        return self.root / "trials" / f"{trial_key(params)}.json"

    def get(self, params: dict[str, Value]) -> Trial | None:
        p = self.path(params)
        if not p.exists():
            return None
        try:
            return Trial.from_json(json.loads(p.read_text()))
        except (OSError, json.JSONDecodeError, TypeError) as exc:
            raise ServelabError(f"{p}: not a trial file ({exc}); delete it to re-run the trial") from None

    def put(self, trial: Trial) -> None:
        write_json_atomic(self.path(trial.params), trial.to_json())

    def all(self) -> list[Trial]:
        d = self.root / "trials"
        return [Trial.from_json(json.loads(p.read_text())) for p in sorted(d.glob("*.json"))] if d.exists() else []

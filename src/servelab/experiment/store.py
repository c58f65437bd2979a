"""The results store: one directory per experiment, every file written atomically.

    DIR/manifest.json                       servelab version, spec, probe, planner figures,
                                            engine versions (rewritten as arms start)
    DIR/arms/<arm>/status.json              started | done | failed (+ reason), startup
                                            figures of each replica, engine version
    DIR/arms/<arm>/logs/                    engine (and router) logs
    DIR/cells/<arm>/<workload>/<load>.json  one finished cell (`CellRecord`): result JSON
                                            (with per-request details), server metrics, the
                                            arm's memory lines

A file is written to a temporary name in its directory and renamed over the target
(`os.replace`), so a run killed at any moment leaves either the old file, the new one, or a
stray temporary file; `ExperimentStore.open` removes strays. A cell file exists only for a
finished cell, which is what makes resuming exact: a cell is done iff its file exists.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from servelab.errors import ServelabError
from servelab.experiment.cellrecord import CellRecord
from servelab.storage import TMP_SUFFIX, read_json, write_json_atomic

ArmState = Literal["started", "done", "failed"]


def read_cell_file(path: Path) -> CellRecord:
    """The cell record in `path`; `ServelabError` naming the file (unreadable, not JSON,
    not a cell file, the key that is wrong)."""
    return CellRecord.parse(read_json(path), str(path))


@dataclass(frozen=True, slots=True)
class ArmStatus:
    """What happened to an arm's engine: `state`, the failure `reason`, the engine version,
    each replica's parsed startup figures (`StartupInfo` dumps; None: none parsed) and
    `engine_of`, the arm whose launched engine this arm ran on (None: its own)."""

    state: ArmState
    reason: str | None = None
    version: str | None = None
    startups: tuple[dict[str, Any] | None, ...] = ()
    engine_of: str | None = None

    def but(self, state: ArmState, reason: str | None = None) -> ArmStatus:
        """This status in another state (the figures kept)."""
        return dataclasses.replace(self, state=state, reason=reason)

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "reason": self.reason, "version": self.version,
                "startups": list(self.startups), "engine_of": self.engine_of}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArmStatus:
        return cls(state=data["state"], reason=data.get("reason"), version=data.get("version"),
                   startups=tuple(data.get("startups") or ()), engine_of=data.get("engine_of"))


class ExperimentStore:
    """One experiment directory (see the module docstring for its layout)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def open(cls, root: Path) -> ExperimentStore:
        """Create `root` if needed and remove temporary files a killed run left behind."""
        store = cls(root)
        store.root.mkdir(parents=True, exist_ok=True)
        for stray in store.root.rglob(f".*{TMP_SUFFIX}"):
            stray.unlink(missing_ok=True)
        return store

    # -- paths ---------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def arm_dir(self, arm: str) -> Path:
        return self.root / "arms" / arm

    def log_dir(self, arm: str) -> Path:
        return self.arm_dir(arm) / "logs"

    def cell_path(self, arm: str, workload: str, load: str) -> Path:
        return self.root / "cells" / arm / workload / f"{load}.json"

    # -- manifest ------------------------------------------------------------------------
    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json_atomic(self.manifest_path, manifest)

    def read_manifest(self) -> dict[str, Any]:
        if not self.manifest_path.exists():
            raise ServelabError(f"{self.root} holds no experiment (no manifest.json)")
        return read_json(self.manifest_path)

    # -- arms ----------------------------------------------------------------------------
    def write_arm_status(self, arm: str, status: ArmStatus) -> None:
        write_json_atomic(self.arm_dir(arm) / "status.json", status.to_json())

    def read_arm_status(self, arm: str) -> ArmStatus | None:
        path = self.arm_dir(arm) / "status.json"
        return ArmStatus.from_json(read_json(path)) if path.exists() else None

    # -- cells ---------------------------------------------------------------------------
    def has_cell(self, arm: str, workload: str, load: str) -> bool:
        return self.cell_path(arm, workload, load).exists()

    def write_cell(self, record: CellRecord) -> Path:
        """Store one finished cell (atomically; its file says the cell is done)."""
        c = record.cell
        path = self.cell_path(c.arm, c.workload, c.load)
        write_json_atomic(path, record.to_json())
        return path

    def read_cell(self, arm: str, workload: str, load: str) -> CellRecord | None:
        path = self.cell_path(arm, workload, load)
        return read_cell_file(path) if path.exists() else None

    def cells(self) -> list[tuple[Path, CellRecord]]:
        """Every finished cell with its file, sorted by path."""
        return [(path, read_cell_file(path)) for path in self.cell_files()]

    def cell_files(self) -> list[Path]:
        """Every finished cell's file, sorted."""
        base = self.root / "cells"
        return sorted(p for p in base.glob("*/*/*.json")) if base.exists() else []

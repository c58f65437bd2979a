"""The stored cell: what one measured cell of an experiment is, as a typed record.

`DIR/cells/<arm>/<workload>/<load>.json` holds one `CellRecord`: which cell it is
(`CellKey`: arm, workload, load, seed, traffic), the bench result (vLLM's keys, read as a
`StoredResult`), each replica's server series, the arm's startup (memory) figures, the
roofline step at the batch the engine ran, the measurement's extras, the workload's notes
and, on a Ray cluster, where it ran (`Placement`). Unknown keys are refused, so a file
that is not a cell says so by name. The store writes and reads it (`ExperimentStore`);
everything that reads cells (the report, the export, the simulator's calibration on an
experiment) reads this record, never the raw JSON.

Migration on read: cells written before a section existed lack it (servers, roofline,
extras, notes, engine memory: empty; no placement); validation copies carry `stripped`
(the per-request lists left out to keep the repository small).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.errors import ServelabError, first_problem
from servelab.metrics.result_file import StoredResult
from servelab.rate import RequestRate


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CellKey(_Record):
    """Which cell, and the traffic it was measured with: the rate in requests/s (inf for a
    concurrency load or all-at-once), the client's concurrency cap, the warm-ups before
    it."""

    arm: str
    workload: str
    load: str
    seed: int
    num_prompts: int
    concurrency: int | None = None
    request_rate: RequestRate = math.inf
    max_concurrency: int | None = None
    burstiness: float = 1.0
    num_warmups: int = 0


class Placement(_Record):
    """Where a cell ran on a Ray cluster: the node ids of its arm's bundles, which
    placement of the arm it was (1 = the first), and the placement group's strategy."""

    node_ids: list[str]
    attempt: int = Field(ge=1)
    strategy: str


class CellRecord(_Record):
    """One cell file (see the module docstring). `servers`, `engine_memory`, `roofline`
    and `extras` hold other modules' records as they serialise themselves
    (`ServerSeries.to_json_dict`, `StartupInfo`, `ArmPlanner.decode_step`, the
    measurement's extras); their own readers type them."""

    cell: CellKey
    result: StoredResult
    servers: list[dict[str, Any]] = Field(default_factory=list)
    engine_memory: list[dict[str, Any] | None] = Field(default_factory=list)
    roofline: dict[str, Any] | None = None
    extras: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    placement: Placement | None = None
    stripped: list[str] | None = None

    @property
    def name(self) -> str:
        """arm/workload/load."""
        return f"{self.cell.arm}/{self.cell.workload}/{self.cell.load}"

    def placed(self, placement: Placement) -> CellRecord:
        """This record with where it ran."""
        return self.model_copy(update={"placement": placement})

    def to_json(self) -> dict[str, Any]:
        """The file's JSON object (the result's keys as it had them; rates as vLLM writes
        them; no placement key for a cell that ran locally)."""
        out: dict[str, Any] = {"cell": self.cell.model_dump(mode="json"), "result": self.result.to_json()}
        for key in ("servers", "engine_memory", "roofline", "extras", "notes"):
            out[key] = getattr(self, key)
        if self.placement is not None:
            out["placement"] = self.placement.model_dump(mode="json")
        if self.stripped is not None:
            out["stripped"] = list(self.stripped)
        return out

    @classmethod
    def parse(cls, data: object, where: str) -> CellRecord:
        """`data` (a cell file's JSON) as a record; `ServelabError` naming `where` and the
        first key that is wrong."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ServelabError(f"{where}: not a servelab cell file: {first_problem(exc)}") from None


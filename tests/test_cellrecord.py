"""The stored cell as a typed record: every committed experiment's cells load (the
migration on read) and write back what they held; a file that is not a cell is refused by
name; the request rate meets JSON in one place."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import BaseModel

from servelab.errors import ServelabError
from servelab.experiment.cellrecord import CellRecord
from servelab.experiment.store import ExperimentStore, read_cell_file
from servelab.metrics.result_file import StoredResult
from servelab.rate import RequestRate, rate_from_json, rate_to_json

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(p for p in (ROOT / "docs" / "validation").rglob("cells/*/*/*.json"))


def test_there_are_committed_cells_to_check() -> None:
    # The experiments under docs/validation (H200 runs, the Ray run, the spec-decode run).
    assert len(COMMITTED) >= 100
    assert any("placement" in json.loads(p.read_text()) for p in COMMITTED)
    assert any("stripped" in json.loads(p.read_text()) for p in COMMITTED)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(ROOT / "docs" / "validation")))
def test_every_committed_cell_loads_and_writes_back_what_it_held(path: Path) -> None:
    raw = json.loads(path.read_text())
    record = read_cell_file(path)
    assert record.to_json() == raw
    assert CellRecord.parse(record.to_json(), "again") == record
    assert record.result.completed == raw["result"]["completed"]
    assert record.cell.request_rate == (math.inf if raw["cell"]["request_rate"] == "inf"
                                        else raw["cell"]["request_rate"])


def test_a_cell_from_before_a_section_existed_reads_with_it_empty() -> None:
    old = {"cell": {"arm": "a", "workload": "w", "load": "c2", "seed": 1, "num_prompts": 4},
           "result": {"duration": 2.0, "completed": 4, "total_input_tokens": 40,
                      "total_output_tokens": 80, "request_throughput": 2.0, "output_throughput": 40.0,
                      "total_token_throughput": 60.0}}
    r = CellRecord.parse(old, "old.json")
    assert (r.servers, r.engine_memory, r.roofline, r.extras, r.notes, r.placement) == ([], [], None, {}, [], None)
    assert r.cell.request_rate == math.inf and r.cell.burstiness == 1.0 and r.cell.num_warmups == 0
    assert r.result.failed == 0 and r.result.mean_ttft_ms is None


def test_a_file_that_is_not_a_cell_is_refused_by_name(tmp_path: Path) -> None:
    good = json.loads(COMMITTED[0].read_text())
    store = ExperimentStore.open(tmp_path)
    path = store.cell_path("a", "w", "c1")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**good, "bogus": 1}))
    with pytest.raises(ServelabError, match=r"c1\.json: not a servelab cell file: key bogus: unknown key"):
        store.read_cell("a", "w", "c1")
    path.write_text(json.dumps({**good, "cell": {**good["cell"], "request_rate": "fast"}}))
    with pytest.raises(ServelabError, match=r"key cell\.request_rate: .*a number or \"inf\", got 'fast'"):
        store.cells()
    path.write_text("{")
    with pytest.raises(ServelabError, match=r"c1\.json: line 1: not valid JSON"):
        store.cells()


def test_a_result_keeps_the_keys_it_does_not_type() -> None:
    # vLLM's format is open: --metadata keys and percentile keys land at its top level
    data = {"duration": 1.0, "completed": 1, "total_input_tokens": 1, "total_output_tokens": 2,
            "request_throughput": 1.0, "output_throughput": 2.0, "total_token_throughput": 3.0,
            "request_rate": "inf", "p99_ttft_ms": 12.5, "arm": "base"}
    r = StoredResult.parse(data, "r.json")
    assert r.request_rate == math.inf and r.number("p99_ttft_ms") == 12.5 and r.number("nope") is None
    assert r.percentiles_ms() == {"p99_ttft": 12.5}
    assert r.to_json() == data
    with pytest.raises(ServelabError, match=r"r\.json: not a bench result: key completed: Field required"):
        StoredResult.parse({k: v for k, v in data.items() if k != "completed"}, "r.json")


class _Rated(BaseModel):
    rate: RequestRate


def test_the_rate_is_a_number_in_memory_and_inf_as_vllm_writes_it() -> None:
    assert rate_to_json(math.inf) == "inf" and rate_to_json(2.5) == 2.5
    assert rate_from_json("inf") == math.inf and rate_from_json(3) == 3.0
    assert _Rated(rate="inf").rate == math.inf
    assert _Rated(rate=math.inf).model_dump(mode="json") == {"rate": "inf"}
    assert _Rated(rate=4).model_dump(mode="json") == {"rate": 4.0}
    for bad in ("fast", True, None):
        with pytest.raises(ValueError):
            rate_from_json(bad)

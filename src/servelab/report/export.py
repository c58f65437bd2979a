"""An experiment as one table for the user's own tools: one row per cell, as CSV or Parquet.

A row holds the cell's identity (arm, workload, load first), every other scalar of the
stored cell record and of its result (vLLM's result keys; nested records such as
`servelab.slot_wait_ms.mean` flattened with dots), and the server figures the report reads
(`ServerFigures`, combined over replicas), named `server.*` with their units. List-valued
keys (per-request arrays: `ttfts`, `itls`, `errors`, ...) are left out: they are one value
per request, not per cell (the cell files under `cells/` keep them). Columns are the union
over cells: the identity first, the rest sorted by name; a cell without a column leaves
it empty.
"""

from __future__ import annotations

import importlib.util

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.errors import ServelabError
from servelab.experiment.store import ExperimentStore
from servelab.metrics.server_figures import ServerFigures
from servelab.report.data import cell_figures
from servelab.storage import write_atomic

Scalar = str | int | float | bool | None

IDENTITY = ("arm", "workload", "load")

# ServerFigures field -> export column (units in the name; fractions are 0..1).
SERVER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("max_waiting", "server.max_waiting_requests"),
    ("mean_waiting", "server.mean_waiting_requests"),
    ("max_running", "server.max_running_requests"),
    ("mean_running", "server.mean_running_requests"),
    ("peak_kv_usage", "server.peak_kv_usage_fraction"),
    ("preemptions", "server.preemptions_count"),
    ("prefix_hit_rate", "server.prefix_hit_rate_fraction"),
    ("prefix_queries", "server.prefix_queries_tokens"),
    ("prompt_tokens", "server.prompt_tokens"),
)

PYARROW_HINT = "--parquet needs pyarrow, which is not installed: pip install pyarrow"


@dataclass(frozen=True, slots=True)
class CellRow:
    """One cell as one export row: `columns` maps each column name to its value."""

    arm: str
    workload: str
    load: str
    columns: Mapping[str, Scalar]


def _scalars(record: Mapping[str, Any], prefix: str = "") -> dict[str, Scalar]:
    """The scalar leaves of a JSON record, nested records' keys joined with dots; lists
    are left out (per-request arrays)."""
    out: dict[str, Scalar] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_scalars(value, name + "."))
        elif value is None or isinstance(value, (str, int, float, bool)):
            out[name] = value
    return out


def _server_columns(server: ServerFigures) -> dict[str, Scalar]:
    return {column: getattr(server, field) for field, column in SERVER_COLUMNS}


def cell_rows(root: Path) -> list[CellRow]:
    """Every stored cell of the experiment in `root`, in the spec's arm and workload order
    and by load (concurrencies, then rates, ascending). `ServelabError` when `root` is not
    an experiment or a cell file is not one."""
    store = ExperimentStore(Path(root))
    spec = store.read_manifest()["spec"]
    arm_order = {a["name"]: i for i, a in enumerate(spec["arms"])}
    workload_order = {w["name"]: i for i, w in enumerate(spec["workloads"])}
    keyed: list[tuple[tuple[int, int, bool, float], CellRow]] = []
    for _, record in store.cells():
        c = record.cell
        server = cell_figures(record).server  # the figures exactly as the report reads them
        # The cell record first, then the result: where both name a key (request_rate,
        # burstiness, ...) the result's measured record wins; identity stays the cell's.
        columns = {**_scalars(c.model_dump(mode="json")), **_scalars(record.result.to_json()),
                   **_server_columns(server), "arm": c.arm, "workload": c.workload, "load": c.load}
        x = float(c.concurrency) if c.concurrency is not None else c.request_rate
        order = (arm_order.get(c.arm, len(arm_order)), workload_order.get(c.workload, len(workload_order)),
                 c.concurrency is None, x)
        keyed.append((order, CellRow(c.arm, c.workload, c.load, columns)))
    return [row for _, row in sorted(keyed, key=lambda kv: kv[0])]


def column_names(rows: list[CellRow]) -> list[str]:
    """The union of the rows' columns: identity first, the rest sorted by name."""
    rest = sorted({name for r in rows for name in r.columns} - set(IDENTITY))
    return [*IDENTITY, *rest]


def to_csv(rows: list[CellRow]) -> bytes:
    """The rows as CSV (RFC 4180, UTF-8, a header line; empty cells for missing values;
    floats in full precision, so a value reads back equal to the stored one)."""
    names = column_names(rows)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=names, restval="")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.columns.items()})
    return buf.getvalue().encode("utf-8")


def pyarrow_available() -> bool:
    """Whether `--parquet` can be written (pyarrow is an optional dependency)."""
    return importlib.util.find_spec("pyarrow") is not None


def _arrow_column(values: list[Scalar]) -> tuple[list[Any], str]:
    """A column's values and Arrow type: bool, int64 or float64 when every present value
    is one (float64 when none is present), else strings (a load's request_rate can be 2.5 in one cell and "inf" in
    another)."""
    present = [v for v in values if v is not None]
    if not present:
        return values, "float64"  # no cell has a value: read as missing numbers (NaN)
    if all(isinstance(v, bool) for v in present):
        return values, "bool"
    numbers = [v for v in present if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) == len(present):
        kind = "int64" if all(isinstance(v, int) for v in present) else "float64"
        return values, kind
    return [None if v is None else str(v) for v in values], "string"


def to_parquet(rows: list[CellRow]) -> bytes:
    """The rows as a Parquet file (needs pyarrow; `ServelabError` naming --parquet else)."""
    if not pyarrow_available():
        raise ServelabError(PYARROW_HINT)
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"bool": pa.bool_(), "int64": pa.int64(), "float64": pa.float64(), "string": pa.string()}
    arrays, names = [], column_names(rows)
    for name in names:
        values, kind = _arrow_column([r.columns.get(name) for r in rows])
        arrays.append(pa.array(values, type=types[kind]))
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, names=names), buf)
    return buf.getvalue()


def export(root: Path, csv_path: Path | None = None, parquet_path: Path | None = None) -> int:
    """Write the experiment's cell rows to `csv_path` and/or `parquet_path` (atomically);
    returns the number of rows. Callers check the paths first (`check_writable`)."""
    rows = cell_rows(root)
    if csv_path is not None:
        write_atomic(csv_path, to_csv(rows))
    if parquet_path is not None:
        write_atomic(parquet_path, to_parquet(rows))
    return len(rows)

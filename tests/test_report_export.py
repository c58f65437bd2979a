"""`servelab report DIR --csv FILE` / `--parquet FILE`: one row per cell, read back with the
stdlib (csv.DictReader) and checked against the stored cell files; bad paths refused
before anything is written (the real CLI in a subprocess, a simulated experiment)."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]

SPEC = """\
name: export
engine: sim
hardware: {gpu: L40S}
model: Qwen/Qwen3-0.6B
arms:
  - name: roomy
  - name: tight
    args: {max_num_seqs: 1}
workloads:
  - name: rnd
    dataset_name: random
    random_input_len: 32
    random_output_len: 16
loads:
  concurrency: [1, 4]
  num_prompts: 8
seed: 11
"""


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory, servelab_cli: Cli) -> Path:
    root = tmp_path_factory.mktemp("export")
    (root / "spec.yaml").write_text(SPEC)
    done = servelab_cli("run", str(root / "spec.yaml"), "--out", str(root / "exp"), "--no-report")
    assert done.returncode == 0, done.stderr
    return root / "exp"


def _stored(exp: Path, arm: str, load: str) -> dict:
    return json.loads((exp / "cells" / arm / "rnd" / f"{load}.json").read_text())


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_csv_has_one_row_per_cell_with_the_stored_figures(experiment: Path, tmp_path: Path,
                                                          servelab_cli: Cli) -> None:
    out = tmp_path / "cells.csv"
    done = servelab_cli("report", str(experiment), "--csv", str(out))
    assert done.returncode == 0, done.stderr
    with out.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header, rows = list(reader.fieldnames or []), list(reader)
    # The spec's arm order, loads ascending.
    assert [(r["arm"], r["workload"], r["load"]) for r in rows] == [
        ("roomy", "rnd", "c1"), ("roomy", "rnd", "c4"), ("tight", "rnd", "c1"), ("tight", "rnd", "c4")]
    assert header[:3] == ["arm", "workload", "load"] and header[3:] == sorted(header[3:])
    assert "ttfts" not in header and "itls" not in header  # per-request arrays left out
    for r in rows:
        res = _stored(experiment, r["arm"], r["load"])["result"]
        assert float(r["output_throughput"]) == res["output_throughput"]
        assert float(r["mean_ttft_ms"]) == res["mean_ttft_ms"]
        assert int(r["completed"]) == 8 and int(r["failed"]) == 0
        assert int(r["concurrency"]) == int(r["load"][1:])
    # max_num_seqs 1: the tight arm's engine never ran more than one request at a time,
    # the roomy one ran all four of c4 together at some point.
    running = {(r["arm"], r["load"]): float(r["server.max_running_requests"]) for r in rows}
    assert running[("tight", "c4")] == 1.0 and running[("roomy", "c4")] == 4.0


def test_parquet_is_written_or_refused_with_the_install_hint(experiment: Path, tmp_path: Path,
                                                             servelab_cli: Cli) -> None:
    out = tmp_path / "cells.parquet"
    done = servelab_cli("report", str(experiment), "--parquet", str(out))
    if importlib.util.find_spec("pyarrow") is None:
        assert done.returncode == 2
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "--parquet" in errors[0] and "pip install pyarrow" in errors[0]
        assert "Traceback" not in done.stderr and not out.exists()
        return
    import pyarrow.parquet as pq

    assert done.returncode == 0, done.stderr
    table = pq.read_table(out).to_pylist()
    assert [(r["arm"], r["load"]) for r in table] == [
        ("roomy", "c1"), ("roomy", "c4"), ("tight", "c1"), ("tight", "c4")]
    for r in table:
        assert r["output_throughput"] == _stored(experiment, r["arm"], r["load"])["result"]["output_throughput"]


def test_bad_csv_path_is_refused_before_anything_is_written(experiment: Path, tmp_path: Path,
                                                            servelab_cli: Cli) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file\n")
    before = _listing(experiment), _listing(tmp_path)
    done = servelab_cli("report", str(experiment), "--csv", str(blocker / "cells.csv"))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--csv" in errors[0], done.stderr
    assert (_listing(experiment), _listing(tmp_path)) == before
    assert blocker.read_text() == "a regular file\n"

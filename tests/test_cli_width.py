"""Output read at 80 columns: the real CLI in a subprocess, stdout piped, COLUMNS=80.

Tables never drop a digit (no `…`, no line past 80 columns, every figure the JSON form or
the stored cell gives appears whole), every `--help` shows every flag name whole, and an
error is one whole line however long.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

WIDTH = 80
ENV = {"COLUMNS": str(WIDTH)}
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")

# The quickstart's arms (examples/quickstart.yaml: long arm names, 14B figures in the
# thousands) on one workload at two loads, small enough to simulate in seconds.
QUICKSTART_SMALL = """\
name: quickstart-small
engine: sim
hardware: {gpu: L40S}
model: Qwen/Qwen3-14B
arms:
  - name: bf16
    baseline: true
  - name: awq
    quantization: awq
  - name: awq-overtuned
    quantization: awq
    args: {max_num_seqs: 8, max_model_len: 1024}
workloads:
  - name: prefix
    dataset_name: prefix_repetition
    prefix_repetition_prefix_len: 256
    prefix_repetition_suffix_len: 256
    prefix_repetition_num_prefixes: 10
    prefix_repetition_output_len: 128
loads:
  concurrency: [1, 32]
  num_prompts: 40
slo: {ttft_ms: 500, tpot_ms: 50, percentile: 99}
seed: 2026
"""

# Lists every command path and the flag names click knows for it, from the app itself, in
# a process of its own (registering the commands mutates the app).
WALK = """\
import json
import typer.main
from servelab import cli
cli._register_all()
def walk(cmd, path):
    shown = [p for p in cmd.params if not getattr(p, "hidden", False)]  # hidden: not in --help
    flags = sorted({o for p in shown for o in (*p.opts, *p.secondary_opts) if o.startswith("-")})
    subs = sorted((n, s) for n, s in getattr(cmd, "commands", {}).items() if not s.hidden)
    out = [{"path": path, "flags": flags,
            "summaries": [s.get_short_help_str(limit=10_000) for _, s in subs]}]
    for name, sub in subs:
        out += walk(sub, [*path, name])
    return out
print(json.dumps(walk(typer.main.get_command(cli.app), [])))
"""


def _tokens(text: str) -> set[str]:
    """Every number as printed (thousands commas and decimals kept): a cut figure such as
    `1,564…` yields `1,564`, not `1,564.2`."""
    return set(NUMBER.findall(text))


def _assert_fits(text: str) -> None:
    assert "…" not in text
    long = [line for line in text.splitlines() if len(line) > WIDTH]
    assert not long, f"{len(long)} lines over {WIDTH} columns, first: {long[0]!r}"


@pytest.fixture(scope="module")
def quickstart_dir(tmp_path_factory: pytest.TempPathFactory,
                   servelab_cli: Callable[..., subprocess.CompletedProcess[str]]) -> Path:
    root = tmp_path_factory.mktemp("width")
    spec = root / "quickstart-small.yaml"
    spec.write_text(QUICKSTART_SMALL)
    done = servelab_cli("run", str(spec), "--out", str(root / "exp"), "--no-report")
    assert done.returncode == 0, done.stderr
    return root / "exp"


def test_report_at_80_columns_keeps_every_figure_whole(
        quickstart_dir: Path, servelab_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    done = servelab_cli("report", str(quickstart_dir), env=ENV)
    assert done.returncode == 0, done.stderr
    _assert_fits(done.stdout)
    shown = _tokens(done.stdout)
    cells = {}
    for path in sorted((quickstart_dir / "cells").glob("*/*/*.json")):
        stored = json.loads(path.read_text())
        cells[(stored["cell"]["arm"], stored["cell"]["load"])] = stored["result"]
    assert len(cells) == 6  # 3 arms x 2 loads
    for (arm, load), res in cells.items():
        for key in ("total_token_throughput", "output_throughput", "mean_ttft_ms", "p99_ttft_ms",
                    "mean_itl_ms", "p99_itl_ms", "duration"):
            figure = f"{res[key]:,.1f}"
            assert figure in shown, f"{arm} {load} {key} {figure} not shown whole"
        base = cells[("bf16", load)]["output_throughput"]
        if arm != "bf16":
            assert f"{res['output_throughput'] / base:,.2f}" in shown  # the ratio table's x0.00
    manifest = json.loads((quickstart_dir / "manifest.json").read_text())
    for arm, plan in manifest["planner"].items():
        mem = plan["memory"]
        assert f"{mem['kv_cache_tokens']:,}" in shown, arm
        assert f"{mem['weights_gib']:,.2f}" in shown, arm


def test_plan_what_if_at_80_columns_keeps_every_figure_whole(
        servelab_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    args = ("plan", "--model", "Qwen/Qwen3-14B", "--gpu", "L40S",
            "--what-if", "tp2: --tensor-parallel-size 2")
    text = servelab_cli(*args, env=ENV)
    assert text.returncode == 0, text.stderr
    _assert_fits(text.stdout)
    out = json.loads(servelab_cli(*args, "--json").stdout)
    shown = _tokens(text.stdout)
    expected = {f"{out['weights_gib']:.2f}", f"{out['kv_cache_gib']:.2f}",
                f"{out['kv_cache_tokens']:,}", f"{out['kv_bytes_per_token']:,}",
                f"{out['max_concurrency']:.2f}", f"{out['decode_ceiling_tok_s']:.1f}"}
    for r in out["what_if"]:
        expected |= {str(r["gpus"]), f"{r['kv_cache_tokens']:,}", str(r["requests_per_replica"]),
                     str(r["batch_per_replica"]), f"{r['step_ms']:.2f}", f"{r['decode_tok_s']:,.0f}",
                     f"{r['tok_per_gpu_s']:,.0f}", f"{r['decode_ceiling_tok_s']:.1f}"}
        assert re.search(rf"(?<!\S){re.escape(r['arm'])}(?!\S)", text.stdout), r["arm"]
    assert not expected - shown, f"not shown whole: {sorted(expected - shown)}"


def _commands() -> list[dict]:
    done = subprocess.run([sys.executable, "-c", WALK], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_help_at_80_columns_shows_every_flag_and_summary_whole(
        servelab_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    commands = _commands()
    paths = {" ".join(c["path"]) for c in commands}
    assert {"", "plan", "report", "sim calibrate", "data inspect"} <= paths
    for command in commands:
        done = servelab_cli(*command["path"], "--help", env=ENV)
        where = "servelab " + " ".join(command["path"])
        assert done.returncode == 0, (where, done.stderr)
        assert "…" not in done.stdout, where
        for flag in command["flags"]:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", done.stdout), (where, flag)
        # A group lists each command's first sentence whole (wrapped: compared without spaces).
        packed = "".join(done.stdout.split())
        for summary in command["summaries"]:
            assert "".join(summary.split()) in packed, (where, summary)
        long = [line for line in done.stdout.splitlines() if len(line) > WIDTH]
        assert not long, (where, long[0])


def test_an_error_is_one_whole_line_at_80_columns(
        tmp_path: Path, servelab_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    missing = tmp_path / ("a-folder-name-long-enough-that-the-error-runs-past-eighty-columns-" * 2)
    done = servelab_cli("report", str(missing), env=ENV)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(missing) in errors[0], done.stderr


def test_fit_table_layouts_keep_each_figure_whole_at_every_width() -> None:
    from rich.console import Console

    from servelab.textgrid import FitTable

    headers = ("load", "arm", "total tok/s", "output tok/s", "mean TTFT ms", "p99 TTFT ms",
               "mean ITL ms", "p99 ITL ms", "duration s", "failed")
    rows = (("c1", "bf16", "1,564.2", "782.1", "12,345.6", "15,470.1", "38.6", "79.8", "123.4", "0"),
            ("c32", "awq-overtuned", "11,564.2", "5,782.1", "2,345.6", "5,470.1", "8.6", "9.8",
             "23.4", "1"))
    table = FitTable("arms x loads", headers, rows, keys=2)
    # width -> the titles the layout prints: one grid, two or four column groups, or
    # stacked rows under the one title.
    titles = {160: ["arms x loads"], 80: ["arms x loads (1/2)", "arms x loads (2/2)"],
              40: [f"arms x loads ({i}/4)" for i in range(1, 5)], 20: ["arms x loads"]}
    for width, expected in titles.items():
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(table)
        text = console.export_text()
        assert [line for line in text.splitlines() if line.startswith("arms x loads")] == expected
        assert all(len(line) <= width for line in text.splitlines()), width
        assert "…" not in text
        assert _tokens(text) >= {c for r in rows for c in r[2:]}, width
        if width == 20:  # stacked: one "header: value" line per figure
            assert "  p99 ITL ms: 79.8" in text.splitlines()

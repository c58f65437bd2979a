"""What `servelab bench` shows: a live progress bar on stderr and the final summary table.

The bar shows requests done of total, requests in flight, failures and the output token
rate so far; it redraws at most every `REDRAW_S` so a fast run does not spend its CPU on
the terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from servelab.client.sender import SendStatus
from servelab.metrics.result import BenchResult

REDRAW_S = 0.1


class LiveProgress:
    """A rich progress bar fed by `SendStatus` updates (use as a context manager)."""

    def __init__(self, total: int, enabled: bool, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._enabled = enabled
        self._t_start = clock()
        self._last = 0.0
        self._progress = Progress(
            TextColumn("[bold]bench"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("in flight {task.fields[in_flight]:>4}"),
            TextColumn("failed {task.fields[failed]}"),
            TextColumn("{task.fields[tok_s]:>9.1f} out tok/s"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            disable=not enabled,
            refresh_per_second=4,
        )
        self._task = self._progress.add_task("bench", total=total, in_flight=0, failed=0, tok_s=0.0)

    def __enter__(self) -> LiveProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, status: SendStatus) -> None:
        """Take the latest counters (cheap unless a redraw is due)."""
        if not self._enabled:
            return
        now = self._clock()
        if now - self._last < REDRAW_S and status.in_flight:
            return
        self._last = now
        elapsed = max(now - self._t_start, 1e-9)
        self._progress.update(
            self._task,
            completed=status.done + status.failed,
            in_flight=status.in_flight,
            failed=status.failed,
            tok_s=status.output_tokens / elapsed,
        )


def summary_table(result: BenchResult, title: str) -> Table:
    """The final table: counts, throughputs and the latency statistics asked for."""
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("Successful requests", str(result.completed))
    table.add_row("Failed requests", str(result.failed))
    for reason, count in result.failed_by_reason.items():
        table.add_row(f"  failed: {reason}", str(count))
    table.add_row("Benchmark duration (s)", f"{result.duration_s:.2f}")
    table.add_row("Total input tokens", str(result.total_input_tokens))
    table.add_row("Total generated tokens", str(result.total_output_tokens))
    table.add_row("Request throughput (req/s)", f"{result.request_throughput:.2f}")
    if result.request_goodput is not None:
        table.add_row("Request goodput (req/s)", f"{result.request_goodput:.2f}")
    table.add_row("Output token throughput (tok/s)", f"{result.output_throughput:.2f}")
    table.add_row("Total token throughput (tok/s)", f"{result.total_token_throughput:.2f}")
    table.add_row("Peak output token throughput (tok/s)", f"{result.max_output_tokens_per_s:.2f}")
    # vLLM's figure counts requests active in the same 1-s bucket, so it can exceed the
    # concurrency cap; the true instantaneous peak is shown beside it.
    table.add_row("Peak requests in flight", str(result.peak_in_flight_requests))
    table.add_row("Peak concurrent requests (vLLM, 1-s buckets)", str(result.max_concurrent_requests))
    names = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}
    for metric in result.percentile_metrics:
        stats = result.latency(metric)
        table.add_row(f"Mean {names[metric]} (ms)", f"{stats.mean_ms:.2f}")
        table.add_row(f"Median {names[metric]} (ms)", f"{stats.median_ms:.2f}")
        for pv in stats.percentiles:
            table.add_row(f"P{pv.key_word} {names[metric]} (ms)", f"{pv.value_ms:.2f}")
    lag = result.client.sched_lag
    table.add_row("Client scheduling lag p99 / max (ms)", f"{lag.p99_ms:.2f} / {lag.max_ms:.2f}")
    table.add_row("Concurrency-slot wait mean (ms)", f"{result.client.slot_wait.mean_ms:.2f}")
    return table


def warnings_for(result: BenchResult) -> list[str]:
    """Lines the reader must not miss under the table."""
    out: list[str] = []
    c = result.client
    if c.client_fell_behind:
        out.append(
            f"the client fell behind its schedule (p99 scheduling lag {c.sched_lag.p99_ms:.1f} ms"
            f" > {c.sched_lag_threshold_ms:.1f} ms): it, not the server, limited this run; try"
            " --num-client-processes"
        )
    if result.failed:
        reasons = ", ".join(f"{k}: {v}" for k, v in result.failed_by_reason.items())
        out.append(f"{result.failed} requests failed ({reasons}); they are in no latency figure")
    if result.partial:
        out.append("interrupted: these are partial results")
    return out

"""What `servelab bench` shows: a live progress bar on stderr and the final summary.

The summary is `vllm bench serve`'s, line for line (its labels, its `{:<40} {:<10.2f}`
columns, its section rules), so a script that parses vLLM's console output parses
servelab's; servelab's own figures follow in a section of their own.

The bar shows requests done of total, requests in flight, failures and the output token
rate so far; it redraws at most every `REDRAW_S` so a fast run does not spend its CPU on
the terminal.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from servelab.client.sender import SendStatus
from servelab.metrics.result import METRIC_NAMES, BenchResult, LatencyStats
from servelab.metrics.traps import trap_notes

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


_WIDTH = 50
_NAMES = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
    "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
    "e2el_including_client_queue": ("E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency"),
}


def _row(label: str, value: object) -> str:
    # vLLM's "{:<40} {:<10}" / "{:<40} {:<10.2f}": scripts split on the label.
    if isinstance(value, float):
        return f"{label:<40} {value:<10.2f}"
    return f"{label:<40} {value!s:<10}"


def _header(title: str, fill: str) -> str:
    return f"{title:{fill}^{_WIDTH}}"


def _latency_block(lines: list[str], key: str, stats: LatencyStats) -> None:
    short, header = _NAMES[key]
    lines.append(_header(header, "-"))
    lines.append(_row(f"Mean {short} (ms):", stats.mean_ms))
    lines.append(_row(f"Median {short} (ms):", stats.median_ms))
    for pv in stats.percentiles:
        lines.append(_row(f"P{pv.key_word} {short} (ms):", pv.value_ms))


def summary_lines(result: BenchResult, title: str = " Serving Benchmark Result ") -> list[str]:
    """The summary in `vllm bench serve`'s layout and labels (so scripts that parse vLLM's
    console output parse this), then servelab's own figures in a section below it."""
    run = result.run
    lines = [_header(title, "=")]
    lines.append(_row("Successful requests:", result.completed))
    lines.append(_row("Failed requests:", result.failed))
    if run is not None and run.max_concurrency is not None:
        lines.append(_row("Maximum request concurrency:", run.max_concurrency))
    if run is not None and not math.isinf(run.request_rate):
        lines.append(_row("Request rate configured (RPS):", float(run.request_rate)))
    lines.append(_row("Benchmark duration (s):", result.duration_s))
    lines.append(_row("Total input tokens:", result.total_input_tokens))
    lines.append(_row("Total generated tokens:", result.total_output_tokens))
    lines.append(_row("Request throughput (req/s):", result.request_throughput))
    if result.request_goodput is not None:
        lines.append(_row("Request goodput (req/s):", result.request_goodput))
    lines.append(_row("Output token throughput (tok/s):", result.output_throughput))
    lines.append(_row("Peak output token throughput (tok/s):", result.max_output_tokens_per_s))
    lines.append(_row("Peak concurrent requests:", float(result.max_concurrent_requests)))
    lines.append(_row("Total token throughput (tok/s):", result.total_token_throughput))
    for metric in METRIC_NAMES:
        if metric in result.percentile_metrics:
            _latency_block(lines, metric, result.latency(metric))
    for key, stats in result.queue_metrics():
        _latency_block(lines, key, stats)
    sd = result.spec_decode
    if sd is not None:
        lines.append(_header("Speculative Decoding", "-"))
        lines.append(_row("Acceptance rate (%):", sd.acceptance_rate_pct))
        lines.append(_row("Acceptance length:", sd.acceptance_length))
        lines.append(_row("Drafts:", sd.num_drafts))
        lines.append(_row("Draft tokens:", sd.draft_tokens))
        lines.append(_row("Accepted tokens:", sd.accepted_tokens))
        if sd.per_position_acceptance:
            lines.append("Per-position acceptance (%):")
            for i, rate in enumerate(sd.per_position_acceptance):
                lines.append(_row(f"  Position {i}:", rate * 100.0))
    lines.append("=" * _WIDTH)
    lines.extend(_servelab_lines(result))
    return lines


def _servelab_lines(result: BenchResult) -> list[str]:
    lines = [_header(" servelab ", "-")]
    for reason, count in result.failed_by_reason.items():
        lines.append(_row(f"Failed: {reason}:", count))
    # vLLM's peak counts requests active in the same 1-s bucket, so it can exceed the
    # concurrency cap; the true instantaneous peak is this one.
    lines.append(_row("Peak requests in flight:", result.peak_in_flight_requests))
    lag = result.client.sched_lag
    lines.append(_row("Client scheduling lag p99 (ms):", lag.p99_ms))
    lines.append(_row("Client scheduling lag max (ms):", lag.max_ms))
    lines.append(_row("Concurrency-slot wait mean (ms):", result.client.slot_wait.mean_ms))
    server = result.server.mean_server_ttft_ms if result.server is not None else None
    if server is not None:
        lines.append(_row("Server-side mean TTFT (ms):", server))
    t = result.traps
    if t.mean_first_itl_ms is not None and t.mean_later_itl_ms is not None:
        lines.append(_row("Mean first ITL (ms):", t.mean_first_itl_ms))
        lines.append(_row("Mean ITL excl. first gaps (ms):", t.itl_excl_first.mean_ms))
    if t.reasoning_tokens:
        lines.append(_row("Reasoning tokens:", t.reasoning_tokens))
        lines.append(_row("Answer tokens:", t.answer_tokens))
    lines.append("=" * _WIDTH)
    return lines


def warnings_for(result: BenchResult) -> list[str]:
    """Lines the reader must not miss under the summary: the run's measurement traps,
    failures, and an interruption."""
    out = trap_notes(result)
    if result.failed:
        reasons = ", ".join(f"{k}: {v}" for k, v in result.failed_by_reason.items())
        out.append(f"{result.failed} requests failed ({reasons}); they are in no latency figure")
    if result.partial:
        out.append("interrupted: these are partial results")
    return out

"""Measurement traps: the sentences a run's reader must see before trusting its headline.

Each rule reads a summarised run (`BenchResult`, with its `MeasurementTraps` counts and the
server's series) and says, with the numbers, when a figure means less than it seems to.
The bench summary, the result JSON (`servelab.trap_notes`) and the experiment report show
the same sentences. Thresholds are where the effect starts to move a headline figure by
more than run-to-run noise (a few per cent), not tuned on any one run.
"""

from __future__ import annotations

from typing import Any

from servelab.metrics.result import BenchResult

# A first inter-token gap this much above the later ones is a pattern, not noise.
FIRST_ITL_RATIO = 1.5
# Below this many requests, or this gap difference (ms), the first-gap comparison is noise.
FIRST_ITL_MIN_REQUESTS = 10
FIRST_ITL_MIN_MS = 1.0
# Client TTFT beyond the server's by this fraction (and SERVER_GAP_MIN_MS) is worth a line.
SERVER_GAP_FRACTION = 0.2
SERVER_GAP_MIN_MS = 5.0
# Output tokens beyond one per chunk, as a share of all output tokens.
MULTI_TOKEN_SHARE = 0.01
# Mean TPOT above this multiple of the median, with short requests holding this share of
# the summed TPOT, is the short-request skew.
TPOT_SKEW_RATIO = 2.0
TPOT_SHORT_SHARE = 0.25


def trap_notes(result: BenchResult) -> list[str]:
    """The traps this run fell into, one sentence each (empty when none)."""
    t = result.traps
    notes: list[str] = []
    total_out = result.total_output_tokens
    if t.reasoning_tokens:
        answer = (f"; the first answer token came {t.mean_answer_ttft_ms:.1f} ms after sending"
                  " on average" if t.mean_answer_ttft_ms is not None else "")
        notes.append(
            f"reasoning model: {t.reasoning_tokens:,} of {total_out:,} output tokens were "
            f"reasoning ({t.reasoning_requests} requests), {t.answer_tokens:,} answer; TTFT "
            f"counts the first reasoning token (mean {result.ttft.mean_ms:.1f} ms){answer}")
    first, later = t.mean_first_itl_ms, t.mean_later_itl_ms
    if (first is not None and later is not None and later > 0
            and result.completed >= FIRST_ITL_MIN_REQUESTS and first > FIRST_ITL_RATIO * later
            and first - later > FIRST_ITL_MIN_MS):
        notes.append(
            f"the first inter-token gap averages {first:.2f} ms vs {later:.2f} ms for later "
            f"gaps (a chunked-prefill remainder or other requests' prefills in that step); "
            f"ITL without first gaps: mean {t.itl_excl_first.mean_ms:.2f} ms, median "
            f"{t.itl_excl_first.median_ms:.2f} ms")
    server = result.server.mean_server_ttft_ms if result.server is not None else None
    if server is not None and result.completed:
        gap = result.ttft.mean_ms - server
        if gap > SERVER_GAP_MIN_MS and gap > SERVER_GAP_FRACTION * result.ttft.mean_ms:
            notes.append(
                f"client TTFT {result.ttft.mean_ms:.1f} ms vs the server's "
                f"{server:.1f} ms (vllm:time_to_first_token_seconds): {gap:.1f} ms is "
                "network, HTTP handling, queueing before the engine and tokenisation")
    if total_out and t.tokens_beyond_one_per_chunk / total_out > MULTI_TOKEN_SHARE:
        chunks = total_out - t.tokens_beyond_one_per_chunk
        notes.append(
            f"{total_out:,} output tokens arrived in {chunks:,} chunks (several tokens per "
            "chunk: speculative decoding or stream batching): a chunk's ITLs are its gap "
            "split evenly, so ITL percentiles are smoothed")
    ignore_eos = result.run.ignore_eos if result.run is not None else False
    if t.short_outputs and not ignore_eos:
        notes.append(
            f"{t.short_outputs} of {result.completed} requests stopped before the max_tokens "
            "asked for (end of sequence); output lengths differ from the workload's, so "
            "throughput is not comparable across servers: use --ignore-eos to fix them")
    tpot = result.tpot
    if (t.short_tpot_requests and tpot.median_ms > 0
            and tpot.mean_ms > TPOT_SKEW_RATIO * tpot.median_ms
            and t.short_tpot_share > TPOT_SHORT_SHARE):
        notes.append(
            f"mean TPOT {tpot.mean_ms:.1f} ms is pulled up by {t.short_tpot_requests} requests "
            f"with 2-3 output tokens ({t.short_tpot_share:.0%} of the summed TPOT; their TPOT "
            f"is one or two gaps): lead with the median, {tpot.median_ms:.1f} ms")
    c = result.client
    if c.client_fell_behind:
        notes.append(
            f"the client fell behind its schedule (p99 scheduling lag {c.sched_lag.p99_ms:.1f} ms"
            f" > {c.sched_lag_threshold_ms:.1f} ms): it, not the server, limited this run; try"
            " --num-client-processes")
    return notes


def result_json(result: BenchResult, detailed: bool = False) -> dict[str, Any]:
    """The result file's object (`BenchResult.to_json_dict`) with the run's trap sentences
    under `servelab.trap_notes`: the one way every command writes a result."""
    data = result.to_json_dict(detailed=detailed)
    data["servelab"]["trap_notes"] = trap_notes(result)
    return data

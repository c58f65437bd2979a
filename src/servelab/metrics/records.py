"""One request's measured timeline: the record the client and the simulator both produce.

Times are seconds since the run's start (`*_s`) or milliseconds (`*_ms`). The metrics
calculator (`servelab.metrics.summary`) turns a list of these into a result; nothing else
computes summaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request.

    `intended_send_s` is when the arrival schedule wanted it sent, `send_s` when it was
    sent (after waiting `slot_wait_ms` for a concurrency slot); the scheduling lag is
    `send_s - intended_send_s` minus that wait. `itl_ms` holds one gap per output token
    after the first (`output_len - 1` values on success), in ms, in one of two forms: a
    `list[float]` (the HTTP client appends as chunks arrive) or an `array('d')` (the
    simulator: 8 bytes a gap, where a list holds a 24-byte Python float per gap, which
    matters at a million requests). Readers use only what both share (`len`, indexing,
    slicing, iteration, `sum`); the metrics calculator reads either without making a
    Python float per gap. A failed request carries
    `error` (a message) and `error_kind` (a short reason used to group failures, e.g.
    `http_500`, `timeout`, `connect`, `stream_broken`) and never enters latency or
    throughput figures. `expected_output_len` is the max_tokens asked for.
    """

    index: int
    prompt_len: int
    intended_send_s: float
    send_s: float
    slot_wait_ms: float = 0.0
    expected_output_len: int | None = None  # None: not known (records made by hand)
    output_len: int = 0
    ttft_ms: float | None = None
    itl_ms: Sequence[float] = field(default_factory=list)  # list[float] or array('d')
    e2el_ms: float | None = None
    error: str | None = None
    error_kind: str | None = None
    warmup: bool = False
    # What the answer said (None when the client did not keep texts), how many of its
    # tokens were reasoning (reasoning-only chunks), and how many chunks carried tokens
    # (fewer than output_len: several tokens per chunk, e.g. speculative decoding; None
    # where no stream was counted, as in the simulator).
    generated_text: str | None = None
    reasoning_text: str | None = None
    reasoning_tokens: int = 0
    answer_ttft_ms: float | None = None  # to the first answer (non-reasoning) token
    chunks: int | None = None

    @property
    def success(self) -> bool:
        return self.error is None and self.ttft_ms is not None

    @property
    def queue_ms(self) -> float:
        """How long the request waited in the client past its intended send (ms): vLLM's
        client queue time, the concurrency-slot wait plus the client's scheduling lag."""
        return max(0.0, (self.send_s - self.intended_send_s) * 1000.0)

    @property
    def sched_lag_ms(self) -> float:
        """How late the client sent this request beyond any concurrency-slot wait (ms)."""
        return max(0.0, (self.send_s - self.intended_send_s) * 1000.0 - self.slot_wait_ms)

    @property
    def tpot_ms(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1); None for one-token or failed requests."""
        if not self.success or self.output_len < 2 or self.e2el_ms is None:
            return None
        assert self.ttft_ms is not None
        return (self.e2el_ms - self.ttft_ms) / (self.output_len - 1)

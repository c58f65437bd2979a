"""Read an engine's memory budget back from its startup log (vLLM and SGLang).

The engine prints what it actually did with the GPU: weights loaded, memory left for the
KV cache, the KV pool in tokens, the maximum concurrency for a full-length request, CUDA
graph memory. These are the figures the planner predicts, so they are read exactly as
printed, and a line the parser does not recognise leaves its field ``None`` and named in
``missing``: a missing figure is never replaced by a guess.

This module owns the record, `StartupInfo`, and the fold into it, the only state in
reading a log: `StartupLogParser` takes lines as they arrive (a watcher tailing a running
engine) and `parse_startup_log` a whole log, through the same code path; neither raises on
odd input. What a single line states (`clean_line`, `parse_line` -> `LogFact`) is the
engines' wording: it lives in `servelab.engine.logline`, which changes with engine releases
while this module does not, and is re-exported here so callers import the parser from one
place.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from servelab.engine.logline import FactValue, LogFact, clean_line, parse_line

__all__ = [
    "FactValue",
    "LogFact",
    "StartupInfo",
    "StartupLogParser",
    "clean_line",
    "parse_line",
    "parse_startup_log",
]


class StartupInfo(BaseModel):
    """What an engine's startup log says about its memory budget (sizes in GiB, times in s).

    Every figure is ``None`` when its line was not found, and then named in ``missing``.
    ``conflicts`` names fields whose lines disagreed beyond the log's rounding (the first
    value is kept), e.g. two tensor-parallel ranks reporting different KV memory; durations
    (``*_s``) differ between ranks and are never conflicts.
    """

    model_config = ConfigDict(extra="forbid")

    engine: Literal["vllm", "sglang"] | None = None
    version: str | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    model_loading_gib: float | None = None
    model_loading_s: float | None = None
    total_gpu_memory_gib: float | None = None
    gpu_memory_utilization: float | None = None
    memory_budget_gib: float | None = None
    non_torch_gib: float | None = None
    weights_non_torch_gib: float | None = None
    peak_activation_gib: float | None = None
    available_kv_gib: float | None = None
    kv_cache_device: Literal["gpu", "cpu"] | None = None
    kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    max_concurrency: float | None = None
    max_concurrency_context_tokens: int | None = None
    cuda_graph_gib: float | None = None
    cuda_graph_s: float | None = None
    torch_compile_s: float | None = None
    init_engine_s: float | None = None
    missing: list[str] = []
    conflicts: list[str] = []


_FIGURES = tuple(n for n in StartupInfo.model_fields if n not in ("missing", "conflicts"))


def _agree(a: FactValue, b: FactValue) -> bool:
    # Two lines may print one figure at different precision (27.5185 vs 27.52 GiB).
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 0.0051 + 1e-9
    return a == b


class StartupLogParser:
    """Folds log lines, as they arrive, into a `StartupInfo`; the first value of a field wins.

    ``block_size`` (tokens per KV block) lets old vLLM logs, which give only
    ``# GPU blocks: N``, yield a token count when the log does not print the block size.
    """

    def __init__(self, block_size: int | None = None) -> None:
        self._values: dict[str, FactValue] = {}
        self._conflicts: list[str] = []
        self._block_size = block_size

    def feed(self, line: str) -> list[LogFact]:
        """Take one line; return the facts it stated (empty for an ordinary line)."""
        facts = parse_line(line)
        for fact in facts:
            known = self._values.get(fact.field)
            if known is None:
                self._values[fact.field] = fact.value
            # Ranks finish at slightly different times: only disagreeing sizes, counts and
            # settings are conflicts, not durations.
            elif (
                not fact.field.endswith("_s")
                and not _agree(known, fact.value)
                and fact.field not in self._conflicts
            ):
                self._conflicts.append(fact.field)
        return facts

    def feed_lines(self, lines: Iterable[str]) -> None:
        """Take every line of an iterable (a file object, a list)."""
        for line in lines:
            self.feed(line)

    def result(self) -> StartupInfo:
        """The figures read so far; unread ones are None and listed in ``missing``."""
        values = dict(self._values)
        block_size = values.get("block_size", self._block_size)
        blocks = values.get("num_gpu_blocks")
        if "kv_cache_tokens" not in values and isinstance(blocks, int) and isinstance(block_size, int):
            values["kv_cache_tokens"] = blocks * block_size
        missing = [name for name in _FIGURES if name not in values]
        return StartupInfo(**values, missing=missing, conflicts=list(self._conflicts))


def parse_startup_log(text: str, block_size: int | None = None) -> StartupInfo:
    """Parse a whole startup log (vLLM or SGLang); see `StartupInfo` for the fields."""
    parser = StartupLogParser(block_size=block_size)
    parser.feed_lines(text.splitlines())
    return parser.result()

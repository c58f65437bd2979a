"""Timed traces: requests with their own send times (`--dataset-name timed_trace`).

Two formats, told apart by the file's suffix:

* JSON Lines, vLLM's TimedTrace / Mooncake's layout: per line a timestamp, an input and an
  output length and optionally a list of hash ids (keys `--timed-trace-label-*`, by default
  `timestamp`, `input_length`, `output_length`, `hash_ids`). A timestamp times
  `--timed-trace-sec-multiplier` is seconds (Mooncake's traces are in ms: pass 0.001).
  The k-th hash id stands for prompt tokens [k x B, (k + 1) x B) with B =
  `--timed-trace-chunk-hash-size` (Mooncake 512, vLLM's default 16); requests whose hash
  ids agree up to a block send token-for-token the same text up to the end of that block,
  so a prefix cache sees the sharing the trace recorded.
* CSV (`.csv`), the Azure LLM inference trace: `TIMESTAMP` (a date-time), `ContextTokens`,
  `GeneratedTokens`; no shared prefixes.

Prompts are random clean tokens fitted to the exact length (`textfit.TextMaker`); a
block's text is built after the blocks before it, so its tokens stay the same in every
request sharing that prefix. Where the hash ids cover fewer tokens than the input length,
unique random tokens fill the rest (vLLM's prompt would stop at the last block).

Send times: seconds after the first request of the file (vLLM waits for the first
timestamp itself), divided by `--trace-speedup`. Timestamps must not decrease.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from servelab.errors import ServelabError
from servelab.workload.filelines import csv_rows, int_field, json_lines, require_file
from servelab.workload.synthetic import request_spec
from servelab.workload.textfit import Fitted, TextMaker

if TYPE_CHECKING:
    from servelab.workload.request import RequestSpec
    from servelab.workload.tokenizer import TokenizerHandle


class TraceOptions(Protocol):
    """The timed-trace flags this module reads (the dataset options carry them): how many
    requests, the trace's time unit and hash-block size, its JSONL column names, the replay
    speed-up, and chat or completions."""

    num_prompts: int
    timed_trace_sec_multiplier: float
    timed_trace_chunk_hash_size: int
    timed_trace_label_timestamp: str
    timed_trace_label_input_length: str
    timed_trace_label_output_length: str
    timed_trace_label_hash_ids: str
    trace_speedup: float
    use_chat: bool

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One request of a trace: when (s, trace clock), how long in and out, which blocks."""

    time_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[str, ...]
    lineno: int


@dataclass(frozen=True, slots=True)
class Trace:
    """The requests and their send times (s after the first, speed-up applied)."""

    requests: list[RequestSpec]
    arrival_s: tuple[float, ...]
    notes: list[str]


def _number(path: Path, lineno: int, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ServelabError(f"{path}:{lineno}: {key!r} must be a number (got {value!r})")
    return float(value)


def _jsonl_entries(path: Path, opts: TraceOptions, limit: int) -> list[TraceEntry]:
    ts_key = opts.timed_trace_label_timestamp
    in_key = opts.timed_trace_label_input_length
    out_key = opts.timed_trace_label_output_length
    hash_key = opts.timed_trace_label_hash_ids
    out: list[TraceEntry] = []
    for lineno, obj in json_lines(path):
        if len(out) == limit:
            break
        for key, flag in ((ts_key, "timestamp"), (in_key, "input-length"), (out_key, "output-length")):
            if key not in obj:
                raise ServelabError(
                    f"{path}:{lineno}: no {key!r} (keys found: {', '.join(sorted(obj))}; "
                    f"--timed-trace-label-{flag} names it)"
                )
        hashes = obj.get(hash_key, [])
        if not isinstance(hashes, list) or not all(
            isinstance(h, (int, str)) and not isinstance(h, bool) for h in hashes
        ):
            raise ServelabError(f"{path}:{lineno}: {hash_key!r} must be a list of integers or strings")
        out.append(TraceEntry(
            _number(path, lineno, ts_key, obj[ts_key]) * opts.timed_trace_sec_multiplier,
            int_field(path, lineno, in_key, obj[in_key], 0),
            int_field(path, lineno, out_key, obj[out_key], 0),
            tuple(str(h) for h in hashes), lineno,
        ))
    return out


def _azure_time_s(path: Path, lineno: int, text: str) -> float:
    text = (text or "").strip()
    try:
        return float(text)
    except ValueError:
        pass
    # Azure writes 7 fractional digits ("2023-11-16 18:15:46.6805900"); datetime takes 6.
    head, dot, frac = text.partition(".")
    try:
        stamp = datetime.fromisoformat(head)
        return stamp.timestamp() + (float("0." + frac) if dot and frac.isdigit() else 0.0)
    except ValueError:
        raise ServelabError(f"{path}:{lineno}: 'TIMESTAMP' {text!r} is not a date-time") from None


def _azure_entries(path: Path, limit: int) -> list[TraceEntry]:
    out: list[TraceEntry] = []
    for lineno, row in csv_rows(path, AZURE_COLUMNS):
        if len(out) == limit:
            break
        out.append(TraceEntry(
            _azure_time_s(path, lineno, row["TIMESTAMP"]),
            int_field(path, lineno, "ContextTokens", row["ContextTokens"], 0),
            int_field(path, lineno, "GeneratedTokens", row["GeneratedTokens"], 0),
            (), lineno,
        ))
    return out


@dataclass(frozen=True, slots=True)
class _Block:
    """A block's own text, and the last token ids and text of the prompt up to its end."""

    text: str
    tail: Fitted


class PromptBuilder:
    """Prompts from hash-id blocks: one fitted text per block path, shared by every request
    whose hash ids start with that path.

    A block is fitted after only the last `WINDOW` tokens before it, not the whole prefix:
    a merge across the junction reaches back one pre-token, never 32 tokens, and fitting
    against the whole prefix made a 200-request Mooncake trace take 35 s. Each prompt is
    encoded whole once at the end; `mismatched` counts prompts whose count came out
    different from the trace's (a junction that tokenised apart from its window).
    """

    WINDOW = 32

    def __init__(self, maker: TextMaker, tok: TokenizerHandle, block: int) -> None:
        self._maker = maker
        self._tok = tok
        self._block = block
        self._paths: dict[tuple[tuple[str, int], ...], _Block] = {}
        self.mismatched = 0

    def _fit(self, n: int, tail: Fitted | None) -> _Block:
        # The window is fitted against as it encodes on its own (its first tokens may
        # differ from in context; the junction, at its end, is what must stay put).
        head = Fitted(tail.text, self._tok.encode(tail.text)) if tail is not None else None
        fitted = self._maker.fit(n, head)
        k = len(tail.text) if tail is not None else 0
        ids = fitted.ids[-self.WINDOW:]
        return _Block(fitted.text[k:], Fitted(self._tok.decode(ids), ids))

    def build(self, hash_ids: tuple[str, ...], input_len: int) -> tuple[str, int]:
        """A text of `input_len` tokens whose blocks follow `hash_ids`, and its true count."""
        tail: Fitted | None = None
        path: tuple[tuple[str, int], ...] = ()
        parts = []
        left = input_len
        for h in hash_ids:
            if left <= 0:
                break
            size = min(self._block, left)
            path = (*path, (h, size))
            if path not in self._paths:
                self._paths[path] = self._fit(size, tail)
            block = self._paths[path]
            parts.append(block.text)
            tail = block.tail
            left -= size
        if left > 0:
            parts.append(self._fit(left, tail).text)
        text = "".join(parts)
        count = self._tok.count(text)
        self.mismatched += count != input_len
        return text, count


def read_trace(
    path: Path, opts: TraceOptions, tok: TokenizerHandle, rng: np.random.Generator
) -> Trace:
    """The first `opts.num_prompts` requests of the trace at `path` and their send times."""
    require_file(path, "timed_trace")
    csv_file = path.suffix.lower() == ".csv"
    if csv_file and opts.timed_trace_sec_multiplier != 1:
        raise ServelabError("--timed-trace-sec-multiplier applies to JSON Lines traces; "
                            f"{path}'s TIMESTAMP column holds date-times")
    entries = _azure_entries(path, opts.num_prompts) if csv_file else _jsonl_entries(
        path, opts, opts.num_prompts)
    if not entries:
        raise ServelabError(f"{path}: no requests (the trace has no rows)")
    for prev, cur in itertools.pairwise(entries):
        if cur.time_s < prev.time_s:
            raise ServelabError(f"{path}:{cur.lineno}: timestamp goes back in time "
                                f"({cur.time_s:g} s after {prev.time_s:g} s); sort the trace")
    builder = PromptBuilder(TextMaker(tok, rng), tok, opts.timed_trace_chunk_hash_size)
    requests = []
    zero_out = 0
    for i, e in enumerate(entries):
        text, count = builder.build(e.hash_ids, e.input_len)
        zero_out += e.output_len == 0
        requests.append(request_spec(i, text, count, max(e.output_len, 1), opts.use_chat))
    t_first = entries[0].time_s
    arrival = tuple((e.time_s - t_first) / opts.trace_speedup for e in entries)
    span = entries[-1].time_s - t_first
    notes = [f"{path}: {len(entries):,} requests over {span:,.3f} s of trace time"
             + (f" (sent over {arrival[-1]:,.3f} s at --trace-speedup {opts.trace_speedup:g})"
                if opts.trace_speedup != 1 else "")]
    if len(entries) < opts.num_prompts:
        notes.append(f"--num-prompts {opts.num_prompts}: the trace holds {len(entries):,} "
                     "requests; all are sent (a trace is not oversampled)")
    if builder.mismatched:
        notes.append(f"{builder.mismatched:,} prompts re-encode to another length than the "
                     "trace's (tokens merged across a block boundary); prompt_len is the true count")
    if zero_out:
        notes.append(f"{zero_out:,} trace requests asked for 0 output tokens; they ask for 1")
    return Trace(requests, arrival, notes)

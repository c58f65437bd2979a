"""The BurstGPT trace (github.com/HPMLL/BurstGPT) as vLLM's `burstgpt` dataset reads it.

The CSV's columns: `Timestamp`, `Model`, `Request tokens`, `Response tokens`,
`Total tokens`, `Log Type`. As in vLLM's BurstGPTDataset: only `Model == "GPT-4"` rows
with `Response tokens > 0` (a failed response logs 0) are used, `--num-prompts` rows are
drawn with the seed (with replacement only when the file has fewer), and each request is a
random-token prompt of `Request tokens` tokens asking for `Response tokens`. The trace's
timestamps are not used (vLLM's `burstgpt` does not either); replay them with
`--dataset-name timed_trace`.

Differences: vLLM draws rows with pandas' `DataFrame.sample` and builds the prompt from ids
`(i + j) mod vocab` whose text re-encodes to another length; servelab draws with numpy and
fits random clean tokens to the exact length (`textfit.TextMaker`). `--disable-shuffle`
takes rows in file order and `--no-oversample` refuses to repeat rows (vLLM ignores both here).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from servelab.errors import ServelabError
from servelab.workload.filelines import csv_rows, int_field, require_file
from servelab.workload.synthetic import request_spec
from servelab.workload.textfit import TextMaker

if TYPE_CHECKING:
    from servelab.workload.request import RequestSpec
    from servelab.workload.tokenizer import TokenizerHandle

COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
MODEL = "GPT-4"


def read_burstgpt(path: Path) -> tuple[list[tuple[int, int]], int]:
    """(request tokens, response tokens) of the rows vLLM keeps, and how many rows were read."""
    require_file(path, "burstgpt")
    kept: list[tuple[int, int]] = []
    rows = 0
    for lineno, row in csv_rows(path, COLUMNS):
        rows += 1
        if (row.get("Model") or "").strip() != MODEL:
            continue
        response = int_field(path, lineno, "Response tokens", row.get("Response tokens"), 0)
        if response <= 0:
            continue
        request = int_field(path, lineno, "Request tokens", row.get("Request tokens"), 0)
        kept.append((request, response))
    if not kept:
        raise ServelabError(
            f"{path}: none of its {rows:,} rows is a {MODEL} row with 'Response tokens' > 0 "
            "(the rows vllm bench serve's burstgpt keeps)"
        )
    return kept, rows


def burstgpt_requests(
    rows: list[tuple[int, int]],
    tok: TokenizerHandle,
    rng: np.random.Generator,
    *,
    num_prompts: int,
    disable_shuffle: bool,
    no_oversample: bool,
    use_chat: bool,
) -> tuple[list[RequestSpec], list[str]]:
    """`num_prompts` requests sized by rows of the trace (see the module docstring)."""
    notes = []
    n = num_prompts
    if n > len(rows) and no_oversample:
        notes.append(f"--num-prompts {n}: the trace has {len(rows):,} usable rows; "
                     "--no-oversample sends those")
        n = len(rows)
    if disable_shuffle:
        picks = np.arange(n) % len(rows)
    else:
        picks = rng.choice(len(rows), size=n, replace=n > len(rows))
    if n > len(rows):
        notes.append(f"--num-prompts {n}: the trace has {len(rows):,} usable rows; rows were "
                     "drawn with replacement (as vllm bench serve does)")
    maker = TextMaker(tok, rng)
    out = []
    for i, j in enumerate(picks.tolist()):
        request_len, response_len = rows[j]
        fitted = maker.fit(request_len)
        out.append(request_spec(i, fitted.text, len(fitted.ids), response_len, use_chat))
    return out, notes

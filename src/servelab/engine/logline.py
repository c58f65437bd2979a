"""One line of an engine's startup log in, the figures that line states out (vLLM and SGLang).

This module owns the engines' wording: the logger prefixes to strip and one pattern per
printed figure, for the vLLM and SGLang releases listed in docs/probe.md. It holds no
state, so a watcher tailing a running engine and `servelab.engine.logparse`, which folds a
whole log into a `StartupInfo`, read each line the same way. It is kept apart from that
fold because the wording changes with every engine release, while the record and the rules
for folding (first value wins, disagreements are conflicts) do not.

Figures are read exactly as printed. Nothing here raises on odd input: unrecognised text
yields no facts. Units: vLLM's and SGLang's "GB" figures are bytes / 2**30 (both divide by
1 << 30), so they are stored as GiB unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FactValue", "LogFact", "clean_line", "parse_line"]

FactValue = str | int | float

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# "(EngineCore_DP0 pid=123) INFO 11-29 10:00:00 [gpu_worker.py:298] " and SGLang's
# "[2025-05-01 12:00:00 TP0] "; either part may be absent.
_PREFIX = re.compile(
    r"^\s*(?:\([\w .\-]+ pid=\d+\)\s*)?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[?[\w./\-]+:\d+\]\s*)?"
    r"(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [\w ]+)?\]\s*)?"
)
_NUM = r"\d[\d,]*(?:\.\d+)?"


@dataclass(frozen=True)
class LogFact:
    """One figure read from one log line.

    `field` is the name of a field of `servelab.engine.logparse.StartupInfo`.
    """

    field: str
    value: FactValue


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def _i(text: str) -> int:
    return int(text.replace(",", ""))


Handler = Callable[[re.Match[str]], list[LogFact]]


def _facts(**values: FactValue) -> list[LogFact]:
    return [LogFact(k, v) for k, v in values.items()]


def _vllm_version(m: re.Match[str]) -> list[LogFact]:
    return _facts(engine="vllm", version=m["v"])


def _model_loading(m: re.Match[str]) -> list[LogFact]:
    facts = _facts(engine="vllm", model_loading_gib=_f(m["gib"]))
    seconds = m.groupdict().get("s")
    if seconds is not None:
        facts.append(LogFact("model_loading_s", _f(seconds)))
    return facts


def _kv_size(m: re.Match[str]) -> list[LogFact]:
    facts = _facts(engine="vllm", kv_cache_tokens=_i(m["tok"]))
    if m["dev"] in ("GPU", "CPU"):
        facts.append(LogFact("kv_cache_device", m["dev"].lower()))
    return facts


def _concurrency(m: re.Match[str]) -> list[LogFact]:
    return _facts(max_concurrency_context_tokens=_i(m["ctx"]), max_concurrency=_f(m["x"]))


def _graphs(m: re.Match[str]) -> list[LogFact]:
    facts = _facts(cuda_graph_s=_f(m["s"]))
    if m["gib"] is not None:
        facts.append(LogFact("cuda_graph_gib", _f(m["gib"])))
    return facts


def _budget(m: re.Match[str]) -> list[LogFact]:
    return _facts(
        engine="vllm",
        total_gpu_memory_gib=_f(m["tot"]),
        gpu_memory_utilization=_f(m["u"]),
        memory_budget_gib=_f(m["b"]),
    )


def _desired(m: re.Match[str]) -> list[LogFact]:
    return _facts(gpu_memory_utilization=_f(m["u"]), memory_budget_gib=_f(m["b"]))


def _sglang_kv(m: re.Match[str]) -> list[LogFact]:
    facts = _facts(engine="sglang")
    if m["tok"] is not None:
        facts.append(LogFact("kv_cache_tokens", _i(m["tok"])))
    # Two values rounded to 0.01 each: their sum is good to 0.01 as well.
    gib = _f(m["kv"]) if m["kv"] is not None else _f(m["k"]) + _f(m["v"])
    facts.append(LogFact("available_kv_gib", round(gib, 2)))
    return facts


def _one(field: str, conv: Callable[[str], FactValue], engine: str | None = None) -> Handler:
    def handler(m: re.Match[str]) -> list[LogFact]:
        facts = [LogFact(field, conv(m[1]))]
        if engine is not None:
            facts.append(LogFact("engine", engine))
        return facts

    return handler


# Each pattern is searched in the cleaned line; one line may match several (vLLM's CPU
# build prints the KV size and the concurrency on one line).
_RULES: tuple[tuple[re.Pattern[str], Handler], ...] = tuple(
    (re.compile(p), h)
    for p, h in (
        # vLLM version: the banner (0.11+), the engine config line, the old API server line.
        (r"█\s+version\s+(?P<v>\d[\w.+\-]*)", _vllm_version),
        (r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>[^)\s]+)\)", _vllm_version),
        (r"vLLM API server version (?P<v>\d[\w.+\-]*)", _vllm_version),
        (r"Using max model len (\d+)", _one("max_model_len", _i, "vllm")),
        (r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)",
         _one("max_num_batched_tokens", _i, "vllm")),
        # "Model loading took 27.52 GiB and 2.25 seconds" (V1; "GB" before ~0.9, and
        # "GiB memory" in some releases); "Loading model weights took 14.9888 GB" (V0).
        (
            rf"Model loading took (?P<gib>{_NUM}) ?Gi?B(?: memory)? and (?P<s>{_NUM}) ?(?:seconds|secs|s)\b",
            _model_loading,
        ),
        (rf"Loading model weights took (?P<gib>{_NUM}) ?Gi?B", _model_loading),
        (rf"Available KV cache memory: ({_NUM}) ?GiB", _one("available_kv_gib", _f, "vllm")),
        # CPU build: "Explicitly set (1.0/15.09) GiB for KV cache on node 0."
        (rf"Explicitly set \(({_NUM})/{_NUM}\) GiB for KV cache", _one("available_kv_gib", _f, "vllm")),
        (rf"(?:(?P<dev>[A-Z]{{3}}) )?KV cache size: (?P<tok>{_NUM}) tokens", _kv_size),
        (rf"Maximum concurrency for (?P<ctx>{_NUM}) tokens per request: (?P<x>{_NUM})x", _concurrency),
        (r"# (?:GPU|gpu|cuda|CUDA) blocks: (\d[\d,]*)", _one("num_gpu_blocks", _i, "vllm")),
        (rf"Graph capturing finished in (?P<s>{_NUM}) secs?(?:, took (?P<gib>{_NUM}) GiB)?", _graphs),
        (rf"torch\.compile (?:took|takes) ({_NUM}) ?s in total", _one("torch_compile_s", _f)),
        (
            rf"init engine \([^)]*\) took ({_NUM}) ?(?:s|secs|seconds)\b",
            _one("init_engine_s", _f, "vllm"),
        ),
        (r"\bkv_cache_dtype['\"]?\s*[=:]\s*['\"]?(\w+)", _one("kv_cache_dtype", str)),
        (r"['\"]?\bblock_size['\"]?\s*[=:]\s*(\d+)", _one("block_size", _i)),
        (r"['\"]?\bgpu_memory_utilization['\"]?\s*[=:]\s*(\d*\.\d+|1)\b", _one("gpu_memory_utilization", _f)),
        # vLLM ~0.7-0.9 memory profile (V0 worker and early V1 gpu_worker).
        (
            rf"total_gpu_memory \((?P<tot>{_NUM}) ?GiB\) x gpu_memory_utilization \((?P<u>{_NUM})\) = (?P<b>{_NUM}) ?GiB",
            _budget,
        ),
        (rf"model weights take ({_NUM}) ?GiB", _one("model_loading_gib", _f)),
        # vLLM ~0.6.4: "Memory profiling results: total_gpu_memory=79.15GiB ... kv_cache_size=54.86GiB"
        (rf"\btotal_gpu_memory=({_NUM})GiB", _one("total_gpu_memory_gib", _f, "vllm")),
        (rf"\bnon_torch_memory=({_NUM})GiB", _one("non_torch_gib", _f)),
        (rf"\bkv_cache_size=({_NUM})GiB", _one("available_kv_gib", _f)),
        (rf"non_torch_memory takes ({_NUM}) ?GiB", _one("non_torch_gib", _f)),
        (rf"PyTorch activation peak memory takes ({_NUM}) ?GiB", _one("peak_activation_gib", _f)),
        (rf"the rest of the memory reserved for KV Cache is ({_NUM}) ?GiB", _one("available_kv_gib", _f)),
        # vLLM ~0.10+ (gpu_worker), one line: "Free memory on device (78.66/79.19 GiB) on startup.
        # Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 14.08 GiB for weight,
        # 1.97 GiB for peak activation, 0.07 GiB for non-torch memory, and 0.67 GiB for CUDAGraph
        # memory. ... Current kv cache memory in use is 59212694937 bytes." (later releases say
        # "X GiB for consumed memory (weights + non-torch)" and "... in use is 55.15 GiB").
        (rf"Free memory on device \({_NUM}/({_NUM}) GiB\) on startup", _one("total_gpu_memory_gib", _f, "vllm")),
        (rf"Desired GPU memory utilization is \((?P<u>{_NUM}), (?P<b>{_NUM}) GiB\)", _desired),
        (rf"Actual usage is ({_NUM}) GiB for weight\b", _one("model_loading_gib", _f)),
        (rf"({_NUM}) GiB for consumed memory \(weights \+ non-torch\)", _one("weights_non_torch_gib", _f)),
        (rf"({_NUM}) GiB for peak activation", _one("peak_activation_gib", _f)),
        (rf"({_NUM}) GiB for non-torch memory", _one("non_torch_gib", _f)),
        (rf"({_NUM}) GiB for CUDAGraph memory", _one("cuda_graph_gib", _f)),
        (rf"Current kv cache memory in use is ({_NUM}) GiB", _one("available_kv_gib", _f)),
        (r"Current kv cache memory in use is (\d+) bytes", _one("available_kv_gib", lambda t: int(t) / 2**30)),
        # SGLang (model_runner / scheduler).
        (rf"Load weight end\..*?mem usage=({_NUM}) ?GB", _one("model_loading_gib", _f, "sglang")),
        (
            rf"KV Cache is allocated\.(?: #tokens: (?P<tok>{_NUM}),)?"
            rf"(?: K size: (?P<k>{_NUM}) ?GB, V size: (?P<v>{_NUM}) ?GB| KV size: (?P<kv>{_NUM}) ?GB)",
            _sglang_kv,
        ),
        (r"\bmax_total_num_tokens=(\d+)", _one("kv_cache_tokens", _i, "sglang")),
        (r"max_total_num_tokens=\d+.*\bcontext_len=(\d+)", _one("max_model_len", _i, "sglang")),
        (
            rf"Capture cuda graph end\. Time elapsed: (?P<s>{_NUM}) ?s\..*?mem usage=(?P<gib>{_NUM}) ?GB",
            _graphs,
        ),
        (r"\b[Ss][Gg][Ll]ang(?: version)?[ =:]+v?(\d+\.\d+\.\d+[\w.+\-]*)", _one("version", str, "sglang")),
    )
)


def clean_line(line: str) -> str:
    """Strip ANSI colour codes and the logger prefix (process tag, level, time, source)."""
    return _PREFIX.sub("", _ANSI.sub("", line), count=1).strip()


def parse_line(line: str) -> list[LogFact]:
    """The figures one log line states, in the order found; [] for any other line."""
    text = clean_line(line)
    facts: list[LogFact] = []
    for pattern, handler in _RULES:
        match = pattern.search(text)
        if match is not None:
            facts.extend(handler(match))
    return facts



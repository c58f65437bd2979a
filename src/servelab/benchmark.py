"""One `servelab bench` as asked: the workload built, the schedule drawn, the run against the
target (`client.run.bench_run`), the result summarised, named and saved.

The CLI parses vLLM's flags into a `BenchRequest` (a target, a workload, a load, what to
save) and calls `run_bench`; it prints the outcome. Nothing here reads a flag.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from servelab.client.backends import SamplingParams
from servelab.client.run import RemoteClients, RunPlan, Sent, bench_run, lora_sequence, rps_change_events
from servelab.client.sessions import detailed_columns
from servelab.client.target import TargetConfig
from servelab.client.workers import new_event_loop
from servelab.errors import ServelabError
from servelab.metrics.result import BenchResult, RunInfo, write_result
from servelab.metrics.summary import SummaryOptions, summarize
from servelab.metrics.traps import result_json
from servelab.storage import check_writable, check_writable_dir
from servelab.workload.arrivals import ArrivalOptions, rates_rps, schedule_s
from servelab.workload.datasets import DatasetOptions, build_workload
from servelab.workload.tokenizer import load_tokenizer

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# vLLM forces ignore_eos for these, so generation runs to the requested length.
IGNORE_EOS_DATASETS = ("random", "random-mm", "timed_trace")


@dataclass(frozen=True, slots=True)
class SaveTo:
    """Where the result JSON goes: `result_dir` (default .), `filename` (default vLLM's
    name), `append` (a line per run, as vLLM's --append-result)."""

    result_dir: Path | None = None
    filename: str | None = None
    append: bool = False

    def check(self) -> None:
        """Before any request: a bad path must not lose the run."""
        if self.filename is not None:
            check_writable((self.result_dir or Path(".")) / self.filename, "--result-dir/--result-filename")
        else:
            check_writable_dir(self.result_dir or Path("."), "--result-dir")

    def path(self, run: RunInfo) -> Path:
        """vLLM's result file name unless one is given: `{label}-{rate}qps[-concurrencyN]-
        {model}-{date}.json` (the rate as Python prints a float: "10.0", "inf"), or with a
        ramp-up `{label}-ramp-up-{strategy}-{start}qps-{end}qps[-concurrencyN]-{model}-
        {date}.json` (whole rates as ints, as vLLM's int flags print)."""
        filename = self.filename
        if filename is None:
            label = run.label or run.backend
            if run.ramp_up_strategy is not None:
                rate = (f"ramp-up-{run.ramp_up_strategy}-{_rps_word(run.ramp_up_start_rps)}qps-"
                        f"{_rps_word(run.ramp_up_end_rps)}qps")
            else:
                rate = f"{float(run.request_rate)}qps"
            conc = f"-concurrency{run.max_concurrency}" if run.max_concurrency is not None else ""
            filename = f"{label}-{rate}{conc}-{run.model_id.split('/')[-1]}-{run.date}.json"
        return (self.result_dir or Path(".")) / filename


def _rps_word(rps: float | None) -> str:
    # vLLM's ramp-up rates are ints ("20"); servelab's may be fractional ("20.5").
    return f"{rps:g}" if rps is not None else "None"


@dataclass(frozen=True)
class BenchRequest:
    """One bench run: the `target` (URL, backend, model, timeout, key), the workload
    (`dataset`, `seed`), the load (`arrivals`, `max_concurrency`, `num_warmups`), what each
    request asks for (`sampling`, `ignore_eos`, `logprobs`, headers, extra body keys, LoRA
    adapters), how the summary is taken (`summary`) and labelled (`model`, `label`,
    `metadata`), what is saved (`save`, `save_detailed`, which needs
    `summary.per_request_itls`), and who sends (`processes`, or the `remote` clients)."""

    target: TargetConfig
    dataset: DatasetOptions
    seed: int
    arrivals: ArrivalOptions
    sampling: SamplingParams
    summary: SummaryOptions
    max_concurrency: int | None = None
    num_warmups: int = 0
    model: str | None = None
    label: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    lora_modules: tuple[str, ...] = ()
    lora_assignment: str = "random"
    ignore_eos: bool = False
    logprobs: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
    extra_body: dict[str, object] = field(default_factory=dict)
    request_id_prefix: str | None = None
    ready_check_timeout_s: float = 0.0
    profile: bool = False
    progress: bool = True
    save: SaveTo | None = None
    save_detailed: bool = False
    processes: int = 1
    remote: RemoteClients | None = None

    def check(self) -> None:
        """Refuse what cannot run, naming the flag, before any request is sent."""
        if self.processes < 1:
            raise ServelabError(f"--num-client-processes {self.processes}: must be >= 1")
        if self.remote is not None and self.processes > 1:
            raise ServelabError("--ray-workers and --num-client-processes: give one (each Ray worker is one "
                                "client process)")
        if self.lora_assignment not in ("random", "round-robin"):
            raise ServelabError(f"--lora-assignment {self.lora_assignment}: choose random or round-robin")
        if self.logprobs is not None and self.logprobs < 0:
            raise ServelabError(f"--logprobs {self.logprobs}: must be >= 0")
        if self.ready_check_timeout_s < 0:
            raise ServelabError(f"--ready-check-timeout-sec {self.ready_check_timeout_s:g}: must be >= 0")
        if self.save_detailed and not self.summary.per_request_itls:
            # a caller's mistake, not the user's: found before any request is sent
            raise ValueError("save_detailed needs SummaryOptions(per_request_itls=True)")
        if self.save is not None:
            self.save.check()


@dataclass(frozen=True)
class BenchOutcome:
    """What a run gave: the summarised result, its JSON (as saved), the raw run, and the
    file it went to (None: not saved)."""

    result: BenchResult
    data: dict[str, Any]
    sent: Sent
    path: Path | None


def run_bench(req: BenchRequest, say: Callable[[str], None] = lambda _l: None) -> BenchOutcome:
    """Check `req`, build its workload, send it, summarise and (if asked) save the result;
    `say` prints progress and notes."""
    req.check()
    tok = load_tokenizer(req.dataset.tokenizer)
    work = build_workload(req.dataset, tok, req.seed)
    if not work.requests:
        raise ServelabError("the workload has no requests")
    for note in work.notes:
        say(f"note: {note}")  # plain: notes quote paths and names verbatim
    if req.sampling.temperature is None:
        say("note: no --temperature: the server's default applies (vLLM: the model's "
            "generation_config), as in vllm bench serve; --temperature 0 for greedy")
    intended = schedule_s(work, req.arrivals, np.random.default_rng(req.seed), sessions=True)
    target = dataclasses.replace(
        req.target, sampling=req.sampling,
        ignore_eos=req.ignore_eos or req.dataset.dataset_name in IGNORE_EOS_DATASETS,
        extra_headers=req.headers, extra_body=req.extra_body, logprobs=req.logprobs,
        request_id_prefix=(req.request_id_prefix if req.request_id_prefix is not None
                           else f"bench-{uuid.uuid4().hex[:8]}-"),
        lora_models=lora_sequence(list(req.lora_modules), req.lora_assignment, len(work.requests),
                                  np.random.default_rng([req.seed, 1])),
        # Texts only where a figure needs them: --save-detailed's generated_texts, the
        # history of multi-turn sessions, chat's reasoning tokens.
        keep_text=req.save_detailed or work.sessions is not None or req.target.backend.chat)
    local = urlsplit(target.base_url).hostname in LOCAL_HOSTS
    if req.remote is not None and local:
        say(f"note: --ray-workers: workers on other nodes cannot reach {target.base_url}; give the "
            "server's address as the nodes see it")
    plan = RunPlan(max_concurrency=req.max_concurrency, num_warmups=req.num_warmups, processes=req.processes,
                   ready_check_timeout_s=req.ready_check_timeout_s, profile=req.profile, progress=req.progress,
                   sample_gpu=local, remote=req.remote)
    say(f"bench: {len(work.requests)} requests to {target.url}, seed {req.seed}")
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        sent = runner.run(bench_run(target, work.requests, intended, plan, say, work.sessions))
    target = sent.target
    result = summarize(sent.records, max(sent.t_end - sent.t0, 1e-9), req.summary)
    rps_events = (rps_change_events(rates_rps(len(work.requests), req.arrivals).tolist(), sent.records,
                                    sent.wall_t0) if req.arrivals.ramp_up_strategy else ())
    run = RunInfo.now(
        backend=target.backend.name, label=req.label or target.backend.name, model_id=req.model or target.model,
        tokenizer_id=work.tokenizer.name, num_prompts=len(work.requests), arrivals=req.arrivals,
        max_concurrency=req.max_concurrency, metadata=req.metadata, seed=req.seed, tokenizer=work.tokenizer.source,
        sampling=req.sampling.fields(), ignore_eos=target.ignore_eos, rps_change_events=rps_events)
    result = result.with_run(run).with_server(sent.server)
    if sent.gpu is not None:
        result = result.with_gpu(sent.gpu)
    if sent.interrupted:
        result = result.as_partial()
    data = result_json(result, detailed=req.save_detailed)
    if req.save_detailed and work.sessions is not None:
        data["servelab"].update(detailed_columns(work.requests, work.sessions, sent.records))
    if req.remote is not None:
        data["servelab"]["client_workers"] = req.remote.shares_json()
    path = None
    if req.save is not None:
        path = req.save.path(run)
        write_result(path, data, req.save.append)
        say(f"result written to {path}")
    return BenchOutcome(result, data, sent, path)

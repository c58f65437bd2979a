"""Per-step CPU and GPU times from inside a served vLLM 0.25.1 (issue 14, 2026-12-07): is an
engine step with prefill chunks beside 30-60 decodes bound by the GPU or by the engine core's
CPU, and what does the CPU spend per step and per request? On PYTHONPATH for the server only;
each process appends JSON lines to $HOOK_DIR/<pid>.jsonl. Times: `perf_counter` seconds (the
system-wide monotonic clock the servelab client stamps with) and, beside them, the calling
thread's CPU seconds (`thread_time`: what the thread ran, not what it waited for, the GIL
included).

Engine-core process (records):
- sch: `Scheduler.schedule` (start, end, thread CPU at both; tokens, requests, chunks of more
  than one token, their tokens, new requests with their chunk);
- exe / smp: the model runner's `execute_model` / `sample_tokens` (V1 and V2 runners: start,
  end, thread CPU, step index). A CUDA event is recorded on the current stream at
  `execute_model`'s entry and at `sample_tokens`' exit (never during a CUDA-graph capture or a
  dummy run); `gpu` gives both on the perf_counter axis (a reference event synchronised once),
  so a step's GPU span starts when the stream reached the step's first work;
- res: `AsyncOutputFuture.result`: the engine core's wait for a step's sampled tokens;
- upd: `Scheduler.update_from_output` (start, end, thread CPU);
- pre: `EngineCore.preprocess_add_request` (the input thread: deserialised request to
  `Request`, prefix-cache block hashes included);
- eadd: `Scheduler.add_request`.
API-server process: tok (`BaseRenderer._tokenize_prompt`), add (`AsyncLLM._add_request`), out1
(`OutputProcessor.process_outputs`), each with thread CPU.
Both: `cpu`, every 10 ms from a sampler thread: the process's CPU seconds and each Python
thread's whose CPU moved (`thr` names a thread once).
"""
import collections
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time

_DIR = os.environ.get("HOOK_DIR")
_lock = threading.Lock()
_start_lock = threading.Lock()
_state = {"fh": None, "step": 0, "ref": None, "pending": collections.deque(), "open": None,
          "sampler": False}
_pc, _tt = time.perf_counter, time.thread_time


def _emit(*rec):
    with _lock:
        if _state["fh"] is None:
            _state["fh"] = open(os.path.join(_DIR, f"{os.getpid()}.jsonl"), "a", buffering=1 << 16)
        _state["fh"].write(json.dumps(rec) + "\n")
        if rec[0] in ("out1", "upd", "cpu"):
            _state["fh"].flush()


def _sampler():
    known = {}
    last = {}
    while True:
        time.sleep(0.01)
        rows = []
        for th in threading.enumerate():
            ident = th.ident
            if ident is None:
                continue
            try:
                c = time.clock_gettime(time.pthread_getcpuclockid(ident))
            except (OSError, ProcessLookupError, OverflowError):
                continue
            if ident not in known:
                known[ident] = len(known)
                _emit("thr", known[ident], th.name)
            if last.get(ident) != c:
                last[ident] = c
                rows.append([known[ident], round(c, 6)])
        _emit("cpu", _pc(), round(time.process_time(), 6), rows)


def _start_sampler():
    if _state["sampler"]:
        return
    with _start_lock:
        if _state["sampler"]:
            return
        _state["sampler"] = True
        threading.Thread(target=_sampler, name="hook-sampler", daemon=True).start()


def _timed(tag, fn, extra=None):
    def wrapper(*a, **k):
        _start_sampler()
        t0, c0 = _pc(), _tt()
        out = fn(*a, **k)
        rec = [tag, t0, _pc(), c0, _tt()]
        if extra is not None:
            rec += extra(a, k, out)
        _emit(*rec)
        return out
    return wrapper


# GPU events -----------------------------------------------------------------------------------
def _gpu_ok(torch, a, k):
    if k.get("dummy_run") or k.get("is_profile"):
        return False
    so = a[1] if len(a) > 1 else k.get("scheduler_output")
    if so is None or getattr(so, "total_num_scheduled_tokens", 0) <= 0:
        return False
    return not torch.cuda.is_current_stream_capturing()


def _event(torch):
    if _state["ref"] is None:
        torch.cuda.synchronize()
        ref = torch.cuda.Event(enable_timing=True)
        ref.record()
        ref.synchronize()
        _state["ref"] = (ref, _pc())
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


def _drain():
    ref = _state["ref"]
    q = _state["pending"]
    while q and q[0][2].query():
        idx, e0, e1 = q.popleft()
        _emit("gpu", idx, ref[1] + ref[0].elapsed_time(e0) / 1e3, ref[1] + ref[0].elapsed_time(e1) / 1e3)


def _patch_runner(mod):
    import torch
    cls = mod.GPUModelRunner
    o_exe, o_smp = cls.execute_model, cls.sample_tokens

    def execute_model(self, *a, **k):
        _start_sampler()
        t0, c0 = _pc(), _tt()
        ok = _gpu_ok(torch, (self, *a), k)
        e0 = _event(torch) if ok else None
        out = o_exe(self, *a, **k)
        if ok:
            _state["step"] += 1
            _state["open"] = (_state["step"], e0)
        _emit("exe", t0, _pc(), c0, _tt(), _state["step"] if ok else -1)
        return out

    def sample_tokens(self, *a, **k):
        t0, c0 = _pc(), _tt()
        out = o_smp(self, *a, **k)
        got = _state["open"]
        idx = -1
        if got is not None and not torch.cuda.is_current_stream_capturing():
            _state["open"] = None
            idx = got[0]
            _state["pending"].append((idx, got[1], _event(torch)))
        _emit("smp", t0, _pc(), c0, _tt(), idx)
        return out
    cls.execute_model, cls.sample_tokens = execute_model, sample_tokens


def _patch_uniproc(mod):
    cls = mod.AsyncOutputFuture
    orig = cls.result

    def result(self, *a, **k):
        t0 = _pc()
        out = orig(self, *a, **k)
        _emit("res", t0, _pc())
        return out
    cls.result = result


def _sched_extra(a, k, so):
    new = [[r.req_id, so.num_scheduled_tokens.get(r.req_id, 0)] for r in so.scheduled_new_reqs]
    big = sum(1 for n in so.num_scheduled_tokens.values() if n > 1)
    pre = sum(n for n in so.num_scheduled_tokens.values() if n > 1)
    return [so.total_num_scheduled_tokens, len(so.num_scheduled_tokens), big, pre, new]


def _patch_scheduler(mod):
    cls = mod.Scheduler
    o_upd, o_add = cls.update_from_output, cls.add_request
    cls.schedule = _timed("sch", cls.schedule, _sched_extra)

    def update_from_output(self, so, mro, *a, **k):
        t0, c0 = _pc(), _tt()
        out = o_upd(self, so, mro, *a, **k)
        _emit("upd", t0, _pc(), c0, _tt(), so.total_num_scheduled_tokens)
        if _state["ref"] is not None:
            _drain()
        return out

    def add_request(self, request, *a, **k):
        _emit("eadd", _pc(), request.request_id)
        return o_add(self, request, *a, **k)
    cls.update_from_output, cls.add_request = update_from_output, add_request


def _patch_core(mod):
    cls = mod.EngineCore
    cls.preprocess_add_request = _timed(
        "pre", cls.preprocess_add_request, lambda a, k, out: [getattr(out[0], "request_id", "")])


# API server -----------------------------------------------------------------------------------
def _patch_renderer(mod):
    cls = mod.BaseRenderer
    cls._tokenize_prompt = _timed("tok", cls._tokenize_prompt)


def _patch_async_llm(mod):
    cls = mod.AsyncLLM
    orig = cls._add_request

    async def _add_request(self, request, *a, **k):
        _start_sampler()
        _emit("add", _pc(), request.request_id, request.arrival_time, time.time())
        return await orig(self, request, *a, **k)
    cls._add_request = _add_request


def _patch_output(mod):
    cls = mod.OutputProcessor
    cls.process_outputs = _timed(
        "out1", cls.process_outputs,
        lambda a, k, r: [len(a[1]), sum(len(o.new_token_ids) for o in a[1])])


_TARGETS = {
    "vllm.renderers.base": _patch_renderer,
    "vllm.v1.engine.async_llm": _patch_async_llm,
    "vllm.v1.engine.output_processor": _patch_output,
    "vllm.v1.core.sched.scheduler": _patch_scheduler,
    "vllm.v1.engine.core": _patch_core,
    "vllm.v1.executor.uniproc_executor": _patch_uniproc,
    "vllm.v1.worker.gpu_model_runner": _patch_runner,
    "vllm.v1.worker.gpu.model_runner": _patch_runner,
}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, patch):
        self.inner, self.patch = inner, patch

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        try:
            self.patch(module)
            _emit("patched", module.__name__)
        except Exception as exc:  # a failed patch must not stop the server
            _emit("patch_failed", module.__name__, repr(exc))


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        patch = _TARGETS.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, patch)
        return spec


if _DIR:
    os.makedirs(_DIR, exist_ok=True)
    sys.meta_path.insert(0, _Finder())

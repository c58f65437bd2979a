"""Timestamps from inside a served vLLM 0.25.1 (issue 14, 2026-12-03): where a request's time
goes between the client and the GPU, and how busy the API server's event loop is.

Extends ../../sim-waves-2026-12-03/hook with: the completion handler's entry (`srv0`, after
HTTP parsing and validation) and the stream's end (`gen1`, after `[DONE]` went out), both with
the client's X-Request-Id; and a probe task on the API server's loop that wakes every 1 ms and
records (perf_counter, the loop thread's CPU time): the CPU the loop thread spent between two
wakes is the loop's own work in that interval (the tokenizer runs on another thread, waits for
the GIL are not CPU), so its busy time per interval is measured, not inferred from lateness. On PYTHONPATH for the server only; each process
appends JSON lines to $HOOK_DIR/<pid>.jsonl (perf_counter seconds: the system-wide monotonic
clock the servelab client stamps with, so the three processes' times compare).

API-server process: tokenizer start/end (`_tokenize_prompt`, in the renderer's worker thread),
the hand-off to the engine core (`AsyncLLM._add_request`: request id and vLLM's arrival
time), the output handler's processing of each engine output batch (`process_outputs`).
Engine-core process: a request's arrival in the scheduler, each `schedule()` call (tokens,
requests, new requests and their chunks), each `update_from_output()` call.
"""
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time

_DIR = os.environ.get("HOOK_DIR")
_lock = threading.Lock()
_fh = None


def _emit(*rec):
    global _fh
    with _lock:
        if _fh is None:
            _fh = open(os.path.join(_DIR, f"{os.getpid()}.jsonl"), "a", buffering=1 << 16)
        _fh.write(json.dumps(rec) + "\n")
        if rec[0] in ("out1", "upd0", "lag"):
            _fh.flush()


def _patch_renderer(mod):
    cls = mod.BaseRenderer
    orig = cls._tokenize_prompt

    def _tokenize_prompt(self, *a, **k):
        t0 = time.perf_counter()
        out = orig(self, *a, **k)
        _emit("tok", t0, time.perf_counter(), threading.get_ident())
        return out
    cls._tokenize_prompt = _tokenize_prompt


def _patch_async_llm(mod):
    cls = mod.AsyncLLM
    orig = cls._add_request

    async def _add_request(self, request, *a, **k):
        _emit("add", time.perf_counter(), request.request_id, request.arrival_time, time.time())
        return await orig(self, request, *a, **k)
    cls._add_request = _add_request


def _patch_output(mod):
    cls = mod.OutputProcessor
    orig = cls.process_outputs

    def process_outputs(self, outs, *a, **k):
        t0 = time.perf_counter()
        r = orig(self, outs, *a, **k)
        _emit("out1", t0, time.perf_counter(), len(outs),
              sum(len(o.new_token_ids) for o in outs))
        return r
    cls.process_outputs = process_outputs


_probe = []


async def _loop_probe():
    import asyncio
    buf = []
    while True:
        await asyncio.sleep(0.001)
        buf.append((time.perf_counter(), time.thread_time()))
        if len(buf) >= 200:
            _emit("lag", buf)
            buf = []


def _start_probe():
    if not _probe:
        import asyncio
        _probe.append(asyncio.get_running_loop().create_task(_loop_probe()))


def _patch_serving(mod):
    cls = mod.OpenAIServingCompletion
    o_create, o_gen = cls.create_completion, cls.completion_stream_generator

    async def create_completion(self, request, raw_request=None, *a, **k):
        rid = raw_request.headers.get("X-Request-Id") if raw_request is not None else None
        _emit("srv0", time.perf_counter(), rid)
        _start_probe()
        return await o_create(self, request, raw_request, *a, **k)

    async def completion_stream_generator(self, request, engine_inputs, result_generator,
                                          request_id, *a, **k):
        async for chunk in o_gen(self, request, engine_inputs, result_generator, request_id, *a, **k):
            yield chunk
        _emit("gen1", time.perf_counter(), request_id)
    cls.create_completion = create_completion
    cls.completion_stream_generator = completion_stream_generator


def _patch_scheduler(mod):
    cls = mod.Scheduler
    o_sched, o_upd, o_add = cls.schedule, cls.update_from_output, cls.add_request

    def schedule(self, *a, **k):
        t0 = time.perf_counter()
        so = o_sched(self, *a, **k)
        new = [[r.req_id, so.num_scheduled_tokens.get(r.req_id, 0)] for r in so.scheduled_new_reqs]
        big = sum(1 for n in so.num_scheduled_tokens.values() if n > 1)
        pre = sum(n for n in so.num_scheduled_tokens.values() if n > 1)
        _emit("sch", t0, time.perf_counter(), so.total_num_scheduled_tokens,
              len(so.num_scheduled_tokens), big, pre, new)
        return so

    def update_from_output(self, so, mro, *a, **k):
        _emit("upd0", time.perf_counter(), so.total_num_scheduled_tokens)
        return o_upd(self, so, mro, *a, **k)

    def add_request(self, request, *a, **k):
        _emit("eadd", time.perf_counter(), request.request_id, request.arrival_time)
        return o_add(self, request, *a, **k)
    cls.schedule, cls.update_from_output, cls.add_request = schedule, update_from_output, add_request


_TARGETS = {
    "vllm.renderers.base": _patch_renderer,
    "vllm.v1.engine.async_llm": _patch_async_llm,
    "vllm.v1.engine.output_processor": _patch_output,
    "vllm.v1.core.sched.scheduler": _patch_scheduler,
    "vllm.entrypoints.openai.completion.serving": _patch_serving,
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

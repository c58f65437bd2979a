"""Inside a served vLLM 0.25.1 (issue 17, 2026-12-04): does the served engine's extra ~4.5 ms
per step at batch 128-256 (../spec-cpu-2026-12-03, finding 4) come from GIL hand-overs
between the engine core's busy loop and its input/output threads?

On PYTHONPATH for the server only. Each process appends JSON lines to $HOOK_DIR/<pid>.jsonl
(perf_counter seconds):
- `sch` t0 t1 tokens requests: each `Scheduler.schedule()` (the step boundary), `upd0` t:
  each `update_from_output()` entry (engine-core process);
- `cpu` t {thread name: cpu seconds}: every 0.5 s, each Python thread's CPU time from
  /proc/self/task/<native_id>/stat (utime + stime), so the input/output threads' CPU per step
  can be read beside the busy loop's;
- `swi` t seconds: the interpreter's switch interval, set from the file $SWITCH_FILE (polled
  by the same thread; absent or empty: CPython's 5 ms), so one server can run a load at
  5 ms and at 0.5 ms without a restart.
"""
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time

_DIR = os.environ.get("HOOK_DIR")
_SWITCH = os.environ.get("SWITCH_FILE")
_lock = threading.Lock()
_fh = None
_TICK = os.sysconf("SC_CLK_TCK")


def _emit(*rec):
    global _fh
    with _lock:
        if _fh is None:
            _fh = open(os.path.join(_DIR, f"{os.getpid()}.jsonl"), "a", buffering=1 << 16)
        _fh.write(json.dumps(rec) + "\n")


def _thread_cpu():
    out = {}
    for th in threading.enumerate():
        nid = getattr(th, "native_id", None)
        if nid is None:
            continue
        try:
            with open(f"/proc/self/task/{nid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[f"{th.name}:{nid}"] = (int(fields[11]) + int(fields[12])) / _TICK
        except OSError:
            pass
    return out


def _sampler():
    current = sys.getswitchinterval()
    _emit("swi", time.perf_counter(), current)
    while True:
        time.sleep(0.5)
        want = current
        if _SWITCH:
            try:
                with open(_SWITCH) as f:
                    txt = f.read().strip()
                want = float(txt) if txt else 0.005
            except (OSError, ValueError):
                want = 0.005
        if want != current:
            sys.setswitchinterval(want)
            current = sys.getswitchinterval()
            _emit("swi", time.perf_counter(), current)
        _emit("cpu", time.perf_counter(), _thread_cpu())
        with _lock:
            if _fh is not None:
                _fh.flush()


def _patch_scheduler(mod):
    cls = mod.Scheduler
    o_sched, o_upd = cls.schedule, cls.update_from_output

    def schedule(self, *a, **k):
        t0 = time.perf_counter()
        so = o_sched(self, *a, **k)
        _emit("sch", t0, time.perf_counter(), so.total_num_scheduled_tokens,
              len(so.num_scheduled_tokens))
        return so

    def update_from_output(self, so, mro, *a, **k):
        _emit("upd0", time.perf_counter(), so.total_num_scheduled_tokens)
        return o_upd(self, so, mro, *a, **k)
    cls.schedule, cls.update_from_output = schedule, update_from_output


_TARGETS = {"vllm.v1.core.sched.scheduler": _patch_scheduler}


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
    threading.Thread(target=_sampler, name="sl-hook-sampler", daemon=True).start()

    def _in_child():
        # vLLM forks its engine core: threads do not survive a fork, and the child needs its
        # own file
        global _fh, _lock
        _fh, _lock = None, threading.Lock()
        threading.Thread(target=_sampler, name="sl-hook-sampler", daemon=True).start()
    os.register_at_fork(after_in_child=_in_child)

"""Engine steps of vLLM 0.25.1 at a fixed decode batch, with and without n-gram speculation
(issue 17: where does K = 4 stop paying, and what does its step cost above the captured
CUDA-graph sizes?).

Runs one model (dummy weights) in vLLM's offline engine in this process with the server's
limits (8,192 batched tokens, 1,024 sequences, prefix caching on, as `vllm serve` on the
H200), optionally with `--speculative-config`. For each batch B of `--batches` it submits B
prompts of `--prompt-tokens` random token ids at once (greedy, `--output-tokens` each,
ignore EOS) and records every engine step the scheduler makes: when its schedule, execute,
sample and update phases start and end (the engine core's own calls, wrapped on the
instance: perf_counter, no synchronisation added), the requests scheduled, their tokens and
the draft tokens among them. A warm-up run at each B precedes the recorded one (fresh
prompts each). The step time at batch B is the interval between consecutive updates over
the steps where all B requests decode (no prefill chunk), the same rule with and without
asynchronous scheduling. Writes one JSON (`--out`); `summarise.py` tabulates it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process


def _timed(steps: list[dict], phase: str, fn):
    def call(*args, **kwargs):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        rec = {"phase": phase, "t0": t, "t1": time.perf_counter()}
        if phase == "schedule":
            so = out
            spec = sum(len(v) for v in so.scheduled_spec_decode_tokens.values())
            rec.update(reqs=len(so.num_scheduled_tokens), tokens=so.total_num_scheduled_tokens,
                       spec=spec,
                       prefill=sum(1 for r, n in so.num_scheduled_tokens.items()
                                   if n > 1 + len(so.scheduled_spec_decode_tokens.get(r, ()))))
        steps.append(rec)
        return out
    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--speculative-config", default=None, help="vLLM's JSON, e.g. n-gram K = 4")
    ap.add_argument("--batches", default="1,16,64,96,100,101,112,128,160,192,256")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=128)
    args = ap.parse_args()

    import torch
    import vllm
    from vllm import LLM, SamplingParams

    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    spec = json.loads(args.speculative_config) if args.speculative_config else None
    t0 = time.monotonic()
    llm = LLM(model=args.model, load_format="dummy", seed=0, gpu_memory_utilization=0.9,
              max_model_len=4096, max_num_batched_tokens=8192, max_num_seqs=1024,
              speculative_config=dict(spec) if spec else None)  # vLLM adds its objects to the dict it gets
    start_s = time.monotonic() - t0
    core = llm.llm_engine.engine_core.engine_core
    steps: list[dict] = []
    sched, ex = core.scheduler, core.model_executor
    sched.schedule = _timed(steps, "schedule", sched.schedule)
    sched.update_from_output = _timed(steps, "update", sched.update_from_output)
    ex.execute_model = _timed(steps, "execute", ex.execute_model)
    ex.sample_tokens = _timed(steps, "sample", ex.sample_tokens)
    params = SamplingParams(max_tokens=args.output_tokens, ignore_eos=True, temperature=0.0)
    rng = random.Random(1)

    def run(b: int) -> tuple[float, list[dict]]:
        ps = [{"prompt_token_ids": [rng.randrange(100, min(50_000, cfg["vocab_size"])) for _ in range(args.prompt_tokens)]}
              for _ in range(b)]
        steps.clear()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        llm.generate(ps, params, use_tqdm=False)
        return time.perf_counter() - t, list(steps)

    out = {"model": os.path.basename(args.model.rstrip("/")), "layers": cfg["num_hidden_layers"],
           "architecture": cfg["architectures"][0], "speculative_config": spec,
           "async_scheduling": bool(getattr(core, "async_scheduling", False)),
           "v2_model_runner": bool(getattr(llm.llm_engine.vllm_config, "use_v2_model_runner", False)),
           "vllm": vllm.__version__, "torch": torch.__version__, "start_s": round(start_s, 1),
           "prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens, "batches": {}}
    for b in (int(x) for x in args.batches.split(",")):
        run(b)  # warm-up at this size
        wall_s, recs = run(b)
        out["batches"][str(b)] = {"wall_s": round(wall_s, 4), "phases": recs}
        upd = [r["t1"] for r in recs if r["phase"] == "update"]
        sch = [r for r in recs if r["phase"] == "schedule"]
        gaps = [(upd[i] - upd[i - 1]) * 1e3 for i in range(1, min(len(upd), len(sch)))
                if sch[i]["reqs"] == b and sch[i]["prefill"] == 0]
        print(f"{out['model']} spec={bool(spec)} B={b}: wall {wall_s:.2f} s, {len(sch)} steps, "
              f"decode step median {statistics.median(gaps) if gaps else float('nan'):.2f} ms "
              f"over {len(gaps)}", flush=True)
        _write(Path(args.out), out)  # as it goes: a later failure keeps the batches done


def _write(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


if __name__ == "__main__":
    main()

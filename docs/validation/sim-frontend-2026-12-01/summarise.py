"""vLLM 0.25.1's API server on the H200 host, from this run's probes (issue 14).

    .venv/bin/python docs/validation/sim-frontend-2026-12-01/summarise.py

Prints, per served model and cell (results/<model>/<cell>.json, `servelab bench
--save-detailed`): requests/s, output tokens/s, mean TTFT, TPOT, SSE chunks (tokens less
the client's count of tokens beyond one per chunk) and vLLM's own histogram means over the
cell (the /metrics snapshot after each cell less the one before). Then derives the figures
servelab ships as `servelab.sim.cost.H200_API_SERVER`, from Qwen3-0.6B's probes only (its
GPU step is the shortest, so the API server binds first):
- tokenizer worker: the 1,024- and 4,096-token one-output-token probes are bound by it
  (one request at a time), so 1 / (requests/s) = tokenize_us + per_token_us x tokens;
- event loop per request: the 64-token probe is bound by the loop (the tokenizer needs
  1.2 ms there), 1 / (requests/s) = request + hand-off + one token + one chunk; the
  split before / after tokenising from when a burst of 64 first reaches the engine
  (the first TTFT of the burst, ~70 ms = 64 intakes);
- per output token and per chunk: 128 streams of 512 tokens saturate the loop
  (tokens/s x per_token + chunks/s x per_chunk + requests/s x per_request = 1 s/s), and 64
  streams of random 1024/128 (../sim-kernels-2026-12-01, 4.53 ms TPOT, 1.02 tokens per
  chunk) keep up: 64 x (per_token + per_chunk) = one step.
"""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent
RES = HERE / "results"
TINY_C64 = HERE.parent / "sim-kernels-2026-12-01" / "results" / "qwen3-0.6b" / "rnd_c64.json"
HIST = ("time_to_first_token", "request_queue_time", "request_prefill_time", "e2e_request_latency")


def _hist(path: Path) -> dict[str, float]:
    """{'<histogram>:sum' / ':count': value} from a /metrics snapshot (labels summed)."""
    out: dict[str, float] = {}
    if path.exists():
        for family in text_string_to_metric_families(path.read_text()):
            for sample in family.samples:
                for h in HIST:
                    for kind in ("sum", "count"):
                        if sample.name == f"vllm:{h}_seconds_{kind}":
                            out[f"{h}:{kind}"] = out.get(f"{h}:{kind}", 0.0) + sample.value
    return out


def cells(model: str) -> dict[str, dict]:
    """Each cell's figures, in the order the cells ran (device.log)."""
    order, mine = [], False
    for ln in (RES / "device.log").read_text().splitlines():
        if " serve " in ln or " trace " in ln:
            mine = ln.split()[-1] == model
        elif mine and ln.strip().endswith("rc=0"):
            order.append(ln.split()[-2])
    prev = _hist(RES / model / "metrics-before.txt")
    out = {}
    for name in order:
        f = RES / model / f"{name}.json"
        if not f.exists() or name in out:
            continue
        d = json.loads(f.read_text())
        cur = _hist(RES / model / f"{name}.metrics.txt")
        srv = {}
        if not name.startswith("warm"):
            for h in HIST:
                n = cur.get(f"{h}:count", 0.0) - prev.get(f"{h}:count", 0.0)
                if n > 0:
                    srv[h] = 1e3 * (cur[f"{h}:sum"] - prev[f"{h}:sum"]) / n
        prev = cur or prev
        extra = d["servelab"]["traps"]["tokens_beyond_one_per_chunk"]
        tokens = d["total_output_tokens"]
        out[name] = {"req_s": d["completed"] / d["duration"], "tok_s": d["output_throughput"],
                     "ttft_ms": d["mean_ttft_ms"], "tpot_ms": d["mean_tpot_ms"] or 0.0,
                     "chunks_s": (tokens - extra) / d["duration"], "tokens": tokens,
                     "chunks": tokens - extra, "first_ttft_ms": 1e3 * d["ttfts"][0], "server": srv}
    return out


def derive(tiny: dict[str, dict]) -> dict[str, float]:
    """The API server's figures (us) from Qwen3-0.6B's probes (see the module doc)."""
    t1, t4 = 1e6 / tiny["in1024_c64"]["req_s"], 1e6 / tiny["in4096_c16"]["req_s"]
    per_token = (t4 - t1) / (4096 - 1024)
    tokenize = t1 - per_token * 1024
    loop_req = 1e6 / tiny["in64_c64"]["req_s"]           # request + hand-off + token + chunk
    before = tiny["in64_c64"]["first_ttft_ms"] * 1e3 / 64
    sat = tiny["out512_c128"]
    c64 = json.loads(TINY_C64.read_text())
    per_pair = c64["mean_tpot_ms"] * 1e3 / 64               # per token + per chunk, keeping up
    busy = 1e6 - sat["req_s"] * loop_req                   # us per second left to stream
    # tok_s x a + chunks_s x b = busy, a + b = per_pair
    a = (busy - sat["chunks_s"] * per_pair) / (sat["tok_s"] - sat["chunks_s"])
    b = per_pair - a
    req = loop_req - a - b
    return {"frontend_tokenize_us": tokenize, "frontend_us_per_prompt_token": per_token,
            "frontend_us_per_request": min(before, req), "frontend_handoff_us": req - min(before, req),
            "frontend_us_per_output_token": a, "frontend_us_per_chunk": b}


def main() -> None:
    for model in sorted(p.name for p in RES.iterdir() if p.is_dir()):
        print(f"## {model}")
        print("| cell | req/s | out tok/s | TTFT ms | TPOT ms | tokens / chunk | server TTFT | queue | prefill |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, c in cells(model).items():
            s = c["server"]
            print(f"| {name} | {c['req_s']:,.1f} | {c['tok_s']:,.0f} | {c['ttft_ms']:.1f} | {c['tpot_ms']:.2f} | "
                  f"{c['tokens'] / c['chunks']:.2f} | {s.get('time_to_first_token', float('nan')):.1f} | "
                  f"{s.get('request_queue_time', float('nan')):.1f} | {s.get('request_prefill_time', float('nan')):.1f} |")
        print()
    fig = derive(cells("qwen3-0.6b"))
    print("API-server figures (us):", ", ".join(f"{k} {v:.2f}" for k, v in fig.items()))


if __name__ == "__main__":
    main()

"""How fast the random dataset is built for the simulator, and how much memory it takes.

The fleet command of issue 19 (`servelab sim run ... --dataset-name random
--random-input-len 220 --random-output-len 200 --random-range-ratio 0.9 --request-rate 280`)
builds its requests with the built-in tokenizer, then turns them into the engines' token
ids. Two modes:

Paths (default): three ways of building the same requests, in the same process:

- one by one: `random_requests_one_by_one` (a decode and an encode per try of every
  request), then `offline_requests` encoding every text again;
- batched: `random_requests_and_ids(spliced=False)` (every request's first try decoded and
  encoded in one batch, misses retried in order), then `offline_requests` reusing the
  encodings;
- spliced: `random_requests_and_ids` (the windows' encodings spliced at forced pre-token
  boundaries, `servelab.workload.splice`), then `offline_requests` reusing them.

The bench checks that all three give identical requests and prints the speed-ups against
the one-by-one path. The spliced path keeps what it meets by window start, end and cut, so
it gains with the number of requests (`--spliced-only --num-prompts 1000000` times it alone
at the fleet's size).

`--prepare`: `servelab.sim.offline.prepare_workload` end to end (tokenizer, requests, token
ids, arrival times), the call `sim run` makes, once with the code of `--baseline-rev`
(default 03acd83, before token ids were kept as arrays; extracted with `git archive` and put
first on PYTHONPATH) and once with this checkout, each in its own process so that each
peak RSS is its own. Each process then hashes every request's prompt blocks as the engine
does (`prompt_block_hashes`, 16-token blocks) and timed apart; a digest of every request
(index, ids, output length, text), the block hashes and the arrival times must match.
Prints seconds (wall and CPU), peak RSS and the ratios.

Run it under `taskset -c 0` for the one-core figures (the tokenizer's batch calls use its
threads; the children inherit the pinning):

    .venv/bin/python bench/workload_speed.py [--num-prompts 20000] [--spliced-only]
    .venv/bin/python bench/workload_speed.py --prepare --num-prompts 1000000
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import resource
import time
from array import array
from pathlib import Path

import numpy as np

from baseline_rev import REPO, run_child, source_of

_BLOCK_SIZE = 16  # vLLM's default block size, the simulator's too


def _one_by_one(shape, tok, seed: int) -> list:
    from servelab.sim.offline import offline_requests
    from servelab.workload.synthetic import random_requests_one_by_one

    specs = random_requests_one_by_one(shape, tok, np.random.default_rng(seed))
    return offline_requests(specs, tok)


def _batched(shape, tok, seed: int) -> list:
    from servelab.sim.offline import offline_requests
    from servelab.workload.synthetic import random_requests_and_ids

    specs, ids = random_requests_and_ids(shape, tok, np.random.default_rng(seed), spliced=False)
    return offline_requests(specs, tok, ids)


def _spliced(shape, tok, seed: int) -> list:
    from servelab.sim.offline import offline_requests
    from servelab.workload.synthetic import random_requests_and_ids

    specs, ids = random_requests_and_ids(shape, tok, np.random.default_rng(seed))
    return offline_requests(specs, tok, ids)


def _paths(args: argparse.Namespace) -> None:
    from servelab.workload.synthetic import RandomShape
    from servelab.workload.tokenizer import load_tokenizer

    tok = load_tokenizer(None)
    shape = RandomShape(args.num_prompts, 220, 200, 0.9)
    paths = [("spliced (windows spliced, encoded once)", _spliced)]
    if not args.spliced_only:
        paths = [("one by one (encoded twice)", _one_by_one),
                 ("batched first tries (encoded once)", _batched)] + paths
    walls = {}
    built = {}
    for name, fn in paths:
        t = time.perf_counter()
        built[name] = fn(shape, tok, args.seed)
        walls[name] = time.perf_counter() - t
        speed = "" if name == paths[0][0] else f"  x{walls[paths[0][0]] / walls[name]:.2f}"
        print(f"{name:<42} {args.num_prompts:,} requests in {walls[name]:7.2f} s "
              f"({walls[name] / args.num_prompts * 1e6:6.1f} us/request){speed}")
    if len(built) > 1:
        ref = built[paths[0][0]]
        same = all(b == ref for b in built.values())
        print(f"requests identical: {'yes' if same else 'NO'}")
        if not same:
            raise SystemExit("the paths built different requests")


def _child(num_prompts: int, seed: int) -> None:
    """One `prepare_workload` with whatever servelab is first on the path; prints JSON."""
    import servelab
    from servelab.sim.blocks import prompt_block_hashes
    from servelab.sim.offline import prepare_workload
    from servelab.workload.arrivals import ArrivalOptions
    from servelab.workload.datasets import DatasetOptions

    dataset = DatasetOptions(dataset_name="random", num_prompts=num_prompts,
                             random_input_len=220, random_output_len=200,
                             random_range_ratio=0.9)
    arrivals = ArrivalOptions(request_rate=280.0)
    wall, cpu = time.perf_counter(), time.process_time()
    wl = prepare_workload(dataset, seed, arrivals)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gc.disable()  # as `simulate` runs: the collector paused
    t = time.process_time()
    hashes = [prompt_block_hashes(r.prompt_token_ids, _BLOCK_SIZE) for r in wl.requests]
    hash_s = time.process_time() - t
    gc.enable()
    digest = hashlib.sha256()
    for r, h in zip(wl.requests, hashes):
        digest.update(repr((r.index, r.output_len, r.route_text, r.session_key)).encode())
        digest.update(array("q", r.prompt_token_ids).tobytes())
        digest.update(array("q", h).tobytes())
    digest.update(np.asarray(wl.intended_s, dtype=np.float64).tobytes())
    digest.update(repr((wl.tokenizer_name, wl.tokenizer_source, wl.notes)).encode())
    print(json.dumps({"servelab": str(Path(servelab.__file__).parent), "wall_s": wall,
                      "cpu_s": cpu, "peak_mib": peak_mib, "hash_s": hash_s,
                      "ids_type": type(wl.requests[0].prompt_token_ids).__name__,
                      "digest": digest.hexdigest()}))


def _prepare(args: argparse.Namespace) -> None:
    child_args = ["--num-prompts", str(args.num_prompts), "--seed", str(args.seed)]
    with source_of(args.baseline_rev) as old_src:
        runs = [(f"baseline {args.baseline_rev}", run_child(__file__, child_args, old_src)),
                ("this checkout", run_child(__file__, child_args, REPO / "src"))]
    base = runs[0][1]
    n = args.num_prompts
    print(f"prepare_workload, random 220/200 +-0.9, rate 280, {n:,} requests, seed {args.seed}")
    for name, r in runs:
        ratio = "" if r is base else (f"  x{base['wall_s'] / r['wall_s']:.2f} wall, "
                                      f"x{base['cpu_s'] / r['cpu_s']:.2f} CPU, "
                                      f"peak x{r['peak_mib'] / base['peak_mib']:.2f}")
        print(f"{name:<18} {r['wall_s']:7.2f} s wall ({r['wall_s'] / n * 1e6:5.1f} us/request), "
              f"{r['cpu_s']:7.2f} s CPU, peak RSS {r['peak_mib']:7,.0f} MiB; ids as "
              f"{r['ids_type']}; block hashes {r['hash_s'] / n * 1e6:4.2f} us CPU/request{ratio}")
    for name, r in runs:
        print(f"{name}: servelab from {r['servelab']}")
    same = base["digest"] == runs[1][1]["digest"]
    print(f"requests, ids, texts, block hashes and arrival times identical: "
          f"{'yes' if same else 'NO'}")
    if not same:
        raise SystemExit("the baseline and this checkout prepared different workloads")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-prompts", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spliced-only", action="store_true",
                    help="time the spliced path alone (no reference: for sizes the others take minutes on)")
    ap.add_argument("--prepare", action="store_true",
                    help="time prepare_workload end to end against --baseline-rev, each in its own process")
    ap.add_argument("--baseline-rev", default="03acd83",
                    help="the commit --prepare compares with (default: before the compact ids)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.num_prompts, args.seed)
    elif args.prepare:
        _prepare(args)
    else:
        _paths(args)


if __name__ == "__main__":
    main()

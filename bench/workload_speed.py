"""How fast the random dataset is built for the simulator: three paths on the same requests.

The fleet command of issue 19 (`servelab sim run ... --dataset-name random
--random-input-len 220 --random-output-len 200 --random-range-ratio 0.9`) builds its
requests with the built-in tokenizer, then turns them into the engines' token ids. The
three ways run here on the same requests, in the same process:

- one by one: `random_requests_one_by_one` (a decode and an encode per try of every
  request), then `offline_requests` encoding every text again;
- batched: `random_requests_and_ids(spliced=False)` (every request's first try decoded and
  encoded in one batch, misses retried in order), then `offline_requests` reusing the
  encodings;
- spliced: `random_requests_and_ids` (the windows' encodings spliced at forced pre-token
  boundaries, `servelab.workload.splice`), then `offline_requests` reusing them.

The bench checks that all three give identical requests and prints the speed-ups against
the one-by-one path; the tokenizer's batch calls use its threads, so run it under
`taskset -c 0` for the one-core figure. The spliced path keeps the encodings of the
windows' ends and tails it meets, so it gains with the number of requests (`--spliced-only
--num-prompts 1000000` times it alone at the fleet's size).

    .venv/bin/python bench/workload_speed.py [--num-prompts 20000] [--spliced-only]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from servelab.sim.offline import OfflineRequest, offline_requests
from servelab.workload.synthetic import (
    RandomShape,
    random_requests_and_ids,
    random_requests_one_by_one,
)
from servelab.workload.tokenizer import TokenizerHandle, load_tokenizer


def _one_by_one(shape: RandomShape, tok: TokenizerHandle, seed: int) -> list[OfflineRequest]:
    specs = random_requests_one_by_one(shape, tok, np.random.default_rng(seed))
    return offline_requests(specs, tok)


def _batched(shape: RandomShape, tok: TokenizerHandle, seed: int) -> list[OfflineRequest]:
    specs, ids = random_requests_and_ids(shape, tok, np.random.default_rng(seed), spliced=False)
    return offline_requests(specs, tok, ids)


def _spliced(shape: RandomShape, tok: TokenizerHandle, seed: int) -> list[OfflineRequest]:
    specs, ids = random_requests_and_ids(shape, tok, np.random.default_rng(seed))
    return offline_requests(specs, tok, ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-prompts", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spliced-only", action="store_true",
                    help="time the spliced path alone (no reference: for sizes the others take minutes on)")
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()

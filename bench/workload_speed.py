"""How fast the random dataset is built for the simulator: the old path against the new.

The fleet command of issue 19 (`servelab sim run ... --dataset-name random
--random-input-len 220 --random-output-len 200 --random-range-ratio 0.9`) builds its
requests with the built-in tokenizer, then turns them into the engines' token ids. Both
ways run here on the same requests, in the same process:

- old: `random_requests_one_by_one` (a decode and an encode per try of every request),
  then `offline_requests` encoding every text again;
- new: `random_requests_and_ids` (every request's first try decoded and encoded in one
  batch, misses retried in order), then `offline_requests` reusing the encodings.

The bench checks that both give identical requests and prints the speed-up; the tokenizer's
batch calls use its threads, so run it under `taskset -c 0` for the one-core figure.

    .venv/bin/python bench/workload_speed.py [--num-prompts 20000]
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


def _old(shape: RandomShape, tok: TokenizerHandle, seed: int) -> list[OfflineRequest]:
    specs = random_requests_one_by_one(shape, tok, np.random.default_rng(seed))
    return offline_requests(specs, tok)


def _new(shape: RandomShape, tok: TokenizerHandle, seed: int) -> list[OfflineRequest]:
    specs, ids = random_requests_and_ids(shape, tok, np.random.default_rng(seed))
    return offline_requests(specs, tok, ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-prompts", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tok = load_tokenizer(None)
    shape = RandomShape(args.num_prompts, 220, 200, 0.9)
    walls = {}
    built = {}
    for name, fn in (("old (one by one, encoded twice)", _old), ("new (batched, encoded once)", _new)):
        t = time.perf_counter()
        built[name] = fn(shape, tok, args.seed)
        walls[name] = time.perf_counter() - t
        print(f"{name:<34} {args.num_prompts:,} requests in {walls[name]:7.2f} s "
              f"({walls[name] / args.num_prompts * 1e6:6.1f} us/request)")
    old, new = built.values()
    print(f"speed-up: {list(walls.values())[0] / list(walls.values())[1]:.2f}x; "
          f"requests identical: {'yes' if old == new else 'NO'}")
    if old != new:
        raise SystemExit("the old and the new path built different requests")


if __name__ == "__main__":
    main()

"""Topping up a dataset that holds fewer requests than `--num-prompts`, as vLLM does.

`vllm bench serve` (BenchmarkDataset.maybe_oversample_requests) draws the missing requests
with replacement from those it sampled, `random.seed(seed)` then `random.choice` each; with
`--no-oversample` it sends what the dataset has. servelab does the same with a
`random.Random(seed)` of its own (the same draws as vLLM's seeded global generator, without
touching global state) and says so in a note, because repeated prompts hit a prefix cache.
"""

from __future__ import annotations

import dataclasses
import random

from servelab.workload.request import RequestSpec


def oversample(
    requests: list[RequestSpec], num_prompts: int, seed: int, *, no_oversample: bool, source: str
) -> tuple[list[RequestSpec], list[str]]:
    """`requests` topped up to `num_prompts` (copies get the next indices), and notes.

    `source` names the data in the notes (e.g. the file). Nothing changes when there are
    already enough requests.
    """
    have = len(requests)
    if have >= num_prompts or have == 0:
        return requests, []
    if no_oversample:
        return requests, [(
            f"--num-prompts {num_prompts}: {source} gives only {have:,} requests; "
            f"--no-oversample sends those {have:,}"
        )]
    rng = random.Random(seed)
    extra = [
        dataclasses.replace(rng.choice(requests), index=have + i)
        for i in range(num_prompts - have)
    ]
    return requests + extra, [(
        f"--num-prompts {num_prompts}: {source} gives only {have:,} requests; "
        f"{num_prompts - have:,} more were drawn from them with replacement, as vllm bench "
        "serve oversamples (repeated prompts can hit the prefix cache; --no-oversample sends "
        f"only the {have:,})"
    )]

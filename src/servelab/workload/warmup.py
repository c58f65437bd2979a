"""Warm-up requests: shaped like the run's first requests, sharing no prompt prefix with them.

A warm-up that repeats a measured prompt fills the server's prefix cache with it, and that
request's TTFT is then measured against a warm cache (seen on an H200: the first 10 of 50
random-1024 requests at 26-37 ms TTFT, the rest at 57-69 ms, from 10 warm-ups that copied
them). A distinct first token breaks every block hash of the prompt (prefix caching hashes
blocks chained from the first), so a warm-up here is the measured request with a short
marker in front: the same lengths and shape, no shared cache blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from servelab.workload.request import ChatMessage, RequestSpec


def warmup_marker(i: int) -> str:
    """The text put in front of warm-up `i`'s prompt."""
    return f"[warm-up {i}] "


def warmup_requests(requests: Sequence[RequestSpec], num_warmups: int) -> list[RequestSpec]:
    """`num_warmups` requests cycling over `requests`, each with a marker before its prompt.

    `prompt_len` is left as the original's: warm-ups are never measured.
    """
    if not requests or num_warmups <= 0:
        return []
    out = []
    for i in range(num_warmups):
        spec = requests[i % len(requests)]
        marker = warmup_marker(i)
        if spec.prompt is not None:
            out.append(replace(spec, prompt=marker + spec.prompt))
        else:
            assert spec.messages is not None
            first, *rest = spec.messages
            messages = (ChatMessage(first.role, marker + first.content), *rest)
            out.append(replace(spec, messages=messages))
    return out

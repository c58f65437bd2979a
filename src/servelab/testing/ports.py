"""Free ports on 127.0.0.1 for the servers tests and benchmarks start.

Ports are drawn below Linux's ephemeral range (32768+), so no outgoing connection of
another test or of the client under test takes one between the check and the bind; other
processes on the machine can still take them later, so callers start their servers soon.
"""

from __future__ import annotations

import random
import socket

_LOW, _HIGH = 20000, 32000


def free_port_base(span: int = 1) -> int:
    """A port p such that p .. p + span - 1 are all free on 127.0.0.1 now."""
    if not 1 <= span < _HIGH - _LOW:
        raise ValueError(f"span must be in 1..{_HIGH - _LOW - 1} (got {span})")
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(_LOW, _HIGH - span)
        try:
            for port in range(base, base + span):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {span} consecutive free ports found in {_LOW}-{_HIGH}")

"""The retry budget: retries may add at most `ratio` x requests (plus `min_retries`) per
window, so a failing backend cannot multiply the load on the others."""

from __future__ import annotations

import random
from collections import deque


class RetryBudget:
    """Counts requests and retries over the last `window_s` seconds (clock injected)."""

    def __init__(self, ratio: float, min_retries: int, window_s: float) -> None:
        self._ratio = ratio
        self._min = min_retries
        self._window_s = window_s
        self._requests: deque[float] = deque()
        self._retries: deque[float] = deque()

    def record_request(self, now_s: float) -> None:
        requests = self._requests
        requests.append(now_s)
        # Drop what left the window here too, not only when a retry is tried: without
        # retries the deque would otherwise grow by one entry per request, forever.
        horizon = now_s - self._window_s
        while requests[0] < horizon:
            requests.popleft()

    def try_spend(self, now_s: float) -> bool:
        """Take one retry if the budget allows; False when it is spent."""
        horizon = now_s - self._window_s
        for q in (self._requests, self._retries):
            while q and q[0] < horizon:
                q.popleft()
        if len(self._retries) >= self._min + self._ratio * len(self._requests):
            return False
        self._retries.append(now_s)
        return True


def backoff_s(attempt: int, base_ms: float, rng: random.Random) -> float:
    """Delay before retry `attempt` (1-based): base x 2^(attempt-1), jittered x[0.5, 1.5),
    capped at 1 s."""
    return min(1.0, base_ms / 1000.0 * (2 ** (attempt - 1)) * (0.5 + rng.random()))

"""The hotspot factor: backends x the largest share of routing decisions in a window.

1.0 is a perfect spread; N means every decision went to one of N backends. Pure (the
clock arrives as `now_s`), so the simulator's benchmarks can use it too.
"""

from __future__ import annotations

from collections import Counter, deque


class HotspotWindow:
    """Decisions of the last `window_s` seconds, counted per backend."""

    def __init__(self, n_backends: int, window_s: float) -> None:
        self._n = n_backends
        self._window_s = window_s
        self._events: deque[tuple[float, int]] = deque()
        self._counts: Counter[int] = Counter()

    def add(self, index: int, now_s: float) -> None:
        self._events.append((now_s, index))
        self._counts[index] += 1
        self._expire(now_s)

    def factor(self, now_s: float) -> float:
        """n_backends x max share; 0.0 when the window holds no decision."""
        self._expire(now_s)
        total = len(self._events)
        if not total:
            return 0.0
        return self._n * max(self._counts.values()) / total

    def _expire(self, now_s: float) -> None:
        horizon = now_s - self._window_s
        events, counts = self._events, self._counts
        while events and events[0][0] < horizon:
            _, index = events.popleft()
            counts[index] -= 1
            if not counts[index]:
                del counts[index]

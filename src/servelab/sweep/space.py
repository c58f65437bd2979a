"""The tuner's search space: `--param NAME=V1,V2,...` axes and their grid."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servelab.errors import ServelabError

Value = int | float | str | bool
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def _value(text: str) -> Value:
    t = text.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t


@dataclass(frozen=True, slots=True)
class Space:
    """Axes in the order given; each axis's values ascending as given."""

    axes: tuple[tuple[str, tuple[Value, ...]], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    def values(self, name: str) -> tuple[Value, ...]:
        return dict(self.axes)[name]

    @property
    def size(self) -> int:
        return math.prod(len(v) for _, v in self.axes)

    def grid(self) -> list[dict[str, Value]]:
        """Every point, the last axis varying fastest."""
        points: list[dict[str, Value]] = [{}]
        for name, vals in self.axes:
            points = [{**p, name: v} for p in points for v in vals]
        return points

    def nearest(self, wanted: Mapping[str, Value | None]) -> dict[str, Value]:
        """The grid point nearest `wanted` axis by axis (log distance for positive numbers;
        an axis with no wanted value takes its middle value)."""
        out: dict[str, Value] = {}
        for name, vals in self.axes:
            w = wanted.get(name)
            if w is None or not isinstance(w, (int, float)) or isinstance(w, bool):
                out[name] = w if w in vals else vals[len(vals) // 2]
                continue
            out[name] = min(vals, key=lambda v: _dist(v, w))
        return out


def _dist(v: Value, w: float) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and w > 0:
        return abs(math.log(v / w))
    return math.inf


def parse_space(items: Sequence[str], allowed: Sequence[str] | None) -> Space:
    """Parse ``--param max_num_seqs=16,32,64`` items; `allowed` (None: any) names the
    parameters the target can take."""
    if not items:
        raise ServelabError("--param: give at least one NAME=V1,V2,... (e.g. max_num_seqs=32,64,128)")
    axes: list[tuple[str, tuple[Value, ...]]] = []
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip().lstrip("-").replace("-", "_")
        if not sep or not _NAME.match(name):
            raise ServelabError(f"--param {item!r}: expected NAME=V1,V2,... (e.g. max_num_seqs=32,64)")
        if allowed is not None and name not in allowed:
            raise ServelabError(f"--param {name}: not an engine argument the target takes; "
                                f"it takes: {', '.join(sorted(allowed))}")
        if name in dict(axes):
            raise ServelabError(f"--param {name} given twice")
        vals = tuple(_value(v) for v in raw.split(",") if v.strip())
        if not vals:
            raise ServelabError(f"--param {item!r}: no values")
        if len(set(vals)) != len(vals):
            raise ServelabError(f"--param {item!r}: values repeat")
        axes.append((name, vals))
    return Space(tuple(axes))

"""Sweeps and tuning: adaptive load levels, the knee, capacity under an SLO, why the curve
bends, and a search over engine arguments. See docs/sweeps.md."""

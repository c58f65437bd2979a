"""The 4-bit (and fp8) GEMM families of the shipped profile's grid, measured again with bf16
and with fp16 activations (`servelab.sim.profiler.measure_quant_gemms`): an AWQ checkpoint
is served in fp16, whose Machete / Marlin builds the shipped profile did not time.
Writes the points as JSON (`--out`): `GemmPoint`s with the activations' dtype added.
(The run's copy of this script read both dtypes from one call; same points, same file.)"""

from __future__ import annotations

import argparse
from pathlib import Path

from servelab.sim.profiler import ProfileGrid, Timer, measure_quant_gemms
from servelab.storage import write_json_atomic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    from vllm import _custom_ops as ops

    torch.manual_seed(0)
    grid = ProfileGrid()
    skipped: dict[str, str] = {}
    timer = Timer(torch, grid)
    rows = []
    for act in ("bf16", "fp16"):
        for p in measure_quant_gemms(torch, timer, ops, grid, skipped, lambda s: print(s, flush=True), act):
            if act == "bf16" or p.family != "fp8":
                rows.append({**p.model_dump(mode="json"), "act_dtype": act})
    write_json_atomic(Path(args.out), {"device": torch.cuda.get_device_name(0), "skipped": skipped,
                                       "gemm": rows})


if __name__ == "__main__":
    main()

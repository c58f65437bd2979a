"""The H200's prefill-heavy cells drawn three times (issue 14, 2026-12-06, fifth session):
OLMoE-1B-7B and gemma-3-12b, the two held-out models whose single 12-01 draws missed the
issue's 25 % bound on TTFT (OLMoE rnd_c32 -29.9 %, rnd_c64 -42.0 %, gemma rnd_c64 -25.6 %),
re-simulated with the shipped H200 profile and residual (nothing fitted on these cells).

    .venv/bin/python docs/validation/sim-repeats-h200-2026-12-06/check.py [--out NAME]

Reads results/<model>/ (../sim-transfer-h100-2026-12-06/device.sh, MODE=repeats: rnd_c1 with
8 warm-ups, then rnd_c32 and rnd_c64 three times each, interleaved, seeds 102/103, 112/113,
122/123) and writes NAME.md / NAME.json: per draw, then per cell the error of the simulated
mean on the measured mean and the draws' spread. The cells record the tokenizer at its
device path: link the kit's payload there (`ln -sfn $PWD/.gpu/dl/payload /tmp/gpu-x/payload`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from servelab.sim.cost import default_calibration
from servelab.storage import write_atomic

HERE = Path(__file__).resolve().parent
GPU = "H200"
LABEL = "shipped"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# One reader of cells and one table of draws: the H100 check's.
h100 = _load("h100check", HERE.parent / "sim-transfer-h100-2026-12-06" / "check.py")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="table", help="NAME of the NAME.md / NAME.json written here")
    a = ap.parse_args()
    # none of these models is one the residual was fitted on: every row is held out
    rows = h100.cell_rows(h100.targets(HERE / "results", GPU), default_calibration(GPU), LABEL)
    write_atomic(HERE / f"{a.out}.json", (json.dumps(rows, indent=1) + "\n").encode())
    text = "\n".join([f"H200, shipped profile and residual (`default_calibration('{GPU}')`).", "",
                      *h100._cell_table(rows, LABEL)]) + "\n"
    write_atomic(HERE / f"{a.out}.md", text.encode())
    print(text)


if __name__ == "__main__":
    main()

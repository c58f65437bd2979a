"""Where the measured TTFT goes, per cell, from vLLM's own histograms (issue 14).

    .venv/bin/python docs/validation/sim-transfer-h100-2026-12-06/decompose.py [--results DIR]

The second H100 run (device.sh, MODE=protocol) saved /metrics after every cell
(results/<model>/<cell>.metrics.txt.gz; `--results` another run's, dumps gzipped or not,
run in the order its device.log names them); a cell's figures are the histograms' sum and count
deltas against the dump before it (each holds the bench's one test request too, and the
first cell its 8 warm-ups). `request_queue_time` runs from the engine core taking the
request in to its scheduling, `request_prefill_time` from scheduling to the first token
(engine-core stamps), `time_to_first_token` from the API server's arrival stamp to the first
token's output. Server TTFT - queue - prefill is what no histogram attributes: the API
server's intake and hand-off, the wait for the engine core's step in flight before the
request is taken in, and the first token's way back. The client's TTFT adds the HTTP and
SSE path on top.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent
ORDER = ("rnd_c1", "rnd_c32", "rnd_c64", "sg_r10", "sg_c64")  # as device.sh ran them
HISTOGRAMS = {"server": "vllm:time_to_first_token_seconds", "queue": "vllm:request_queue_time_seconds",
              "prefill": "vllm:request_prefill_time_seconds"}


def totals(path: Path) -> dict[str, tuple[float, float]]:
    """(sum s, count) of each histogram in HISTOGRAMS, over every label set."""
    out = {k: (0.0, 0.0) for k in HISTOGRAMS}
    names = {v: k for k, v in HISTOGRAMS.items()}
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            for suffix, i in (("_sum", 0), ("_count", 1)):
                key = names.get(s.name.removesuffix(suffix)) if s.name.endswith(suffix) else None
                if key is not None:
                    cur = list(out[key])
                    cur[i] += s.value
                    out[key] = (cur[0], cur[1])
    return out


def _cell(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".metrics.txt")


def logged_order(mdir: Path) -> list[str]:
    """The cells of `mdir`'s model in the order the run's device.log (beside the model
    directories) records them, [] without a log."""
    log = mdir.parent / "device.log"
    if not log.exists():
        return []
    order, model = [], None
    for line in log.read_text().splitlines():
        served = re.search(r"\] serve (\S+)$", line)
        if served:
            model = served.group(1)
        ran = re.search(r"\]\s+(\S+) rc=", line)
        if ran and model == mdir.name:
            order.append(ran.group(1))
    return order


def cells(mdir: Path) -> list[Path]:
    """The cells of `mdir` with a /metrics dump, in the order they ran: as the run's
    device.log records them, then any it does not name by ORDER (a cell named by its ORDER
    entry, with `_N` for a further draw, the draws of one cell in a row)."""
    logged = logged_order(mdir)
    dumps: dict[str, Path] = {}
    for p in [*mdir.glob("*.metrics.txt"), *mdir.glob("*.metrics.txt.gz")]:
        if dumps.setdefault(_cell(p), p) != p:
            raise SystemExit(f"{mdir}: two /metrics dumps of {_cell(p)} (gzipped and not)")

    def rank(name: str) -> tuple[int, int]:
        if name in logged:
            return 0, logged.index(name)
        return 1, ORDER.index(name if name in ORDER else name.rsplit("_", 1)[0])
    return [dumps[name] for name in sorted(dumps, key=rank)]


def phases(mdir: Path) -> Iterator[tuple[str, float, dict[str, float]]]:
    """(cell, client mean TTFT ms, {server, queue, prefill: mean ms}) per dumped cell of
    `mdir`, in the order they ran; exits naming a dump whose histograms disagree."""
    before = {k: (0.0, 0.0) for k in HISTOGRAMS}
    for path in cells(mdir):
        now = totals(path)
        counts = {now[k][1] - before[k][1] for k in HISTOGRAMS}
        if len(counts) != 1 or counts == {0.0}:
            raise SystemExit(f"{path}: the histograms counted {sorted(counts)} requests; "
                             "expected one count, above 0")
        ms = {k: 1000 * (now[k][0] - before[k][0]) / (now[k][1] - before[k][1]) for k in HISTOGRAMS}
        cell = _cell(path)
        yield cell, json.loads((mdir / f"{cell}.json").read_text())["mean_ttft_ms"], ms
        before = now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results")
    results = ap.parse_args().results
    print("| cell | client TTFT ms | server TTFT | queue | prefill (to first token out) | intake (server - queue - prefill) |")
    print("|---|---:|---:|---:|---:|---:|")
    for mdir in sorted(p for p in results.iterdir() if p.is_dir()):
        for cell, client, ms in phases(mdir):
            print(f"| {mdir.name}/{cell} | {client:.1f} | {ms['server']:.1f} | {ms['queue']:.1f} | "
                  f"{ms['prefill']:.1f} | {ms['server'] - ms['queue'] - ms['prefill']:.1f} |")


if __name__ == "__main__":
    main()

"""Every served engine step of the random cells in a hook folder (../sim-loop-2026-12-03,
../sim-waves-2026-12-03: `schedule()` stamps with the step's tokens, requests, prefills and
prefill tokens) beside the operator model's price of that step's shape (decode contexts
taken as 1,090 tokens each, the cells' mean; idle gaps past 3x the price + 20 ms dropped),
by kind of step: measured mean interval to the next `schedule()`, priced mean, priced /
measured. Args: the hook run's model folder, the model (a served directory's config.json
folder)."""
import json, sys, glob, lzma, random, numpy as np
from servelab.plan import EngineArgs
from servelab.sim.cost import default_calibration
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.setup import SimOptions, build_cluster
res, cfgdir = sys.argv[1], sys.argv[2]
cal = default_calibration("H200")
cost = build_cluster(SimOptions(cfgdir, "H200", None, EngineArgs(), calibration=cal), random.Random(0)).engines[0].cost
spans = {}
for line in open(f"{res}/cells.txt"):
    n, e, t = line.split(); spans.setdefault(n, {})[e] = float(t)
sch = []
for f in glob.glob(f"{res}/hook/*.jsonl*"):
    for line in (lzma.open(f, "rt") if f.endswith(".xz") else open(f)):
        r = json.loads(line)
        if r[0] == "sch": sch.append(r)
sch.sort(key=lambda r: r[1])
bands = {}
for a, b in zip(sch, sch[1:]):
    cell = next((n for n, s in spans.items() if s["start"] <= a[1] <= s["end"] and n.startswith("rnd_c")), None)
    if cell is None or a[3] == 0: continue
    dt = (b[1] - a[1]) * 1e3
    tokens, reqs, big, pre = a[3], a[4], a[5], a[6]
    dec = reqs - big
    st = ScheduledStep([], [], dec, dec * 1090, pre, 0, 0, big)
    price = cost.step_duration_s(st) * 1e3
    if dt > 3 * price + 20: continue  # idle gaps
    key = "decode-only" if big == 0 else ("prefill <=512" if pre <= 512 else ("prefill 513-4096" if pre <= 4096 else "prefill >4096"))
    bands.setdefault(key, []).append((dt, price, pre, dec))
for k, v in sorted(bands.items()):
    v = np.array(v)
    print(f"  {k:18s} n {len(v):5d} measured mean {v[:,0].mean():7.2f} ms  priced {v[:,1].mean():7.2f}  ratio {v[:,1].sum()/v[:,0].sum():.3f}  (prefill tok {v[:,2].mean():.0f}, decodes {v[:,3].mean():.0f})")

"""The engine core's steps of results2/ (../spec-batch-2026-12-02/step_probe.py through
device2.sh: B prompts of 1,024 random ids submitted at once, 8 output tokens, asynchronous
scheduling, the server's limits) beside the operator model's price of each step's shape
(decode contexts taken as 1,030 tokens): the phases' walls, the interval to the next
`schedule()` (with asynchronous scheduling a step's interval holds the host's work for it
while the GPU may still run the one before, so sums over a run of steps compare, single
intervals less so), and the price. Run from the repository root."""
import json, random
from servelab.plan import EngineArgs
from servelab.sim.cost import default_calibration
from servelab.sim.scheduler import ScheduledStep
from servelab.sim.setup import SimOptions, build_cluster
for name in ("olmoe-1b-7b", "qwen3-30b-a3b"):
    d = json.load(open(f"docs/validation/sim-prefill-2026-12-03/results2/steps-{name}.json"))
    cost = build_cluster(SimOptions(f"docs/validation/sim-transfer-2026-12-01/results/{name}", "H200", None, EngineArgs(), calibration=default_calibration("H200")), random.Random(0)).engines[0].cost
    print(name, "async", d["async_scheduling"])
    for b, v in d["batches"].items():
        ph = v["phases"]
        sch = [r for r in ph if r["phase"] == "schedule"]
        upd = [r for r in ph if r["phase"] == "update"]
        ex = [r for r in ph if r["phase"] == "execute"]
        sa = [r for r in ph if r["phase"] == "sample"]
        print(" B", b)
        for i, s in enumerate(sch):
            dec = s["reqs"] - s["prefill"]; pre = s["tokens"] - dec
            st = ScheduledStep([], [], dec, dec * 1030, pre, 0, 0, s["prefill"])
            price = cost.step_duration_s(st) * 1e3
            nxt = (sch[i+1]["t0"] - s["t0"]) * 1e3 if i + 1 < len(sch) else float("nan")
            f = lambda L: ((L[i]["t1"] - L[i]["t0"]) * 1e3) if i < len(L) else float("nan")
            print("  tokens %5d reqs %3d prefills %2d | sched %.2f exec %.2f sample %.2f update %.2f | to next %.2f | priced %.2f" % (s["tokens"], s["reqs"], s["prefill"], f(sch), f(ex), f(sa), f(upd), nxt, price))

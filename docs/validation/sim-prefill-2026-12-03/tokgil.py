"""Tokenisation time against the API server loop's busy fraction over it (../sim-loop-2026-12-03
hook logs: `tok` records, the loop probe's (perf_counter, thread CPU) samples), per folder:
p10 / p50 / mean / p90 ms per busy band. Args: result folders."""
import json, sys, glob, lzma, numpy as np
rows = []
for d in sys.argv[1:]:
    spans = {}
    for line in open(f"{d}/cells.txt"):
        n, e, t = line.split(); spans.setdefault(n, {})[e] = float(t)
    toks, lag = [], []
    for f in glob.glob(f"{d}/hook/*.jsonl.xz"):
        for line in lzma.open(f, "rt"):
            r = json.loads(line)
            if r[0] == "lag": lag += r[1]
            elif r[0] == "tok": toks.append((r[1], r[2]))
    lag = np.array(sorted(lag)); toks.sort()
    for n, s in spans.items():
        if not n.startswith("rnd_c"): continue
        for a, b in toks:
            if not (s["start"] <= a <= s["end"]): continue
            i0 = np.searchsorted(lag[:, 0], a); i1 = np.searchsorted(lag[:, 0], b)
            if i1 <= i0 + 0: 
                # no probe sample inside: loop fully busy (or blocked); use surrounding
                i0 = max(i0 - 1, 0); i1 = min(i1 + 1, len(lag) - 1)
            x = lag[max(i0-1,0):i1+1]
            frac = (x[-1,1]-x[0,1])/(x[-1,0]-x[0,0])
            rows.append((d.split('/')[-1], n, (b-a)*1e3, frac))
import collections
g = collections.defaultdict(list)
for m, n, dur, fr in rows:
    g[m].append((dur, fr))
for m, v in g.items():
    v = np.array(v)
    print(m, len(v))
    for lo, hi in [(0, .3), (.3, .6), (.6, .8), (.8, .95), (.95, 1.1)]:
        s = v[(v[:,1] >= lo) & (v[:,1] < hi)]
        if len(s): print("  loop busy %.2f-%.2f n %4d dur ms p10 %.1f p50 %.1f mean %.1f p90 %.1f" % (lo, hi, len(s), *np.percentile(s[:,0], [10, 50]), s[:,0].mean(), np.percentile(s[:,0], 90)))

"""One wave of a closed loop in ../sim-loop-2026-12-03's hook logs, request by request
(issue 14, 2026-12-03): the client's send, the handler's entry (srv0), the hand-off to the
engine (add), the engine's arrival (eadd) and first schedule (sch), the client's first token
and end, the server's stream end (gen1); then the previous wave's client ends and server
stream ends beside this wave's sends, the engine steps around the wave's start, the API
server loop's busy fraction per 10 ms and its probe gaps, the output batches and the
tokenisations. Times in ms from the wave's first send.

    python3 docs/validation/sim-prefill-2026-12-03/waves.py docs/validation/sim-loop-2026-12-03/results/olmoe-1b-7b-2 rnd_c64_s1103 64 1
(args: results folder, cell, concurrency, wave index >= 1)
"""
import json, sys, glob, re, lzma, numpy as np
d, cell = sys.argv[1], sys.argv[2]
span = {}
for line in open(f"{d}/cells.txt"):
    n, e, t = line.split()
    if n == cell: span[e] = float(t)
t0, t1 = span["start"], span["end"]
res = json.load(open(f"{d}/{cell}.json"))
ev = {}; toks = []; lag = []; out1 = []; sch = []
for f in glob.glob(f"{d}/hook/*.jsonl.xz"):
    for line in lzma.open(f, "rt"):
        r = json.loads(line)
        if r[0] == "lag":
            lag += [x for x in r[1] if t0 <= x[0] <= t1]; continue
        if not isinstance(r[1], float) or not (t0 <= r[1] <= t1): continue
        k = r[0]
        if k == "srv0":
            ev.setdefault(int(r[2].split("-")[-1]), {})["srv0"] = r[1]
        elif k in ("add", "eadd"):
            m = re.match(r"cmpl-bench-[0-9a-f]+-(\d+)-0-", r[2])
            if m: ev.setdefault(int(m.group(1)), {})[k] = r[1]
        elif k == "gen1":
            m = re.match(r"cmpl-bench-[0-9a-f]+-(\d+)$", r[2])
            if m: ev.setdefault(int(m.group(1)), {})["gen1"] = r[1]
        elif k == "tok": toks.append((r[1], r[2]))
        elif k == "out1": out1.append((r[1], r[2], r[3], r[4]))
        elif k == "sch":
            sch.append((r[1], r[2], r[3], r[4]))
            for rid, n in r[7]:
                m = re.match(r"cmpl-bench-[0-9a-f]+-(\d+)-0-", rid)
                if m: ev.setdefault(int(m.group(1)), {}).setdefault("sch", r[1])
st = np.array(res["start_times"]); tt = np.array(res["ttfts"]); lat = np.array(res["latencies"])
idx = sorted(ev)
off = min(ev[i]["srv0"] - st[i] for i in idx if "srv0" in ev[i])
base = off  # perf time of bench start approx (send->srv0 min = 0)
print("n", len(idx), "offset", off - t0)
W = int(sys.argv[3]) if len(sys.argv) > 3 else 64
wv = int(sys.argv[4]) if len(sys.argv) > 4 else 1
order = np.argsort(st)
sel = order[wv*W:(wv+1)*W]
ws = base + st[sel].min()
print("wave", wv, "first send at", ws - t0)
print(" i   send  srv0   add  eadd   sch  ftok   end  gen1   (ms from wave's first send)")
for i in sel[np.argsort(st[sel])]:
    e = ev.get(int(i), {})
    f = lambda k: (e[k] - ws) * 1e3 if k in e else float('nan')
    s = (base + st[i] - ws) * 1e3
    print("%3d %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f" % (i, s, f("srv0"), f("add"), f("eadd"), f("sch"), s + tt[i]*1e3, s + lat[i]*1e3, f("gen1")))
# previous wave's ends
prev = order[(wv-1)*W:wv*W]
ends = np.sort(base + st[prev] + lat[prev] - ws) * 1e3
print("prev wave ends ms:", np.round(ends[[0, len(ends)//4, len(ends)//2, -1]], 1))
tk = [(a - ws) * 1e3 for a, b in toks if -0.05 < a - ws < 0.3]
print("tok starts in window:", len(tk), np.round(sorted(tk)[:5], 1), np.round(sorted(tk)[-3:], 1))
print("sched steps in window (t ms, dur, tokens, reqs):")
for a, b, n, r in sch:
    if -0.15 < a - ws < 0.4: print("  %.1f %.1f %d %d" % ((a-ws)*1e3, (b-a)*1e3, n, r))
# loop cpu busy per 5 ms
lag = np.array(sorted(lag))
m = (lag[:,0] > ws - 0.05) & (lag[:,0] < ws + 0.3)
L = lag[m]
tb = np.arange(-50, 300, 10)
busy = []
for a in tb:
    mm = (L[:,0]-ws >= a/1e3) & (L[:,0]-ws < (a+10)/1e3)
    x = L[mm]
    busy.append((x[-1,1]-x[0,1])/(x[-1,0]-x[0,0]) if len(x) > 2 else np.nan)
print("loop busy frac per 10 ms from -50:", np.round(busy, 2))
print("probe gaps > 2.5 ms: (t ms, gap ms, cpu ms)")
for (a, ca), (b, cb) in zip(L[:-1], L[1:]):
    if b - a > 0.0025: print("  %.1f %.1f %.1f" % ((a-ws)*1e3, (b-a)*1e3, (cb-ca)*1e3))
print("out1 in window (t, dur ms, n outs, n toks):")
for a, b, n, k in sorted(out1):
    if -0.01 < a - ws < 0.2: print("  %.1f %.2f %d %d" % ((a-ws)*1e3, (b-a)*1e3, n, k))
print("toks (start, dur):", [(round((a-ws)*1e3,1), round((b-a)*1e3,1)) for a, b in sorted(toks) if -0.01 < a-ws < 0.2])
print("prev wave: sorted client end vs gen1 (ms) and this wave's sorted sends")
pe = sorted((base + st[i] + lat[i] - ws) * 1e3 for i in prev)
pg = sorted((ev[int(i)]["gen1"] - ws) * 1e3 for i in prev if "gen1" in ev.get(int(i), {}))
ss = sorted((base + st[i] - ws) * 1e3 for i in sel)
for a, b, c in zip(pe, pg, ss): print("  end %7.1f gen1 %7.1f   send %7.1f" % (a, b, c))

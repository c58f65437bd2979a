"""Does a compute-bound prefill run slower served than profiled? (issue 14, 2026-12-08; plain
PyTorch on the GPU machine, no kit)

    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
        --format=csv -lms 100 > $OUT/smi.csv &  python3 sustained.py > $OUT/sustained.txt

servelab's kernel profile times each GEMM alone (warm-ups, then the median of a few calls),
on a GPU that idles between shapes. A served prefill-heavy load runs 6-8k-token steps back
to back for seconds. This times Qwen3-4B's four GEMMs of a layer at M = 8,192 tokens (bf16,
torch.matmul: cuBLAS, as the profile) three ways: (1) profile-like, each alone after a 2 s
idle; (2) as 36-layer "steps" back to back for 20 s, each step timed with CUDA events;
(3) profile-like again right after. Prints the times and the step's time per second of the
sustained run; nvidia-smi's samples (SM clock, power, throttle reasons) say why.
"""
import statistics
import time

import torch

M = 8192
SHAPES = {"qkv": (6144, 2560), "o": (2560, 4096), "gate_up": (19456, 2560), "down": (2560, 9728)}
LAYERS = 36


def ev():
    return torch.cuda.Event(enable_timing=True)


def alone(w, x, reps=20, warm=5):
    for _ in range(warm):
        torch.matmul(x, w)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = ev(), ev()
        a.record()
        torch.matmul(x, w)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def profile_like(ws, xs, label):
    out = {}
    for name in SHAPES:
        time.sleep(2.0)
        out[name] = alone(ws[name], xs[name])
    per_layer = sum(out.values())
    print(f"{label}: " + ", ".join(f"{k} {v:.1f} us" for k, v in out.items())
          + f"; a layer's four {per_layer:.1f} us, 36 layers {per_layer * LAYERS / 1e3:.2f} ms", flush=True)
    return per_layer


def main():
    torch.manual_seed(0)
    dev = "cuda"
    print(torch.cuda.get_device_name(0), torch.__version__, flush=True)
    ws = {k: torch.randn((kk, n), device=dev, dtype=torch.bfloat16) / 50 for k, (n, kk) in SHAPES.items()}
    xs = {k: torch.randn((M, kk), device=dev, dtype=torch.bfloat16) for k, (n, kk) in SHAPES.items()}
    cold = profile_like(ws, xs, "profile-like, idle GPU")
    t_end = time.perf_counter() + 20.0
    t0 = time.perf_counter()
    per_second: dict[int, list[float]] = {}
    while time.perf_counter() < t_end:
        a, b = ev(), ev()
        a.record()
        for _ in range(LAYERS):
            for name in SHAPES:
                torch.matmul(xs[name], ws[name])
        b.record()
        b.synchronize()
        per_second.setdefault(int(time.perf_counter() - t0), []).append(a.elapsed_time(b))
    for s, v in sorted(per_second.items()):
        print(f"sustained second {s:2d}: {len(v)} steps, median {statistics.median(v):.2f} ms "
              f"({statistics.median(v) / (cold * LAYERS / 1e3):.3f} x the idle profile)", flush=True)
    hot = profile_like(ws, xs, "profile-like, right after")
    print(f"after / before: {hot / cold:.3f}")


if __name__ == "__main__":
    main()

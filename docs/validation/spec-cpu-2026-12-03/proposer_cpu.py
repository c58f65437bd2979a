"""The n-gram path's per-sequence CPU in vLLM 0.25.1's V1 runner, timed on this host's CPU
(issue 17): `NgramProposer.propose` (its Python loop, the numba batch call capped at one
thread, the `i in valid_ngram_requests` list scan) and the runner's per-sequence Python after
the step's synchronisation (`RejectionSampler.parse_output`'s rows, `_bookkeeping_sync`'s loop),
rebuilt from vLLM's source (/tmp/vsrc/vllm, unzipped from the kit's wheel) with the engine's
array shapes, at batch B and context L.

    python3 -m venv /tmp/nb && /tmp/nb/bin/pip install numba numpy
    /tmp/nb/bin/python docs/validation/spec-cpu-2026-12-03/proposer_cpu.py > docs/validation/spec-cpu-2026-12-03/proposer_cpu.md

Only the order of magnitude carries over: this is not the H200 host's CPU.
"""

from __future__ import annotations

import sys
import time
import types

import numpy as np

sys.modules.setdefault("torch", types.ModuleType("torch"))  # ngram_proposer imports it for hints
sys.modules["torch"].Tensor = object
sys.modules.setdefault("vllm.config", types.ModuleType("vllm.config"))
sys.modules["vllm.config"].VllmConfig = object
sys.path.insert(0, "/tmp/vsrc")
import importlib.util  # noqa: E402

spec = importlib.util.spec_from_file_location("ngp", "/tmp/vsrc/vllm/v1/spec_decode/ngram_proposer.py")
ngp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ngp)

K, MAX_REQS, PLACEHOLDER = 4, 1024, -1


class Proposer(ngp.NgramProposer):
    """vLLM's NgramProposer with its config read from arguments instead of a VllmConfig."""

    def __init__(self, max_model_len: int) -> None:  # noqa: D107 (same fields as vLLM's)
        self.min_n, self.max_n, self.k, self.max_model_len = 2, 4, K, max_model_len
        self.valid_ngram_draft = np.zeros((MAX_REQS, K), dtype=np.int32)
        self.valid_ngram_num_drafts = np.zeros(MAX_REQS, dtype=np.int32)
        self.num_tokens_threshold = 8192
        self.num_numba_thread_available = 1
        self.propose(K, [[1]] * 4, np.full(4, 8, dtype=np.int32), np.ones((4, 64), dtype=np.int32))


def best(fn, reps: int = 30) -> float:
    """Best-of wall time (ms)."""
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return 1e3 * min(out)


def main() -> None:
    rng = np.random.default_rng(0)
    print("| max_model_len | context L | B | propose ms | of it: `i in list` scan ms | parse_output + bookkeeping ms | us / seq (all) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for mml in (4096, 131072):
        tok = np.zeros((MAX_REQS, mml), dtype=np.int32)
        prop = Proposer(mml)
        for ctx in (300, 2000):
            # text that recurs (dummy weights repeat tokens, so nearly every sequence matches)
            tok[:, :ctx] = rng.integers(0, 50, size=(MAX_REQS, ctx), dtype=np.int32)
            ntok = np.full(MAX_REQS, ctx, dtype=np.int32)
            for b in (1, 16, 64, 128, 256):
                sampled = [[int(x) for x in rng.integers(0, 50, size=K + 1)] for _ in range(b)]
                t_prop = best(lambda: prop.propose(K, sampled, ntok, tok))
                valid = list(range(b))
                t_scan = best(lambda: [i in valid for i in range(b)])
                out_np = rng.integers(0, 50, size=(b, K + 1)).astype(np.int32)
                out_np[:, -1] = PLACEHOLDER
                req_out = [[] for _ in range(b)]

                def post():
                    valid_mask = (out_np != PLACEHOLDER) & (out_np < 151936)
                    rows = [row[valid_mask[i]].tolist() for i, row in enumerate(out_np)]
                    for i in range(b):  # _bookkeeping_sync's loop
                        ids = rows[i]
                        s = int(ntok[i])
                        tok[i, s:s + len(ids)] = ids
                        req_out[i].extend(ids)
                        req_out[i].clear()
                t_post = best(post)
                print(f"| {mml:,} | {ctx:,} | {b} | {t_prop:.3f} | {t_scan:.3f} | {t_post:.3f} | "
                      f"{1e3 * (t_prop + t_post) / b:.1f} |", flush=True)


if __name__ == "__main__":
    main()

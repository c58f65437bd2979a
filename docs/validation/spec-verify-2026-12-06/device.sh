#!/usr/bin/env bash
# Issue 17, 2026-12-06 (fifth session): what the GPU runs in a c64 n-gram verification step.
# After the kit's install (../../../../shared/gpu), from the checkout on the machine:
#   bash docs/validation/spec-verify-2026-12-06/device.sh kernels   # ~3 min
#     `servelab sim profile` with the verification attention rows (queries 3, 5, 8 per
#     sequence) and the half-octave GEMM rows, then ../spec-lowacc-2026-12-06/kernels.py
#     (the verification's attention and GEMMs at Qwen3-14B's own shapes).
#   bash docs/validation/spec-verify-2026-12-06/device.sh profile   # ~1.5 min: the profile alone
#   bash docs/validation/spec-verify-2026-12-06/device.sh trace     # ~7 min (trace-spec: ~3 min,
#                                                                   #  the speculative engine alone)
#     ../sim-kernels-2026-12-01/engine_trace.py on Qwen3-14B (dummy weights, offline engine,
#     torch profiler): n-gram K = 6 with the low synthetic acceptance of
#     ../spec-lowacc-2026-12-06 (the step the simulation lacks 7 ms at c64 is the same at
#     every acceptance; low acceptance gives the most verifications per run), then no
#     speculation, at batches 16 and 64, 512-token prompts, 64 output tokens.
# Results under $OUT.
set -u
STAGE=${1:?kernels or trace}
mkdir -p /tmp/slsrc && rm -rf /tmp/slsrc/servelab && cp -r src/servelab /tmp/slsrc/
export PYTHONPATH=/tmp/slsrc:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
V=docs/validation
case "$STAGE" in
kernels|profile)
  nvidia-smi -q > "$OUT/nvsmi.txt" 2>&1
  timeout 300 python3 -m servelab sim profile --out "$OUT/profile.json" > "$OUT/profile.log" 2>&1
  echo "profile rc=$?"
  [ "$STAGE" = profile ] && exit 0
  timeout 200 python3 $V/spec-lowacc-2026-12-06/kernels.py "$OUT/kernels.jsonl" > "$OUT/kernels.log" 2>&1
  echo "kernels rc=$?"
  ;;
trace|trace-spec)
  SPEC='{"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_min": 2, "prompt_lookup_max": 4, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.3, 0.1, 0.05, 0.03, 0.01, 0.0]}'
  timeout 330 python3 $V/sim-kernels-2026-12-01/engine_trace.py --model /tmp/gpu-x/payload/qwen3-14b \
    --out "$OUT/trace-k6low.json" --batches 16,64 --context 512 --steps 64 \
    --speculative-config "$SPEC" > "$OUT/trace-k6low.log" 2>&1
  echo "trace k6low rc=$?"
  nvidia-smi -q > "$OUT/nvsmi-after.txt" 2>&1
  [ "$STAGE" = trace-spec ] && exit 0
  timeout 250 python3 $V/sim-kernels-2026-12-01/engine_trace.py --model /tmp/gpu-x/payload/qwen3-14b \
    --out "$OUT/trace-nospec.json" --batches 16,64 --context 512 --steps 64 \
    > "$OUT/trace-nospec.log" 2>&1
  echo "trace nospec rc=$?"
  ;;
esac

#!/usr/bin/env bash
# Issues 14 and 17, 2026-12-06 (sixth session): the kernel profile on the profiler's fine GEMM
# grid (M = 96, every 64 from 128 to 1,024, every 256 to 2,048, then half octaves; verification attention
# rows), and gemma-3-12b's prefill-heavy engine step kernel by kernel.
# After the kit's install (../../../../shared/gpu), from the checkout on the machine:
#   bash docs/validation/sim-grid-2026-12-06/device.sh profile   # `servelab sim profile`
#   bash docs/validation/sim-grid-2026-12-06/device.sh gemma     # ~4 min
#     ../sim-kernels-2026-12-01/engine_trace.py on gemma-3-12b (the transfer run's served
#     config, dummy weights, offline engine, the server's scheduling limits): 1,024-token
#     prompts at batches 8 and 64 (one and eight 8,192-token prefill steps), 16 output tokens.
# Results under $OUT.
set -u
STAGE=${1:?profile or gemma}
mkdir -p /tmp/slsrc && rm -rf /tmp/slsrc/servelab && cp -r src/servelab /tmp/slsrc/
export PYTHONPATH=/tmp/slsrc:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
V=docs/validation
case "$STAGE" in
profile)
  nvidia-smi -q > "$OUT/nvsmi.txt" 2>&1
  T=$(date +%s)
  timeout 450 python3 -m servelab sim profile --out "$OUT/profile.json" > "$OUT/profile.log" 2>&1
  echo "profile rc=$? in $(( $(date +%s) - T )) s" | tee -a "$OUT/profile.log"
  ;;
gemma)
  bash .gpu/bin/dev.sh modeldir gemma-3-12b $V/sim-transfer-2026-12-01/configs/gemma-3-12b-text.json \
    > "$OUT/modeldir-gemma.log" 2>&1
  timeout 420 python3 $V/sim-kernels-2026-12-01/engine_trace.py --model /tmp/gpu-x/payload/gemma-3-12b \
    --out "$OUT/trace-gemma-3-12b.json" --batches 8,64 --context 1024 --steps 16 \
    > "$OUT/trace-gemma-3-12b.log" 2>&1
  echo "trace gemma rc=$?"
  ;;
esac

#!/usr/bin/env bash
# Issue 17, 2026-12-04, third machine: the host's probe (servelab probe --json: CPU model and
# single-thread Python speed) before and after, and ../spec-cpu-2026-12-03/runner_probe.py with
# --profile (CUPTI kernel sums) on Llama-3.1-8B and Qwen3-14B, n-gram K = 4, on one machine.
# After the kit's install, servelab in /tmp/sl, the kit's bin in /tmp/kitbin; detached:
#   setsid nohup bash /tmp/sl/docs/validation/spec-gil-2026-12-04/device3.sh > /tmp/g3run.out 2>&1 &
set -u
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
R=/tmp/g3run
mkdir -p "$R"
cd /tmp/sl || exit 1
T0=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
P=/tmp/gpu-x/payload
K4='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'
[ -d $P/llama-3.1-8b ] || bash /tmp/kitbin/dev.sh modeldir llama-3.1-8b src/servelab/data/models/llama-3.1-8b.json > "$R/modeldir.log" 2>&1
PYTHONPATH=/tmp/sl/src:/tmp/site python3 -m servelab probe --json > "$R/probe-before.json" 2> "$R/probe.err"
log "probe rc=$?"
for m in llama-3.1-8b qwen3-14b; do
  PYTHONPATH=/tmp/site timeout 300 python3 docs/validation/spec-cpu-2026-12-03/runner_probe.py --model "$P/$m" \
    --speculative-config "$K4" --profile --batches 1,16,64,100,128,256 --out "$R/$m-k4.json" > "$R/$m.log" 2>&1
  log "$m rc=$?"
done
PYTHONPATH=/tmp/sl/src:/tmp/site python3 -m servelab probe --json > "$R/probe-after.json" 2>> "$R/probe.err"
log "all done"

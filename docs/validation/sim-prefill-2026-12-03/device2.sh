#!/usr/bin/env bash
# Issue 14, 2026-12-03, second machine: the engine core's own phases (schedule, execute,
# sample, update) on prefill-heavy batches with asynchronous scheduling, as a served engine
# runs them: ../spec-batch-2026-12-02/step_probe.py with 8, 32 and 64 prompts of 1,024
# tokens submitted at once (8 output tokens each). After the kit's install and servelab
# copied to /tmp/sl; detached:
#   setsid nohup bash docs/validation/sim-prefill-2026-12-03/device2.sh > /tmp/srun.out 2>&1 &
set -u
R=/tmp/srun
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl-site:/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
P=docs/validation/spec-batch-2026-12-02/step_probe.py
CAT=src/servelab/data/models
T0=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
for m in "olmoe-1b-7b $CAT/olmoe-1b-7b.json" "qwen3-30b-a3b $CAT/qwen3-30b-a3b.json"; do
  set -- $m
  bash /tmp/kitbin/dev.sh modeldir "$1" "$2" > "$R/modeldir-$1.log" 2>&1
  log "modeldir $1 rc=$?"
  python3 $P --model /tmp/gpu-x/payload/$1 --out "$R/steps-$1.json" --batches 8,32,64 \
    --prompt-tokens 1024 --output-tokens 8 > "$R/steps-$1.log" 2>&1
  log "step_probe $1 rc=$?"
done
log "done"

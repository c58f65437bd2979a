#!/usr/bin/env bash
# Issue 14, 2026-12-03: prefill steps beyond the captured graphs, GPU vs host
# (prefill_probe.py) on the held-out MoE models and a dense one. After the kit's install
# (/work/shared/gpu) and servelab copied to /tmp/sl; detached:
#   setsid nohup bash docs/validation/sim-prefill-2026-12-03/device.sh > /tmp/prun.out 2>&1 &
set -u
R=/tmp/prun
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl-site:/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
H=docs/validation/sim-prefill-2026-12-03
CAT=src/servelab/data/models
T0=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
for m in "olmoe-1b-7b $CAT/olmoe-1b-7b.json" "mistral-7b $CAT/mistral-7b-v0.3.json" "qwen3-30b-a3b $CAT/qwen3-30b-a3b.json"; do
  set -- $m
  bash /tmp/kitbin/dev.sh modeldir "$1" "$2" > "$R/modeldir-$1.log" 2>&1
  log "modeldir $1 rc=$?"
  python3 $H/prefill_probe.py --model /tmp/gpu-x/payload/$1 --out "$R/prefill-$1.json" > "$R/prefill-$1.log" 2>&1
  log "prefill_probe $1 rc=$?"
done
log "done"

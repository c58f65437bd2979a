#!/usr/bin/env bash
# Issue 17, 2026-12-03: spec.yaml (n-gram K = 4 vs none, ShareGPT c128-c256, Llama-3.1-8B)
# after the kit's install, with servelab in /tmp/sl (as ../sim-waves-2026-12-03); detached:
#   setsid nohup bash /tmp/sl/docs/validation/spec-llama-2026-12-03/device.sh > /tmp/lrun.out 2>&1 &
set -u
R=/tmp/lrun
mkdir -p "$R/hook"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl-site:/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-330}   # no new arm after this many seconds of the script
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
bash /tmp/kitbin/dev.sh modeldir llama-3.1-8b src/servelab/data/models/llama-3.1-8b.json > "$R/modeldir.log" 2>&1
log "modeldir rc=$?"
for arm in ngram-k4 nospec; do
  if [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; then log "skip $arm: out of time"; continue; fi
  log "arm $arm"
  python3 -m servelab run docs/validation/spec-llama-2026-12-03/spec.yaml --out "$R/exp" --arm "$arm" --no-report > "$R/run-$arm.log" 2>&1
  log "arm $arm rc=$?"
done
log "all done"

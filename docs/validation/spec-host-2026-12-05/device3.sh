#!/usr/bin/env bash
# The same machine after device2.sh: ngram-k4 and nospec again, the same cells (how much one
# machine's measurement moves in ten minutes), `servelab probe` after each; into its own
# directory. Sent inline on 2026-12-05 (this is that text).
set -u
R=/tmp/hrun
export PYTHONPATH=/tmp/slsrc:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
T0=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device3.log"; }
for arm in ngram-k4 nospec; do
  log "arm $arm"
  python3 -m servelab run /tmp/slspec/spec.yaml --out "$R/exp-repeat" --arm "$arm" --no-report > "$R/run-repeat-$arm.log" 2>&1
  log "arm $arm rc=$?"
  python3 -m servelab probe > "$R/probe-repeat-$arm.txt" 2>&1
done
log "all done"

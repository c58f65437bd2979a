#!/usr/bin/env bash
# The speculative-decoding run (issue 17) on one H200 after the kit's install
# (/work/shared/gpu): examples/h200-spec.yaml, one arm per `servelab run` so that a time
# budget can skip the last arms; results under /tmp/specrun. Detached:
#   setsid nohup bash docs/validation/spec-decode-2026-12-01/device.sh > /tmp/spec.out 2>&1 &
set -u
R=/tmp/specrun
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl-site:/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-1000}   # no new arm after this many seconds of the script
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
bash /tmp/kitbin/dev.sh modeldir qwen3-0.6b src/servelab/data/models/qwen3-0.6b.json > "$R/modeldir.log" 2>&1
log "draft dir rc=$?"
for arm in baseline ngram-k2 ngram-k6 draft-k4 sync ngram-k4; do
  if [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; then log "skip $arm: out of time"; continue; fi
  log "arm $arm"
  python3 -m servelab run examples/h200-spec.yaml --out "$R/exp" --arm "$arm" > "$R/run-$arm.log" 2>&1
  log "arm $arm rc=$?"
done
log "all done"

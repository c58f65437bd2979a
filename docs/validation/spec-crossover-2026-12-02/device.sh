#!/usr/bin/env bash
# On one H200 after the kit's install (/work/shared/gpu); as ../spec-k4-2026-12-02/device.sh:
# spec.yaml, one `servelab run --arm A` per arm (a time budget skips the last), servelab from a
# copy of the checkout's src in /tmp/slsrc; results under /tmp/xrun. One workload (`sharegpt`),
# both arms over it. Detached:
#   mkdir -p /tmp/slspec /tmp/slsrc && cp docs/validation/spec-crossover-2026-12-02/{spec.yaml,device.sh} /tmp/slspec/ && cp -r src/servelab /tmp/slsrc/
#   setsid nohup bash /tmp/slspec/device.sh > /tmp/x.out 2>&1 &
set -u
R=/tmp/xrun
mkdir -p "$R"
export PYTHONPATH=/tmp/slsrc:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
SPEC=/tmp/slspec/spec.yaml
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-900}   # no new arm after this many seconds of the script
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
for arm in ngram-k4 nospec; do
  if [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; then log "skip $arm: out of time"; continue; fi
  log "arm $arm"
  python3 -m servelab run "$SPEC" --out "$R/exp" --arm "$arm" --no-report > "$R/run-$arm.log" 2>&1
  log "arm $arm rc=$?"
done
log "all done"

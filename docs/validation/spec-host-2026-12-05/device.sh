#!/usr/bin/env bash
# On one H200 after the kit's install (/work/shared/gpu): spec.yaml, one `servelab run --arm A`
# per arm in the order below (no new arm after BUDGET_S seconds of the script), servelab from
# a copy of the checkout's src in /tmp/slsrc, `servelab probe` (the host's CPU figure) before
# the first arm and after the last; results under /tmp/hrun. Detached:
#   mkdir -p /tmp/slspec /tmp/slsrc && cp docs/validation/spec-host-2026-12-05/{spec.yaml,device.sh} /tmp/slspec/ && cp -r src/servelab /tmp/slsrc/
#   (setsid nohup bash /tmp/slspec/device.sh > /tmp/h.out 2>&1 &)
set -u
R=/tmp/hrun
mkdir -p "$R"
export PYTHONPATH=/tmp/slsrc:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
SPEC=/tmp/slspec/spec.yaml
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-900}
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
python3 -m servelab probe > "$R/probe-before.txt" 2>&1
log "probe rc=$?"
for arm in nospec ngram-k2 ngram-k4 ngram-k6; do
  if [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; then log "skip $arm: out of time"; continue; fi
  log "arm $arm"
  python3 -m servelab run "$SPEC" --out "$R/exp" --arm "$arm" --no-report > "$R/run-$arm.log" 2>&1
  log "arm $arm rc=$?"
done
python3 -m servelab probe > "$R/probe-after.txt" 2>&1
log "all done"

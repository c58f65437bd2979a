#!/usr/bin/env bash
# The same machine after device.sh: the draft-model arm (a Qwen3-0.6B-shaped draft with dummy
# weights, `dev.sh modeldir`; vLLM's synthetic rejection sampling at the acceptance the spec
# gives, as examples/h200-spec.yaml), `servelab probe` before and after.
set -u
R=/tmp/hrun
export PYTHONPATH=/tmp/slsrc:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
SPEC=/tmp/slspec/spec.yaml
T0=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device2.log"; }
bash /tmp/kitbin/dev.sh modeldir qwen3-0.6b /tmp/slspec/qwen3-0.6b.json > "$R/modeldir.log" 2>&1
log "modeldir rc=$?"
python3 -m servelab probe > "$R/probe-draft-before.txt" 2>&1
log "arm draft-k4"
python3 -m servelab run "$SPEC" --out "$R/exp" --arm draft-k4 --no-report > "$R/run-draft-k4.log" 2>&1
log "arm draft-k4 rc=$?"
python3 -m servelab probe > "$R/probe-draft-after.txt" 2>&1
log "all done"

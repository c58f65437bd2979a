#!/usr/bin/env bash
# The client check of 2026-11-30 (../h200x2-2026-11-30/clientcheck.sh) again, after the fixes
# it led to (no sampling field unless asked; bodies encoded and /metrics read before t0).
# On one H200 after the kit's install; detached:
#   setsid nohup bash docs/validation/h200-client-2026-11-30/device.sh > /tmp/ccrun.out 2>&1 &
set -u
R=/tmp/ccrun
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl-site:/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
echo "[$(date +%T)] start" >> "$R/device.log"
python3 -m servelab probe > "$R/probe.txt" 2>&1
bash docs/validation/h200x2-2026-11-30/clientcheck.sh "$R/client" > "$R/client.log" 2>&1
echo "[$(date +%T)] client check rc=$?" >> "$R/device.log"

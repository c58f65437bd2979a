#!/usr/bin/env bash
# What this validation ran on the two-H200 machine, after the kit's install (README.md).
# Start it detached; it writes under /tmp/rrun (device.log says where it is):
#   setsid nohup bash docs/validation/h200x2-router-2026-11-30/device.sh > /tmp/rrun.out 2>&1 &
# 1. probe (text, JSON, nvidia-smi topo -m);
# 2. examples/h200x2-router.yaml: two Qwen3-14B replicas (KV pool cut to 82k tokens each)
#    behind servelab's router, four policies on one launch, 3 loads each.
set -u
R=/tmp/rrun
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl-site:/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
S="python3 -m servelab"
log() { echo "[$(date +%T)] $*" >> "$R/device.log"; }

log "probe"
$S probe > "$R/probe.txt" 2>&1
$S probe --json > "$R/probe.json" 2>> "$R/device.log"
nvidia-smi topo -m > "$R/nvidia-smi-topo.txt" 2>&1
log "router arms"
$S run examples/h200x2-router.yaml --out "$R/router" --no-report > "$R/router.log" 2>&1
log "router rc=$?"
log "done"

#!/usr/bin/env bash
# Everything this validation ran on the two-H200 machine, after the kit's install (see
# README.md). Start it detached; it writes under /tmp/x2run (device.log says where it is):
#   setsid nohup bash docs/validation/h200x2-2026-11-30/device.sh > /tmp/x2run.out 2>&1 &
# 1. probe (servelab probe, text and JSON; nvidia-smi topo -m beside it);
# 2. two one-GPU jobs side by side: GPU 0 the fp8 arm of examples/h200-vllm.yaml at
#    c10/c32/c64 (the one-GPU arm the first session did not reach), GPU 1 the client check;
# 3. examples/h200x2-vllm.yaml on both GPUs.
set -u
R=/tmp/x2run
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

log "phase A: fp8 on GPU 0, client check on GPU 1"
(CUDA_VISIBLE_DEVICES=0 $S run examples/h200-vllm.yaml --arm fp8 --load c10 --load c32 \
   --load c64 --out "$R/fp8" --no-report > "$R/fp8.log" 2>&1; log "fp8 rc=$?") &
(CUDA_VISIBLE_DEVICES=1 bash docs/validation/h200x2-2026-11-30/clientcheck.sh "$R/client" \
   > "$R/client.log" 2>&1; log "client check rc=$?") &
wait
log "phase B: two GPUs"
$S run examples/h200x2-vllm.yaml --out "$R/x2" --no-report > "$R/x2.log" 2>&1
log "x2 rc=$?"
log "done"

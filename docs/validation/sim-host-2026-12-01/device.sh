#!/usr/bin/env bash
# Issues 14 and 17, fifth H200 run: the host's CPU cost of launching a step outside CUDA
# graphs (host_probe.py on four synthetic models), and the 4-bit GEMMs with fp16
# activations (quant_gemms.py). After the kit's install (/work/shared/gpu) and servelab
# copied to /tmp/sl; detached:
#   setsid nohup bash docs/validation/sim-host-2026-12-01/device.sh > /tmp/hrun.out 2>&1 &
set -u
R=/tmp/hrun
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl-site:/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
H=docs/validation/sim-host-2026-12-01
T0=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }

python3 $H/quant_gemms.py --out "$R/quant-gemms.json" > "$R/quant-gemms.log" 2>&1
log "quant_gemms rc=$?"
for m in probe-dense-4 probe-dense-20 probe-moe-4 probe-moe-16; do
  bash /tmp/kitbin/dev.sh modeldir $m "$H/configs/$m.json" > "$R/modeldir-$m.log" 2>&1
  log "modeldir $m rc=$?"
  python3 $H/host_probe.py --model /tmp/gpu-x/payload/$m --out "$R/host-$m.json" > "$R/host-$m.log" 2>&1
  log "host_probe $m rc=$?"
done
log "done"

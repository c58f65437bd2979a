#!/usr/bin/env bash
# Issue 17, second H200 run of this folder: what a step outside CUDA graphs costs the host
# on each of vLLM 0.25.1's model runners (V1: n-gram's; V2: the default), for a prefill
# (../sim-host-2026-12-01/host_probe.py, 768 tokens, its dense 4- and 20-layer models) and
# for a decode batch past the largest graph (step_probe.py, Llama-3.1-8B, 640 sequences);
# then n-gram K = 2 on Qwen3-14B (capture sizes rounded to K + 1 = 3). After the kit's
# install and the checkout at /tmp/sl (as device.sh); detached:
#   setsid nohup bash /tmp/sl/docs/validation/spec-batch-2026-12-02/device2.sh > /tmp/brun2.out 2>&1 &
set -u
R=/tmp/brun2
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
H=docs/validation/spec-batch-2026-12-02
HP=docs/validation/sim-host-2026-12-01
P=/tmp/gpu-x/payload
T0=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
for m in probe-dense-4 probe-dense-20; do
  bash /tmp/kitbin/dev.sh modeldir $m "$HP/configs/$m.json" > "$R/modeldir-$m.log" 2>&1
done
bash /tmp/kitbin/dev.sh modeldir llama-3.1-8b src/servelab/data/models/llama-3.1-8b.json > "$R/modeldir-llama.log" 2>&1
log "modeldirs"
for runner in 0 1; do
  for m in probe-dense-4 probe-dense-20; do
    VLLM_USE_V2_MODEL_RUNNER=$runner timeout 200 python3 $HP/host_probe.py --model $P/$m --runs 7 --out "$R/host-$m-v2runner$runner.json" > "$R/host-$m-v2runner$runner.log" 2>&1
    log "host_probe $m V2=$runner rc=$?"
  done
  VLLM_USE_V2_MODEL_RUNNER=$runner timeout 240 python3 $H/step_probe.py --model $P/llama-3.1-8b --batches 96,640 --out "$R/llama-3.1-8b-nospec-v2runner$runner.json" > "$R/llama-nospec-v2runner$runner.log" 2>&1
  log "step_probe llama nospec V2=$runner rc=$?"
done
K2='{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'
timeout 300 python3 $H/step_probe.py --model $P/qwen3-14b --speculative-config "$K2" --batches 64,128,170,171,192,256 --out "$R/qwen3-14b-k2.json" > "$R/qwen3-14b-k2.log" 2>&1
log "qwen3-14b k2 rc=$?"
log "done"

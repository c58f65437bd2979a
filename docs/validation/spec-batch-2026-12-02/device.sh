#!/usr/bin/env bash
# Issue 17: engine steps at a fixed decode batch, n-gram K = 4 and none (step_probe.py), on
# Qwen3-14B (the crossover run's model) and Llama-3.1-8B (a model outside every speculative
# run). After the kit's install (/work/shared/gpu) and servelab's checkout at /tmp/sl;
# detached:  setsid nohup bash /tmp/sl/docs/validation/spec-batch-2026-12-02/device.sh > /tmp/brun.out 2>&1 &
set -u
R=/tmp/brun
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
H=docs/validation/spec-batch-2026-12-02
K4='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'
T0=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
P=/tmp/gpu-x/payload
bash /tmp/kitbin/dev.sh modeldir llama-3.1-8b src/servelab/data/models/llama-3.1-8b.json > "$R/modeldir.log" 2>&1
log "modeldir rc=$?"; cp $P/llama-3.1-8b/config.json "$R/llama-3.1-8b-config.json"
timeout 420 python3 $H/step_probe.py --model $P/qwen3-14b --speculative-config "$K4" --out "$R/qwen3-14b-k4.json" > "$R/qwen3-14b-k4.log" 2>&1
log "qwen3-14b k4 rc=$?"
timeout 300 python3 $H/step_probe.py --model $P/qwen3-14b --batches 1,16,64,96,128,192,256 --out "$R/qwen3-14b-nospec.json" > "$R/qwen3-14b-nospec.log" 2>&1
log "qwen3-14b nospec rc=$?"
timeout 420 python3 $H/step_probe.py --model $P/llama-3.1-8b --speculative-config "$K4" --out "$R/llama-3.1-8b-k4.json" > "$R/llama-3.1-8b-k4.log" 2>&1
log "llama-3.1-8b k4 rc=$?"
log "done"

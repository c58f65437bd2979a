#!/usr/bin/env bash
# Issue 17, 2026-12-04, second run: the served n-gram K = 4 step and the offline one at the same
# shapes on one machine. Served: Llama-3.1-8B shape, max_model_len 4,096, random 256-token
# prompts, 128 output tokens, num_prompts = concurrency (one wave: every step holds the whole
# batch, nothing arrives or leaves mid-wave), c16/c64/c128/c256, two seeds each; the server
# carries hook/ (step stamps). Offline: ../spec-cpu-2026-12-03/runner_probe.py at B = 16, 64,
# 128, 256, same prompts' shape. After the kit's install, servelab in /tmp/sl, the kit's bin in
# /tmp/kitbin; detached:
#   setsid nohup bash /tmp/sl/docs/validation/spec-gil-2026-12-04/device2.sh > /tmp/g2run.out 2>&1 &
set -u
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
R=/tmp/g2run
mkdir -p "$R/cells"
cd /tmp/sl || exit 1
T0=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
export MODEL=/tmp/gpu-x/payload/llama-3.1-8b SERVED_NAME=llama OUT=$R
[ -d "$MODEL" ] || bash /tmp/kitbin/dev.sh modeldir llama-3.1-8b src/servelab/data/models/llama-3.1-8b.json > "$R/modeldir.log" 2>&1
K4='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'
HOOK=/tmp/sl/docs/validation/spec-gil-2026-12-04/hook
mkdir -p "$R/hook"
log "serve"
PYTHONPATH=$HOOK HOOK_DIR=$R/hook WAIT_S=400 bash /tmp/kitbin/dev.sh serve ngram-k4 --max-model-len 4096 --speculative-config "$K4" > "$R/serve.log" 2>&1
log "serve rc=$?"
seed=7000
for c in 16 64 128 256 16 64 128 256; do
  seed=$((seed + 1))
  log "bench c$c seed $seed"
  PYTHONPATH=/tmp/sl/src:/tmp/site python3 -m servelab bench --base-url http://127.0.0.1:8000 \
    --model llama --tokenizer "$MODEL" --dataset-name random --random-input-len 256 \
    --random-output-len 128 --random-range-ratio 0 --num-prompts "$c" --max-concurrency "$c" \
    --num-warmups 2 --ignore-eos --temperature 0 --seed "$seed" --no-progress --save-result \
    --result-dir "$R/cells" --result-filename "c$c-s$seed.json" > "$R/bench-c$c-s$seed.log" 2>&1
  log "bench rc=$?"
  sleep 1
done
bash /tmp/kitbin/dev.sh stop ngram-k4 > "$R/stop.log" 2>&1
log "stop rc=$?"
PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 400 python3 docs/validation/spec-cpu-2026-12-03/runner_probe.py \
  --model "$MODEL" --speculative-config "$K4" --batches 16,64,128,256 --max-model-len 4096 \
  --out "$R/offline-k4.json" > "$R/offline.log" 2>&1
log "offline rc=$?"
log "all done"

#!/usr/bin/env bash
# The sim-transfer run (issue 14) on one H200 after the kit's install (/work/shared/gpu):
# 1. `servelab sim profile` (the H200 kernel profile the cost model reads);
# 2. per model (dummy weights, vLLM 0.25.1 defaults, one server at a time): startup log,
#    then five cells with servelab's client, greedy, --ignore-eos, a fresh seed each:
#    random 1024/128 at c1, c32, c64; ShareGPT at rate 10 with 10 in flight, and at c64.
# Detached (the launching command's checkout copy goes away), results under /tmp/trun:
#   setsid nohup bash docs/validation/sim-transfer-2026-12-01/device.sh > /tmp/trun.out 2>&1 &
set -u
R=/tmp/trun
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl-site:/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
S="python3 -m servelab"
V=docs/validation/sim-transfer-2026-12-01
CAT=src/servelab/data/models
PAY=/tmp/gpu-x/payload
URL=http://127.0.0.1:8000
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-1250}   # no new model after this many seconds of the script
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }

log "profile"
timeout 400 $S sim profile --out "$R/profile-h200.json" > "$R/profile.log" 2>&1
log "profile rc=$?"

cell() {  # DIR NAME SEED [bench flags]
  local d=$1 name=$2 seed=$3; shift 3
  $S bench --backend openai --base-url "$URL" --model "$SERVED" --tokenizer "$MDIR" \
    --ignore-eos --temperature 0 --seed "$seed" --percentile-metrics ttft,tpot,itl,e2el \
    --metric-percentiles 50,90,99 --save-result --result-dir "$d" --result-filename "$name.json" \
    --no-progress "$@" > "$d/$name.log" 2>&1
  log "  $name rc=$?"
}

model() {  # NAME CONFIG SERVED_NAME
  local name=$1 cfg=$2
  SERVED=$3
  if [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; then log "skip $name: out of time"; return; fi
  local d=$R/$name; mkdir -p "$d"
  bash /tmp/kitbin/dev.sh modeldir "$name" "$cfg" > "$d/modeldir.log" 2>&1
  MDIR=$PAY/$name
  cp "$MDIR/config.json" "$d/config.json"
  log "serve $name"
  setsid python3 -m vllm.entrypoints.openai.api_server --model "$MDIR" --load-format dummy \
    --served-model-name "$SERVED" --host 127.0.0.1 --port 8000 > "$d/server.log" 2>&1 < /dev/null &
  local pid=$! ok=0
  for _ in $(seq 1 240); do
    if curl -sf -m 2 "$URL/health" > /dev/null; then ok=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 2
  done
  log "healthy=$ok $name"
  if [ $ok = 1 ]; then
    cell "$d" rnd_c1 101 --dataset-name random --random-input-len 1024 --random-output-len 128 \
      --num-prompts 12 --max-concurrency 1 --num-warmups 8
    cell "$d" rnd_c32 102 --dataset-name random --random-input-len 1024 --random-output-len 128 \
      --num-prompts 128 --max-concurrency 32
    cell "$d" rnd_c64 103 --dataset-name random --random-input-len 1024 --random-output-len 128 \
      --num-prompts 256 --max-concurrency 64
    cell "$d" sg_r10 104 --dataset-name sharegpt --dataset-path "$PAY/sharegpt_subset.json" \
      --num-prompts 150 --request-rate 10 --max-concurrency 10
    cell "$d" sg_c64 105 --dataset-name sharegpt --dataset-path "$PAY/sharegpt_subset.json" \
      --num-prompts 256 --max-concurrency 64
    curl -s "$URL/metrics" > "$d/metrics.txt"
  fi
  kill -TERM -- -$pid 2>/dev/null
  for _ in $(seq 1 30); do kill -0 $pid 2>/dev/null || break; sleep 1; done
  kill -KILL -- -$pid 2>/dev/null
  sleep 2
  log "stopped $name"
}

model qwen3-4b "$CAT/qwen3-4b.json" Qwen/Qwen3-4B
model llama-3.1-8b "$CAT/llama-3.1-8b.json" meta-llama/Llama-3.1-8B-Instruct
model olmoe-1b-7b "$CAT/olmoe-1b-7b.json" allenai/OLMoE-1B-7B-0924
model mistral-7b "$CAT/mistral-7b-v0.3.json" mistralai/Mistral-7B-Instruct-v0.3
model gemma-3-12b "$V/configs/gemma-3-12b-text.json" google/gemma-3-12b-it
model qwen3-30b-a3b "$CAT/qwen3-30b-a3b.json" Qwen/Qwen3-30B-A3B
log "done"

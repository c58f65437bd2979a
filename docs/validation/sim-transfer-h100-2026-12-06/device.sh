#!/usr/bin/env bash
# Issue 14, 2026-12-06 (third session): the prefill-heavy cells again, each drawn three times,
# on whatever GPU the device service lends. Per model (dummy weights, vLLM 0.25.1 defaults,
# one server at a time), servelab's client, greedy, --ignore-eos:
#   MODE=repeats  (an H200): ../sim-transfer-2026-12-01's protocol for its first cells, same
#     seeds and order (rnd_c1 with 8 warm-ups at c1, then rnd_c32 seed 102, rnd_c64 seed 103),
#     then two more draws of each (seeds 112/113, 122/123), interleaved; /metrics after every
#     cell (server-side TTFT, queue and prefill histograms).
#   MODE=protocol (another GPU): the 12-01 protocol's five cells (random 1024/128 at c1/c32/c64,
#     ShareGPT at rate 10 / c10 and at c64), the same seeds.
# The host's single-thread speed every ~5 s (servelab probe's loop). No new model after
# BUDGET_S seconds. Detached, from the checkout on the machine:
#   mkdir -p /tmp/slsrc /tmp/kitbin /tmp/slcfg && cp -r src/servelab /tmp/slsrc/ && cp .gpu/bin/* /tmp/kitbin/
#   cp src/servelab/data/models/*.json docs/validation/sim-transfer-2026-12-01/configs/*.json /tmp/slcfg/
#   (MODE=repeats MODELS="..." setsid nohup bash THIS > /tmp/trep.out 2>&1 &)
set -u
R=/tmp/trep
mkdir -p "$R"
export PYTHONPATH=/tmp/slsrc:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
S="python3 -m servelab"
CFG=/tmp/slcfg
PAY=/tmp/gpu-x/payload
URL=http://127.0.0.1:8000
MODE=${MODE:-repeats}
MODELS=${MODELS:-"olmoe-1b-7b gemma-3-12b mistral-7b qwen3-30b-a3b"}
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-1000}
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
nvidia-smi -q > "$R/nvsmi.txt" 2>&1; lscpu > "$R/lscpu.txt" 2>&1
$S probe > "$R/probe-before.txt" 2>&1
( while true; do
    python3 -c "import time; from servelab.hardware.host import probe_host; print(f'{time.time():.1f} {probe_host().python_loop_ns:.1f}', flush=True)" >> "$R/hostspeed.txt" 2>/dev/null
    sleep 5
  done ) &
SAMPLER=$!
log "mode $MODE models $MODELS gpu $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

cell() {  # DIR NAME SEED [bench flags]
  local d=$1 name=$2 seed=$3; shift 3
  $S bench --backend openai --base-url "$URL" --model "$SERVED" --tokenizer "$MDIR" \
    --ignore-eos --temperature 0 --seed "$seed" --percentile-metrics ttft,tpot,itl,e2el \
    --metric-percentiles 50,90,99 --save-result --result-dir "$d" --result-filename "$name.json" \
    --no-progress "$@" > "$d/$name.log" 2>&1
  log "  $name rc=$?"
  curl -s "$URL/metrics" > "$d/$name.metrics.txt"
}
rnd() {  # DIR NAME SEED CONCURRENCY PROMPTS [flags]
  local d=$1 name=$2 seed=$3 c=$4 n=$5; shift 5
  cell "$d" "$name" "$seed" --dataset-name random --random-input-len 1024 --random-output-len 128 \
    --num-prompts "$n" --max-concurrency "$c" "$@"
}

model() {  # NAME
  local name=$1 cfg served
  case $name in
    olmoe-1b-7b) cfg=$CFG/olmoe-1b-7b.json served=allenai/OLMoE-1B-7B-0924 ;;
    gemma-3-12b) cfg=$CFG/gemma-3-12b-text.json served=google/gemma-3-12b-it ;;
    mistral-7b) cfg=$CFG/mistral-7b-v0.3.json served=mistralai/Mistral-7B-Instruct-v0.3 ;;
    qwen3-30b-a3b) cfg=$CFG/qwen3-30b-a3b.json served=Qwen/Qwen3-30B-A3B ;;
    qwen3-4b) cfg=$CFG/qwen3-4b.json served=Qwen/Qwen3-4B ;;
    llama-3.1-8b) cfg=$CFG/llama-3.1-8b.json served=meta-llama/Llama-3.1-8B-Instruct ;;
    *) log "unknown model $name"; return ;;
  esac
  SERVED=$served
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
    rnd "$d" rnd_c1 101 1 12 --num-warmups 8
    if [ "$MODE" = repeats ]; then
      rnd "$d" rnd_c32_1 102 32 128
      rnd "$d" rnd_c64_1 103 64 256
      rnd "$d" rnd_c32_2 112 32 128
      rnd "$d" rnd_c64_2 113 64 256
      rnd "$d" rnd_c32_3 122 32 128
      rnd "$d" rnd_c64_3 123 64 256
    else
      rnd "$d" rnd_c32 102 32 128
      rnd "$d" rnd_c64 103 64 256
      cell "$d" sg_r10 104 --dataset-name sharegpt --dataset-path "$PAY/sharegpt_subset.json" \
        --num-prompts 150 --request-rate 10 --max-concurrency 10
      cell "$d" sg_c64 105 --dataset-name sharegpt --dataset-path "$PAY/sharegpt_subset.json" \
        --num-prompts 256 --max-concurrency 64
    fi
  fi
  kill -TERM -- -$pid 2>/dev/null
  for _ in $(seq 1 30); do kill -0 $pid 2>/dev/null || break; sleep 1; done
  kill -KILL -- -$pid 2>/dev/null
  sleep 2
  log "stopped $name"
}

for m in $MODELS; do model "$m"; done
$S probe > "$R/probe-after.txt" 2>&1
kill "$SAMPLER"
log "done"

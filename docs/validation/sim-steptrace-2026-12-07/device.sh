#!/usr/bin/env bash
# Issue 14, 2026-12-07: an engine step's CPU and GPU time apart, at 32 and 64 in flight.
# Random 1024/128 on OLMoE-1B-7B (held out; its c64 TTFT is the acceptance's failing figure) and
# Qwen3-4B (a model of the residual's fit set), served by vLLM 0.25.1 (dummy weights, vLLM's
# defaults) with hook/sitecustomize.py on the server's PYTHONPATH: the engine core's schedule,
# execute_model, sample_tokens, the wait for a step's tokens and update_from_output with the
# thread's CPU time at each, a CUDA event at each step's start and end, the input thread's
# request preprocessing, and a 10 ms sampler of every Python thread's CPU time; the API
# server's tokenising, hand-off and output processing. servelab's client, greedy,
# --ignore-eos, per-request records kept.
# After the kit's install, from the checkout on the machine; detached:
#   mkdir -p /tmp/slsrc /tmp/kitbin /tmp/st && cp -r src/servelab /tmp/slsrc/ && cp .gpu/bin/* /tmp/kitbin/
#   cp -r docs/validation/sim-steptrace-2026-12-07/. src/servelab/data/models /tmp/st/
#   (setsid nohup bash /tmp/st/device.sh > /tmp/st.out 2>&1 &)
set -u
R=/tmp/strun
mkdir -p "$R"
export PYTHONPATH=/tmp/slsrc:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
S="python3 -m servelab"
CAT=/tmp/st/models
PAY=/tmp/gpu-x/payload
URL=http://127.0.0.1:8000
T0=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
pc() { python3 -c "import time; print(time.perf_counter())"; }
nvidia-smi -q > "$R/nvsmi.txt" 2>&1; lscpu > "$R/lscpu.txt" 2>&1
$S probe > "$R/probe-before.txt" 2>&1
log "gpu $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

cell() {  # DIR NAME SEED [bench flags]
  local d=$1 name=$2 seed=$3; shift 3
  echo "$name start $(pc)" >> "$d/cells.txt"
  $S bench --backend openai --base-url "$URL" --model "$SERVED" --tokenizer "$MDIR" \
    --ignore-eos --temperature 0 --seed "$seed" --percentile-metrics ttft,tpot,itl,e2el \
    --metric-percentiles 50,90,99 --save-result --save-detailed --result-dir "$d" \
    --result-filename "$name.json" --no-progress "$@" > "$d/$name.log" 2>&1
  log "  $name rc=$?"
  echo "$name end $(pc)" >> "$d/cells.txt"
  curl -s "$URL/metrics" > "$d/$name.metrics.txt"
}
rnd() {  # DIR NAME SEED CONC PROMPTS [flags]
  local d=$1 name=$2 seed=$3 c=$4 n=$5; shift 5
  cell "$d" "$name" "$seed" --dataset-name random --random-input-len 1024 --random-output-len 128 \
    --max-concurrency "$c" --num-prompts "$n" "$@"
}

model() {  # NAME SERVED_NAME CELLS...
  local name=$1
  SERVED=$2; shift 2
  local d=$R/$name; mkdir -p "$d/hook"
  bash /tmp/kitbin/dev.sh modeldir "$name" "$CAT/$name.json" > "$d/modeldir.log" 2>&1
  MDIR=$PAY/$name
  cp "$MDIR/config.json" "$d/config.json"
  log "serve $name"
  HOOK_DIR=$d/hook PYTHONPATH=/tmp/st/hook:$PYTHONPATH setsid python3 -m vllm.entrypoints.openai.api_server \
    --model "$MDIR" --load-format dummy --served-model-name "$SERVED" --host 127.0.0.1 --port 8000 \
    > "$d/server.log" 2>&1 < /dev/null &
  local pid=$! ok=0
  for _ in $(seq 1 240); do
    if curl -sf -m 2 "$URL/health" > /dev/null; then ok=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 2
  done
  log "healthy=$ok $name"
  if [ $ok = 1 ]; then
    rnd "$d" warm 301 64 128 --num-warmups 8   # every batch size the cells reach, compiled first
    rnd "$d" rnd_c32_1 102 32 128
    rnd "$d" rnd_c64_1 103 64 256
    "$@"
    curl -s "$URL/metrics" > "$d/metrics.txt"
  fi
  kill -TERM -- -$pid 2>/dev/null
  for _ in $(seq 1 30); do kill -0 $pid 2>/dev/null || break; sleep 1; done
  kill -KILL -- -$pid 2>/dev/null
  sleep 2
  log "stopped $name"
}
olmoe_more() { rnd "$d" rnd_c64_2 113 64 256; }
# SKIP_FAMIXED=1: not at all (a short device session)
if [ "${SKIP_FAMIXED:-0}" != 1 ]; then python3 /tmp/st/famixed.py > "$R/famixed.txt" 2>&1; log "famixed rc=$?"; fi
model olmoe-1b-7b allenai/OLMoE-1B-7B-0924 olmoe_more
# Qwen3-4B only while the session's device time lasts (SKIP_QWEN=1: not at all)
[ "${SKIP_QWEN:-0}" = 1 ] || model qwen3-4b Qwen/Qwen3-4B true
$S probe > "$R/probe-after.txt" 2>&1
log "done"

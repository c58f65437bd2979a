#!/usr/bin/env bash
# Issue 14, 2026-12-03, the second machine: as device.sh, but every repeat of a cell with its
# own seed (device.sh repeated the seeds, and vLLM's prefix cache served the repeats), on the
# held-out models, those that miss most first (OLMoE: two more seeds beside device.sh's).
# After the kit's install (/work/shared/gpu) and servelab copied to /tmp/sl; detached:
#   setsid nohup bash docs/validation/sim-loop-2026-12-03/device2.sh > /tmp/wrun2.out 2>&1 &
set -u
R=/tmp/wrun2
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl-site:/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
S="python3 -m servelab"
W=docs/validation/sim-loop-2026-12-03
CAT=src/servelab/data/models
PAY=/tmp/gpu-x/payload
URL=http://127.0.0.1:8000
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-450}   # no new model after this many seconds of the script
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
late() { [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; }
pc() { python3 -c "import time; print(time.perf_counter())"; }

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
rnd() {  # DIR NAME SEED IN OUT CONC PROMPTS
  cell "$1" "$2" "$3" --dataset-name random --random-input-len "$4" --random-output-len "$5" \
    --max-concurrency "$6" --num-prompts "$7"
}

model() {  # NAME CONFIG SERVED_NAME
  local name=$1 cfg=$2
  SERVED=$3
  if late; then log "skip $name: out of time"; return; fi
  local d=$R/$name
  mkdir -p "$d/hook"
  bash /tmp/kitbin/dev.sh modeldir "$name" "$cfg" > "$d/modeldir.log" 2>&1
  MDIR=$PAY/$name
  cp "$MDIR/config.json" "$d/config.json"
  log "serve $name"
  HOOK_DIR=$d/hook PYTHONPATH=$PWD/$W/hook:$PYTHONPATH setsid python3 -m vllm.entrypoints.openai.api_server \
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
    cell "$d" warm_sg 301 --dataset-name sharegpt --dataset-path "$PAY/sharegpt_subset.json" \
      --num-prompts 128 --max-concurrency 64 --num-warmups 8
    rnd "$d" warm_rnd 302 1024 32 64 64
    rnd "$d" warm_out 303 32 64 128 128
    # every repeat with its own seed: a repeated seed repeats the prompts, which vLLM's
    # prefix cache then serves (the first run of this script measured that by mistake)
    for k in $REPS; do
      rnd "$d" rnd_c32_s$((102 + 1000 * k)) $((102 + 1000 * k)) 1024 128 32 128
      rnd "$d" rnd_c64_s$((103 + 1000 * k)) $((103 + 1000 * k)) 1024 128 64 256
    done
    curl -s "$URL/metrics" > "$d/metrics.txt"
  fi
  kill -TERM -- -$pid 2>/dev/null
  for _ in $(seq 1 30); do kill -0 $pid 2>/dev/null || break; sleep 1; done
  kill -KILL -- -$pid 2>/dev/null
  sleep 2
  log "stopped $name"
}

REPS="1 2" model olmoe-1b-7b "$CAT/olmoe-1b-7b.json" allenai/OLMoE-1B-7B-0924
REPS="0 1 2" model gemma-3-12b docs/validation/sim-transfer-2026-12-01/configs/gemma-3-12b-text.json google/gemma-3-12b-it
REPS="0 1 2" model mistral-7b "$CAT/mistral-7b-v0.3.json" mistralai/Mistral-7B-Instruct-v0.3
REPS="0 1 2" model qwen3-30b-a3b "$CAT/qwen3-30b-a3b.json" Qwen/Qwen3-30B-A3B
log "done"

#!/usr/bin/env bash
# Issue 17, 2026-12-04: the served engine's step at batch 128-256 with CPython's switch
# interval at 5 ms (its default) and at 0.5 ms, same server, n-gram K = 4 and no speculation,
# Llama-3.1-8B shape (dummy weights), ShareGPT output 128, 1,024 prompts a load.
# After the kit's install, servelab in /tmp/sl and the kit's bin in /tmp/kitbin; detached:
#   setsid nohup bash /tmp/sl/docs/validation/spec-gil-2026-12-04/device.sh > /tmp/grun.out 2>&1 &
set -u
R=/tmp/grun
mkdir -p "$R"
cd /tmp/sl || exit 1
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-600}
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
export MODEL=/tmp/gpu-x/payload/llama-3.1-8b SERVED_NAME=llama OUT=$R
bash /tmp/kitbin/dev.sh modeldir llama-3.1-8b src/servelab/data/models/llama-3.1-8b.json > "$R/modeldir.log" 2>&1
log "modeldir rc=$?"
HOOK=/tmp/sl/docs/validation/spec-gil-2026-12-04/hook
SW=$R/switch.txt
seed=5000
bench() {  # bench LABEL CONCURRENCY SWITCH_S
  echo "$3" > "$SW"; sleep 1.5
  seed=$((seed + 1))
  log "bench $1 c$2 switch $3 seed $seed"
  PYTHONPATH=/tmp/sl/src:/tmp/site python3 -m servelab bench --base-url http://127.0.0.1:8000 \
    --model llama --tokenizer "$MODEL" --dataset-name sharegpt \
    --dataset-path /tmp/gpu-x/payload/sharegpt_subset.json --sharegpt-output-len 128 \
    --num-prompts 1024 --max-concurrency "$2" --num-warmups 3 --ignore-eos --temperature 0 \
    --seed "$seed" --no-progress --save-result --result-dir "$R/cells" \
    --result-filename "$1-c$2-sw$3-s$seed.json" --metadata "switch_s=$3" > "$R/bench-$1-c$2-sw$3.log" 2>&1
  log "bench rc=$?"
}
for arm in ngram-k4 nospec; do
  if [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; then log "skip $arm: out of time"; continue; fi
  mkdir -p "$R/hook-$arm"; rm -f "$SW"
  extra=()
  [ "$arm" = ngram-k4 ] && extra=(--speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}')
  log "serve $arm"
  PYTHONPATH=$HOOK HOOK_DIR=$R/hook-$arm SWITCH_FILE=$SW WAIT_S=400 bash /tmp/kitbin/dev.sh serve "$arm" "${extra[@]}" > "$R/serve-$arm.log" 2>&1
  log "serve rc=$?"
  bench "$arm" 256 0.005
  bench "$arm" 256 0.0005
  bench "$arm" 128 0.005
  bench "$arm" 128 0.0005
  bench "$arm" 256 0.005
  bash /tmp/kitbin/dev.sh stop "$arm" > "$R/stop-$arm.log" 2>&1
  log "stop rc=$?"
done
log "all done"

#!/usr/bin/env bash
# Issue 14, third H200 run (after device.sh): the engine's CPU time per step, measured where
# it binds: a model whose GPU step is shorter than it (Qwen3-0.6B, dummy weights), served
# with vLLM's defaults, random 1024/128 at 1, 16 and 64 in flight, then ShareGPT at 64.
# Same set-up as device.sh; results under /tmp/krun2:
#   setsid nohup bash docs/validation/sim-kernels-2026-12-01/device-tiny.sh > /tmp/krun2.out 2>&1 &
# (device.sh's own header follows)
# After the kit's install (/work/shared/gpu) and servelab copied to /tmp/sl:
# 1. `servelab sim profile` again (fused-MoE points now rotate their routing, see
#    servelab.sim.profiler.time_moe);
# 2. engine_trace.py: real vLLM decode and prefill steps kernel by kernel (offline engine,
#    torch profiler) for OLMoE-1B-7B (CUDA graphs; eager), Qwen3-30B-A3B, Llama-3.1-8B;
# 3. Qwen3-30B-A3B served again, warmed at the batch sizes the cells reach before they are
#    measured (the first run's ShareGPT cells carried a one-time stall), per-request
#    records kept; then Llama-3.1-8B's prefill-heavy cells with per-request records.
# Detached, results under /tmp/krun:
#   setsid nohup bash docs/validation/sim-kernels-2026-12-01/device.sh > /tmp/krun.out 2>&1 &
set -u
R=/tmp/krun2
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl-site:/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
S="python3 -m servelab"
V=docs/validation/sim-kernels-2026-12-01
CAT=src/servelab/data/models
PAY=/tmp/gpu-x/payload
URL=http://127.0.0.1:8000
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-200}   # nothing new starts after this many seconds of the script
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
late() { [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; }

bash /tmp/kitbin/dev.sh modeldir qwen3-0.6b "$CAT/qwen3-0.6b.json" > "$R/modeldir-qwen3-0.6b.log" 2>&1
log "modeldir rc=$?"
cell() {  # DIR NAME SEED [bench flags]
  local d=$1 name=$2 seed=$3; shift 3
  $S bench --backend openai --base-url "$URL" --model "$SERVED" --tokenizer "$MDIR" \
    --ignore-eos --temperature 0 --seed "$seed" --percentile-metrics ttft,tpot,itl,e2el \
    --metric-percentiles 50,90,99 --save-result --save-detailed --result-dir "$d" \
    --result-filename "$name.json" --no-progress "$@" > "$d/$name.log" 2>&1
  log "  $name rc=$?"
}

serve() {  # NAME SERVED_NAME CELLS...
  local name=$1
  SERVED=$2; shift 2
  if late; then log "skip serve $name: out of time"; return; fi
  local d=$R/$name; mkdir -p "$d"
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
    # warm-up at every batch size the cells reach (Triton compiles a fused-MoE config per
    # range of tokens on first use); kept apart from the cells
    cell "$d" warm_sg 201 --dataset-name sharegpt --dataset-path "$PAY/sharegpt_subset.json" \
      --num-prompts 128 --max-concurrency 64 --num-warmups 8
    cell "$d" warm_rnd 202 --dataset-name random --random-input-len 1024 --random-output-len 32 \
      --num-prompts 64 --max-concurrency 64
    curl -s "$URL/metrics" > "$d/metrics-before.txt"
    for c in "$@"; do
      case $c in
        rnd_c1) cell "$d" rnd_c1 211 --dataset-name random --random-input-len 1024 --random-output-len 128 \
                   --num-prompts 12 --max-concurrency 1 ;;
        rnd_c16) cell "$d" rnd_c16 216 --dataset-name random --random-input-len 1024 --random-output-len 128 \
                   --num-prompts 64 --max-concurrency 16 ;;
        rnd_c32) cell "$d" rnd_c32 212 --dataset-name random --random-input-len 1024 --random-output-len 128 \
                   --num-prompts 128 --max-concurrency 32 ;;
        rnd_c64) cell "$d" rnd_c64 213 --dataset-name random --random-input-len 1024 --random-output-len 128 \
                   --num-prompts 256 --max-concurrency 64 ;;
        sg_r10) cell "$d" sg_r10 214 --dataset-name sharegpt --dataset-path "$PAY/sharegpt_subset.json" \
                  --num-prompts 150 --request-rate 10 --max-concurrency 10 ;;
        sg_c64) cell "$d" sg_c64 215 --dataset-name sharegpt --dataset-path "$PAY/sharegpt_subset.json" \
                  --num-prompts 256 --max-concurrency 64 ;;
      esac
    done
    curl -s "$URL/metrics" > "$d/metrics.txt"
  fi
  kill -TERM -- -$pid 2>/dev/null
  for _ in $(seq 1 30); do kill -0 $pid 2>/dev/null || break; sleep 1; done
  kill -KILL -- -$pid 2>/dev/null
  sleep 2
  log "stopped $name"
}

serve qwen3-0.6b Qwen/Qwen3-0.6B rnd_c1 rnd_c16 rnd_c64 sg_c64
log "done"

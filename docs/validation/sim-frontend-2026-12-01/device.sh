#!/usr/bin/env bash
# Issue 14 (and 17), fourth H200 run: what vLLM's API server costs per request and per
# streamed token, measured where it binds, and two engine traces.
# 1. Qwen3-0.6B served (its GPU step is the shortest: the API server binds first), vLLM's
#    defaults, per-request records and a /metrics snapshot after every cell:
#    intake probes (one output token: a request is intake + one prefill + one chunk) at
#    64, 1,024 and 4,096 prompt tokens; streaming probes (32-token prompts, 512 tokens out)
#    at 1, 32 and 128 in flight; random 1024/128 at 32 in flight.
# 2. OLMoE-1B-7B served, warmed at every batch size its cells reach, then random 1024/128
#    at 32 and 64 in flight twice each (fresh seeds; the transfer run's seeds first), and
#    the two API-server probes that bind (intake at 1,024 tokens, streaming at 128).
# 3. engine_trace.py (../sim-kernels-2026-12-01): Qwen3-14B AWQ (Machete) decode and
#    prefill kernels at batch 1 and 32; Qwen3-14B with the Qwen3-0.6B-shaped draft model,
#    K = 4, synthetic acceptance 0.8/0.7/0.6/0.5 (the spec-decode run's draft-k4 arm), at
#    batch 1 and 16, with the host's launch calls counted.
# After the kit's install (/work/shared/gpu) and servelab copied to /tmp/sl; detached:
#   setsid nohup bash docs/validation/sim-frontend-2026-12-01/device.sh > /tmp/frun.out 2>&1 &
set -u
R=/tmp/frun
mkdir -p "$R"
cd /tmp/sl || exit 1
export PYTHONPATH=/tmp/sl-site:/tmp/sl/src:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
S="python3 -m servelab"
TRACE=docs/validation/sim-kernels-2026-12-01/engine_trace.py
CAT=src/servelab/data/models
PAY=/tmp/gpu-x/payload
URL=http://127.0.0.1:8000
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-1080}   # nothing new starts after this many seconds of the script
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
late() { [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; }

for m in qwen3-0.6b olmoe-1b-7b; do
  bash /tmp/kitbin/dev.sh modeldir $m "$CAT/$m.json" > "$R/modeldir-$m.log" 2>&1
  log "modeldir $m rc=$?"
done
bash /tmp/kitbin/dev.sh awqdir > "$R/awqdir.log" 2>&1
log "awqdir rc=$?"

cell() {  # DIR NAME SEED [bench flags]
  local d=$1 name=$2 seed=$3; shift 3
  if late; then log "  skip $name: out of time"; return; fi
  $S bench --backend openai --base-url "$URL" --model "$SERVED" --tokenizer "$MDIR" \
    --ignore-eos --temperature 0 --seed "$seed" --percentile-metrics ttft,tpot,itl,e2el \
    --metric-percentiles 50,90,99 --save-result --save-detailed --result-dir "$d" \
    --result-filename "$name.json" --no-progress "$@" > "$d/$name.log" 2>&1
  log "  $name rc=$?"
  curl -s "$URL/metrics" > "$d/$name.metrics.txt"
}
rnd() {  # DIR NAME SEED IN OUT CONC PROMPTS
  cell "$1" "$2" "$3" --dataset-name random --random-input-len "$4" --random-output-len "$5" \
    --max-concurrency "$6" --num-prompts "$7"
}

serve() {  # NAME SERVED_NAME FUNCTION
  local name=$1
  SERVED=$2
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
    cell "$d" warm_sg 301 --dataset-name sharegpt --dataset-path "$PAY/sharegpt_subset.json" \
      --num-prompts 128 --max-concurrency 64 --num-warmups 8
    rnd "$d" warm_rnd 302 1024 32 64 64
    rnd "$d" warm_out 303 32 64 128 128
    curl -s "$URL/metrics" > "$d/metrics-before.txt"
    "$3" "$d"
    curl -s "$URL/metrics" > "$d/metrics.txt"
  fi
  kill -TERM -- -$pid 2>/dev/null
  for _ in $(seq 1 30); do kill -0 $pid 2>/dev/null || break; sleep 1; done
  kill -KILL -- -$pid 2>/dev/null
  sleep 2
  log "stopped $name"
}

tiny_cells() {
  local d=$1
  rnd "$d" in64_c64 311 64 1 64 1024
  rnd "$d" in1024_c64 312 1024 1 64 512
  rnd "$d" in4096_c16 313 4096 1 16 128
  rnd "$d" out512_c1 314 32 512 1 4
  rnd "$d" out512_c32 315 32 512 32 128
  rnd "$d" out512_c128 316 32 512 128 256
  rnd "$d" rnd_c32 317 1024 128 32 128
}
olmoe_cells() {
  local d=$1
  rnd "$d" rnd_c32 102 1024 128 32 128
  rnd "$d" rnd_c64 103 1024 128 64 256
  rnd "$d" rnd_c32_b 322 1024 128 32 128
  rnd "$d" rnd_c64_b 323 1024 128 64 256
  rnd "$d" in1024_c64 324 1024 1 64 512
  rnd "$d" out512_c128 325 32 512 128 256
}

serve qwen3-0.6b Qwen/Qwen3-0.6B tiny_cells
serve olmoe-1b-7b allenai/OLMoE-1B-7B-0924 olmoe_cells

trace() {  # OUTNAME MODELDIR BATCHES [extra]
  local out=$1 model=$2 batches=$3; shift 3
  if late; then log "skip trace $out: out of time"; return; fi
  log "trace $out"
  timeout 420 python3 "$TRACE" --model "$model" --out "$R/trace-$out.json" --batches "$batches" "$@" \
    > "$R/trace-$out.log" 2>&1
  log "trace $out rc=$?"
}
trace qwen3-14b-awq "$PAY/qwen3-14b-awq" 1,32
trace qwen3-14b-draft-k4 "$PAY/qwen3-14b" 1,16 --steps 65 --speculative-config \
  "{\"method\": \"draft_model\", \"model\": \"$PAY/qwen3-0.6b\", \"num_speculative_tokens\": 4, \"rejection_sample_method\": \"synthetic\", \"synthetic_acceptance_rates\": [0.8, 0.7, 0.6, 0.5]}"
log "done"

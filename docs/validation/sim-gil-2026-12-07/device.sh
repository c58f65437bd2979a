#!/usr/bin/env bash
# Issue 14, 2026-12-07: two questions about the prefill-heavy cells, on one lent GPU (vLLM 0.25.1
# from the kit, dummy weights, vLLM's defaults, one server at a time, servelab's client, greedy,
# --ignore-eos):
# 1. OLMoE-1B-7B, random 1024/128 at 32 and 64 in flight, twice each, served first with CPython's
#    default GIL switch interval (5 ms) and then with 0.5 ms in every server process (the API
#    server and the engine core: `gilsite/sitecustomize.py` on their PYTHONPATH). Where the
#    threads of one process wait for the GIL (the tokenizer worker behind a busy event loop), a
#    shorter interval shortens the waits; the TTFT that moves is the part the GIL costs.
# 2. gemma-3-12b served with the kit tokenizer's vocabulary (vocab_size 151,936 instead of
#    262,208): its dummy outputs then decode as a real tokenizer's do (../sim-detok-2026-12-06).
#    The transfer protocol's five cells, with rnd_c32 / rnd_c64 drawn three times.
# Detached, from the checkout on the machine (after the kit's install):
#   mkdir -p /tmp/slsrc /tmp/kitbin /tmp/slcfg /tmp/gilsite && cp -r src/servelab /tmp/slsrc/ && cp .gpu/bin/* /tmp/kitbin/
#   cp docs/validation/sim-transfer-2026-12-01/configs/*.json /tmp/slcfg/
#   cp docs/validation/sim-gil-2026-12-07/gilsite/sitecustomize.py /tmp/gilsite/
#   (setsid nohup bash docs/validation/sim-gil-2026-12-07/device.sh > /tmp/gil.out 2>&1 &)
set -u
R=/tmp/gilrun
mkdir -p "$R"
export PYTHONPATH=/tmp/slsrc:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
S="python3 -m servelab"
CFG=/tmp/slcfg
PAY=/tmp/gpu-x/payload
URL=http://127.0.0.1:8000
T0=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
nvidia-smi -q > "$R/nvsmi.txt" 2>&1; lscpu > "$R/lscpu.txt" 2>&1
$S probe > "$R/probe-before.txt" 2>&1
log "gpu $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

cell() {  # DIR NAME SEED [bench flags]
  local d=$1 name=$2 seed=$3; shift 3
  $S bench --backend openai --base-url "$URL" --model "$SERVED" --tokenizer "$MDIR" \
    --ignore-eos --temperature 0 --seed "$seed" --percentile-metrics ttft,tpot,itl,e2el \
    --metric-percentiles 50,90,99 --save-result --save-detailed --result-dir "$d" --result-filename "$name.json" \
    --no-progress "$@" > "$d/$name.log" 2>&1
  log "  $name rc=$?"
  curl -s "$URL/metrics" > "$d/$name.metrics.txt"
}
rnd() {  # DIR NAME SEED CONCURRENCY PROMPTS [flags]
  local d=$1 name=$2 seed=$3 c=$4 n=$5; shift 5
  cell "$d" "$name" "$seed" --dataset-name random --random-input-len 1024 --random-output-len 128 \
    --num-prompts "$n" --max-concurrency "$c" "$@"
}

serve() {  # DIR [extra PYTHONPATH]: start, wait for /health; sets PID, OK
  local d=$1 extra=${2:-}
  curl -s "$URL/metrics" > /dev/null 2>&1 && log "a server already answers on 8000"
  PYTHONPATH="${extra:+$extra:}$PYTHONPATH" setsid python3 -m vllm.entrypoints.openai.api_server \
    --model "$MDIR" --load-format dummy --served-model-name "$SERVED" --host 127.0.0.1 --port 8000 \
    > "$d/server.log" 2>&1 < /dev/null &
  PID=$! OK=0
  for _ in $(seq 1 240); do
    if curl -sf -m 2 "$URL/health" > /dev/null; then OK=1; break; fi
    kill -0 $PID 2>/dev/null || break
    sleep 2
  done
  curl -s "$URL/metrics" > "$d/metrics-before.txt"
  log "healthy=$OK $(basename "$d")"
}
stop() {
  kill -TERM -- -$PID 2>/dev/null
  for _ in $(seq 1 30); do kill -0 $PID 2>/dev/null || break; sleep 1; done
  kill -KILL -- -$PID 2>/dev/null
  sleep 2
  log "stopped"
}

# 1. OLMoE, default switch interval, then 0.5 ms
SERVED=allenai/OLMoE-1B-7B-0924
bash /tmp/kitbin/dev.sh modeldir olmoe-1b-7b "$CFG/olmoe-1b-7b.json" > "$R/modeldir-olmoe.log" 2>&1
MDIR=$PAY/olmoe-1b-7b
for arm in default:0.005 short:0.0005; do
  name=${arm%%:*}; sw=${arm#*:}
  d=$R/olmoe-1b-7b-$name; mkdir -p "$d"; cp "$MDIR/config.json" "$d/config.json"
  export GIL_SWITCH_S=$sw GIL_LOG_DIR=$d
  serve "$d" /tmp/gilsite
  if [ $OK = 1 ]; then
    rnd "$d" rnd_c1 101 1 12 --num-warmups 8
    rnd "$d" rnd_c32_1 102 32 128
    rnd "$d" rnd_c64_1 103 64 256
    rnd "$d" rnd_c32_2 112 32 128
    rnd "$d" rnd_c64_2 113 64 256
  fi
  stop
done
unset GIL_SWITCH_S GIL_LOG_DIR

# 2. gemma-3-12b with the tokenizer's vocabulary
SERVED=google/gemma-3-12b-it
bash /tmp/kitbin/dev.sh modeldir gemma-3-12b "$CFG/gemma-3-12b-text.json" > "$R/modeldir-gemma.log" 2>&1
MDIR=$PAY/gemma-3-12b
python3 - "$MDIR/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["vocab_size"] = 151936
json.dump(c, open(p, "w"), indent=2)
PY
d=$R/gemma-3-12b; mkdir -p "$d"; cp "$MDIR/config.json" "$d/config.json"
serve "$d"
if [ $OK = 1 ]; then
  rnd "$d" rnd_c1 101 1 12 --num-warmups 8
  rnd "$d" rnd_c32_1 102 32 128
  rnd "$d" rnd_c64_1 103 64 256
  rnd "$d" rnd_c32_2 112 32 128
  rnd "$d" rnd_c64_2 113 64 256
  rnd "$d" rnd_c32_3 122 32 128
  rnd "$d" rnd_c64_3 123 64 256
  cell "$d" sg_r10 104 --dataset-name sharegpt --dataset-path "$PAY/sharegpt_subset.json" \
    --num-prompts 150 --request-rate 10 --max-concurrency 10
  cell "$d" sg_c64 105 --dataset-name sharegpt --dataset-path "$PAY/sharegpt_subset.json" \
    --num-prompts 256 --max-concurrency 64
fi
stop
$S probe > "$R/probe-after.txt" 2>&1
log "done"

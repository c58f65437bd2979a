#!/usr/bin/env bash
# Client check (issue 8 part 2): `servelab bench` and `vllm bench serve` on one vLLM server,
# the same prompts (one JSONL file both read: servelab's `jsonl`, vLLM's `custom` dataset,
# no chat template, file order), the same load (closed loop, C in flight), --ignore-eos.
# The prefix cache is emptied before every run (the server runs in vLLM's dev mode), so no
# run finds the previous run's prompts cached. Runs alternate tools: vLLM, servelab,
# servelab, vLLM on ShareGPT (the repeat gives the run-to-run noise), then both on random.
#
#   clientcheck.sh OUT_DIR
# Environment (defaults: the H200 kit's paths): MODEL (dir: weights config + tokenizer),
# SERVED, SHAREGPT, PORT, N (prompts per run), C (concurrency), RANDOM_IN, RANDOM_OUT,
# VLLM_BENCH (how to run `vllm bench serve`), SERVELAB, SERVER_EXTRA (more server flags).
set -u
D=${1:?usage: clientcheck.sh OUT_DIR}
mkdir -p "$D"
MODEL=${MODEL:-/tmp/gpu-x/payload/qwen3-14b}
SERVED=${SERVED:-Qwen/Qwen3-14B}
SHAREGPT=${SHAREGPT:-/tmp/gpu-x/payload/sharegpt_subset.json}
PORT=${PORT:-8300}
N=${N:-320}
C=${C:-32}
RANDOM_IN=${RANDOM_IN:-1024}
RANDOM_OUT=${RANDOM_OUT:-128}
VLLM_BENCH=${VLLM_BENCH:-python3 -m vllm.entrypoints.cli.main bench serve}
VLLM_SERVER=${VLLM_SERVER:-python3 -m vllm.entrypoints.openai.api_server}
SERVELAB=${SERVELAB:-python3 -m servelab}
URL=http://127.0.0.1:$PORT
log() { echo "[$(date +%T)] $*"; }

$SERVELAB data inspect --dataset-name sharegpt --dataset-path "$SHAREGPT" --tokenizer "$MODEL" \
  --num-prompts "$N" --seed 11 --save-samples "$D/sg.jsonl" > "$D/sg-inspect.txt" || exit 1
$SERVELAB data inspect --dataset-name random --random-input-len "$RANDOM_IN" \
  --random-output-len "$RANDOM_OUT" --tokenizer "$MODEL" --num-prompts "$N" --seed 12 \
  --save-samples "$D/rnd.jsonl" > "$D/rnd-inspect.txt" || exit 1

log "server"
# shellcheck disable=SC2086
VLLM_SERVER_DEV_MODE=1 setsid $VLLM_SERVER --model "$MODEL" --load-format dummy \
  --served-model-name "$SERVED" --host 127.0.0.1 --port "$PORT" --gpu-memory-utilization 0.9 \
  ${SERVER_EXTRA:-} > "$D/server.log" 2>&1 &
SPID=$!
trap 'kill -TERM -- -$SPID 2>/dev/null; sleep 5; kill -KILL -- -$SPID 2>/dev/null' EXIT
for _ in $(seq 1 300); do
  curl -sf "$URL/health" > /dev/null && break
  kill -0 $SPID 2>/dev/null || { log "server died"; tail -30 "$D/server.log"; exit 1; }
  sleep 2
done
log "healthy"

common=(--base-url "$URL" --model "$SERVED" --tokenizer "$MODEL" --max-concurrency "$C"
        --request-rate inf --ignore-eos --percentile-metrics ttft,tpot,itl,e2el
        --metric-percentiles 50,90,99 --save-result --save-detailed --result-dir "$D" --seed 1)
vb() {  # NAME DATA [flags]
  local name=$1 data=$2; shift 2
  curl -sf -X POST "$URL/reset_prefix_cache" > /dev/null || log "reset failed"
  # shellcheck disable=SC2086
  $VLLM_BENCH --backend openai "${common[@]}" --dataset-name custom --dataset-path "$data" \
    --custom-output-len -1 --skip-chat-template --disable-shuffle --num-prompts "$N" \
    --result-filename "$name.json" "$@" > "$D/$name.log" 2>&1
  log "$name rc=$?"
}
sb() {
  local name=$1 data=$2; shift 2
  curl -sf -X POST "$URL/reset_prefix_cache" > /dev/null || log "reset failed"
  $SERVELAB bench --backend openai "${common[@]}" --dataset-name jsonl --dataset-path "$data" \
    --num-prompts "$N" --result-filename "$name.json" --no-progress "$@" > "$D/$name.log" 2>&1
  log "$name rc=$?"
}
# Not compared: the first requests JIT-compile the sampler and warm both clients.
vb warm-vllm "$D/rnd.jsonl" --num-prompts 40
sb warm-servelab "$D/rnd.jsonl" --num-prompts 40
vb sg-vllm-1 "$D/sg.jsonl"
sb sg-servelab-1 "$D/sg.jsonl"
sb sg-servelab-2 "$D/sg.jsonl"
vb sg-vllm-2 "$D/sg.jsonl"
sb rnd-servelab-1 "$D/rnd.jsonl"
vb rnd-vllm-1 "$D/rnd.jsonl"
curl -s "$URL/metrics" > "$D/metrics.txt"
log "done"

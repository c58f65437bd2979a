#!/usr/bin/env bash
# After the sampling fix (no GPU needed): what `vllm bench serve` and `servelab bench` send
# for the same JSONL, captured by capture_server.py. Needs the CPU vLLM venv (.venv-vllm,
# with pandas for vLLM's custom dataset), a tiny model dir (tools/make_tiny_model.py) and a
# JSONL written by `servelab data inspect --save-samples`.
#   bodycheck.sh MODEL_DIR FILE.jsonl OUT_DIR
set -eu
MODEL=$1 DATA=$2 D=$3
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$D"
.venv/bin/python "$HERE/capture_server.py" 18991 "$D/vllm-bodies.jsonl" & P1=$!
.venv/bin/python "$HERE/capture_server.py" 18992 "$D/servelab-bodies.jsonl" & P2=$!
trap 'kill $P1 $P2' EXIT
sleep 2
.venv-vllm/bin/vllm bench serve --backend openai --base-url http://127.0.0.1:18991 --model tiny \
  --tokenizer "$MODEL" --dataset-name custom --dataset-path "$DATA" --custom-output-len -1 \
  --skip-chat-template --disable-shuffle --num-prompts 4 --max-concurrency 2 --ignore-eos --seed 1 > "$D/vllm.log" 2>&1
.venv/bin/servelab bench --backend openai --base-url http://127.0.0.1:18992 --model tiny \
  --tokenizer "$MODEL" --dataset-name jsonl --dataset-path "$DATA" --num-prompts 4 \
  --max-concurrency 2 --ignore-eos --seed 1 --no-progress > "$D/servelab.log" 2>&1
.venv/bin/python - "$D" <<'PY'
import json, sys
d = sys.argv[1]
v = [json.loads(l) for l in open(f"{d}/vllm-bodies.jsonl")]
s = [json.loads(l) for l in open(f"{d}/servelab-bodies.jsonl")]
print("vllm bench serve:", {k: x for k, x in v[0].items() if k != "prompt"})
print("servelab bench:  ", {k: x for k, x in s[0].items() if k != "prompt"})
print("same prompts:", {r["prompt"] for r in v} == {r["prompt"] for r in s},
      "same max_tokens:", sorted(r["max_tokens"] for r in v) == sorted(r["max_tokens"] for r in s))
PY

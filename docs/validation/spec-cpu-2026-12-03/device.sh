#!/usr/bin/env bash
# Issue 17: runner_probe.py on the H200 after the kit's recv 01..09 + install. One config per
# call:  bash docs/validation/spec-cpu-2026-12-03/device.sh llama|llama-long|qwen  (results to $OUT)
set -u
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
H=docs/validation/spec-cpu-2026-12-03
K4='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'
P=/tmp/gpu-x/payload
[ -d $P/llama-3.1-8b ] || bash .gpu/bin/dev.sh modeldir llama-3.1-8b docs/validation/sim-transfer-2026-12-01/results/llama-3.1-8b/config.json > $OUT/modeldir.log 2>&1
case $1 in
  llama) timeout 560 python3 $H/runner_probe.py --model $P/llama-3.1-8b --speculative-config "$K4" --profile --out $OUT/llama-k4.json ;;
  llama-long) timeout 560 python3 $H/runner_probe.py --model $P/llama-3.1-8b --speculative-config "$K4" --max-model-len 131072 --out $OUT/llama-k4-long.json ;;
  qwen) timeout 560 python3 $H/runner_probe.py --model $P/qwen3-14b --speculative-config "$K4" --profile --out $OUT/qwen3-14b-k4.json ;;
esac > $OUT/$1.log 2>&1
echo "rc=$?"; tail -12 $OUT/$1.log

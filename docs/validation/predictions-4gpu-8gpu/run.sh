#!/usr/bin/env bash
# Regenerates every result in this folder: planner what-ifs and simulator runs for
# Qwen3-14B-AWQ (and bf16) on H200s, 4-GPU and 8-GPU arms. CPU only; sequential.
# Usage: docs/validation/predictions-4gpu-8gpu/run.sh   (from anywhere; ~10 min on 2 cores)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"

# The public CLI. If the console script cannot start (see README, "CLI defects": a command
# module listed in servelab.cli._COMMAND_MODULES but missing from the tree), fall back to the
# same entry point with only the command modules that exist.
if "$ROOT/.venv/bin/servelab" --version >/dev/null 2>&1; then
  SL=("$ROOT/.venv/bin/servelab")
else
  echo "warning: .venv/bin/servelab does not start; using cli_fallback.py" >&2
  SL=("$PY" "$HERE/cli_fallback.py")
fi

# Qwen3's own tokenizer (the GPU kit's payload), as in docs/simulator.md's validation.
TOKDIR="$(mktemp -d)"; trap 'rm -rf "$TOKDIR"' EXIT
tar -xJf /work/shared/gpu/payload/qwen3-14b.tar.xz -C "$TOKDIR" qwen3-14b/tokenizer.json
TOK="$TOKDIR/qwen3-14b/tokenizer.json"

OUTD="$HERE/results"; mkdir -p "$OUTD/plan" "$OUTD/sim"
"${SL[@]}" --version > "$OUTD/servelab-version.txt"

MODELS=("awq:Qwen/Qwen3-14B-AWQ" "bf16:Qwen/Qwen3-14B")
CONCS=(16 64 256)
# ShareGPT (Qwen tokenizer, seed 0): mean prompt ~229, mean output ~190 -> mean decode
# context ~ 229 + 190/2 ~ 320..512; prefix repetition: 512 prompt + 128 out -> 512 + 64.
declare -A CTX=([sharegpt]=512 [prefix]=576)

# ---- planner: one table per model x GPUs x concurrency x context ---------------------
for m in "${MODELS[@]}"; do
  tag="${m%%:*}"; model="${m#*:}"
  for c in "${CONCS[@]}"; do
    for wl in sharegpt prefix; do
      ctx="${CTX[$wl]}"
      "${SL[@]}" plan --model "$model" --gpu H200 --tensor-parallel-size 4 \
        --target-concurrency "$c" --context "$ctx" \
        --what-if "tp2x2: --tensor-parallel-size 2 --replicas 2" \
        --what-if "4rep: --tensor-parallel-size 1 --replicas 4" \
        --json > "$OUTD/plan/plan-$tag-4gpu-c$c-ctx$ctx.json" 2>/dev/null
      "${SL[@]}" plan --model "$model" --gpu H200 --tensor-parallel-size 8 \
        --target-concurrency "$c" --context "$ctx" \
        --what-if "tp4x2: --tensor-parallel-size 4 --replicas 2" \
        --what-if "tp2x4: --tensor-parallel-size 2 --replicas 4" \
        --what-if "8rep: --tensor-parallel-size 1 --replicas 8" \
        --json > "$OUTD/plan/plan-$tag-8gpu-c$c-ctx$ctx.json" 2>/dev/null
    done
  done
  # Step breakdown (bytes, FLOPs, memory / compute / all-reduce seconds) per GPU at the
  # per-replica batches the arms see, context 512.
  for tp in 1 2 4 8; do
    for b in 1 2 4 8 16 32 64 128 256; do
      "${SL[@]}" plan --model "$model" --gpu H200 --tensor-parallel-size "$tp" \
        --batch "$b" --context 512 --prefill-tokens 512 --json \
        > "$OUTD/plan/step-$tag-tp$tp-b$b.json" 2>/dev/null
    done
  done
done

# ---- simulator -------------------------------------------------------------------------
wl_flags() {  # $1 = workload
  case "$1" in
    sharegpt) echo "--dataset-name sharegpt" ;;
    prefix) echo "--dataset-name prefix_repetition --prefix-repetition-prefix-len 256 \
--prefix-repetition-suffix-len 256 --prefix-repetition-num-prefixes 10 \
--prefix-repetition-output-len 128" ;;
  esac
}
nprompts() { case "$1" in 16) echo 160 ;; 64) echo 640 ;; 256) echo 1280 ;; esac; }

sim() {  # $1 out file, rest: flags
  local out="$1"; shift
  "${SL[@]}" sim run --gpu H200 --seed 0 --tokenizer "$TOK" --json "$@" \
    > "$out.tmp" 2>/dev/null
  mv "$out.tmp" "$out"   # written whole, one file per arm
}

for m in "${MODELS[@]}"; do
  tag="${m%%:*}"; model="${m#*:}"
  for wl in sharegpt prefix; do
    W=$(wl_flags "$wl")
    for c in "${CONCS[@]}"; do
      n=$(nprompts "$c"); base="$OUTD/sim/$tag-$wl-c$c"
      # arm: name, TP, replicas, policy ("" = one engine; "direct" = one replica at c/N, n/N)
      for arm in "tp4:4:1:" "tp2x2-rr:2:2:round_robin" "tp2x2-ca:2:2:cache_aware" \
                 "tp2x2-direct:2:2:direct" "4rep-rr:1:4:round_robin" "4rep-ca:1:4:cache_aware" \
                 "4rep-direct:1:4:direct" \
                 "tp8:8:1:" "8rep-rr:1:8:round_robin" "8rep-ca:1:8:cache_aware" \
                 "8rep-direct:1:8:direct"; do
        IFS=: read -r name tp reps pol <<< "$arm"
        f="$base-$name.json"
        [[ -s "$f" && -z "${FORCE:-}" ]] && continue   # resumable: arms already written stay
        echo "sim $tag $wl c$c $name" >&2
        if [[ -z "$pol" ]]; then
          sim "$f" --model "$model" $W --num-prompts "$n" --max-concurrency "$c" \
            --tensor-parallel-size "$tp"
        elif [[ "$pol" == direct ]]; then
          sim "$f" --model "$model" $W --num-prompts $((n / reps)) \
            --max-concurrency $((c / reps)) --tensor-parallel-size "$tp" \
            --metadata "direct_replicas=$reps"
        else
          sim "$f" --model "$model" $W --num-prompts "$n" --max-concurrency "$c" \
            --tensor-parallel-size "$tp" --replicas "$reps" --router-policy "$pol"
        fi
      done
    done
  done
done

"$PY" "$HERE/tables.py" "$OUTD" > "$HERE/tables.md"
echo "wrote $HERE/tables.md" >&2

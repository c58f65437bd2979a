#!/usr/bin/env bash
# On one H200 after the kit's install: the draft's model directory, then one
# `servelab run --arm A` per arm (no new arm after BUDGET_S seconds), `servelab probe` before
# each arm and after the last; servelab from a copy of the checkout's src in /tmp/slsrc;
# results under /tmp/hrun. Detached, from the checkout on the machine:
#   D=docs/validation/spec-onehost-2026-12-05; mkdir -p /tmp/slspec /tmp/slsrc /tmp/kitbin
#   cp $D/{spec.yaml,device.sh} src/servelab/data/models/qwen3-0.6b.json /tmp/slspec/ && cp -r src/servelab /tmp/slsrc/ && cp .gpu/bin/* /tmp/kitbin/
#   (setsid nohup bash /tmp/slspec/device.sh > /tmp/h.out 2>&1 &)
# Another spec without a draft model (../spec-lowacc-2026-12-06): copy its spec.yaml instead
# and run with DRAFT= (no draft directory) and ARMS="its arms in order".
set -u
R=/tmp/hrun
mkdir -p "$R"
export PYTHONPATH=/tmp/slsrc:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
SPEC=${SPEC:-/tmp/slspec/spec.yaml}  # another spec: SPEC= and EXP= (its own experiment folder)
EXP=${EXP:-$R/exp}
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-1100}
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*" >> "$R/device.log"; }
# The spec names the GPU the simulator prices: the machine's own (an H100 when no H200 is lent)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H100*PCIe*) G=H100-PCIE ;; *H100*) G=H100-SXM ;; *) G=H200 ;; esac
sed -i "s/^  gpu: H200\$/  gpu: $G/" "$SPEC"
log "gpu $GPU -> spec gpu $G"
DRAFT=${DRAFT-/tmp/slspec/qwen3-0.6b.json}  # the draft arm's config; empty: no draft arm
if [ -n "$DRAFT" ]; then
  bash /tmp/kitbin/dev.sh modeldir qwen3-0.6b "$DRAFT" > "$R/modeldir.log" 2>&1
  log "modeldir rc=$?"
fi
# The host's single-thread speed every ~5 s through the whole run (servelab probe's loop,
# pinned to one CPU the engine shares): earlier machines flipped between ~155 and ~350 ns
# within minutes, and the speculative arms' steps are mostly host CPU.
( while true; do
    python3 -c "import time; from servelab.hardware.host import probe_host; print(f'{time.time():.1f} {probe_host().python_loop_ns:.1f}', flush=True)" >> "$R/hostspeed.txt" 2>/dev/null
    sleep 5
  done ) &
SAMPLER=$!
ARMS=${ARMS:-"nospec ngram-k2 ngram-k6 draft-k4 ngram-k4"}  # in order; the budget may stop the last
for arm in $ARMS; do
  if [ $(( $(date +%s) - T0 )) -gt "$BUDGET_S" ]; then log "skip $arm: out of time"; continue; fi
  python3 -m servelab probe > "$R/probe-before-$arm.txt" 2>&1
  log "arm $arm"
  python3 -m servelab run "$SPEC" --out "$EXP" --arm "$arm" --no-report > "$R/run-$arm.log" 2>&1
  log "arm $arm rc=$?"
done
python3 -m servelab probe > "$R/probe-after.txt" 2>&1
kill "$SAMPLER"
log "all done"

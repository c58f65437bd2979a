#!/usr/bin/env bash
# On the device after the kit's install (../../../../shared/gpu), from the checkout: the
# kernel profile, then ../spec-onehost-2026-12-05/device.sh on this folder's spec (nospec,
# then ngram-k6-low), detached; results under /tmp/hrun (nvsmi.txt, profile.json,
# profile.log, exp/, device.log, hostspeed.txt, probe-*.txt).
#   bash docs/validation/spec-cross-2026-12-07/device.sh          # returns at once
#   tail /tmp/hrun/device.log                                     # poll; ~9 min in all
# Then, once device.log says "all done", the second experiment (spec-k.yaml: real n-gram at
# K = 6 and 2, then nospec again, into /tmp/hrun/exp-k; no new arm after BUDGET_S seconds):
#   bash docs/validation/spec-cross-2026-12-07/device.sh k
set -u
D=docs/validation/spec-cross-2026-12-07
mkdir -p /tmp/slspec /tmp/slsrc /tmp/kitbin /tmp/hrun
if [ "${1:-}" = k ]; then
  # a copy under another name: bash reads a running script as it goes
  cp $D/spec-k.yaml /tmp/slspec/ && cp docs/validation/spec-onehost-2026-12-05/device.sh /tmp/slspec/device-k.sh
  (setsid nohup env SPEC=/tmp/slspec/spec-k.yaml EXP=/tmp/hrun/exp-k DRAFT= ARMS="${ARMS:-ngram-k6 ngram-k2 nospec}" \
     BUDGET_S=${BUDGET_S:-500} bash /tmp/slspec/device-k.sh > /tmp/h-k.out 2>&1 &)
  echo started k; exit 0
fi
cp $D/spec.yaml docs/validation/spec-onehost-2026-12-05/device.sh /tmp/slspec/
rm -rf /tmp/slsrc/servelab && cp -r src/servelab /tmp/slsrc/ && cp .gpu/bin/* /tmp/kitbin/
export PYTHONPATH=/tmp/slsrc:/tmp/site PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
(setsid nohup bash -c "nvidia-smi -q > /tmp/hrun/nvsmi.txt 2>&1;
  timeout 300 python3 -m servelab sim profile --out /tmp/hrun/profile.json > /tmp/hrun/profile.log 2>&1;
  DRAFT= ARMS='nospec ngram-k6-low' BUDGET_S=${BUDGET_S:-600} bash /tmp/slspec/device.sh" > /tmp/h.out 2>&1 &)
echo started

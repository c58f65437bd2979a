#!/usr/bin/env bash
# The speculative runs' held-out checks again with the staircase profiles of staircase.py
# (issue 17, 2026-12-06): per run, the host's figures fitted again on the same cells as the
# committed fit (the residual absorbs whatever the profile prices differently), then every
# cell re-simulated with the acceptance it measured. Results under staircase/<run>/.
#   bash docs/validation/spec-verify-2026-12-06/staircase.sh        # ~2 min
# Needs the kit's payload at /tmp/gpu-x/payload and the draft's config (../spec-perhost-2026-12-05).
set -eu
V=docs/validation
S=$V/spec-verify-2026-12-06
C=$V/spec-perhost-2026-12-05/check.py
P=/tmp/staircase-profiles
py=.venv/bin/python
$py $S/staircase.py $P
fit() {  # OUT EXPERIMENT PROFILE ARM [DRAFT_ARM]
  local out=$1 exp=$2 prof=$3 arm=$4
  mkdir -p $out
  $py -m servelab sim calibrate --experiment $exp --profile $prof --arm $arm --workload sharegpt \
    --fit speculative --out $out/host.json > $out/fit.txt
  if [ $# -ge 5 ]; then
    $py -m servelab sim calibrate --experiment $exp --profile $prof --arm $5 --workload sharegpt \
      --cells c1 --fit drafter --calibration $out/host.json --out $out/host.json >> $out/fit.txt
  fi
}
# H200 machine A (ngram-k2 fitted; K = 4 and 6 held out)
A=$V/spec-host-2026-12-05/results/exp
fit $S/staircase/machine-a $A $P/h200.json ngram-k2
$py $C $A --profile $P/h200.json --calibration $S/staircase/machine-a/host.json --fit ngram-k2/sharegpt \
  --label "machine A's host figures, refitted on the H200 staircase profile" --out $S/staircase/machine-a
# H200 machine B (ngram-k6 and draft-k4 c1 fitted; three draws per workload)
B=$V/spec-repeats-2026-12-02/results/exp
fit $S/staircase/machine-b $B $P/h200.json ngram-k6 draft-k4
$py $C $B --profile $P/h200.json --calibration $S/staircase/machine-b/host.json --fit ngram-k6/sharegpt \
  --fit draft-k4/sharegpt/c1 --repeats sharegpt,sharegpt-b,sharegpt-c --repeats prefix,prefix-b,prefix-c \
  --label "machine B's host figures, refitted on the H200 staircase profile" --out $S/staircase/machine-b
# H100, every arm (ngram-k2 and draft-k4 c1 fitted)
E=$V/spec-onehost-2026-12-05/results/exp
fit $S/staircase/onehost $E $P/h100-sxm.json ngram-k2 draft-k4
$py $C $E --profile $P/h100-sxm.json --calibration $S/staircase/onehost/host.json --fit ngram-k2/sharegpt \
  --fit draft-k4/sharegpt/c1 --label "the H100 host's figures, refitted on the estimated H100 staircase profile" \
  --out $S/staircase/onehost
# H100, low acceptance (ngram-k2 fitted)
L=$V/spec-lowacc-2026-12-06/results/exp
fit $S/staircase/lowacc $L $P/h100-sxm.json ngram-k2
$py $C $L --profile $P/h100-sxm.json --calibration $S/staircase/lowacc/host.json --fit ngram-k2/sharegpt \
  --label "the H100 host's figures, refitted on the estimated H100 staircase profile" --out $S/staircase/lowacc

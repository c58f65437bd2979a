#!/usr/bin/env bash
# Every speculative run's held-out check priced with two given kernel profiles (issue 17):
# per run, the host's figures fitted again on the same cells as its committed fit (the
# residual absorbs whatever the profile prices differently), then every cell re-simulated
# with the acceptance it measured. Results under OUT/<run>/ (machine-a, machine-b, onehost,
# lowacc). Used by staircase.sh here and by ../sim-grid-2026-12-07.
#   [RUNS="onehost lowacc"] bash docs/validation/spec-verify-2026-12-06/refit_checks.sh H200_PROFILE \
#       H100_PROFILE OUT "H200 PROFILE'S NAME" "H100 PROFILE'S NAME"                 # ~2 min
# RUNS (default: all four) picks the runs. BASE_ARM (e.g. nospec; default none) first fits the
# residual (GPU time scale, step / sequence / launch / request overheads) on that arm's
# ShareGPT cells, which then count as fitted: the baseline's level becomes the run's machine's.
# Needs the kit's payload at /tmp/gpu-x/payload and the draft's config (../spec-perhost-2026-12-05).
set -eu
V=docs/validation
C=$V/spec-perhost-2026-12-05/check.py
H200=${1:?H200 profile}
H100=${2:?H100 profile}
O=${3:?output folder}
N200=${4:?name of the H200 profile, for the titles}
N100=${5:?name of the H100 profile, for the titles}
py=.venv/bin/python
RUNS=${RUNS:-"machine-a machine-b onehost lowacc"}
want() { [[ " $RUNS " == *" $1 "* ]]; }
BASE_ARM=${BASE_ARM:-}
based=()  # check.py's name for the cells the residual was fitted on
if [ -n "$BASE_ARM" ]; then based=(--fit "$BASE_ARM/sharegpt"); fi
fit() {  # OUT EXPERIMENT PROFILE ARM [DRAFT_ARM]
  local out=$1 exp=$2 prof=$3 arm=$4 start=()
  mkdir -p $out
  : > $out/fit.txt
  if [ -n "$BASE_ARM" ]; then
    $py -m servelab sim calibrate --experiment $exp --profile $prof --arm $BASE_ARM --workload sharegpt \
      --fit residual --out $out/host.json >> $out/fit.txt
    start=(--calibration $out/host.json)
  fi
  $py -m servelab sim calibrate --experiment $exp --profile $prof --arm $arm --workload sharegpt \
    --fit speculative "${start[@]}" --out $out/host.json >> $out/fit.txt
  if [ $# -ge 5 ]; then
    $py -m servelab sim calibrate --experiment $exp --profile $prof --arm $5 --workload sharegpt \
      --cells c1 --fit drafter --calibration $out/host.json --out $out/host.json >> $out/fit.txt
  fi
}
# H200 machine A (ngram-k2 fitted; K = 4 and 6 held out)
A=$V/spec-host-2026-12-05/results/exp
if want machine-a; then
  fit $O/machine-a $A $H200 ngram-k2
  $py $C $A --profile $H200 --calibration $O/machine-a/host.json "${based[@]}" --fit ngram-k2/sharegpt \
    --label "machine A's host figures, refitted on the $N200" --out $O/machine-a
fi
# H200 machine B (ngram-k6 and draft-k4 c1 fitted; three draws per workload)
B=$V/spec-repeats-2026-12-02/results/exp
if want machine-b; then
  fit $O/machine-b $B $H200 ngram-k6 draft-k4
  $py $C $B --profile $H200 --calibration $O/machine-b/host.json "${based[@]}" --fit ngram-k6/sharegpt \
    --fit draft-k4/sharegpt/c1 --repeats sharegpt,sharegpt-b,sharegpt-c --repeats prefix,prefix-b,prefix-c \
    --label "machine B's host figures, refitted on the $N200" --out $O/machine-b
fi
# H100, every arm (ngram-k2 and draft-k4 c1 fitted)
E=$V/spec-onehost-2026-12-05/results/exp
if want onehost; then
  fit $O/onehost $E $H100 ngram-k2 draft-k4
  $py $C $E --profile $H100 --calibration $O/onehost/host.json "${based[@]}" --fit ngram-k2/sharegpt \
    --fit draft-k4/sharegpt/c1 --label "the H100 host's figures, refitted on the $N100" \
    --out $O/onehost
fi
# H100, low acceptance (ngram-k2 fitted)
L=$V/spec-lowacc-2026-12-06/results/exp
if want lowacc; then
  fit $O/lowacc $L $H100 ngram-k2
  $py $C $L --profile $H100 --calibration $O/lowacc/host.json "${based[@]}" --fit ngram-k2/sharegpt \
    --label "the H100 host's figures, refitted on the $N100" --out $O/lowacc
fi

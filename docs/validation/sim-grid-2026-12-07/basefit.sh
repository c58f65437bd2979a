#!/usr/bin/env bash
# Diagnostic (issue 17, 2026-12-07): the H100 runs' checks with the residual (GPU time scale,
# step / sequence / launch / request overheads) fitted on each run's own nospec ShareGPT
# cells, then the speculative host terms on ngram-k2's ShareGPT cells (and, one machine, the
# drafter on draft-k4 c1) as refit_checks.sh fits them; every other cell held out. It asks what
# is left of the low-acceptance crossover miss once the baseline's level is that machine's.
#   bash docs/validation/sim-grid-2026-12-07/basefit.sh PROFILE OUT       # ~1 min
# OUT/<run>/: host.json, fit.txt, table.md, check.json, and payoff.md (payoff.py: the report's
# simulated speed-up against the measured one, and its advice lines, under these figures).
set -eu
P=${1:?profile}
O=${2:?output folder}
py=.venv/bin/python
V=docs/validation
C=$V/spec-perhost-2026-12-05/check.py
run() {  # NAME EXPERIMENT [draft]
  local o=$O/$1 e=$2 extra=()
  mkdir -p "$o"
  $py -m servelab sim calibrate --experiment "$e" --profile "$P" --arm nospec --workload sharegpt \
    --fit residual --out "$o/host.json" > "$o/fit.txt"
  $py -m servelab sim calibrate --experiment "$e" --profile "$P" --arm ngram-k2 --workload sharegpt \
    --fit speculative --calibration "$o/host.json" --out "$o/host.json" >> "$o/fit.txt"
  if [ $# -ge 3 ]; then
    $py -m servelab sim calibrate --experiment "$e" --profile "$P" --arm draft-k4 --workload sharegpt \
      --cells c1 --fit drafter --calibration "$o/host.json" --out "$o/host.json" >> "$o/fit.txt"
    extra=(--fit draft-k4/sharegpt/c1)
  fi
  $py $C "$e" --profile "$P" --calibration "$o/host.json" --fit nospec/sharegpt --fit ngram-k2/sharegpt \
    "${extra[@]}" --label "the residual fitted on nospec's ShareGPT cells" --out "$o" > /dev/null
  $py "$(dirname "$0")/payoff.py" "$e" "$o/host.json" > "$o/payoff.md"
}
run onehost $V/spec-onehost-2026-12-05/results/exp draft
run lowacc $V/spec-lowacc-2026-12-06/results/exp

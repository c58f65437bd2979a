#!/usr/bin/env bash
# This run's checks (issue 17): every cell re-simulated with the acceptance it measured and
# this machine's own kernel profile (results/profile.json), the report's payoff beside the
# measured speed-up, under three sets of host figures (each starting from the H200's shipped
# figures, H200.json in the payoff files: what the H100 had before this run):
#   h200-line/  the H200's shipped figures (the H100's default until this run), nothing fitted;
#   specfit/  the speculative figures fitted on ngram-k2's five cells (the shipped residual);
#   fit/      the residual fitted on nospec's five cells first, then ngram-k2 as in specfit.
# Held out everywhere: ngram-k6, ngram-k6-low (both draws) and nospec's second draw. Then
# h100-line/ and default/: the H100's shipped speculative line, fitted and checked;
# earlier-waves/: the earlier H100 runs' payoff priced as waves; quickstart-payoff.md (below).
#   bash docs/validation/spec-cross-2026-12-07/checks.sh            # ~4 min
# Needs the kit's payload at /tmp/gpu-x/payload (../spec-perhost-2026-12-05).
set -eu
D=docs/validation/spec-cross-2026-12-07
R=$D/results
P=$R/profile.json
py=.venv/bin/python
C=docs/validation/spec-perhost-2026-12-05/check.py
PAY=docs/validation/sim-grid-2026-12-07/payoff.py
# the second draw of ngram-k6-low against the first draw of nospec (one spec, one machine)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cp -r $R/exp-r $T/exp-r && cp -r $R/exp/cells/nospec $T/exp-r/cells/
$py -c "from pathlib import Path; from servelab.sim.cost import default_calibration as d; d('H200').save(Path('$T/h200.json'))"
check() {  # OUT [HOST.json [FITTED_CELLS]]
  local out=$1 cal=() fit=()
  if [ $# -ge 2 ]; then cal=(--calibration $2); fi
  if [ $# -ge 3 ]; then fit=(--fit $3); fi
  for e in exp exp-k exp-r; do
    local src=$R/$e
    if [ $e = exp-r ]; then src=$T/exp-r; fi
    $py $C $src --profile $P "${cal[@]}" "${fit[@]}" --label "$(basename $out)" --out $out/$e > /dev/null
    if [ $# -ge 2 ]; then
      $py $PAY $src $2 $P | sed "s#$T/h200.json#H200.json#; s#$T/exp-r#$R/exp-r (with $R/exp's nospec cells)#" \
        > $out/$e/payoff.md
    fi
  done
}
mkdir -p $D/h200-line $D/specfit $D/fit
check $D/h200-line $T/h200.json
$py -m servelab sim calibrate --experiment $R/exp-k --profile $P --arm ngram-k2 --workload sharegpt \
  --fit speculative --calibration $T/h200.json --out $D/specfit/host.json > $D/specfit/fit.txt
check $D/specfit $D/specfit/host.json ngram-k2/sharegpt
$py -m servelab sim calibrate --experiment $R/exp --profile $P --arm nospec --workload sharegpt \
  --fit residual --calibration $T/h200.json --out $D/fit/host.json > $D/fit/fit.txt
$py -m servelab sim calibrate --experiment $R/exp-k --profile $P --arm ngram-k2 --workload sharegpt \
  --fit speculative --calibration $D/fit/host.json --out $D/fit/host.json >> $D/fit/fit.txt
check $D/fit $D/fit/host.json ngram-k2/sharegpt
# The H100's shipped speculative line (servelab.sim.cost, DEFAULT_CALIBRATIONS["H100"]):
# fitted here on ngram-k2 with the shipped H100 profile, from the H200's figures (what the
# H100 had before); then the shipped H100 figures as they are, with the shipped profile, on
# this run and on two other H100 hosts' runs, every speculative cell held out (default/).
mkdir -p $D/h100-line $D/default
$py -m servelab sim calibrate --experiment $R/exp-k --arm ngram-k2 --workload sharegpt --fit speculative \
  --calibration $T/h200.json --out $D/h100-line/host.json > $D/h100-line/fit.txt
V=docs/validation
ONE=$V/spec-onehost-2026-12-05/results/exp
LOW=$V/spec-lowacc-2026-12-06/results/exp
$py $C $R/exp --label "the shipped H100 figures and profile" --out $D/default/cross > /dev/null
$py $C $R/exp-k --fit ngram-k2/sharegpt --label "the shipped H100 figures and profile" \
  --out $D/default/cross-k > /dev/null
for r in onehost:$ONE lowacc:$LOW; do
  $py $C ${r#*:} --label "the shipped H100 figures and profile" --out $D/default/${r%%:*} > /dev/null
  # the same with the H200's line, which the H100 had before
  $py $C ${r#*:} --calibration $T/h200.json --label "the H200's figures, the shipped H100 profile" \
    --out $D/default/${r%%:*}-h200-line > /dev/null
done
# The earlier H100 runs' payoff with their lengths put back (waves), under each run's committed
# host figures (../sim-grid-2026-12-07: refit/, and basefit/ with the residual fitted on nospec)
mkdir -p $D/earlier-waves
for r in onehost:$ONE lowacc:$LOW; do
  n=${r%%:*}
  $py $D/restore_lens.py ${r#*:} $T/$n > /dev/null
  for fit in refit basefit; do
    $py $PAY $T/$n $V/sim-grid-2026-12-07/$fit/$n/host.json | sed "s#$T/$n#${r#*:} (output lengths restored)#" \
      > $D/earlier-waves/$n-$fit.md
  done
done
# The simulated quickstart experiment (the H200's shipped figures): its payoff error, the
# prefix workload's fixed-length cells priced as waves
$py -m servelab run examples/spec-decode.yaml --out $T/quickstart --no-report > /dev/null 2>&1
$py $PAY $T/quickstart $T/h200.json | sed "s#$T/quickstart#(servelab run examples/spec-decode.yaml)#; s#$T/h200.json#H200.json#" \
  > $D/quickstart-payoff.md

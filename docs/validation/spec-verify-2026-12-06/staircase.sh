#!/usr/bin/env bash
# The speculative runs' held-out checks again with the staircase profiles of staircase.py
# (issue 17, 2026-12-06), through refit_checks.sh. Results under staircase/<run>/.
#   bash docs/validation/spec-verify-2026-12-06/staircase.sh        # ~2 min
# Needs the kit's payload at /tmp/gpu-x/payload and the draft's config (../spec-perhost-2026-12-05).
set -eu
S=docs/validation/spec-verify-2026-12-06
P=/tmp/staircase-profiles
mkdir -p $P
# the H100 profile shipped when this ran (../sim-grid-2026-12-07 replaced it)
git show 3fec5cc:src/servelab/data/profiles/h100-sxm.json > $P/h100-octave.json
.venv/bin/python $S/staircase.py $P $P/h100-octave.json
bash $S/refit_checks.sh $P/h200.json $P/h100-sxm.json $S/staircase \
  "H200 staircase profile" "estimated H100 staircase profile"

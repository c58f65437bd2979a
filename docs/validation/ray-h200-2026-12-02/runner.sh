#!/bin/bash
# Detached: one-node Ray cluster, servelab run --ray auto, probe, ray stop.
W=/tmp/slrun; cd $W
echo $$ > runner.pid
export PYTHONPATH=/tmp/sl-site:/tmp/site
echo "t_start $(date +%s) $(date -u +%FT%TZ)" > times.txt
python3 -m ray.scripts.scripts start --head --num-gpus 1 --num-cpus 12 --include-dashboard=false --disable-usage-stats > ray-start.log 2>&1
rc=$?
echo "t_ray_started $(date +%s) rc=$rc" >> times.txt
if [ $rc -eq 0 ]; then
  python3 -m servelab run examples/h200-ray.yaml --ray auto --out $W/ray --no-report > ray-run.log 2>&1
  rc=$?
  echo "t_run_done $(date +%s) rc=$rc" >> times.txt
  python3 -m servelab probe --ray auto --json > probe-ray.json 2> probe-ray.err
  echo "t_probe_done $(date +%s) rc=$?" >> times.txt
  python3 -m ray.scripts.scripts stop > ray-stop.log 2>&1
  echo "t_ray_stopped $(date +%s) rc=$?" >> times.txt
fi
echo $rc > run.rc
touch DONE

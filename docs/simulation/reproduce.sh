#!/bin/sh
# Reproduce every figure of docs/simulation.md (about 40 minutes on 2 cores).
# Run from the repository root: sh docs/simulation/reproduce.sh
set -e
SIM=".venv/bin/python -m scheduler.sim"
PHILLY=../shared/traces/philly.csv
OPENB=../shared/traces/openb_pods.csv
OUT=docs/simulation

# Main result: two busy weeks of Philly on 640 GPUs (80 nodes x 8), the three policies.
$SIM --trace $PHILLY --start 2017-10-02 --end 2017-10-16 --nodes 80 --gpus-per-node 8 \
    --policy all --json $OUT/philly-oct02-80n.json --plots $OUT/philly-oct02-80n --teams

# The same weeks on a smaller and a larger cluster.
for n in 64 96; do
  $SIM --trace $PHILLY --start 2017-10-02 --end 2017-10-16 --nodes $n --gpus-per-node 8 \
      --policy all --json $OUT/philly-oct02-${n}n.json
done

# Two other windows.
$SIM --trace $PHILLY --start 2017-10-16 --end 2017-10-30 --nodes 96 --gpus-per-node 8 \
    --policy all --json $OUT/philly-oct16-96n.json
$SIM --trace $PHILLY --start 2017-11-06 --end 2017-11-20 --nodes 48 --gpus-per-node 8 \
    --policy all --json $OUT/philly-nov06-48n.json

# What the scheduler is told about run times, and how quota is split (main window).
for est in double queue-max; do
  $SIM --trace $PHILLY --start 2017-10-02 --end 2017-10-16 --nodes 80 --gpus-per-node 8 \
      --policy fifo-backfill --policy fairshare --runtime-estimate $est \
      --json $OUT/philly-oct02-80n-$est.json
done
$SIM --trace $PHILLY --start 2017-10-02 --end 2017-10-16 --nodes 80 --gpus-per-node 8 \
    --policy all --quota equal --json $OUT/philly-oct02-80n-equal.json

# Racks of 16 nodes: multi-node gangs must stay inside one.
$SIM --trace $PHILLY --start 2017-10-02 --end 2017-10-16 --nodes 80 --gpus-per-node 8 --racks 5 \
    --policy all --json $OUT/philly-oct02-80n-racks.json

# The whole trace on 1,000 GPUs (the speed target's setup).
$SIM --trace $PHILLY --nodes 125 --gpus-per-node 8 --policy all --json $OUT/philly-all-125n.json

# Alibaba openb: heterogeneous node shapes (1, 2, 4, 8 GPUs), its busy last five weeks,
# on 8 of its nodes (33 GPUs) chosen evenly over (model, shape): one flavor, then one per model.
$SIM --trace $OPENB --format openb --start 1970-04-26 --nodes 8 --openb-flavors single \
    --policy all --json $OUT/openb-8n-single.json --plots $OUT/openb-8n-single
$SIM --trace $OPENB --format openb --start 1970-04-26 --nodes 8 --openb-flavors model \
    --policy all --json $OUT/openb-8n-model.json

# The requeue backoff (scheduler/requeue.py) switched off: the reclaim thrash it bounds (openb,
# a flavor per model), four Philly windows; then longer maxima on openb.
$SIM --trace $OPENB --format openb --start 1970-04-26 --nodes 8 --openb-flavors model \
    --policy fairshare --requeue-backoff 0 --json $OUT/ablation-backoff-openb-8n-model.json
for n in 80 64; do
  $SIM --trace $PHILLY --start 2017-10-02 --end 2017-10-16 --nodes $n --gpus-per-node 8 \
      --policy fairshare --requeue-backoff 0 --json $OUT/ablation-backoff-philly-oct02-${n}n.json
done
$SIM --trace $PHILLY --start 2017-10-16 --end 2017-10-30 --nodes 96 --gpus-per-node 8 \
    --policy fairshare --requeue-backoff 0 --json $OUT/ablation-backoff-philly-oct16-96n.json
$SIM --trace $PHILLY --start 2017-11-06 --end 2017-11-20 --nodes 48 --gpus-per-node 8 \
    --policy fairshare --requeue-backoff 0 --json $OUT/ablation-backoff-philly-nov06-48n.json
for most in 14400 86400; do
  $SIM --trace $OPENB --format openb --start 1970-04-26 --nodes 8 --openb-flavors model \
      --policy fairshare --requeue-backoff 60,$most --json $OUT/ablation-backoff-openb-8n-model-max$most.json
done

# The cohort hold (scheduler/backfill.py) switched off, on the main window and the overloaded one.
.venv/bin/python $OUT/ablation_cohort_hold.py --nodes 80 --out $OUT/ablation-cohort-hold-80n.json
.venv/bin/python $OUT/ablation_cohort_hold.py --nodes 64 --out $OUT/ablation-cohort-hold-64n.json

# Bounded waits: the whole Philly trace in two-week windows, clusters sized to 70% and 80%
# of each window's mean demand, the three policies (docs/simulation.md, "Bounded waits").
.venv/bin/python bench/scan_traces.py --load 0.7,0.8 --worst 4 --json $OUT/scan-before.json
.venv/bin/python bench/scan_traces.py --load 0.7,0.8 --policy fairshare --age-weight 1 --max-age 86400 \
    --reuse $OUT/scan-before.json --json $OUT/scan-age-1d.json
.venv/bin/python bench/scan_traces.py --load 0.7,0.8 --policy fairshare --age-weight 1 --max-age 86400 \
    --reclaim-backoff --reuse $OUT/scan-before.json --json $OUT/scan-age-1d-reclaim-backoff.json
.venv/bin/python bench/scan_traces.py --load 0.8 --windows 1,2,4,5,6,7 --policy fairshare --age-weight 1 \
    --max-age 604800 --reuse $OUT/scan-before.json --json $OUT/scan-age-7d.json

# The same scan on the merged issue-13 code (placement-aware reclaim; main at 7fa74d4): fair share
# with the defaults, then the rules that are off by default (FIFO and FIFO + backfill reused).
S=".venv/bin/python bench/scan_traces.py --load 0.7,0.8 --policy fairshare --reuse $OUT/scan-before.json"
$S --worst 3 --json $OUT/scan-merged.json
$S --age-weight 1 --max-age 604800 --json $OUT/scan-merged-age-7d.json
$S --age-weight 1 --max-age 604800 --reclaim-backoff --json $OUT/scan-merged-age-7d-reclaim-backoff.json
$S --backfill-reservations 3 --json $OUT/scan-merged-bf3.json
$S --age-weight 1 --max-age 86400 --json $OUT/scan-merged-age-1d.json
$S --age-weight 1 --max-age 86400 --reclaim-backoff --json $OUT/scan-merged-age-1d-reclaim-backoff.json
for fl in single model; do
  $SIM --trace $OPENB --format openb --start 1970-04-26 --nodes 8 --openb-flavors $fl \
      --policy fairshare --json $OUT/openb-8n-$fl-merged.json
done

# Issue 13's last part (branch tails on 76c6a02: the reclaim-latency clock, reclaim from held
# GPUs): the scan with the defaults, openb, and the fair-share rows of the tables refreshed.
$S --worst 3 --json $OUT/scan-tails.json
for fl in single model; do
  $SIM --trace $OPENB --format openb --start 1970-04-26 --nodes 8 --openb-flavors $fl \
      --policy fairshare --json $OUT/openb-8n-$fl-tails.json
done
W="--start 2017-10-02 --end 2017-10-16 --gpus-per-node 8 --policy fairshare"
$SIM --trace $PHILLY $W --nodes 80 --json $OUT/philly-oct02-80n-tails.json
$SIM --trace $PHILLY $W --nodes 96 --json $OUT/philly-oct02-96n-tails.json
$SIM --trace $PHILLY $W --nodes 64 --json $OUT/philly-oct02-64n-tails.json
$SIM --trace $PHILLY --start 2017-10-16 --end 2017-10-30 --gpus-per-node 8 --policy fairshare \
    --nodes 96 --json $OUT/philly-oct16-96n-tails.json
$SIM --trace $PHILLY --start 2017-11-06 --end 2017-11-20 --gpus-per-node 8 --policy fairshare \
    --nodes 48 --json $OUT/philly-nov06-48n-tails.json
for est in double queue-max; do
  $SIM --trace $PHILLY $W --nodes 80 --runtime-estimate $est --json $OUT/philly-oct02-80n-$est-tails.json
done
$SIM --trace $PHILLY $W --nodes 80 --quota equal --json $OUT/philly-oct02-80n-equal-tails.json
$SIM --trace $PHILLY $W --nodes 80 --racks 5 --json $OUT/philly-oct02-80n-racks-tails.json
$SIM --trace $PHILLY --nodes 125 --gpus-per-node 8 --policy fairshare --json $OUT/philly-all-125n-tails.json

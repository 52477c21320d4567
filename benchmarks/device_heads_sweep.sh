#!/usr/bin/env bash
# Paper-scale E1 heads sweep on a lent GPU machine (see README "GPU"), for the
# device tool: no snakemake there, so this calls the package's CLI directly.
#   run(command="bash benchmarks/device_heads_sweep.sh", timeout_s=600)
# Writes under $OUT: results/reference/gpu/ (per-seed records and tables, the layout of results/reference/paper-scale/), logs/, device.json.
# The six H settings of the published protocol train concurrently (one process each, 10 seeds x K/Q/V per
# process); whatever has finished by the deadline is aggregated, the rest named as missing.
set -uo pipefail
OUT=${OUT:?set OUT}
DEADLINE=${DEADLINE:-480}          # seconds for training before aggregating what finished
EPOCHS=${EPOCHS:-50}
N_PROMPTS=${N_PROMPTS:-50000}   # small values let this script be tried on CPU first
DEVICE=${DEVICE:-cuda}
COMPILE=${COMPILE:-0}             # 1: torch.compile the step (needs a working inductor/triton there)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cd "$OUT" && mkdir -p logs results data
PY=${PYTHON:-python3}
PARAMS=$($PY - <<PY
import json, sys
sys.path.insert(0, "$PYTHONPATH")
from algo_emu.config import load_config
cfg = load_config("$OLDPWD/config/config.yaml")
cfg["heads"]["epochs"] = $EPOCHS
cfg["heads"]["n_prompts"] = $N_PROMPTS
cfg["heads"]["compile"] = bool($COMPILE)
print(json.dumps(cfg["heads"]))
PY
)
$PY -c "import torch, json; print(json.dumps({'device': torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu', 'torch': torch.__version__, 'cuda': torch.version.cuda}))" > device.json
SEEDS="0 1 2 3 4 5 6 7 8 9"
PROTOCOL=${PROTOCOL:-published}   # the published code's protocol: the paper's numbers are comparable with it
t0=$(date +%s)
if [ "$PROTOCOL" = published ]; then
  DATA=data/heads/published/dataset.pt
  $PY -m algo_emu heads data --params "$PARAMS" --protocol published --seed 0 --out $DATA
else
  for s in $SEEDS; do $PY -m algo_emu heads data --params "$PARAMS" --seed $s --out data/heads/seed$s/dataset.pt & done; wait
  DATA=$(for s in $SEEDS; do printf 'data/heads/seed%s/dataset.pt ' $s; done)
fi
echo "data: $(( $(date +%s) - t0 )) s"
RUNS=results/reference/gpu/heads/$PROTOCOL/runs
for H in 1 2 4 6 8 12; do
  timeout $DEADLINE $PY -m algo_emu heads train --params "$PARAMS" --protocol $PROTOCOL --heads $H --p 60 --seeds $SEEDS \
    --data $DATA --out-dir $RUNS/H${H}_p60 --checkpoint checkpoints/${PROTOCOL}_H${H}_p60.pt --device $DEVICE \
    > logs/train_${PROTOCOL}_H$H.log 2>&1 &
done
wait
echo "train: $(( $(date +%s) - t0 )) s"
rm -rf checkpoints
METRICS=$(ls $RUNS/*/seed*/metrics.json 2>/dev/null)
[ -n "$METRICS" ] || { echo "no setting finished"; tail -n 3 logs/*.log; exit 1; }
# The same partial-set aggregation as the committed CPU reference sets: missing settings are named, never hidden.
T=results/reference/gpu/tables
mkdir -p $T
$PY -m algo_emu heads aggregate --params "$(echo "$PARAMS" | $PY -c 'import json,sys; p=json.load(sys.stdin); p["protocols"]=["'$PROTOCOL'"]; print(json.dumps(p))')" \
  --metrics $METRICS --runs $T/heads_runs.csv --heads-table $T/heads_vs_mse.csv --p-table $T/prompt_length_vs_mse.csv --allow-partial
cat $T/heads_vs_mse.md
tail -n 2 logs/train_*.log

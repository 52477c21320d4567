#!/usr/bin/env bash
# Paper-scale E1 heads sweep on a lent GPU machine (see README "GPU"), for the
# device tool: no snakemake there, so this calls the package's CLI directly.
#   run(command="bash benchmarks/device_heads_sweep.sh", timeout_s=600)
# Writes under $OUT: results/ (runs, tables, fit), logs/, device.json.
# The six H settings train concurrently (one process each, 10 seeds x K/Q/V per
# process); whatever has finished by the deadline is aggregated.
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
t0=$(date +%s)
for s in $SEEDS; do $PY -m algo_emu heads data --params "$PARAMS" --seed $s --out data/heads/seed$s/dataset.pt & done; wait
echo "data: $(( $(date +%s) - t0 )) s"
DATA=$(for s in $SEEDS; do printf 'data/heads/seed%s/dataset.pt ' $s; done)
for H in 1 2 4 6 8 12; do
  timeout $DEADLINE $PY -m algo_emu heads train --params "$PARAMS" --heads $H --p 60 --seeds $SEEDS --data $DATA \
    --out-dir results/heads/runs/H${H}_p60 --checkpoint results/heads/checkpoints/H${H}_p60.pt --device $DEVICE \
    > logs/train_H$H.log 2>&1 &
done
wait
echo "train: $(( $(date +%s) - t0 )) s"
rm -rf results/heads/checkpoints
METRICS=$(ls results/heads/runs/*/seed*/metrics.json 2>/dev/null)
[ -n "$METRICS" ] || { echo "no setting finished"; tail -n 3 logs/*.log; exit 1; }
$PY - <<PY
import json, sys
sys.path.insert(0, "$PYTHONPATH")
from algo_emu.experiments import heads as E
params = json.loads('''$PARAMS''')
runs = E.load_runs("""$METRICS""".split())
done = sorted(runs.heads.unique().tolist())
params["heads_sweep"] = done
from algo_emu.io import write_csv
write_csv("results/heads_runs.csv", runs)
from algo_emu.tables import write_table
write_table(E.heads_table(runs, params), "results/heads_vs_mse.csv", E.caption(params, runs, "Heads sweep at p = 60 (GPU)"))
if len(done) >= 2:
    E.fit(params, "results/heads_runs.csv", "results/heads_fit.json")
print(open("results/heads_vs_mse.md").read())
PY
tail -n 2 logs/train_H*.log

#!/usr/bin/env bash
# E1's heads sweep alone on a GPU machine without snakemake: a thin wrapper of tools/benchmarks/device_paper_scale.sh, which runs
# every trained experiment (docs/gpu.md) and whose header says how the budget is split, what is returned under
# $OUT (gpu_reference.tar.gz with results/reference/gpu/'s layout, SUMMARY.md, status.json, device.json,
# logs.tar.gz, resume.tar.gz) and how unfinished settings are named.
#   run(command="bash tools/benchmarks/device_heads_sweep.sh", carry=[".whl"], timeout_s=600)
# Knobs kept from the earlier script: DEADLINE (seconds of training; the budget is DEADLINE + RESERVE),
# PROTOCOL (published: the heads sweep the paper's numbers compare with; independent: ours; both: the two),
# EPOCHS and N_PROMPTS (write a copy of config/config.yaml with heads.epochs / heads.n_prompts changed, to try
# the script on CPU first: N_PROMPTS=100 EPOCHS=1 DEVICE=cpu), COMPILE, DEVICE. Any knob of
# device_paper_scale.sh passes through.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case "${PROTOCOL:-published}" in
  published) EXP=heads ;;
  independent) EXP=independent ;;
  both) EXP="heads independent" ;;
  *) echo "PROTOCOL: published, independent or both"; exit 2 ;;
esac
export EXPERIMENTS=${EXPERIMENTS:-$EXP}
export RESERVE=${RESERVE:-60}
[ -n "${DEADLINE:-}" ] && export BUDGET=$(( DEADLINE + RESERVE ))
if [ -n "${EPOCHS:-}${N_PROMPTS:-}" ]; then
  TMPCFG=$(mktemp "${TMPDIR:-/tmp}/algo-emu-heads-XXXXXX.yaml")
  "${PYTHON:-python3}" - "$HERE/../../${CONFIG_BASE:-config/config.yaml}" "$TMPCFG" <<'PY' || exit 1
import os, sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
for key, env in (("epochs", "EPOCHS"), ("n_prompts", "N_PROMPTS")):
    if os.environ.get(env):
        cfg["heads"][key] = int(os.environ[env])
yaml.safe_dump(cfg, open(sys.argv[2], "w"), sort_keys=False)
PY
  export CONFIG=$TMPCFG
fi
exec bash "$HERE/device_paper_scale.sh"

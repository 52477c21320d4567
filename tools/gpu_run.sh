#!/usr/bin/env bash
# The user's Snakemake command on a GPU machine that has torch but neither Snakemake nor a network, inside a
# time box, with what it made packed into a few bounded files (docs/gpu.md).
#
#   OUT=<empty folder> bash tools/gpu_run.sh all --cores all        # the arguments are snakemake's own
#
# 1. Snakemake and what torch's Python lacks come as wheels carried in WHEELS (default .whl/, made with
#    `make gpu-wheels`); `pip install --no-index --target SITE` installs them, SITE goes on PYTHONPATH.
# 2. `python -m snakemake --profile workflow/profiles/default --directory WORKDIR <arguments>` runs for at most
#    LIMIT seconds (default 540), then gets SIGTERM (Snakemake stops its jobs) and 20 s later SIGKILL. Training
#    writes a checkpoint every epoch, so a later call on the unpacked files continues where this one stopped.
# 3. Under $OUT, at most FILES files (default 8) of at most PART_SIZE (default 16M, as `split -b` reads it):
#    status.txt (exit code, seconds, device, what was packed and left out, the end of Snakemake's log), then
#    results.tar.gz (WORKDIR's results/ without checkpoints, logs/, .snakemake/metadata), then resume.tar.gz
#    (the training checkpoints); each is cut into .part00, .part01, ... (`cat` joins them) when larger than
#    PART_SIZE. Parts beyond FILES are left out, the checkpoints' first; status.txt names them.
#
# Exit status: Snakemake's; 124 when the time box ended it. Knobs: OUT (required), WHEELS, LIMIT, FILES,
# PART_SIZE, WORKDIR (default the repository), PYTHON (default python3: the one holding torch), SITE (default
# /tmp/algo-emu-site).
set -uo pipefail
: "${OUT:?set OUT (an empty folder for the packed files)}"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3} WHEELS=${WHEELS:-$REPO/.whl} LIMIT=${LIMIT:-540} FILES=${FILES:-8} PART_SIZE=${PART_SIZE:-16M}
SITE=${SITE:-/tmp/algo-emu-site} WORKDIR=${WORKDIR:-$REPO} TMP=$(mktemp -d) T0=$SECONDS
mkdir -p "$OUT" "$WORKDIR/logs" || exit 1
OUT=$(cd "$OUT" && pwd) LOG=logs/gpu_run.snakemake.log
if ! "$PY" -c "import snakemake" 2>/dev/null; then
  ls "$WHEELS"/*.whl > /dev/null 2>&1 || { echo "no snakemake, and no wheels in $WHEELS (make gpu-wheels)" >&2; exit 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout -k 20 "$LIMIT" "$PY" -m snakemake -s "$REPO/Snakefile" --profile "$REPO/workflow/profiles/default" \
  --directory "$WORKDIR" "$@" > "$WORKDIR/$LOG" 2>&1
RC=$?

cd "$WORKDIR" || exit 1
tar czf "$TMP/results.tar.gz" --exclude='*/checkpoints' --ignore-failed-read results logs .snakemake/metadata 2> /dev/null
find results -type d -name checkpoints -print0 2> /dev/null | tar czf "$TMP/resume.tar.gz" --null -T -
left=$((FILES - 1)) packed="" dropped=""
for f in results.tar.gz resume.tar.gz; do
  tar tzf "$TMP/$f" > /dev/null 2>&1 && [ -n "$(tar tzf "$TMP/$f")" ] || continue  # nothing in it
  split -b "$PART_SIZE" -d -a 2 "$TMP/$f" "$TMP/$f.part"
  parts=("$TMP/$f".part*)
  [ "${#parts[@]}" -eq 1 ] && mv "${parts[0]}" "$TMP/$f" && parts=("$TMP/$f")
  for part in "${parts[@]}"; do
    if [ "$left" -gt 0 ]; then cp "$part" "$OUT/" && left=$((left - 1)) && packed+=" $(basename "$part")"
    else dropped+=" $(basename "$part")"; fi
  done
done
{
  echo "snakemake $* -> exit $RC after $((SECONDS - T0)) s (time box $LIMIT s; 124: stopped by it)"
  "$PY" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, '|',
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')" 2>&1
  echo "packed:${packed:- nothing}"
  echo "left out (more than $FILES files of $PART_SIZE):${dropped:- nothing}"
  echo "--- the end of $LOG"
  tail -n 40 "$LOG"
} > "$OUT/status.txt"
rm -rf "$TMP"
exit "$RC"

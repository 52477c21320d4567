#!/usr/bin/env bash
# Failure injection on a real (single-node) SLURM cluster:
#
#   sudo .ci/slurm/failure_e2e.sh
#
# 1. starts the cluster and makes a scratch copy of the working tree (as run_e2e.sh),
# 2. runs the slurm-cpu profile with ALGO_EMU_FAIL_SEED=$E2E_FAIL_SEED, which
#    makes every training job whose run contains that seed exit 1, and checks:
#    snakemake exits non-zero, reports "Error in rule $E2E_FAIL_RULE" with the
#    job's log path(s), those logs exist and name the injected failure, the
#    SLURM log of the failed job exists, and sacct shows the job FAILED
#    (the profile's keep-going lets the independent jobs finish),
# 3. reruns without the injection and checks: it completes, it runs exactly
#    the jobs a dry run still planned (finished in run 1 + run 2 = planned at
#    the start: nothing ran twice), the outputs made in run 1 are untouched
#    (same mtimes), every output is present and sacct shows all COMPLETED.
# Always tears down (trap on EXIT); exits non-zero on any failure.
# Settings: lib.sh, plus E2E_FAIL_SEED (default 1), E2E_FAIL_RULE (default
# heads_train), E2E_FAIL_PATTERN (text the failed job's log must contain,
# default ALGO_EMU_FAIL_SEED).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
E2E_FAIL_SEED=${E2E_FAIL_SEED:-1}
E2E_FAIL_RULE=${E2E_FAIL_RULE:-heads_train}
E2E_FAIL_PATTERN=${E2E_FAIL_PATTERN:-ALGO_EMU_FAIL_SEED}

T0=$(e2e_now)
e2e_start_cluster
e2e_prepare_workdir
N0=$(e2e_planned_jobs)
[ "$N0" -gt 0 ] || e2e_fail "nothing to do for '$E2E_TARGET' in a fresh copy"
e2e_log "planned: $N0 snakemake jobs; injecting a failure for seed $E2E_FAIL_SEED"

# ------------------------------------------------------------ run 1: injected failure
export ALGO_EMU_FAIL_SEED=$E2E_FAIL_SEED
e2e_snakemake run1-failing
unset ALGO_EMU_FAIL_SEED
RUN1_RC=$E2E_RC RUN1_WALL=$E2E_WALL RUN1_ID=$E2E_RUNID
L1=$E2E_OUT/run1-failing.log
[ "$RUN1_RC" != 0 ] || e2e_fail "snakemake exited 0 although seed $E2E_FAIL_SEED was made to fail"
grep -q "^Error in rule $E2E_FAIL_RULE:" "$L1" || e2e_fail "no 'Error in rule $E2E_FAIL_RULE:' in $L1"
# the rule's log file(s), as snakemake names them in the error block
mapfile -t RULE_LOGS < <(awk -v r="Error in rule $E2E_FAIL_RULE:" '
    index($0, r) == 1 {inblk = 1; next}
    inblk && /^ *log: / {sub(/^ *log: /, ""); sub(/ \(check log file\(s\) for error details\)/, "");
                         n = split($0, a, ", "); for (i = 1; i <= n; i++) print a[i]; inblk = 0}
    inblk && /^$/ {inblk = 0}' "$L1" | sort -u)
[ "${#RULE_LOGS[@]}" -gt 0 ] || e2e_fail "the error report of $E2E_FAIL_RULE names no log: file"
# (the rule's `log:` and, from the SLURM plugin, the SLURM job's log)
named=0
for f in "${RULE_LOGS[@]}"; do
  case "$f" in /*) p=$f ;; *) p=$E2E_RUN/$f ;; esac
  [ -s "$p" ] || e2e_fail "reported log $f does not exist"
  if grep -q "$E2E_FAIL_PATTERN" "$p"; then named=1; fi
done
[ "$named" = 1 ] || e2e_fail "none of the reported logs (${RULE_LOGS[*]}) mentions '$E2E_FAIL_PATTERN'"
e2e_log "run1: failure reported with log(s): ${RULE_LOGS[*]}"
# the SLURM job's own log (the plugin keeps it for failed jobs) is among them
printf '%s\n' "${RULE_LOGS[@]}" | grep -q '\.snakemake/slurm_logs/' \
  || e2e_fail "the error report names no SLURM log (.snakemake/slurm_logs/...)"
e2e_check_sacct "$RUN1_ID" run1-failing allow_failed
RUN1_SLURM=$E2E_N_SLURM RUN1_SLURM_FAILED=$E2E_N_FAILED
K1=$(e2e_finished_jobs "$L1")

# ------------------------------------------------------------ what is left to do
N1=$(e2e_planned_jobs)
if [ "$N1" -le 0 ] || [ "$N1" -ge "$N0" ]; then
  e2e_fail "after the failed run a dry run plans $N1 of $N0 jobs (expected 0 < n < $N0: tests/tiny.yaml" \
    "needs some job that does not involve seed $E2E_FAIL_SEED, else nothing is left to keep)"
fi
[ $((K1 + N1)) = "$N0" ] || e2e_fail "run 1 finished $K1 jobs and $N1 remain, but $N0 were planned"
# outputs made in run 1, with their mtimes (must not change in run 2)
(cd "$E2E_WORK" && "$E2E_SNAKEMAKE" "$E2E_TARGET" --summary --configfile "$E2E_CONFIG" 2>/dev/null) \
  | awk -F'\t' 'NR > 1 && $5 == "ok" {print $1}' > "$E2E_OUT/run1-outputs.txt"
(cd "$E2E_RUN" && while read -r f; do stat -c '%y %n' "$f"; done) < "$E2E_OUT/run1-outputs.txt" \
  > "$E2E_OUT/run1-mtimes.txt"
[ "$(wc -l < "$E2E_OUT/run1-mtimes.txt")" = "$(wc -l < "$E2E_OUT/run1-outputs.txt")" ] \
  || e2e_fail "could not read the mtime of every output of run 1 in $E2E_RUN (the check would compare nothing)"
e2e_log "after run 1: $K1 jobs finished, $N1 left; $(wc -l < "$E2E_OUT/run1-outputs.txt") outputs kept"

# ------------------------------------------------------------ run 2: clean rerun
e2e_snakemake run2-rerun
L2=$E2E_OUT/run2-rerun.log
[ "$E2E_RC" = 0 ] || { grep -A12 'Error in rule' "$L2" | head -40 >&2; e2e_fail "the rerun exited $E2E_RC"; }
K2=$(e2e_finished_jobs "$L2")
[ "$K2" = "$N1" ] || e2e_fail "the rerun ran $K2 jobs, expected the $N1 left over"
(cd "$E2E_RUN" && while read -r f; do stat -c '%y %n' "$f"; done) < "$E2E_OUT/run1-outputs.txt" \
  > "$E2E_OUT/run2-mtimes.txt"
if ! cmp -s "$E2E_OUT/run1-mtimes.txt" "$E2E_OUT/run2-mtimes.txt"; then
  diff "$E2E_OUT/run1-mtimes.txt" "$E2E_OUT/run2-mtimes.txt" >&2 || true
  e2e_fail "the rerun rewrote outputs that run 1 had completed"
fi
e2e_check_complete
e2e_check_sacct "$E2E_RUNID" run2-rerun

cat >&2 <<EOF
[e2e] ---------------------------------------------------------------
[e2e] cluster start       ${E2E_T_CLUSTER} s
[e2e] run 1 (seed $E2E_FAIL_SEED fails) exit $RUN1_RC, ${RUN1_WALL} s: $K1 of $N0 jobs finished, SLURM jobs $RUN1_SLURM ($RUN1_SLURM_FAILED not COMPLETED)
[e2e] run 2 (rerun)       exit 0, ${E2E_WALL} s: $K2 jobs (= the $N1 left), SLURM jobs $E2E_N_SLURM all COMPLETED
[e2e] completed work kept $(wc -l < "$E2E_OUT/run1-outputs.txt") outputs of run 1 untouched
[e2e] total               $(e2e_secs "$T0" "$(e2e_now)") s
[e2e] ---------------------------------------------------------------
EOF

#!/usr/bin/env bash
# End-to-end check of the workflow on a real (single-node) SLURM cluster:
#
#   sudo .ci/slurm/run_e2e.sh          # as root, from anywhere
#
# 1. starts the cluster (.ci/slurm/setup.sh; packages are installed if missing),
# 2. runs `snakemake --profile workflow/profiles/slurm-cpu --configfile
#    tests/tiny.yaml all` in a scratch copy of the working tree, with the
#    repo's .venv,
# 3. checks that every output of the target exists and is up to date (a dry
#    run plans nothing, `snakemake --summary` says ok for each output),
# 4. checks with `sacct` that the run's SLURM jobs are all COMPLETED,
# 5. prints the times and the number of SLURM jobs,
# and always tears the cluster down (trap on EXIT), also when a step fails.
# Exits non-zero on any failure. Settings: see lib.sh (E2E_PROFILE,
# E2E_CONFIG, E2E_TARGET, E2E_EXTRA_ARGS, E2E_INPLACE, E2E_KEEP, ...).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"

T0=$(e2e_now)
e2e_start_cluster
e2e_prepare_workdir

N_PLANNED=$(e2e_planned_jobs)
[ "$N_PLANNED" -gt 0 ] || e2e_fail "nothing to do for '$E2E_TARGET' in a fresh copy (planned: $N_PLANNED)"
e2e_log "planned: $N_PLANNED snakemake jobs for '$E2E_TARGET' ($E2E_PROFILE, $E2E_CONFIG)"

e2e_snakemake run
if [ "$E2E_RC" != 0 ]; then
  grep -E -A12 'Error in rule|Error executing rule|WorkflowError' "$E2E_OUT/run.log" | head -60 >&2 || tail -40 "$E2E_OUT/run.log" >&2
  e2e_fail "snakemake exited $E2E_RC"
fi
N_FINISHED=$(e2e_finished_jobs "$E2E_OUT/run.log")
[ "$N_FINISHED" = "$N_PLANNED" ] || e2e_fail "snakemake finished $N_FINISHED of $N_PLANNED planned jobs"

e2e_check_complete
e2e_check_sacct "$E2E_RUNID" run

cat >&2 <<EOF
[e2e] ---------------------------------------------------------------
[e2e] cluster start       ${E2E_T_CLUSTER} s
[e2e] snakemake wall      ${E2E_WALL} s   ($E2E_PROFILE, $E2E_CONFIG, target $E2E_TARGET)
[e2e] snakemake jobs      $N_FINISHED (of which SLURM jobs: $E2E_N_SLURM, all COMPLETED)
[e2e] outputs checked     $E2E_N_OUTPUTS
[e2e] total               $(e2e_secs "$T0" "$(e2e_now)") s
[e2e] ---------------------------------------------------------------
EOF

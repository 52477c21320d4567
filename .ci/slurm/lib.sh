# shellcheck shell=bash
# Shared by run_e2e.sh and failure_e2e.sh (sourced, not run).
#
# Settings (environment):
#   E2E_ROOT        repository to test (default: this repo)
#   E2E_PROFILE     snakemake profile          (default: workflow/profiles/slurm-cpu)
#   E2E_CONFIG      config file                (default: tests/tiny.yaml)
#   E2E_TARGET      target rule / files        (default: all)
#   E2E_SNAKEMAKE   snakemake executable       (default: $E2E_ROOT/.venv/bin/snakemake)
#   E2E_EXTRA_ARGS  more snakemake arguments   (default: none)
#   E2E_INPLACE=1   run in $E2E_ROOT itself instead of a scratch copy of its
#                   working tree (tracked + untracked, not ignored files)
#   E2E_KEEP=1      keep the cluster's base dir (logs, DB, scratch copy) even
#                   when everything passed (it is always kept on failure)
#   ALGO_EMU_SLURM_BASE  cluster base dir (default: a fresh mktemp dir)
# Needs root (setup.sh starts the daemons).

E2E_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
E2E_ROOT=$(cd "${E2E_ROOT:-$E2E_HERE/../..}" && pwd)
E2E_PROFILE=${E2E_PROFILE:-workflow/profiles/slurm-cpu}
E2E_CONFIG=${E2E_CONFIG:-tests/tiny.yaml}
E2E_TARGET=${E2E_TARGET:-all}
E2E_SNAKEMAKE=${E2E_SNAKEMAKE:-$E2E_ROOT/.venv/bin/snakemake}
E2E_EXTRA_ARGS=${E2E_EXTRA_ARGS:-}
E2E_SM_PID=""

e2e_log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
e2e_fail() { e2e_log "FAIL: $*"; exit 1; }
e2e_now() { date +%s.%N; }
e2e_secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }

# Always tear down, also on failure or Ctrl-C; keep the evidence on failure.
e2e_cleanup() {
  local rc=$1
  trap - EXIT INT TERM
  # interrupted while snakemake ran: stop it the way Ctrl-C would (it then
  # scancels its jobs); teardown cancels whatever is left
  if [ -n "${E2E_SM_PID:-}" ] && kill -0 "$E2E_SM_PID" 2>/dev/null; then
    e2e_log "stopping snakemake ($E2E_SM_PID)"
    kill -INT "$E2E_SM_PID" 2>/dev/null
    for _ in $(seq 120); do kill -0 "$E2E_SM_PID" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$E2E_SM_PID" 2>/dev/null && kill -KILL "$E2E_SM_PID" 2>/dev/null
  fi
  if [ -n "${ALGO_EMU_SLURM_BASE:-}" ] && [ -d "$ALGO_EMU_SLURM_BASE" ]; then
    if [ "$rc" = 0 ] && [ "${E2E_KEEP:-0}" != 1 ]; then
      "$E2E_HERE/teardown.sh" "$ALGO_EMU_SLURM_BASE" --purge
    else
      "$E2E_HERE/teardown.sh" "$ALGO_EMU_SLURM_BASE"
      e2e_log "kept $ALGO_EMU_SLURM_BASE (daemon logs in log/, snakemake logs in e2e/)"
    fi
  fi
  if [ "$rc" = 0 ]; then e2e_log "PASSED"; else e2e_log "FAILED (exit $rc)"; fi
  exit "$rc"
}

e2e_start_cluster() {
  [ -x "$E2E_SNAKEMAKE" ] || e2e_fail "no snakemake at $E2E_SNAKEMAKE (make venv, or set E2E_SNAKEMAKE)"
  export ALGO_EMU_SLURM_BASE=${ALGO_EMU_SLURM_BASE:-$(mktemp -d /tmp/algo-emu-slurm.XXXXXX)}
  trap 'e2e_cleanup $?' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  E2E_OUT=$ALGO_EMU_SLURM_BASE/e2e
  mkdir -p "$E2E_OUT"
  local t0; t0=$(e2e_now)
  "$E2E_HERE/setup.sh" > /dev/null || e2e_fail "cluster setup failed"
  E2E_T_CLUSTER=$(e2e_secs "$t0" "$(e2e_now)")
  # shellcheck disable=SC1091
  . "$ALGO_EMU_SLURM_BASE/env.sh"       # ALGO_EMU_SLURM_ACCOUNT/PARTITION for the profile
  e2e_log "cluster up in ${E2E_T_CLUSTER}s ($(tail -1 "$ALGO_EMU_SLURM_BASE/setup-times.txt"))"
}

e2e_prepare_workdir() {
  if [ "${E2E_INPLACE:-0}" = 1 ]; then
    E2E_WORK=$E2E_ROOT
  else
    E2E_WORK=$ALGO_EMU_SLURM_BASE/work
    mkdir -p "$E2E_WORK"
    (cd "$E2E_ROOT" && git ls-files -z -c -o --exclude-standard \
      | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$E2E_WORK" \
      || e2e_fail "could not copy the working tree of $E2E_ROOT"
    # the venv's editable install points at $E2E_ROOT/src; make the copy win
    if [ -d "$E2E_WORK/src" ]; then export PYTHONPATH="$E2E_WORK/src${PYTHONPATH:+:$PYTHONPATH}"; fi
  fi
  # the run's own folder (the config's workdir): relative paths Snakemake reports (logs, outputs) are read there
  E2E_RUN=$E2E_WORK/$(cd "$E2E_WORK" && "$E2E_ROOT/.venv/bin/python" -c \
    'import sys, yaml; print((yaml.safe_load(open(sys.argv[1])) or {}).get("workdir", "."))' "$E2E_CONFIG") \
    || e2e_fail "could not read workdir from $E2E_CONFIG"
  e2e_log "working directory: $E2E_WORK (the run's folder: $E2E_RUN)"
}

# e2e_snakemake <name> [args...] (the target goes first: --configfile takes
# several values and would swallow it): run the profile's snakemake on the target,
# log to $E2E_OUT/<name>.log; sets E2E_RC, E2E_WALL, E2E_RUNID.
e2e_snakemake() {
  local name=$1; shift
  local t0
  t0=$(e2e_now)
  # in the background + `wait`, so that a signal to this script is handled at
  # once (bash runs traps only after a foreground child has finished)
  # shellcheck disable=SC2086
  (cd "$E2E_WORK" && exec "$E2E_SNAKEMAKE" "$E2E_TARGET" --profile "$E2E_PROFILE" \
      --configfile "$E2E_CONFIG" $E2E_EXTRA_ARGS "$@") > "$E2E_OUT/$name.log" 2>&1 &
  E2E_SM_PID=$!
  E2E_RC=0
  wait "$E2E_SM_PID" || E2E_RC=$?
  E2E_SM_PID=""
  E2E_WALL=$(e2e_secs "$t0" "$(e2e_now)")
  E2E_RUNID=$(sed -n 's/.*SLURM run ID: \([A-Za-z0-9_-]*\).*/\1/p' "$E2E_OUT/$name.log" | tail -1)
  e2e_log "$name: snakemake exit $E2E_RC after ${E2E_WALL}s (SLURM run ID ${E2E_RUNID:-none}; log $E2E_OUT/$name.log)"
}

# e2e_planned_jobs: number of jobs a dry run of the target would run (0 if none)
e2e_planned_jobs() {
  local out
  out=$(cd "$E2E_WORK" && "$E2E_SNAKEMAKE" "$E2E_TARGET" --dry-run --quiet rules --configfile "$E2E_CONFIG" 2>&1) \
    || { printf '%s\n' "$out" >&2; e2e_fail "dry run failed"; }
  if printf '%s\n' "$out" | grep -q "Nothing to be done"; then echo 0; return; fi
  printf '%s\n' "$out" | awk '$1 == "total" && $2 ~ /^[0-9]+$/ {print $2; found=1; exit} END {if (!found) print -1}'
}

# e2e_finished_jobs <log>: jobs snakemake reports finished in that run
e2e_finished_jobs() { grep -c '^Finished jobid: ' "$1" || true; }

# e2e_check_complete: every output of the target exists and is up to date
e2e_check_complete() {
  local n bad
  n=$(e2e_planned_jobs)
  [ "$n" = 0 ] || e2e_fail "a dry run of '$E2E_TARGET' still plans $n job(s)"
  (cd "$E2E_WORK" && "$E2E_SNAKEMAKE" "$E2E_TARGET" --summary --configfile "$E2E_CONFIG" 2>/dev/null) \
    > "$E2E_OUT/summary.tsv" || e2e_fail "snakemake --summary failed"
  E2E_N_OUTPUTS=$(awk -F'\t' 'NR > 1' "$E2E_OUT/summary.tsv" | wc -l)
  bad=$(awk -F'\t' 'NR > 1 && $5 != "ok" && $5 !~ /temp/' "$E2E_OUT/summary.tsv")
  [ -z "$bad" ] || { printf '%s\n' "$bad" >&2; e2e_fail "outputs not ok (see $E2E_OUT/summary.tsv)"; }
  [ "$E2E_N_OUTPUTS" -gt 0 ] || e2e_fail "the summary lists no outputs"
  e2e_log "all $E2E_N_OUTPUTS outputs of '$E2E_TARGET' present and up to date"
}

# e2e_sacct <runid>: the run's SLURM jobs, one per line: id|state|rule|submit->start s|elapsed s
e2e_sacct() {
  sacct -X -n -P --name "$1" --starttime now-2days -o JobID,State,Comment,Submit,Start,ElapsedRaw \
    | awk -F'|' '{
        cmd = "date -d " $4 " +%s"; cmd | getline s; close(cmd)
        cmd = "date -d " $5 " +%s"; cmd | getline t; close(cmd)
        sub(/_wildcards_.*/, "", $3); sub(/^rule_/, "", $3)
        printf "%s|%s|%s|%d|%d\n", $1, $2, $3, t - s, $6 }'
}

# e2e_check_sacct <runid> <name> [allow_failed]: print the run's jobs; all
# COMPLETED (or, with allow_failed, COMPLETED/FAILED and at least one FAILED)
e2e_check_sacct() {
  local runid=$1 name=$2 allow=${3:-}
  [ -n "$runid" ] || e2e_fail "$name: no SLURM run ID in the log (did anything reach SLURM?)"
  e2e_sacct "$runid" > "$E2E_OUT/$name.sacct"
  E2E_N_SLURM=$(wc -l < "$E2E_OUT/$name.sacct")
  E2E_N_FAILED=$(awk -F'|' '$2 != "COMPLETED"' "$E2E_OUT/$name.sacct" | wc -l)
  {
    printf '%-8s %-10s %-22s %8s %8s\n' jobid state rule queued_s run_s
    awk -F'|' '{printf "%-8s %-10s %-22s %8s %8s\n", $1, $2, $3, $4, $5}' "$E2E_OUT/$name.sacct"
    awk -F'|' '{q += $4; r += $5} END {if (NR) printf "mean over %d jobs: queued %.1fs, ran %.1fs\n", NR, q/NR, r/NR}' "$E2E_OUT/$name.sacct"
  } | sed "s/^/[e2e sacct $name] /" >&2
  [ "$E2E_N_SLURM" -gt 0 ] || e2e_fail "$name: sacct lists no jobs for run $runid"
  if [ -z "$allow" ]; then
    [ "$E2E_N_FAILED" = 0 ] || e2e_fail "$name: $E2E_N_FAILED SLURM job(s) not COMPLETED"
  else
    [ "$(awk -F'|' '$2 == "FAILED"' "$E2E_OUT/$name.sacct" | wc -l)" -gt 0 ] \
      || e2e_fail "$name: no SLURM job FAILED although a failure was injected"
    [ "$(awk -F'|' '$2 != "FAILED" && $2 != "COMPLETED"' "$E2E_OUT/$name.sacct" | wc -l)" = 0 ] \
      || e2e_fail "$name: SLURM jobs in states other than COMPLETED/FAILED"
  fi
}

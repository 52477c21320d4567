#!/usr/bin/env bash
# Stop the cluster that .ci/slurm/setup.sh started, strictly by the PIDs it
# recorded under the base dir (a recorded PID is signalled only while it still
# runs the expected program). munged is stopped only if setup.sh started it.
#
#   .ci/slurm/teardown.sh [BASE] [--purge]
#
# BASE defaults to $ALGO_EMU_SLURM_BASE. Jobs still in the queue are cancelled
# first (it is this base's private cluster). --purge also deletes the base dir
# and the /etc/slurm configs this base wrote (restoring any it backed up).
# Safe to run twice; exits 0 when there is nothing to stop.
set -uo pipefail

BASE="" PURGE=0
for a in "$@"; do
  case "$a" in
    --purge) PURGE=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) BASE=$a ;;
  esac
done
BASE=${BASE:-${ALGO_EMU_SLURM_BASE:-}}
log() { printf '[slurm-teardown %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
[ -n "$BASE" ] || { log "no base dir given (argument or ALGO_EMU_SLURM_BASE)"; exit 2; }
[ -d "$BASE" ] || { log "$BASE does not exist; nothing to stop"; exit 0; }
BASE=$(cd "$BASE" && pwd -P)
PIDS=$BASE/pid
MARK="# algo-emu .ci/slurm/setup.sh base=$BASE"

pid_alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(tr -dc 0-9 2>/dev/null < "$1"); [ -n "$pid" ] || return 1
  [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$2" ]
}
stop() { # stop <pidfile> <comm>
  local pf=$1 comm=$2 pid
  if pid_alive "$pf" "$comm"; then
    pid=$(tr -dc 0-9 2>/dev/null < "$pf")
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 80); do pid_alive "$pf" "$comm" || break; sleep 0.25; done
    if pid_alive "$pf" "$comm"; then
      log "$comm ($pid) ignored SIGTERM for 20 s, SIGKILL"; kill -KILL "$pid" 2>/dev/null
    fi
    log "stopped $comm ($pid)"
  fi
  rm -f "$pf"
}

# Cancel what is left in this cluster's queue, so no job step outlives slurmd.
if pid_alive "$PIDS/slurmctld.pid" slurmctld && grep -qF "$MARK" /etc/slurm/slurm.conf 2>/dev/null; then
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    log "cancelling jobs: $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null
    for _ in $(seq 40); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.25; done
  fi
fi

# order: compute daemon, controller, accounting daemon, database, munge
stop "$PIDS/slurmd.pid"          slurmd
stop "$PIDS/slurmctld.pid"       slurmctld
stop "$PIDS/slurmdbd.pid"        slurmdbd
stop "$BASE/mysql/mariadbd.pid"  mariadbd
stop "$PIDS/munged.pid"          munged

if [ "$PURGE" = 1 ]; then
  for f in slurm.conf slurmdbd.conf; do
    if grep -qF "$MARK" "/etc/slurm/$f" 2>/dev/null; then
      rm -f "/etc/slurm/$f"
      if [ -e "$BASE/etc/backup/$f" ]; then cp -p "$BASE/etc/backup/$f" "/etc/slurm/$f"; log "restored /etc/slurm/$f"; fi
    fi
  done
  case "$BASE" in
    /|/tmp|/root|/home|/etc|/var|/usr) log "refusing to delete $BASE" ;;
    *) rm -rf "$BASE"; log "purged $BASE" ;;
  esac
fi
exit 0

#!/usr/bin/env bash
# A real single-node SLURM cluster on 127.0.0.1, for CI and for trying the
# slurm profiles (Debian 12: slurm-wlm 22.05 + munge; slurmdbd + MariaDB so
# that `sacct`, which the snakemake SLURM plugin polls, works). Run as root.
#
#   .ci/slurm/setup.sh                         # state in a fresh mktemp dir
#   ALGO_EMU_SLURM_BASE=/tmp/c .ci/slurm/setup.sh
#   . "$BASE/env.sh"; sinfo; ...; .ci/slurm/teardown.sh "$BASE"
#
# What it does: installs the Debian packages if missing (one `apt-get update`),
# starts munged (only if none answers), a private MariaDB + slurmdbd,
# slurmctld and slurmd, registers the cluster, and waits until the node is
# idle. The node advertises the CPUs and memory slurmd detects on this machine
# (`slurmd -C`); no GRES (no GPU), so only the CPU profile can run here.
# State, logs, PID files, the database and the generated configs live under
# $ALGO_EMU_SLURM_BASE; /etc/slurm/{slurm,slurmdbd}.conf are written there
# too (SLURM's clients and the job steps look for them there), tagged with the
# base dir so a second cluster cannot silently take them over.
# Idempotent: with the same base, a re-run starts only what is not running,
# and restarts the SLURM daemons only if the generated config changed.
# teardown.sh stops exactly the daemons this script started (by recorded PID).
#
# Environment:
#   ALGO_EMU_SLURM_BASE        base dir (default: mktemp -d /tmp/algo-emu-slurm.XXXXXX)
#   ALGO_EMU_SLURM_ACCOUNTING  slurmdbd (default) | none (no sacct; the profile
#                              then needs `slurm-status-command: squeue`)
#   ALGO_EMU_SLURM_PORT        first of 4 consecutive TCP ports: slurmctld,
#                              slurmd, slurmdbd, mariadb (default 6817)
#   ALGO_EMU_SLURM_CLUSTER     cluster name (default algoemu)
#   ALGO_EMU_SLURM_PARTITION   partition name (default cpu)
#   ALGO_EMU_SLURM_FORCE=1     take over an /etc/slurm/slurm.conf not written
#                              by this script (it is backed up and restored by
#                              teardown.sh --purge)
set -euo pipefail

log() { printf '[slurm-setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }

[ "$(id -u)" = 0 ] || die "run as root (starts munge/slurm daemons, writes /etc/slurm)"

ACCT=${ALGO_EMU_SLURM_ACCOUNTING:-slurmdbd}
case "$ACCT" in slurmdbd|none) ;; *) die "ALGO_EMU_SLURM_ACCOUNTING must be slurmdbd or none, not '$ACCT'";; esac
PORT=${ALGO_EMU_SLURM_PORT:-6817}
CLUSTER=${ALGO_EMU_SLURM_CLUSTER:-algoemu}
PARTITION=${ALGO_EMU_SLURM_PARTITION:-cpu}
CTLD_PORT=$PORT; SLURMD_PORT=$((PORT + 1)); DBD_PORT=$((PORT + 2)); DB_PORT=$((PORT + 3))

BASE=${ALGO_EMU_SLURM_BASE:-}
if [ -z "$BASE" ]; then BASE=$(mktemp -d /tmp/algo-emu-slurm.XXXXXX); fi
mkdir -p "$BASE"
BASE=$(cd "$BASE" && pwd -P)
# daemons running as munge/mysql must traverse the base dir (mktemp makes it 0700)
chmod 0755 "$BASE"
PIDS=$BASE/pid LOGS=$BASE/log
mkdir -p "$PIDS" "$LOGS" "$BASE/ctld" "$BASE/slurmd" "$BASE/etc"
MARK="# algo-emu .ci/slurm/setup.sh base=$BASE"

t0=$(now)

# ---------------------------------------------------------------- packages
PKGS="slurm-wlm munge"
[ "$ACCT" = slurmdbd ] && PKGS="$PKGS slurmdbd mariadb-server mariadb-client"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  log "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  # keep the packages' maintainer scripts from starting system-wide daemons
  # (we start our own below); remove the guard only if we created it
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; own_policy=1
  fi
  rc=0
  # shellcheck disable=SC2086  # $missing is a list of package names
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } \
    > "$LOGS/apt.log" 2>&1 || rc=$?
  [ "$own_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ "$rc" = 0 ] || { tail -20 "$LOGS/apt.log" >&2; die "apt-get failed (log: $LOGS/apt.log)"; }
fi
t_pkg=$(now)

# ---------------------------------------------------------------- helpers
# pid_alive <pidfile> <comm>: the recorded process is alive and is still <comm>
pid_alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(tr -dc 0-9 2>/dev/null < "$1"); [ -n "$pid" ] || return 1
  [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$2" ]
}
# stop_recorded <pidfile> <comm>: TERM, wait up to 15 s, KILL; only that PID
stop_recorded() {
  local pid
  if pid_alive "$1" "$2"; then
    pid=$(tr -dc 0-9 2>/dev/null < "$1")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 60); do pid_alive "$1" "$2" || break; sleep 0.25; done
    if pid_alive "$1" "$2"; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$1"
}
# wait_for <seconds> <cmd...>
wait_for() {
  local n=$(( $1 * 10 )); shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---------------------------------------------------------------- guard /etc/slurm
mkdir -p /etc/slurm
if [ -e /etc/slurm/slurm.conf ] && ! grep -qF "$MARK" /etc/slurm/slurm.conf; then
  other=$(sed -n 's/^# algo-emu \.ci\/slurm\/setup\.sh base=//p' /etc/slurm/slurm.conf | head -1)
  if [ -n "$other" ] && pid_alive "$other/pid/slurmctld.pid" slurmctld; then
    die "a cluster from base $other is running; tear it down first (.ci/slurm/teardown.sh $other)"
  elif [ -z "$other" ] && [ "${ALGO_EMU_SLURM_FORCE:-0}" != 1 ]; then
    die "/etc/slurm/slurm.conf was not written by this script; set ALGO_EMU_SLURM_FORCE=1 to back it up and take over"
  fi
  if [ -z "$other" ] && [ ! -e "$BASE/etc/backup/slurm.conf" ]; then
    mkdir -p "$BASE/etc/backup"
    cp -p /etc/slurm/slurm.conf "$BASE/etc/backup/"
    [ -e /etc/slurm/slurmdbd.conf ] && cp -p /etc/slurm/slurmdbd.conf "$BASE/etc/backup/"
    log "backed up the existing /etc/slurm configs to $BASE/etc/backup"
  fi
fi
for p in $CTLD_PORT $SLURMD_PORT $DBD_PORT $DB_PORT; do
  case $p in
    "$CTLD_PORT") pf=slurmctld ;; "$SLURMD_PORT") pf=slurmd ;; "$DBD_PORT") pf=slurmdbd ;; *) pf=mariadbd ;;
  esac
  [ "$pf" = mariadbd ] && pidf=$BASE/mysql/mariadbd.pid || pidf=$PIDS/$pf.pid
  if port_busy "$p" && ! pid_alive "$pidf" "$pf"; then
    [ "$ACCT" = none ] && { [ "$pf" = slurmdbd ] || [ "$pf" = mariadbd ]; } && continue
    die "TCP port $p ($pf) is taken by a process this base did not start; set ALGO_EMU_SLURM_PORT"
  fi
done

# ---------------------------------------------------------------- munge
# One munged per machine (fixed socket path). Reuse a working one; record it
# as ours only if we start it, so teardown never stops someone else's munged.
[ -s /etc/munge/munge.key ] || /usr/sbin/mungekey --create --force >/dev/null 2>&1 \
  || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
if ! (munge -n | unmunge) >/dev/null 2>&1; then
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 "$LOGS/munge"
  runuser -u munge -- /usr/sbin/munged --force --log-file="$LOGS/munge/munged.log" \
    --pid-file=/run/munge/munged.pid
  wait_for 10 sh -c 'munge -n | unmunge' || die "munged did not come up ($LOGS/munge/munged.log)"
  cp /run/munge/munged.pid "$PIDS/munged.pid"
  log "started munged ($(cat "$PIDS/munged.pid"))"
fi

# ---------------------------------------------------------------- slurm.conf
# CPUs, Boards, Sockets, Cores, Threads and RealMemory exactly as slurmd detects them.
TOPO=$(/usr/sbin/slurmd -C 2>/dev/null | head -1 | grep -o 'CPUs=.*RealMemory=[0-9]*') \
  || die "slurmd -C did not report the node's hardware"
NODE=$(hostname -s)
if [ "$ACCT" = slurmdbd ]; then
  ACCT_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30"
else
  ACCT_CONF="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi
cat > "$BASE/etc/slurm.conf" <<CONF
$MARK
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
# no cgroups in this container: 22.05 has no CgroupPlugin=disabled, so we write
# no cgroup.conf and use plugins that need none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
ReturnToService=2
StateSaveLocation=$BASE/ctld
SlurmdSpoolDir=$BASE/slurmd
SlurmctldPidFile=$PIDS/slurmctld.pid
SlurmdPidFile=$PIDS/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MinJobAge=300
InactiveLimit=0
KillWait=5
Waittime=0
$ACCT_CONF
JobCompType=jobcomp/none
NodeName=$NODE NodeAddr=127.0.0.1 $TOPO State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
conf_changed=0
cmp -s "$BASE/etc/slurm.conf" /etc/slurm/slurm.conf || conf_changed=1
if [ "$conf_changed" = 1 ]; then
  # a changed config takes a restart of the SLURM daemons of this base
  stop_recorded "$PIDS/slurmd.pid" slurmd
  stop_recorded "$PIDS/slurmctld.pid" slurmctld
  cp "$BASE/etc/slurm.conf" /etc/slurm/slurm.conf
  chmod 0644 /etc/slurm/slurm.conf
fi
rm -f /etc/slurm/cgroup.conf

# ---------------------------------------------------------------- MariaDB + slurmdbd
if [ "$ACCT" = slurmdbd ]; then
  DB=$BASE/mysql
  install -d -o mysql -g mysql -m 0750 "$DB"
  SOCK=$DB/mysqld.sock
  if [ ! -d "$DB/data/mysql" ]; then
    log "initialising MariaDB in $DB/data"
    mariadb-install-db --no-defaults --user=mysql --datadir="$DB/data" \
      --auth-root-authentication-method=socket --skip-test-db > "$LOGS/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed ($LOGS/mariadb-install.log)"
  fi
  if ! pid_alive "$DB/mariadbd.pid" mariadbd; then
    # own session, no inherited stdio (else a caller's pipe stays open until teardown)
    (cd / && exec setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$DB/data" \
        --socket="$SOCK" --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
        --pid-file="$DB/mariadbd.pid" --log-error="$DB/mariadb.log" \
        --innodb-buffer-pool-size=64M --innodb-log-file-size=16M) </dev/null >/dev/null 2>&1 &
    wait_for 60 mariadb --no-defaults --socket="$SOCK" -uroot -e 'select 1' \
      || die "MariaDB did not come up ($DB/mariadb.log)"
    log "started mariadbd ($(cat "$DB/mariadbd.pid"))"
  fi
  # the slurmdbd password lives only in this base (and the 0600 slurmdbd.conf)
  [ -s "$BASE/etc/dbpass" ] || { (umask 077; head -c 18 /dev/urandom | base64 | tr -dc A-Za-z0-9 > "$BASE/etc/dbpass"); }
  DBPASS=$(cat "$BASE/etc/dbpass")
  mariadb --no-defaults --socket="$SOCK" -uroot -e "
    CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DBPASS';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
  (umask 077; cat > "$BASE/etc/slurmdbd.conf" <<CONF
$MARK
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
DebugLevel=info
LogFile=$LOGS/slurmdbd.log
PidFile=$PIDS/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$DBPASS
CONF
  )
  if ! cmp -s "$BASE/etc/slurmdbd.conf" /etc/slurm/slurmdbd.conf; then
    stop_recorded "$PIDS/slurmdbd.pid" slurmdbd
    install -m 0600 "$BASE/etc/slurmdbd.conf" /etc/slurm/slurmdbd.conf   # slurmdbd refuses a readable one
  fi
  if ! pid_alive "$PIDS/slurmdbd.pid" slurmdbd; then
    /usr/sbin/slurmdbd
    wait_for 60 sacctmgr -i list cluster || die "slurmdbd did not come up ($LOGS/slurmdbd.log)"
    log "started slurmdbd ($(cat "$PIDS/slurmdbd.pid"))"
  fi
  # registering the cluster also creates account 'root' with root's association
  # (the profiles' CI setting: slurm_account=root)
  sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" \
    || sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi

# ---------------------------------------------------------------- slurmctld + slurmd
if ! pid_alive "$PIDS/slurmctld.pid" slurmctld; then
  /usr/sbin/slurmctld
  wait_for 60 sh -c 'scontrol ping | grep -q "is UP"' || die "slurmctld did not come up ($LOGS/slurmctld.log)"
  log "started slurmctld ($(cat "$PIDS/slurmctld.pid"))"
fi
if ! pid_alive "$PIDS/slurmd.pid" slurmd; then
  /usr/sbin/slurmd
  log "started slurmd (waiting for it to write $PIDS/slurmd.pid)"
  wait_for 20 test -s "$PIDS/slurmd.pid" || die "slurmd did not start ($LOGS/slurmd.log)"
fi
node_ready() { sinfo -h -n "$NODE" -o %t 2>/dev/null | grep -Eqx '(idle|mix|alloc)'; }
if ! wait_for 60 node_ready; then
  scontrol show node "$NODE" >&2 || true
  die "node $NODE is not usable (state: $(sinfo -h -n "$NODE" -o %t 2>/dev/null)); see $LOGS/slurmd.log"
fi
t_end=$(now)

cat > "$BASE/env.sh" <<ENV
# source me: the cluster started by .ci/slurm/setup.sh
export ALGO_EMU_SLURM_BASE=$BASE
export ALGO_EMU_SLURM_ACCOUNT=root
export ALGO_EMU_SLURM_PARTITION=$PARTITION
ENV
awk -v a="$t0" -v b="$t_pkg" -v c="$t_end" \
  'BEGIN{printf "packages=%.1f daemons=%.1f total=%.1f\n", b-a, c-b, c-a}' >> "$BASE/setup-times.txt"
log "cluster $CLUSTER up: $(sinfo -h -o '%P %D %t %c cpus %m MB' | head -1); $(tail -1 "$BASE/setup-times.txt") s"
log "base: $BASE (teardown: .ci/slurm/teardown.sh $BASE)"
echo "$BASE"

#!/usr/bin/env bash
# Throw-away local S3 server for kvtier tests: a single-node Ceph cluster
# (1 monitor, 1 in-memory "memstore" OSD, 1 radosgw) that lives entirely in
# one state directory, listens on 127.0.0.1 only and needs no systemd.
#
# Usage:
#   tests/s3/server.sh start  [STATE_DIR]   start (or re-print env if running)
#   tests/s3/server.sh stop   [STATE_DIR]   stop every daemon, remove STATE_DIR
#   tests/s3/server.sh status [STATE_DIR]   exit 0 if radosgw answers
#   tests/s3/server.sh install              install Ceph if missing (start does it too), so
#                                           that start can run where no mirror is reachable
#
# STATE_DIR defaults to ${KVTIER_S3_STATE:-${TMPDIR:-/tmp}/kvtier-s3}.
#
# start prints, and writes to STATE_DIR/env, these shell assignments:
#   KVTIER_TEST_S3_ENDPOINT, KVTIER_TEST_S3_REGION, KVTIER_TEST_S3_BUCKET,
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
#
# Exit status of start: 0 ready; 1 failed (daemons stopped, log tails shown);
# 77 Ceph is missing and cannot be installed (callers should skip).
#
# Optional environment:
#   KVTIER_S3_PORT=7480          first S3 port tried (next free one is used)
#   KVTIER_S3_MON_PORT=3300      first monitor port tried (uses it and +1)
#   KVTIER_S3_OSD_BYTES=4294967296   memstore capacity (held in RAM)
#   KVTIER_S3_TIMEOUT=60         seconds allowed for each start-up step
#   KVTIER_S3_STOP_TIMEOUT=10    seconds between SIGTERM and SIGKILL
#   KVTIER_S3_NO_INSTALL=1       never run apt-get (exit 77 if Ceph is missing)
set -euo pipefail

readonly BUCKET=kvtier-test
# radosgw verifies a SigV4 signature with whatever region the request's
# credential scope names (its zonegroup is "default"; "default", "us-east-1"
# and any other name all verify). us-east-1 is what S3 clients assume.
readonly REGION=us-east-1
readonly MARKER=.kvtier-s3          # marks a directory as ours (safe to rm)
readonly RGW_NAME=client.rgw.kvtier

usage() {
  echo "usage: $0 {start|stop|status|install} [STATE_DIR]" >&2
  exit 2
}

[[ $# -ge 1 && $# -le 2 ]] || usage
CMD=$1
STATE_DIR=${2:-${KVTIER_S3_STATE:-${TMPDIR:-/tmp}/kvtier-s3}}
[[ -n $STATE_DIR ]] || usage
# Daemons chdir to / when they detach, so every path must be absolute.
[[ $STATE_DIR == /* ]] || STATE_DIR=$PWD/$STATE_DIR
STATE_DIR=${STATE_DIR%/}
CONF=$STATE_DIR/ceph.conf
ENV_FILE=$STATE_DIR/env

T0=$EPOCHREALTIME
log() {
  local now=$EPOCHREALTIME
  # elapsed seconds with two decimals, computed without forking
  local ms=$(( (${now//[.,]/} - ${T0//[.,]/}) / 10000 ))
  printf '[kvtier-s3 %d.%02ds] %s\n' $((ms / 100)) $((ms % 100)) "$*" >&2
}

# ------------------------------------------------------------------ helpers

# True if something accepts TCP connections on 127.0.0.1:$1.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# First port >= $1 for which ports $1 .. $1+$2-1 are all free.
free_port() {
  local p=$1 n=$2 i ok
  for ((; p < $1 + 200; p++)); do
    ok=1
    for ((i = 0; i < n; i++)); do
      if port_in_use $((p + i)); then ok=0; break; fi
    done
    if ((ok)); then echo "$p"; return 0; fi
  done
  return 1
}

# $1 random characters from the alphabet $2 (no pipes, so pipefail-safe).
rand_str() {
  local out="" b alpha=$2
  for b in $(od -An -vtu1 -N"$1" /dev/urandom); do
    out+=${alpha:b % ${#alpha}:1}
  done
  printf '%s' "$out"
}

# PIDs of live processes started with our ceph.conf on their command line
# (daemons, plus any ceph / radosgw-admin client still running). Matching the
# exact config path means processes of other clusters are never touched.
our_pids() {
  local d pid st args a
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [[ $pid == "$$" ]] && continue
    mapfile -d '' args 2>/dev/null <"$d/cmdline" || continue
    for a in "${args[@]}"; do
      [[ $a == "$CONF" ]] || continue
      # skip zombies: an orphan stays one until PID 1 reaps it
      read -r st 2>/dev/null <"$d/stat" || break
      st=${st##*) }
      [[ ${st%% *} == Z ]] || echo "$pid"
      break
    done
  done
}

alive() {
  local st
  read -r st 2>/dev/null <"/proc/$1/stat" || return 1
  st=${st##*) }
  [[ ${st%% *} != Z ]]
}

# SIGTERM the given PIDs, wait up to KVTIER_S3_STOP_TIMEOUT s, then SIGKILL.
terminate() {
  local pids=("$@") p left i tmo=${KVTIER_S3_STOP_TIMEOUT:-10}
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for ((i = 0; i < tmo * 10; i++)); do
    left=0
    for p in "${pids[@]}"; do alive "$p" && left=1; done
    ((left)) || return 0
    sleep 0.1
  done
  for p in "${pids[@]}"; do
    if alive "$p"; then
      echo "[kvtier-s3] pid $p ignored SIGTERM, sending SIGKILL" >&2
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
  sleep 0.2
}

# Stop radosgw first, then the OSD, then the monitor (and any stray client).
stop_daemons() {
  local comm pid group i
  local -a pids batch
  mapfile -t pids < <(our_pids)
  for group in radosgw ceph-osd ceph-mon ""; do
    batch=()
    for pid in "${pids[@]}"; do
      alive "$pid" || continue
      comm=$(<"/proc/$pid/comm") 2>/dev/null || continue
      if [[ -z $group || $comm == "$group" ]]; then batch+=("$pid"); fi
    done
    ((${#batch[@]})) || continue
    terminate "${batch[@]}"
    log "stopped ${group:-other processes} (pid ${batch[*]})"
  done
  # The daemons are children of PID 1, which may take a moment to reap them;
  # wait (briefly) so that no <defunct> entry outlives "stop".
  for ((i = 0; i < 50; i++)); do
    all_gone "${pids[@]}" && break
    sleep 0.1
  done
}

all_gone() { # pid...
  local p
  for p in "$@"; do [[ ! -e /proc/$p ]] || return 1; done
}

# Remove STATE_DIR, but only if it is ours (or empty).
remove_state_dir() {
  [[ -d $STATE_DIR ]] || return 0
  case $STATE_DIR in
    "" | / | /tmp | "$HOME") echo "[kvtier-s3] refusing to remove $STATE_DIR" >&2; return 1 ;;
  esac
  if [[ -e $STATE_DIR/$MARKER ]] || rmdir "$STATE_DIR" 2>/dev/null; then
    rm -rf -- "$STATE_DIR"
  else
    echo "[kvtier-s3] $STATE_DIR was not created by this script; not removing it" >&2
    return 1
  fi
}

endpoint_answers() { # endpoint
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$1/" 2>/dev/null) || true
  [[ $code =~ ^[1-5][0-9][0-9]$ ]]
}

env_value() { # name -> value from STATE_DIR/env
  local line
  [[ -f $ENV_FILE ]] || return 1
  while IFS= read -r line; do
    if [[ $line == "$1="* ]]; then echo "${line#*=}"; return 0; fi
  done <"$ENV_FILE"
  return 1
}

# Our radosgw is alive (per its pid file) and answers on the endpoint.
is_running() {
  local ep pid
  ep=$(env_value KVTIER_TEST_S3_ENDPOINT) || return 1
  pid=$(<"$STATE_DIR/run/$RGW_NAME.pid") 2>/dev/null || return 1
  [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" || return 1
  [[ $(<"/proc/$pid/comm") == radosgw ]] 2>/dev/null || return 1
  endpoint_answers "$ep"
}

# ------------------------------------------------------------------ install

unavailable() {
  echo "S3 server unavailable: $*" >&2
  exit 77
}

ensure_ceph() {
  local bins=(ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool curl od timeout)
  local b missing=()
  for b in "${bins[@]}"; do command -v "$b" >/dev/null 2>&1 || missing+=("$b"); done
  ((${#missing[@]})) || return 0

  [[ ${KVTIER_S3_NO_INSTALL:-0} != 1 ]] || unavailable "missing ${missing[*]} (KVTIER_S3_NO_INSTALL=1)"
  [[ $(id -u) == 0 ]] || unavailable "missing ${missing[*]} and not root, cannot apt-get install"
  command -v apt-get >/dev/null 2>&1 || unavailable "missing ${missing[*]} and no apt-get"

  local pkgs=(ceph-mon ceph-osd radosgw ceph-common curl coreutils)
  local aptlog
  aptlog=$(mktemp -t kvtier-s3-apt.XXXXXX)
  log "installing ${pkgs[*]} with apt-get (about a minute)"
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -y -q -o DPkg::Lock::Timeout=120 install --no-install-recommends "${pkgs[@]}")
  # Try with the package lists at hand first; refresh them only if needed.
  if ! "${apt[@]}" >"$aptlog" 2>&1; then
    if ! { apt-get -q -o DPkg::Lock::Timeout=120 update && "${apt[@]}"; } >>"$aptlog" 2>&1; then
      tail -n 15 "$aptlog" >&2
      rm -f "$aptlog"
      unavailable "apt-get install ${pkgs[*]} failed"
    fi
  fi
  rm -f "$aptlog"
  for b in "${bins[@]}"; do
    command -v "$b" >/dev/null 2>&1 || unavailable "$b still missing after apt-get install"
  done
  log "installed"
}

# ------------------------------------------------------------------ start

# Called on any exit from start before it finished: show the logs, stop
# whatever was started, leave STATE_DIR (and its logs) for inspection.
start_failed() {
  local rc=$?
  trap - EXIT
  ((rc != 0)) || return 0
  local f
  for f in "$STATE_DIR"/log/*.log; do
    [[ -s $f ]] || continue
    echo "----- tail of $f" >&2
    tail -n 20 "$f" >&2
  done
  stop_daemons || true
  rm -f "$ENV_FILE"
  echo "[kvtier-s3] start failed; logs left in $STATE_DIR/log (remove with: $0 stop $STATE_DIR)" >&2
  exit 1
}

die() {
  log "ERROR: $*"
  exit 1 # start_failed (EXIT trap) cleans up
}

# Run "$@" until it succeeds, at most KVTIER_S3_TIMEOUT seconds.
wait_for() { # description command...
  local what=$1
  shift
  local deadline=$((SECONDS + ${KVTIER_S3_TIMEOUT:-60}))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out waiting for $what"
    sleep 0.2
  done
}

ceph_cli() { timeout 30 ceph -c "$CONF" --connect-timeout 10 "$@"; }

# Signed S3 request. Prints the HTTP status; the body goes to $S3_OUT.
# curl 7.88 signs only if x-amz-content-sha256 is given, so always send it.
s3_request() { # method path [extra curl args...]
  local method=$1 path=$2
  shift 2
  curl -sS -o "$S3_OUT" -w '%{http_code}' --max-time 30 -X "$method" \
    --aws-sigv4 "aws:amz:$REGION:s3" --user "$AK:$SK" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@" "$ENDPOINT/$path"
}

write_conf() {
  # \$name, \$cluster and \$id are Ceph meta-variables expanded by each daemon.
  cat >"$CONF" <<EOF
[global]
fsid = $FSID
mon host = [v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$((MON_PORT + 1))]
public network = 127.0.0.0/8
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
# radosgw asks for a "secure" monitor connection by default, which auth
# "none" cannot give (it then fails with get_initial_auth_request -13)
ms mon client mode = crc secure
keyring = $STATE_DIR/keyring
run dir = $STATE_DIR/run
pid file = $STATE_DIR/run/\$name.pid
admin socket = $STATE_DIR/run/\$name.asok
log file = $STATE_DIR/log/\$name.log
crash dir = $STATE_DIR/crash
log to stderr = false
err to stderr = false
mon cluster log file = $STATE_DIR/log/cluster.log
# one OSD: one replica, few placement groups, no automatic changes
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon osd down out interval = 0
mon data avail warn = 2
mon data avail crit = 1

[mon]
mon data = $STATE_DIR/mon/\$cluster-\$id
# radosgw creates ~6 pools on its first start, each a few map changes:
# commit them faster than the 1 s default
paxos propose interval = 0.05
paxos min wait = 0.01

[osd]
osd data = $STATE_DIR/osd/\$cluster-\$id
# all object data is kept in RAM, up to this many bytes
osd objectstore = memstore
memstore device bytes = $OSD_BYTES
# skip flushing the store on SIGTERM: the directory is deleted anyway
osd fast shutdown = true
# 64 MiB S3 objects reach the OSD as 4 MiB stripes; allow larger ones anyway
osd max object size = 268435456
osd op num shards = 2
osd op num threads per shard = 2

[client]
# the ceph / radosgw-admin command-line tools need no admin socket
admin socket =

[$RGW_NAME]
admin socket = $STATE_DIR/run/\$name.asok
rgw frontends = beast endpoint=127.0.0.1:$S3_PORT
rgw data = $STATE_DIR/rgw
rgw thread pool size = 64
rgw enable usage log = false
# no lifecycle thread: it sleeps in 5 s steps and slows down shutdown
rgw enable lc threads = false
# free the tails (beyond 4 MiB) of deleted or overwritten objects within
# about a minute instead of after 2 h, so the RAM-backed OSD does not fill up
rgw gc obj min wait = 30
rgw gc processor period = 30
EOF
}

cmd_start() {
  if is_running; then
    cat "$ENV_FILE"
    return 0
  fi

  ensure_ceph
  T0=$EPOCHREALTIME # time the start itself, not the install

  # A state directory from an earlier, dead server: clean it up first.
  if [[ -d $STATE_DIR ]]; then
    if [[ -e $STATE_DIR/$MARKER ]]; then
      log "cleaning up stale $STATE_DIR"
      stop_daemons
      remove_state_dir
    elif ! rmdir "$STATE_DIR" 2>/dev/null; then
      echo "[kvtier-s3] $STATE_DIR exists and was not created by this script" >&2
      exit 1
    fi
  fi

  mkdir -p "$STATE_DIR"
  : >"$STATE_DIR/$MARKER"
  mkdir -p "$STATE_DIR"/{run,log,crash,mon/ceph-a,osd/ceph-0,rgw}
  trap start_failed EXIT
  export CEPH_CONF=$CONF

  OSD_BYTES=${KVTIER_S3_OSD_BYTES:-4294967296}
  [[ $OSD_BYTES =~ ^[0-9]+$ ]] || die "KVTIER_S3_OSD_BYTES must be a number of bytes"
  MON_PORT=$(free_port "${KVTIER_S3_MON_PORT:-3300}" 2) || die "no free monitor port"
  S3_PORT=$(free_port "${KVTIER_S3_PORT:-7480}" 1) || die "no free S3 port"
  if ((S3_PORT == MON_PORT || S3_PORT == MON_PORT + 1)); then
    S3_PORT=$(free_port $((MON_PORT + 2)) 1) || die "no free S3 port"
  fi
  FSID=$(</proc/sys/kernel/random/uuid)
  write_conf
  log "state in $STATE_DIR, monitor port $MON_PORT, S3 port $S3_PORT"

  # --- monitor
  monmaptool --create --fsid "$FSID" \
    --addv a "[v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$((MON_PORT + 1))]" \
    "$STATE_DIR/monmap" >"$STATE_DIR/log/mkfs.log" 2>&1 || die "monmaptool failed"
  {
    ceph-authtool --create-keyring "$STATE_DIR/keyring" --gen-key -n mon. --cap mon 'allow *' &&
      ceph-authtool "$STATE_DIR/keyring" --gen-key -n client.admin \
        --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *'
  } >>"$STATE_DIR/log/mkfs.log" 2>&1 || die "ceph-authtool failed"
  ceph-mon -c "$CONF" --mkfs -i a --monmap "$STATE_DIR/monmap" --keyring "$STATE_DIR/keyring" \
    >>"$STATE_DIR/log/mkfs.log" 2>&1 || die "ceph-mon --mkfs failed"
  # Each daemon detaches itself; keep its stdio off our stdout.
  ceph-mon -c "$CONF" -i a </dev/null >>"$STATE_DIR/log/daemons.out" 2>&1 || die "ceph-mon did not start"
  wait_for "the monitor" ceph_cli mon stat
  log "monitor up"

  # --- OSD (memstore)
  local osd_uuid osd_id
  osd_uuid=$(</proc/sys/kernel/random/uuid)
  osd_id=$(ceph_cli osd new "$osd_uuid" 2>>"$STATE_DIR/log/mkfs.log") || die "ceph osd new failed"
  [[ $osd_id =~ ^[0-9]+$ ]] || die "ceph osd new returned '$osd_id'"
  ceph-osd -c "$CONF" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" \
    >>"$STATE_DIR/log/mkfs.log" 2>&1 || die "ceph-osd --mkfs failed"
  ceph-osd -c "$CONF" -i "$osd_id" </dev/null >>"$STATE_DIR/log/daemons.out" 2>&1 || die "ceph-osd did not start"
  osd_up_in() {
    local s
    s=$(ceph_cli osd stat -f json) || return 1
    [[ $s == *'"num_up_osds":1,'* && $s == *'"num_in_osds":1,'* ]]
  }
  wait_for "osd.$osd_id to be up and in" osd_up_in
  log "osd.$osd_id up"

  # --- radosgw (creates its pools on first start)
  ENDPOINT=http://127.0.0.1:$S3_PORT
  radosgw -c "$CONF" -n "$RGW_NAME" </dev/null >>"$STATE_DIR/log/daemons.out" 2>&1 || die "radosgw did not start"
  wait_for "radosgw on $ENDPOINT" endpoint_answers "$ENDPOINT"
  log "radosgw up"

  # --- user with random keys, bucket, signed round trip
  AK=$(rand_str 20 ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789)
  SK=$(rand_str 40 ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789)
  timeout 60 radosgw-admin -c "$CONF" user create --uid=kvtier-test --display-name="kvtier test" \
    --access-key="$AK" --secret-key="$SK" >"$STATE_DIR/log/user-create.out" 2>&1 ||
    die "radosgw-admin user create failed: $(tail -n 3 "$STATE_DIR/log/user-create.out")"

  S3_OUT=$STATE_DIR/log/s3-probe.out
  local code probe=$STATE_DIR/probe body
  code=$(s3_request PUT "$BUCKET") || true
  [[ $code == 200 ]] || die "PUT bucket $BUCKET: HTTP $code $(cat "$S3_OUT" 2>/dev/null)"
  body="kvtier-s3 probe $FSID"
  printf '%s' "$body" >"$probe"
  code=$(s3_request PUT "$BUCKET/kvtier-s3-probe" --data-binary "@$probe") || true
  [[ $code == 200 ]] || die "PUT object: HTTP $code $(cat "$S3_OUT" 2>/dev/null)"
  code=$(s3_request GET "$BUCKET/kvtier-s3-probe") || true
  [[ $code == 200 ]] || die "GET object: HTTP $code $(cat "$S3_OUT" 2>/dev/null)"
  [[ $(<"$S3_OUT") == "$body" ]] || die "GET object returned other bytes than were PUT"
  code=$(s3_request DELETE "$BUCKET/kvtier-s3-probe") || true
  [[ $code == 204 ]] || die "DELETE object: HTTP $code $(cat "$S3_OUT" 2>/dev/null)"
  rm -f "$probe" "$S3_OUT"
  log "bucket $BUCKET ready (signed PUT/GET/DELETE ok, region $REGION)"

  cat >"$ENV_FILE.tmp" <<EOF
KVTIER_TEST_S3_ENDPOINT=$ENDPOINT
KVTIER_TEST_S3_REGION=$REGION
KVTIER_TEST_S3_BUCKET=$BUCKET
AWS_ACCESS_KEY_ID=$AK
AWS_SECRET_ACCESS_KEY=$SK
EOF
  mv "$ENV_FILE.tmp" "$ENV_FILE"
  trap - EXIT
  cat "$ENV_FILE"
}

# ------------------------------------------------------------------ stop / status

cmd_stop() {
  [[ -d $STATE_DIR ]] || return 0
  stop_daemons
  remove_state_dir
}

cmd_status() {
  local ep
  if is_running; then
    ep=$(env_value KVTIER_TEST_S3_ENDPOINT)
    echo "running: $ep ($STATE_DIR)"
    return 0
  fi
  echo "not running ($STATE_DIR)"
  return 1
}

case $CMD in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  install) ensure_ceph ;;
  *) usage ;;
esac

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
#   KVTIER_S3_TIMEOUT=300        seconds allowed for each start-up step (a ceiling for a hung
#                                daemon, see STEP_TIMEOUT in tests/lib/ceph-common.sh)
#   KVTIER_S3_STOP_TIMEOUT=10    seconds between SIGTERM and SIGKILL
#   KVTIER_S3_NO_INSTALL=1       never run apt-get (exit 77 if Ceph is missing)
set -euo pipefail

# read by tests/lib/ceph-common.sh
# shellcheck disable=SC2034
{
  CL_TAG=kvtier-s3
  CL_WHAT="S3 server"
  CL_BINS=(ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool curl od timeout)
  CL_PKGS=(ceph-mon ceph-osd radosgw ceph-common curl coreutils)
  CL_NO_INSTALL_VAR=KVTIER_S3_NO_INSTALL
  CL_NOT_ROOT="not root, cannot apt-get install"
  CL_APT_NOTE=" (about a minute)"
  CL_LOG_INSTALLED=1
  STEP_TIMEOUT=${KVTIER_S3_TIMEOUT:-300}
  WAIT_POLL=0.2
}
# shellcheck source-path=SCRIPTDIR source=../lib/ceph-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/ceph-common.sh"

readonly BUCKET=kvtier-test
readonly MARKER=.kvtier-s3          # marks a directory as ours (safe to rm)

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

# ------------------------------------------------------------------ helpers

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

# ------------------------------------------------------------------ start

# Called on any exit from start before it finished: show the logs, stop
# whatever was started, leave STATE_DIR (and its logs) for inspection.
start_failed() {
  local rc=$?
  trap - EXIT
  ((rc != 0)) || return 0
  log_tails 20
  stop_daemons || true
  rm -f "$ENV_FILE"
  echo "[kvtier-s3] start failed; logs left in $STATE_DIR/log (remove with: $0 stop $STATE_DIR)" >&2
  exit 1
}

# Signed S3 request. Prints the HTTP status; the body goes to $S3_OUT.
# curl 7.88 signs only if x-amz-content-sha256 is given, so always send it.
s3_request() { # method path [extra curl args...]
  local method=$1 path=$2
  shift 2
  curl -sS -o "$S3_OUT" -w '%{http_code}' --max-time "$STEP_TIMEOUT" -X "$method" \
    --aws-sigv4 "aws:amz:$REGION:s3" --user "$AK:$SK" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@" "$ENDPOINT/$path"
}

write_conf() {
  {
    conf_global 127.0.0.1 127.0.0.0/8 "public addr = 127.0.0.1
cluster addr = 127.0.0.1"
    echo
    conf_mon ""
    echo
    conf_osd "$OSD_BYTES" "" "# 64 MiB S3 objects reach the OSD as 4 MiB stripes; allow larger ones anyway
osd max object size = 268435456"
    cat <<EOF

[client]
# the ceph / radosgw-admin command-line tools need no admin socket
admin socket =

EOF
    conf_rgw "127.0.0.1:$S3_PORT" 64
  } >"$CONF"
}

cmd_start() {
  if is_running; then
    cat "$ENV_FILE"
    return 0
  fi

  ensure_ceph
  # shellcheck disable=SC2034 # read by log()
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
  timeout "$STEP_TIMEOUT" radosgw-admin -c "$CONF" user create --uid=kvtier-test --display-name="kvtier test" \
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

#!/usr/bin/env bash
# A second throw-away local S3 server for kvtier tests, of another implementation than
# tests/s3/server.sh (Ceph's radosgw): OpenStack Swift (Debian's swift-proxy, swift-account,
# swift-container, swift-object) with its S3 API middleware (s3api) and tempauth, one replica on
# one device directory, memcached for tempauth's tokens. It lives in one state directory,
# listens on 127.0.0.1 only and needs no systemd.
#
# Usage (the same as tests/s3/server.sh):
#   tests/s3/swift.sh start  [STATE_DIR]   start; prints, and writes to STATE_DIR/env,
#                                          KVTIER_TEST_S3_ENDPOINT, _REGION, _BUCKET,
#                                          AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
#   tests/s3/swift.sh stop   [STATE_DIR]   stop every process, remove STATE_DIR
#   tests/s3/swift.sh install              install Swift and memcached if missing
#
# STATE_DIR defaults to ${KVTIER_SWIFT_STATE:-${TMPDIR:-/tmp}/kvtier-swift}. Exit status of
# start: 0 ready; 1 failed (processes stopped, log tails shown); 77 Swift is missing and cannot
# be installed, or the state directory's filesystem keeps no extended attributes (Swift's object
# server stores metadata in them): callers skip.
#
# Optional environment:
#   KVTIER_SWIFT_PORT=17480     first port tried for the S3 endpoint (the next free ones are
#                               used for memcached and the account, container and object servers)
#   KVTIER_SWIFT_TIMEOUT=300    seconds allowed for each start-up step (a ceiling for a hung
#                               server, as in tests/s3/server.sh)
#   KVTIER_S3_NO_INSTALL=1      never run apt-get (exit 77 if Swift is missing)
set -euo pipefail

# read by tests/lib/ceph-common.sh (its install, logging and waiting helpers are not Ceph's)
# shellcheck disable=SC2034
{
  CL_TAG=kvtier-swift
  CL_WHAT="S3 server (Swift)"
  CL_BINS=(swift-proxy-server swift-account-server swift-container-server swift-object-server
           swift-ring-builder memcached curl)
  CL_PKGS=(swift-proxy swift-account swift-container swift-object memcached curl)
  CL_NO_INSTALL_VAR=KVTIER_S3_NO_INSTALL
  CL_NOT_ROOT="not root, cannot apt-get install"
  CL_APT_NOTE=" (about a minute)"
  CL_LOG_INSTALLED=1
  STEP_TIMEOUT=${KVTIER_SWIFT_TIMEOUT:-300}
  WAIT_POLL=0.2
}
# shellcheck source-path=SCRIPTDIR source=../lib/ceph-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/ceph-common.sh"

readonly BUCKET=kvtier-test
readonly ACCOUNT=test USER_NAME=tester
readonly MARKER=.kvtier-swift # marks a directory as ours (safe to rm)
readonly SERVERS=(account container object proxy)

usage() {
  echo "usage: $0 {start|stop|install} [STATE_DIR]" >&2
  exit 2
}

[[ $# -ge 1 && $# -le 2 ]] || usage
CMD=$1
STATE_DIR=${2:-${KVTIER_SWIFT_STATE:-${TMPDIR:-/tmp}/kvtier-swift}}
[[ $STATE_DIR == /* ]] || STATE_DIR=$PWD/$STATE_DIR
STATE_DIR=${STATE_DIR%/}
ENV_FILE=$STATE_DIR/env

stop_all() {
  local f pid pids=()
  for f in "$STATE_DIR"/run/*.pid; do
    [[ -e $f ]] || continue
    pid=$(<"$f")
    alive "$pid" && pids+=("$pid")
  done
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  local i left
  for ((i = 0; i < 100; i++)); do
    left=0
    for pid in "${pids[@]}"; do alive "$pid" && left=1; done
    ((left)) || return 0
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

start_failed() {
  local rc=$?
  ((rc == 0 || rc == 77)) && return
  log_tails 20
  stop_all
  remove_state_dir || true
}

# Swift's object server keeps an object's metadata in extended attributes of its file.
xattrs_work() {
  local f=$STATE_DIR/dev/d1/.xattr-probe
  : >"$f"
  python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.kvtier.probe", b"1")' "$f" 2>/dev/null
}

write_configs() { # first-port
  local p=$1 user
  user=$(id -un)
  MEMCACHED_PORT=$((p + 1))
  mkdir -p "$STATE_DIR"/{etc,dev/d1,run,log}
  cat >"$STATE_DIR/etc/swift.conf" <<EOF
[swift-hash]
swift_hash_path_suffix = kvtier-test
swift_hash_path_prefix = kvtier
[storage-policy:0]
name = Policy-0
default = yes
EOF
  local name port i=2
  for name in account container object; do
    port=$((p + i))
    i=$((i + 1))
    swift-ring-builder "$STATE_DIR/etc/$name.builder" create 0 1 1 >/dev/null
    swift-ring-builder "$STATE_DIR/etc/$name.builder" add "r1z1-127.0.0.1:$port/d1" 1 >/dev/null
    # rebalance exits 1 with a warning on a one-device ring; the ring is written all the same
    swift-ring-builder "$STATE_DIR/etc/$name.builder" rebalance >/dev/null || true
    [[ -s $STATE_DIR/etc/$name.ring.gz ]] || die "no $name ring was written"
    cat >"$STATE_DIR/etc/$name-server.conf" <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $port
devices = $STATE_DIR/dev
mount_check = false
swift_dir = $STATE_DIR/etc
user = $user
workers = 0
log_name = $name
[pipeline:main]
pipeline = $name-server
[app:$name-server]
use = egg:swift#$name
[$name-replicator]
[$name-updater]
[$name-auditor]
EOF
  done
  # s3api needs slo for multipart uploads; listing_formats and copy as the docs' pipeline.
  cat >"$STATE_DIR/etc/proxy-server.conf" <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $p
swift_dir = $STATE_DIR/etc
user = $user
workers = 0
[pipeline:main]
pipeline = catch_errors proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$MEMCACHED_PORT
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:s3api]
use = egg:swift#s3api
location = $REGION
[filter:tempauth]
use = egg:swift#tempauth
user_${ACCOUNT}_${USER_NAME} = $SECRET .admin
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
EOF
}

# The bucket, made through Swift's own API (an S3 bucket is a Swift container): 201 once the
# proxy, tempauth and the account and container servers all answer.
make_bucket() {
  local token code
  token=$(curl -s -D - -o /dev/null --max-time "$STEP_TIMEOUT" -H "X-Auth-User: $ACCOUNT:$USER_NAME" \
    -H "X-Auth-Key: $SECRET" "$ENDPOINT/auth/v1.0" | tr -d '\r' |
    awk 'tolower($1) == "x-auth-token:" {print $2}') || return 1
  [[ -n $token ]] || return 1
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time "$STEP_TIMEOUT" -X PUT \
    -H "X-Auth-Token: $token" "$ENDPOINT/v1/AUTH_$ACCOUNT/$BUCKET") || return 1
  [[ $code == 201 || $code == 202 ]]
}

start() {
  [[ ! -e $STATE_DIR/env ]] || { cat "$ENV_FILE"; return 0; }
  ensure_ceph # installs CL_PKGS (nothing of Ceph's)
  remove_state_dir || die "cannot use $STATE_DIR"
  mkdir -p "$STATE_DIR/dev/d1"
  touch "$STATE_DIR/$MARKER"
  trap start_failed EXIT
  if ! xattrs_work; then
    remove_state_dir || true
    unavailable "the filesystem of $STATE_DIR keeps no extended attributes (Swift needs them)"
  fi
  local port
  port=$(free_port "${KVTIER_SWIFT_PORT:-17480}" 5) || die "no 5 free ports from ${KVTIER_SWIFT_PORT:-17480}"
  SECRET=$(rand_str 24 abcdefghijklmnopqrstuvwxyz0123456789)
  ENDPOINT=http://127.0.0.1:$port
  write_configs "$port"
  log "starting memcached and the account, container, object and proxy servers (port $port)"
  memcached -l 127.0.0.1 -p "$MEMCACHED_PORT" -U 0 -m 64 -u "$(id -un)" \
    >"$STATE_DIR/log/memcached.log" 2>&1 &
  echo $! >"$STATE_DIR/run/memcached.pid"
  local s
  for s in "${SERVERS[@]}"; do
    "swift-$s-server" "$STATE_DIR/etc/$s-server.conf" >"$STATE_DIR/log/$s.log" 2>&1 &
    echo $! >"$STATE_DIR/run/$s.pid"
  done
  wait_for "the proxy at $ENDPOINT" endpoint_answers "$ENDPOINT"
  wait_for "bucket $BUCKET" make_bucket
  cat >"$ENV_FILE" <<EOF
KVTIER_TEST_S3_ENDPOINT=$ENDPOINT
KVTIER_TEST_S3_REGION=$REGION
KVTIER_TEST_S3_BUCKET=$BUCKET
AWS_ACCESS_KEY_ID=$ACCOUNT:$USER_NAME
AWS_SECRET_ACCESS_KEY=$SECRET
EOF
  trap - EXIT
  log "ready: $ENDPOINT (bucket $BUCKET)"
  cat "$ENV_FILE"
}

case $CMD in
  start) start ;;
  stop)
    stop_all
    remove_state_dir
    ;;
  install) ensure_ceph ;;
  *) usage ;;
esac

#!/usr/bin/env bash
# A throw-away Ceph cluster with CephFS and radosgw, and simulated hosts that share it, for
# kvtier's multi-host tests. Everything lives in one state directory and on one test bridge
# this script creates; no daemon binds to anything but the bridge's address.
#
#   tests/ceph/cluster.sh start  [STATE_DIR]         monitor, OSD, MDS, a CephFS, radosgw, and
#                                                    the hosts (each: a network namespace on
#                                                    the bridge and its own ceph-fuse mount);
#                                                    if it is running already, prints its env
#   tests/ceph/cluster.sh stop   [STATE_DIR]         unmount, stop every daemon, delete the
#                                                    namespaces and the bridge, remove STATE_DIR
#   tests/ceph/cluster.sh status [STATE_DIR]         exit 0 if the MDS and radosgw answer
#   tests/ceph/cluster.sh install                    install the Ceph packages if missing
#   tests/ceph/cluster.sh exec   STATE_DIR HOST CMD...   run CMD in HOST's network namespace
#   tests/ceph/cluster.sh down|up STATE_DIR HOST     pull / plug back HOST's cable
#   tests/ceph/cluster.sh remount STATE_DIR HOST     unmount (lazily if needed) and mount again
#
# STATE_DIR defaults to ${TMPDIR:-/tmp}/kvtier-ceph.
#
# start writes STATE_DIR/env (and prints it): KVTIER_CEPH_HOSTS (the host names),
# KVTIER_CEPH_MNT_<host> (its mount of the file system), KVTIER_CEPH_NETNS_<host>,
# KVTIER_CEPH_IP_<host>, KVTIER_CEPH_BRIDGE_IP, KVTIER_CEPH_S3_ENDPOINT (on the bridge),
# KVTIER_CEPH_S3_BUCKET, KVTIER_CEPH_S3_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY.
#
# Exit status of start: 0 ready; 1 failed (everything it started is stopped, logs kept in
# STATE_DIR/log); 77 the cluster cannot run here (Ceph missing and not installable, no
# /dev/fuse, no network namespaces, not root), with the reason on stderr.
#
# Optional environment:
#   KVTIER_CEPH_HOSTS="a b c"     the simulated hosts
#   KVTIER_CEPH_SESSION_TIMEOUT=30  seconds after which the MDS calls a silent client stale
#                                 (Ceph's minimum); its capabilities and locks go to others
#   KVTIER_CEPH_CAP_REVOKE_TIMEOUT=5  seconds after which the MDS evicts a client that does not
#                                 give back capabilities another client needs (0: never;
#                                 then only the session timeout frees them)
#   KVTIER_CEPH_MDS_EARLY_REPLY=false  true: Ceph's default (see below)
#   KVTIER_CEPH_MDS_TICK=0.2      mds tick interval (Ceph's default: 5)
#   KVTIER_CEPH_FUSE_PAGECACHE=1  0: ceph-fuse bypasses the kernel page cache (1: Ceph's default)
#   KVTIER_CEPH_TIMEOUT=300       seconds allowed for each start-up step and each mount (a
#                                 ceiling for a hung daemon, see STEP_TIMEOUT in
#                                 tests/lib/ceph-common.sh)
#   KVTIER_CEPH_NO_INSTALL=1      never run apt-get (exit 77 if Ceph is missing)
#
# CephFS choices (see docs/deployment.md): the MDS journals before it answers and ticks every
# 0.2 s (no lookup on another host waits for a journal flush, which with Ceph's defaults can
# take up to the 5 s tick), and evicts a client that holds back capabilities for 5 s (a dead
# host then stalls the others' writes for 5 s instead of the 30-60 s session timeout).
set -uo pipefail

# read by tests/lib/ceph-common.sh
# shellcheck disable=SC2034
{
  CL_TAG=kvtier-ceph
  CL_WHAT="Ceph cluster"
  CL_BINS=(ceph-mon ceph-osd ceph-mds ceph-fuse radosgw radosgw-admin ceph monmaptool ceph-authtool
    curl nsenter ip timeout)
  CL_PKGS=(ceph-mon ceph-osd ceph-mds ceph-fuse radosgw ceph-common curl iproute2 util-linux coreutils)
  CL_NO_INSTALL_VAR=KVTIER_CEPH_NO_INSTALL
  CL_NOT_ROOT="not root"
  CL_APT_NOTE=""
  CL_LOG_INSTALLED=0
  STEP_TIMEOUT=${KVTIER_CEPH_TIMEOUT:-300}
  WAIT_POLL=0.1
}
# shellcheck source-path=SCRIPTDIR source=../lib/ceph-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/ceph-common.sh"

readonly MARKER=.kvtier-ceph
readonly BUCKET=kvtier-multihost
readonly FSNAME=kvtierfs
readonly MON_PORT=3300 RGW_PORT=7480

usage() {
  echo "usage: $0 start|stop|status [STATE_DIR] | install | exec|down|up|remount STATE_DIR HOST ..." >&2
  exit 2
}
[[ $# -ge 1 ]] || usage
CMD=$1
shift

set_state_dir() {
  STATE_DIR=${1:-${TMPDIR:-/tmp}/kvtier-ceph}
  [[ $STATE_DIR == /* ]] || STATE_DIR=$PWD/$STATE_DIR
  STATE_DIR=${STATE_DIR%/}
  CONF=$STATE_DIR/ceph.conf
  RUN=$STATE_DIR/run
}

is_mounted() { awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }

# ------------------------------------------------------------------ hosts

host_ns() { echo "${NET_PREFIX}-$1"; }

# Plugs host $1 (index $2) into the bridge: namespace, veth pair, address.
add_host() {
  local h=$1 i=$2 ns veth
  ns=$(host_ns "$h")
  veth=${BRIDGE}v$i
  echo "$ns" >"$RUN/host.$h.ns"
  echo "$veth" >"$RUN/host.$h.veth"
  ip netns add "$ns" || return 1
  ip link add "$veth" type veth peer name eth0 netns "$ns" || return 1
  ip link set "$veth" master "$BRIDGE" up || return 1
  ip -n "$ns" link set lo up || return 1
  ip -n "$ns" addr add "$SUBNET.$((10 + i))/24" dev eth0 || return 1
  ip -n "$ns" link set eth0 up || return 1
}

# Mounts the file system for host $1 with a ceph-fuse that lives in the host's network
# namespace (its traffic crosses the host's veth); the mount itself is in this mount
# namespace, at STATE_DIR/mnt/<host>.
mount_host() {
  local h=$1 ns mnt
  ns=$(<"$RUN/host.$h.ns")
  mnt=$STATE_DIR/mnt/$h
  mkdir -p "$mnt"
  is_mounted "$mnt" && return 0
  # ceph-fuse forks; its parent returns once the mount is live
  timeout $((STEP_TIMEOUT + 10)) nsenter --net="/run/netns/$ns" -- \
    ceph-fuse -c "$CONF" -n "client.host-$h" --client_fs="$FSNAME" \
    --client_mount_timeout="$STEP_TIMEOUT" "$mnt" >"$STATE_DIR/log/ceph-fuse.$h.out" 2>&1 ||
    { log "ceph-fuse for $h failed: $(tail -n 3 "$STATE_DIR/log/ceph-fuse.$h.out")"; return 1; }
  is_mounted "$mnt" || { log "ceph-fuse for $h returned but $mnt is not mounted"; return 1; }
}

fuse_pid() { # host -> pid of its ceph-fuse, if alive
  local pid
  pid=$(<"$RUN/client.host-$1.pid") 2>/dev/null || return 1
  [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" && [[ $(<"/proc/$pid/comm") == ceph-fuse* ]] || return 1
  echo "$pid"
}

# Unmounts host $1. umount -c never stats the mount point (a stat on a mount whose ceph-fuse
# cannot reach the cluster blocks); a busy or dead mount is detached lazily. A ceph-fuse that
# does not exit on its own (cut off from the MDS, or a file still open) is killed.
umount_host() {
  local h=$1 mnt pid i
  mnt=$STATE_DIR/mnt/$h
  pid=$(fuse_pid "$h") || pid=
  if is_mounted "$mnt"; then umount -c "$mnt" 2>/dev/null || umount -l -c "$mnt" 2>/dev/null; fi
  if [[ -n $pid ]]; then
    for ((i = 0; i < 20; i++)); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < 30; i++)); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null
  fi
  if is_mounted "$mnt"; then umount -l -c "$mnt" 2>/dev/null; fi
  rm -f "$RUN/client.host-$h.pid"
}

del_host() {
  local h=$1 ns veth
  umount_host "$h"
  ns=$(<"$RUN/host.$h.ns") 2>/dev/null || ns=
  veth=$(<"$RUN/host.$h.veth") 2>/dev/null || veth=
  [[ -n $ns && -e /run/netns/$ns ]] && ip netns del "$ns"
  # deleting the namespace deletes the pair (the peer goes a moment later)
  [[ -n $veth ]] && ip link show "$veth" >/dev/null 2>&1 && ip link del "$veth" 2>/dev/null
  rm -f "$RUN/host.$h.ns" "$RUN/host.$h.veth"
}

# ------------------------------------------------------------------ stop

# Stops the daemons whose pid files are in RUN (radosgw and MDS first, the monitor last), then
# any process of this cluster that none names (its command line holds our ceph.conf).
stop_daemons() {
  local pf pid i name
  for name in client.rgw mds osd mon; do
    for pf in "$RUN/$name".*.pid; do
      [[ -f $pf ]] || continue
      pid=$(<"$pf")
      if [[ $pid =~ ^[0-9]+$ ]] && alive "$pid"; then
        # the MDS gets SIGKILL: on SIGTERM it is fenced by the monitor and respawns itself
        if [[ $name == mds || $name == osd ]]; then kill -KILL "$pid"; else kill -TERM "$pid"; fi 2>/dev/null
        for ((i = 0; i < 50; i++)); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && kill -KILL "$pid" 2>/dev/null
      fi
      rm -f "$pf"
    done
  done
  for pid in $(our_pids); do
    alive "$pid" && kill -KILL "$pid" 2>/dev/null
  done
}

cmd_stop() {
  [[ -d $STATE_DIR ]] || return 0
  if [[ ! -e $STATE_DIR/$MARKER ]]; then
    rmdir "$STATE_DIR" 2>/dev/null && return 0
    echo "[kvtier-ceph] $STATE_DIR was not made by this script; not touching it" >&2
    return 1
  fi
  local f h pids=()
  for f in "$RUN"/host.*.ns; do
    [[ -f $f ]] || continue
    h=${f#"$RUN"/host.}
    h=${h%.ns}
    del_host "$h" &
    pids+=($!)
  done
  ((${#pids[@]})) && wait "${pids[@]}"
  stop_daemons
  # the bridge last: the daemons' address lives on it
  if [[ -f $RUN/bridge ]]; then
    local br
    br=$(<"$RUN/bridge")
    ip link show "$br" >/dev/null 2>&1 && ip link del "$br"
  fi
  if awk -v d="$STATE_DIR/" 'index($5, d) == 1 { f = 1 } END { exit !f }' /proc/self/mountinfo; then
    echo "[kvtier-ceph] something is still mounted under $STATE_DIR; not removing it" >&2
    return 1
  fi
  rm -rf -- "$STATE_DIR"
  log "stopped"
}

# ------------------------------------------------------------------ start

start_failed() {
  local rc=$?
  trap - EXIT
  ((rc != 0)) || return 0
  log_tails 15
  # keep the logs: move them aside before the state directory goes
  local keep=${STATE_DIR}.failed-log
  rm -rf "$keep"
  cp -r "$STATE_DIR/log" "$keep" 2>/dev/null
  cmd_stop || true
  echo "[kvtier-ceph] start failed; logs in $keep" >&2
  exit "$rc"
}
# A bridge name and a /24 no one in this network namespace uses: kvtceph<N> with
# 169.254.(100+N).0/24 (link-local, so never routed off this machine). The hosts' namespace
# names (one list for the whole machine) carry this script's pid, so that clusters started at
# once from different network namespaces (each `make test` has its own) never collide.
pick_network() {
  local n
  for ((n = 0; n < 100; n++)); do
    ip link show "kvtceph$n" >/dev/null 2>&1 && continue
    ip -4 -o addr show | grep -q " inet 169\.254\.$((100 + n))\." && continue
    BRIDGE=kvtceph$n
    NET_PREFIX=kvtceph$n-$$
    SUBNET=169.254.$((100 + n))
    return 0
  done
  return 1
}

write_conf() {
  {
    conf_global "$BIND" "$SUBNET.0/24"
    echo
    conf_mon "public addr = $BIND"
    echo
    conf_osd 3221225472 "public addr = $BIND
cluster addr = $BIND"
    cat <<EOF

[mds]
public addr = $BIND
mds data = $STATE_DIR/mds/\$cluster-\$id
mds cache memory limit = 268435456
# answer a client only once the operation is journaled, and flush every 0.2 s: no other
# host's lookup waits for a flush (Ceph's defaults: early reply, a flush every 5 s)
mds early reply = $EARLY_REPLY
mds tick interval = $MDS_TICK
# a client that does not give back capabilities it is asked for (a dead or cut-off host) is
# evicted after this many seconds, instead of when its session times out (30 s at least)
mds cap revoke eviction timeout = $CAP_REVOKE

[client]
# ceph-fuse keeps Ceph's default, the kernel page cache, under which a host can read bytes of
# a file that another host has since rewritten in place; kvtier must cope (its pages are
# never rewritten in place; its capacity ledger bypasses the cache on FUSE)
fuse disable pagecache = $NO_PAGECACHE
admin socket =

EOF
    conf_rgw "$BIND:$RGW_PORT" 32
  } >"$CONF"
}

rgw_answers() { endpoint_answers "http://$BIND:$RGW_PORT"; }

mds_active() {
  local s
  s=$(ceph_cli mds stat 2>/dev/null) || return 1
  [[ $s == *up:active* ]]
}

cmd_start() {
  [[ $(id -u) == 0 ]] || unavailable "not root (bridges, namespaces and FUSE mounts need it)"
  ensure_ceph
  [[ -c /dev/fuse ]] || unavailable "/dev/fuse is missing"
  grep -qw fuse /proc/filesystems || unavailable "the kernel has no FUSE"
  # CAP_SYS_ADMIN (bit 21: mounts, namespaces) and CAP_NET_ADMIN (bit 12: links, addresses)
  local caps
  caps=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
  (((0x$caps >> 21) & 1 && (0x$caps >> 12) & 1)) ||
    unavailable "no CAP_SYS_ADMIN and CAP_NET_ADMIN (a container without them cannot mount or make namespaces)"
  local probe=kvtceph-probe-$$
  ip netns add "$probe" 2>/dev/null || unavailable "ip netns add is not permitted here"
  ip netns del "$probe"
  # shellcheck disable=SC2034 # read by log()
  T0=$EPOCHREALTIME
  local hosts=${KVTIER_CEPH_HOSTS-a b c} h i
  for h in $hosts; do
    [[ $h =~ ^[a-z0-9]{1,8}$ ]] || die "host name '$h': 1-8 of a-z 0-9"
  done

  if [[ -f $STATE_DIR/env ]] && cmd_status >/dev/null; then
    cat "$STATE_DIR/env"
    return 0
  fi
  if [[ -e $STATE_DIR/$MARKER ]]; then
    log "cleaning up an earlier cluster in $STATE_DIR"
    cmd_stop || die "cannot clean up $STATE_DIR"
  elif [[ -d $STATE_DIR ]] && ! rmdir "$STATE_DIR" 2>/dev/null; then
    die "$STATE_DIR exists and was not made by this script"
  fi
  mkdir -p "$STATE_DIR"
  : >"$STATE_DIR/$MARKER"
  mkdir -p "$RUN" "$STATE_DIR"/{log,crash,mon/ceph-a,osd/ceph-0,mds/ceph-a,rgw,mnt}
  trap start_failed EXIT

  pick_network || die "no free bridge name / 169.254.x.0/24 network"
  BIND=$SUBNET.1
  CAP_REVOKE=${KVTIER_CEPH_CAP_REVOKE_TIMEOUT:-5}
  NO_PAGECACHE=false
  EARLY_REPLY=${KVTIER_CEPH_MDS_EARLY_REPLY:-false}
  MDS_TICK=${KVTIER_CEPH_MDS_TICK:-0.2}
  [[ ${KVTIER_CEPH_FUSE_PAGECACHE:-1} == 0 ]] && NO_PAGECACHE=true
  ip link add "$BRIDGE" type bridge 2>"$STATE_DIR/log/bridge.err" ||
    unavailable "cannot create a bridge: $(<"$STATE_DIR/log/bridge.err")"
  echo "$BRIDGE" >"$RUN/bridge"
  ip addr add "$BIND/24" dev "$BRIDGE" || die "ip addr add $BIND/24"
  ip link set "$BRIDGE" up || die "ip link set $BRIDGE up"
  ip link set lo up 2>/dev/null
  FSID=$(</proc/sys/kernel/random/uuid)
  write_conf
  export CEPH_CONF=$CONF
  log "bridge $BRIDGE $BIND/24, state in $STATE_DIR"

  # --- monitor
  monmaptool --create --fsid "$FSID" --addv a "[v2:$BIND:$MON_PORT,v1:$BIND:$((MON_PORT + 1))]" \
    "$STATE_DIR/monmap" >"$STATE_DIR/log/mkfs.log" 2>&1 || die "monmaptool"
  {
    ceph-authtool --create-keyring "$STATE_DIR/keyring" --gen-key -n mon. --cap mon 'allow *' &&
      ceph-authtool "$STATE_DIR/keyring" --gen-key -n client.admin --cap mon 'allow *' \
        --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *'
  } >>"$STATE_DIR/log/mkfs.log" 2>&1 || die "ceph-authtool"
  ceph-mon -c "$CONF" --mkfs -i a --monmap "$STATE_DIR/monmap" --keyring "$STATE_DIR/keyring" \
    >>"$STATE_DIR/log/mkfs.log" 2>&1 || die "ceph-mon --mkfs"
  ceph-mon -c "$CONF" -i a </dev/null >>"$STATE_DIR/log/daemons.out" 2>&1 || die "ceph-mon did not start"
  wait_for "the monitor" ceph_cli mon stat
  log "monitor up"

  # --- OSD; the MDS starts beside it and waits for it
  local osd_uuid osd_id
  osd_uuid=$(</proc/sys/kernel/random/uuid)
  osd_id=$(ceph_cli osd new "$osd_uuid" 2>>"$STATE_DIR/log/mkfs.log") || die "ceph osd new"
  [[ $osd_id =~ ^[0-9]+$ ]] || die "ceph osd new returned '$osd_id'"
  ceph-osd -c "$CONF" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" >>"$STATE_DIR/log/mkfs.log" 2>&1 ||
    die "ceph-osd --mkfs"
  ceph-osd -c "$CONF" -i "$osd_id" </dev/null >>"$STATE_DIR/log/daemons.out" 2>&1 || die "ceph-osd did not start"
  ceph-mds -c "$CONF" -i a </dev/null >>"$STATE_DIR/log/daemons.out" 2>&1 || die "ceph-mds did not start"
  osd_up_in() {
    local s
    s=$(ceph_cli osd stat -f json) || return 1
    [[ $s == *'"num_up_osds":1,'* && $s == *'"num_in_osds":1,'* ]]
  }
  wait_for "osd.$osd_id up and in" osd_up_in
  log "osd.$osd_id up"
  radosgw -c "$CONF" -n "$RGW_NAME" </dev/null >>"$STATE_DIR/log/daemons.out" 2>&1 ||
    die "radosgw did not start"

  # --- CephFS (without a manager, so the pools and the file system by hand)
  ceph_cli osd pool create "${FSNAME}_meta" 8 >>"$STATE_DIR/log/mkfs.log" 2>&1 || die "pool ${FSNAME}_meta"
  ceph_cli osd pool create "${FSNAME}_data" 8 >>"$STATE_DIR/log/mkfs.log" 2>&1 || die "pool ${FSNAME}_data"
  ceph_cli fs new "$FSNAME" "${FSNAME}_meta" "${FSNAME}_data" >>"$STATE_DIR/log/mkfs.log" 2>&1 || die "fs new"
  local sess=${KVTIER_CEPH_SESSION_TIMEOUT:-30}
  ceph_cli fs set "$FSNAME" session_timeout "$sess" >>"$STATE_DIR/log/mkfs.log" 2>&1 || die "session_timeout"
  ceph_cli fs set "$FSNAME" session_autoclose "$sess" >>"$STATE_DIR/log/mkfs.log" 2>&1 || die "session_autoclose"
  wait_for "the MDS to become active" mds_active
  log "CephFS $FSNAME active"

  # --- S3 user and bucket
  wait_for "radosgw on $BIND:$RGW_PORT" rgw_answers
  local ak sk code out=$STATE_DIR/log/s3.out
  ak=$(rand_str 20 ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789)
  sk=$(rand_str 40 ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789)
  timeout "$STEP_TIMEOUT" radosgw-admin -c "$CONF" user create --uid=kvtier-multihost --display-name=kvtier \
    --access-key="$ak" --secret-key="$sk" >"$STATE_DIR/log/user-create.out" 2>&1 || die "radosgw-admin user create"
  code=$(curl -sS -o "$out" -w '%{http_code}' --max-time "$STEP_TIMEOUT" -X PUT --aws-sigv4 "aws:amz:$REGION:s3" \
    --user "$ak:$sk" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "http://$BIND:$RGW_PORT/$BUCKET") || true
  [[ $code == 200 ]] || die "PUT bucket: HTTP $code $(cat "$out")"
  log "radosgw up, bucket $BUCKET"

  # --- hosts
  i=0
  for h in $hosts; do
    i=$((i + 1))
    add_host "$h" "$i" || die "host $h: network"
    mount_host "$h" || die "host $h: mount"
  done
  # statvfs reports 0 bytes without a manager; a quota on the root gives free-space checks a size
  [[ -z $hosts ]] || /usr/bin/python3 -c 'import os, sys; os.setxattr(sys.argv[1], "ceph.quota.max_bytes", b"3000000000")' \
    "$STATE_DIR/mnt/${hosts%% *}" || die "cannot set a quota on the file system's root"
  log "hosts up: $hosts"

  {
    echo "KVTIER_CEPH_HOSTS=\"$hosts\""
    echo "KVTIER_CEPH_BRIDGE_IP=$BIND"
    for h in $hosts; do
      echo "KVTIER_CEPH_MNT_$h=$STATE_DIR/mnt/$h"
      echo "KVTIER_CEPH_NETNS_$h=$(host_ns "$h")"
      echo "KVTIER_CEPH_VETH_$h=$(<"$RUN/host.$h.veth")"
    done
    i=0
    for h in $hosts; do
      i=$((i + 1))
      echo "KVTIER_CEPH_IP_$h=$SUBNET.$((10 + i))"
    done
    echo "KVTIER_CEPH_S3_ENDPOINT=http://$BIND:$RGW_PORT"
    echo "KVTIER_CEPH_S3_REGION=$REGION"
    echo "KVTIER_CEPH_S3_BUCKET=$BUCKET"
    echo "AWS_ACCESS_KEY_ID=$ak"
    echo "AWS_SECRET_ACCESS_KEY=$sk"
  } >"$STATE_DIR/env"
  trap - EXIT
  log "ready"
  cat "$STATE_DIR/env"
}

cmd_status() {
  [[ -f $STATE_DIR/env ]] || { echo "not running ($STATE_DIR)"; return 1; }
  BIND=$(sed -n 's/^KVTIER_CEPH_BRIDGE_IP=//p' "$STATE_DIR/env")
  if rgw_answers && mds_active; then echo "running ($STATE_DIR)"; return 0; fi
  echo "not answering ($STATE_DIR)"
  return 1
}

host_cmd() { # exec|down|up|remount STATE_DIR HOST ...
  local op=$1 h=$3
  set_state_dir "$2"
  shift 3
  [[ -f $RUN/host.$h.ns ]] || { echo "[kvtier-ceph] no host '$h' in $STATE_DIR" >&2; return 2; }
  case $op in
    exec) exec nsenter --net="/run/netns/$(<"$RUN/host.$h.ns")" -- "$@" ;;
    down) ip link set "$(<"$RUN/host.$h.veth")" down ;;
    up) ip link set "$(<"$RUN/host.$h.veth")" up ;;
    remount)
      umount_host "$h"
      mount_host "$h"
      ;;
  esac
}

case $CMD in
  start) set_state_dir "${1:-}"; cmd_start ;;
  stop) set_state_dir "${1:-}"; cmd_stop ;;
  status) set_state_dir "${1:-}"; cmd_status ;;
  install) ensure_ceph ;;
  exec | down | up | remount) [[ $# -ge 2 ]] || usage; host_cmd "$CMD" "$@" ;;
  *) usage ;;
esac

# shellcheck shell=bash
# Shell shared by the scripts that start a throw-away Ceph for the tests: tests/s3/server.sh
# (monitor, memstore OSD and radosgw on 127.0.0.1) and tests/ceph/cluster.sh (the same plus an
# MDS, a CephFS and simulated hosts, on a test bridge). Sourced, not run.
#
# The sourcing script sets, before it calls anything here:
#   CL_TAG          log prefix and temporary-file stem (kvtier-s3, kvtier-ceph)
#   CL_WHAT         what "unavailable" says cannot run ("S3 server", "Ceph cluster")
#   CL_BINS         programs ensure_ceph needs; CL_PKGS the packages that bring them
#   CL_NO_INSTALL_VAR  name of the variable that, set to 1, forbids apt-get
#   CL_NOT_ROOT     how ensure_ceph says it is not root; CL_APT_NOTE appended to "installing"
#   CL_LOG_INSTALLED   1: log "installed" after an install
#   STEP_TIMEOUT    seconds each start-up step may take: each wait_for, and each command or
#                   request to a daemon (ceph_cli, radosgw-admin, curl). A ceiling that fails a
#                   hung daemon only: a busy 2-core machine can start Ceph many times slower,
#                   and every step ends on its event (an answer) long before it.
#                   WAIT_POLL seconds between wait_for's tries
#   STATE_DIR, CONF the state directory and its ceph.conf (absolute paths); MARKER the name of
#                   the file that marks STATE_DIR as the script's own (remove_state_dir)
#   FSID, MON_PORT  for the [global] section

# radosgw verifies a SigV4 signature with whatever region the request's
# credential scope names (its zonegroup is "default"; "default", "us-east-1"
# and any other name all verify). us-east-1 is what S3 clients assume.
# shellcheck disable=SC2034 # used by the scripts that source this
readonly REGION=us-east-1
readonly RGW_NAME=client.rgw.kvtier

T0=$EPOCHREALTIME
log() {
  # elapsed seconds with two decimals, computed without forking
  local ms=$(((${EPOCHREALTIME//[.,]/} - ${T0//[.,]/}) / 10000))
  printf '[%s %d.%02ds] %s\n' "$CL_TAG" $((ms / 100)) $((ms % 100)) "$*" >&2
}

unavailable() {
  echo "$CL_WHAT unavailable: $*" >&2
  exit 77
}

die() {
  log "ERROR: $*"
  exit 1 # start_failed (EXIT trap) cleans up
}

alive() {
  local st
  read -r st 2>/dev/null <"/proc/$1/stat" || return 1
  st=${st##*) }
  [[ ${st%% *} != Z ]]
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

# Run "$@" until it succeeds, at most STEP_TIMEOUT seconds.
wait_for() { # description command...
  local what=$1
  shift
  local deadline=$((SECONDS + STEP_TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out waiting for $what"
    sleep "$WAIT_POLL"
  done
}

# The ceph command waits for the monitor to answer (it reconnects by itself) up to the ceiling.
ceph_cli() { timeout "$STEP_TIMEOUT" ceph -c "$CONF" --connect-timeout "$STEP_TIMEOUT" "$@"; }

# $1 random characters from the alphabet $2 (no pipes, so pipefail-safe).
rand_str() {
  local out="" b alpha=$2
  for b in $(od -An -vtu1 -N"$1" /dev/urandom); do
    out+=${alpha:b % ${#alpha}:1}
  done
  printf '%s' "$out"
}

endpoint_answers() { # endpoint
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time "$STEP_TIMEOUT" "$1/" 2>/dev/null) || true
  [[ $code =~ ^[1-5][0-9][0-9]$ ]]
}

# Prints the last $1 lines of each non-empty daemon log in STATE_DIR/log.
log_tails() {
  local f
  for f in "$STATE_DIR"/log/*.log; do
    [[ -s $f ]] || continue
    echo "----- tail of $f" >&2
    tail -n "$1" "$f" >&2
  done
}

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

# Remove STATE_DIR, but only if it is ours (it holds the sourcing script's MARKER) or empty.
remove_state_dir() {
  [[ -d $STATE_DIR ]] || return 0
  case $STATE_DIR in
    "" | / | /tmp | "$HOME") echo "[$CL_TAG] refusing to remove $STATE_DIR" >&2; return 1 ;;
  esac
  if [[ -e $STATE_DIR/$MARKER ]] || rmdir "$STATE_DIR" 2>/dev/null; then
    rm -rf -- "$STATE_DIR"
  else
    echo "[$CL_TAG] $STATE_DIR was not created by this script; not removing it" >&2
    return 1
  fi
}

# ------------------------------------------------------------------ install

ensure_ceph() {
  local b missing=()
  for b in "${CL_BINS[@]}"; do command -v "$b" >/dev/null 2>&1 || missing+=("$b"); done
  ((${#missing[@]})) || return 0

  [[ ${!CL_NO_INSTALL_VAR:-0} != 1 ]] || unavailable "missing ${missing[*]} ($CL_NO_INSTALL_VAR=1)"
  [[ $(id -u) == 0 ]] || unavailable "missing ${missing[*]} and $CL_NOT_ROOT"
  command -v apt-get >/dev/null 2>&1 || unavailable "missing ${missing[*]} and no apt-get"

  local aptlog
  aptlog=$(mktemp -t "$CL_TAG-apt.XXXXXX")
  log "installing ${CL_PKGS[*]} with apt-get$CL_APT_NOTE"
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -y -q -o DPkg::Lock::Timeout=120 install --no-install-recommends "${CL_PKGS[@]}")
  # Try with the package lists at hand first; refresh them only if needed.
  if ! "${apt[@]}" >"$aptlog" 2>&1; then
    if ! { apt-get -q -o DPkg::Lock::Timeout=120 update && "${apt[@]}"; } >>"$aptlog" 2>&1; then
      tail -n 15 "$aptlog" >&2
      rm -f "$aptlog"
      unavailable "apt-get install ${CL_PKGS[*]} failed"
    fi
  fi
  rm -f "$aptlog"
  for b in "${CL_BINS[@]}"; do
    command -v "$b" >/dev/null 2>&1 || unavailable "$b still missing after apt-get install"
  done
  if ((CL_LOG_INSTALLED)); then log "installed"; fi
}

# ------------------------------------------------------------------ ceph.conf
# The sections both clusters share. \$name, \$cluster and \$id are Ceph meta-variables
# expanded by each daemon.

# [global] for a monitor at ADDR; EXTRA (lines) follows "public network".
conf_global() { # addr public-network [extra]
  cat <<EOF
[global]
fsid = $FSID
mon host = [v2:$1:$MON_PORT,v1:$1:$((MON_PORT + 1))]
public network = $2
EOF
  if [[ -n ${3-} ]]; then printf '%s\n' "$3"; fi
  cat <<EOF
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
EOF
}

conf_mon() { # [extra lines first]
  echo "[mon]"
  if [[ -n ${1-} ]]; then printf '%s\n' "$1"; fi
  cat <<EOF
mon data = $STATE_DIR/mon/\$cluster-\$id
# radosgw creates ~6 pools on its first start, each a few map changes:
# commit them faster than the 1 s default
paxos propose interval = 0.05
paxos min wait = 0.01
EOF
}

conf_osd() { # memstore-bytes [extra lines first] [extra lines before the op shards]
  echo "[osd]"
  if [[ -n ${2-} ]]; then printf '%s\n' "$2"; fi
  cat <<EOF
osd data = $STATE_DIR/osd/\$cluster-\$id
# all object data is kept in RAM, up to this many bytes
osd objectstore = memstore
memstore device bytes = $1
# skip flushing the store on SIGTERM: the directory is deleted anyway
osd fast shutdown = true
EOF
  if [[ -n ${3-} ]]; then printf '%s\n' "$3"; fi
  cat <<EOF
osd op num shards = 2
osd op num threads per shard = 2
EOF
}

conf_rgw() { # frontend-endpoint thread-pool-size
  cat <<EOF
[$RGW_NAME]
admin socket = $STATE_DIR/run/\$name.asok
rgw frontends = beast endpoint=$1
rgw data = $STATE_DIR/rgw
rgw thread pool size = $2
rgw enable usage log = false
# no lifecycle thread: it sleeps in 5 s steps and slows down shutdown
rgw enable lc threads = false
# free the tails (beyond 4 MiB) of deleted or overwritten objects within
# about a minute instead of after 2 h, so the RAM-backed OSD does not fill up
rgw gc obj min wait = 30
rgw gc processor period = 30
EOF
}

#!/usr/bin/env bash
# The multi-host tests: starts a throw-away Ceph cluster with three simulated hosts
# (tests/ceph/cluster.sh), runs tests/ceph/test_multihost.py and test_multihost_sealed.py
# against it, and stops everything however the tests end. Where the cluster cannot run here
# (cluster.sh exits 77), the tests still run and skip, each saying why; any other start
# failure fails the run.
#
#   tests/ceph/run-tests.sh [PYTEST ARGS...]
#
# Needs the Release build (build/bin/kvtier, build/python; KVTIER_BUILD_DIR to use another).
# KVTIER_CEPH=0 skips the tests without starting anything.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
PYTHON=${PYTHON:-/usr/bin/python3}

if [[ ${KVTIER_CEPH:-1} == 0 ]]; then
  export KVTIER_CEPH_UNAVAILABLE="KVTIER_CEPH=0"
  exec "$PYTHON" -m pytest -q -rs tests/ceph/test_multihost.py tests/ceph/test_multihost_sealed.py "$@"
fi

state=${TMPDIR:-/tmp}/kvtier-ceph-test.$$
stop() { tests/ceph/cluster.sh stop "$state" >/dev/null 2>&1 || true; }
trap stop EXIT
trap 'exit 130' INT TERM

log=${TMPDIR:-/tmp}/kvtier-ceph-start.$$.log
tests/ceph/cluster.sh start "$state" >/dev/null 2>"$log"
rc=$?
if ((rc == 0)); then
  export KVTIER_CEPH_ENV=$state/env
  grep -h '^\[kvtier-ceph' "$log" | tail -n 1 >&2
elif ((rc == 77)); then
  KVTIER_CEPH_UNAVAILABLE=$(grep -m1 'Ceph cluster unavailable' "$log" || tail -n 1 "$log")
  export KVTIER_CEPH_UNAVAILABLE
  echo "run-tests: running without a cluster: $KVTIER_CEPH_UNAVAILABLE" >&2
else
  echo "run-tests: the Ceph cluster did not start (exit $rc):" >&2
  tail -n 40 "$log" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
"$PYTHON" -m pytest -q -rs --durations=5 tests/ceph/test_multihost.py tests/ceph/test_multihost_sealed.py "$@"

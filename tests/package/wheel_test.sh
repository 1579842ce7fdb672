#!/usr/bin/env bash
# The wheel: scripts/build-wheel packs the built tree; pip installs it, offline, into a fresh
# virtual environment; from there `import kvtier, kvtier.sglang`, the README's SGLang
# extra-config example, and the `kvtier` console command (bench --pages 8) work.
#   wheel_test.sh BUILD_DIR
set -euo pipefail
# shellcheck source=tests/package/common.sh
. "$(dirname "$0")/common.sh" "$1" wheel

python=$(sed -n 's/^KVTIER_PYTHON_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build/CMakeCache.txt")
wheel=$("$src/scripts/build-wheel" "$build" "$scratch/dist")
[[ $(basename "$wheel") == kvtier-$version-cp3*-cp3*-linux_x86_64.whl ]] ||
  fail "unexpected wheel name $(basename "$wheel")"
contents=$(/usr/bin/python3 -m zipfile -l "$wheel")
for f in kvtier/__init__.py kvtier/sglang.py kvtier/_cli.py kvtier/bin/kvtier \
  "kvtier-$version.dist-info/entry_points.txt"; do
  grep -qF "$f" <<<"$contents" || fail "$f is not in the wheel"
done
grep -qE 'kvtier/_kvtier\..*\.so' <<<"$contents" || fail "no extension module in the wheel"
# What it needs from the system is declared (the Debian packages of the libraries linked).
metadata=$(/usr/bin/python3 -c 'import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode())' \
  "$wheel" "kvtier-$version.dist-info/METADATA")
for pkg in libfmt libxxhash libcurl liburing; do
  grep -qE "\b$pkg[0-9a-z.-]*\b" <<<"$metadata" || fail "the wheel's description does not name $pkg"
done

# numpy and torch (for the stand-in pool) come from the system's site-packages; nothing
# is fetched: pip may only use the wheel given.
"$python" -m venv --system-site-packages "$scratch/venv"
"$scratch/venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check \
  "$wheel"

cd "$scratch"  # not the source tree: kvtier must come from the venv
unset PYTHONPATH
"$scratch/venv/bin/python" - "$scratch/venv" "$version" <<'PY'
import sys
import kvtier, kvtier.sglang
venv, version = sys.argv[1], sys.argv[2]
assert kvtier.__file__.startswith(venv), kvtier.__file__
assert kvtier._kvtier.__file__.startswith(venv), kvtier._kvtier.__file__
assert kvtier.__version__ == version, (kvtier.__version__, version)
print("kvtier", kvtier.__version__, "from", kvtier.__file__)
PY
mkdir "$scratch/store"
example=$("$scratch/venv/bin/python" "$here/sglang_example.py" "$src/README.md" "$scratch/store")
echo "$example"
grep -qF "from $scratch/venv/" <<<"$example" || fail "the SGLang example did not use the installed kvtier"

# The console entry point runs the bundled CLI.
[ -x "$scratch/venv/bin/kvtier" ] || fail "no kvtier command in the venv"
[ "$("$scratch/venv/bin/kvtier" --version)" = "kvtier $version" ] || fail "kvtier --version"
bench=$("$scratch/venv/bin/kvtier" bench --dir "$scratch/bench" --pages 8 --page-bytes 65536 --json)
grep -qF '"verified":true' <<<"$bench" || fail "kvtier bench from the wheel did not verify"
echo "PASS: $(basename "$wheel") installs into a fresh venv and works"

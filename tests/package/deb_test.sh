#!/usr/bin/env bash
# The Debian package: CPack builds kvtier_<version>_amd64.deb from the built tree; its
# Depends names the shared libraries' packages and the Python; unpacked into a scratch root,
# its CLI runs a bench and its Python module imports (with Debian's python3).
#   deb_test.sh BUILD_DIR
set -euo pipefail
# shellcheck source=tests/package/common.sh
. "$(dirname "$0")/common.sh" "$1" deb

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build/CMakeCache.txt")
(cd "$build" && cpack --config CPackConfig.cmake -B "$scratch/pkg" >"$scratch/cpack.log" 2>&1) ||
  { cat "$scratch/cpack.log" >&2; fail "cpack"; }
deb="$scratch/pkg/kvtier_${version}_amd64.deb"
[ -f "$deb" ] || { ls "$scratch/pkg" >&2; fail "no kvtier_${version}_amd64.deb"; }

depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for dep in 'python3 (>= 3.' 'python3 (<< 3.' libfmt libxxhash libisal liburing libcurl libc6; do
  grep -qF "$dep" <<<"$depends" || fail "Depends lacks $dep"
done
listing=$(dpkg-deb -c "$deb" | awk '{print $NF}')
for f in ./usr/bin/kvtier ./usr/include/kvtier/store/store.h \
  ./usr/lib/cmake/kvtier/kvtierConfig.cmake ./usr/lib/cmake/kvtier/kvtierConfigVersion.cmake \
  ./usr/lib/cmake/kvtier/kvtierTargets.cmake ./usr/lib/pkgconfig/kvtier.pc \
  "./usr/lib/libkvtier.so.$version" ./usr/lib/python3/dist-packages/kvtier/__init__.py \
  ./usr/lib/python3/dist-packages/kvtier/sglang.py ./usr/share/man/man1/kvtier.1 \
  ./usr/share/bash-completion/completions/kvtier; do
  grep -qxF "$f" <<<"$listing" || fail "$f is not in the package"
done
grep -qE '^\./usr/lib/python3/dist-packages/kvtier/_kvtier\..*\.so$' <<<"$listing" ||
  fail "no extension module in the package"

root=$scratch/root
dpkg-deb -x "$deb" "$root"
[ "$("$root/usr/bin/kvtier" --version)" = "kvtier $version" ] || fail "kvtier --version"
"$root/usr/bin/kvtier" bench --dir "$scratch/bench" --pages 8 --page-bytes 65536 | tee "$scratch/bench.txt"
grep -q 'verified yes' "$scratch/bench.txt" || fail "kvtier bench from the package did not verify"
cd "$scratch"
PYTHONPATH=$root/usr/lib/python3/dist-packages /usr/bin/python3 - "$root" <<'PY'
import sys
import kvtier, kvtier.sglang
assert kvtier.__file__.startswith(sys.argv[1]), kvtier.__file__
print("kvtier", kvtier.__version__, "from", kvtier.__file__)
PY
echo "PASS: $(basename "$deb")"

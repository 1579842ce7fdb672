#!/usr/bin/env bash
# `cmake --install` of a built tree into a scratch prefix, then a program outside the tree
# built against that prefix twice: with find_package(kvtier) and with pkg-config. Each writes
# one page and reads it back. Also checks what else the prefix must hold (SONAME, headers
# that include only public headers, the CLI and its --version, man page, bash completion that
# completes).
#   install_test.sh BUILD_DIR
set -euo pipefail
# shellcheck source=tests/package/common.sh
. "$(dirname "$0")/common.sh" "$1" install
prefix=$scratch/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
[ -n "$version" ] || fail "no project version in $build/CMakeCache.txt"

# The library: libkvtier.so -> libkvtier.so.<soversion> -> libkvtier.so.<version>.
lib=$(find "$prefix" -name "libkvtier.so.$version" -type f)
[ -n "$lib" ] || fail "no libkvtier.so.$version under $prefix"
libdir=$(dirname "$lib")
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
[[ $soname == libkvtier.so.* ]] || fail "libkvtier has SONAME '$soname'"
[ -L "$libdir/$soname" ] && [ -L "$libdir/libkvtier.so" ] || fail "missing $soname or libkvtier.so links"

# Installed headers include only installed headers (or system ones).
while IFS= read -r inc; do
  [ -f "$prefix/include/$inc" ] || fail "an installed header includes \"$inc\", which is not installed"
done < <(grep -rhoE '^#include "[^"]+"' "$prefix/include" | sed 's/#include "\(.*\)"/\1/' | sort -u)

# The CLI, its version, man page and bash completion.
[ "$("$prefix/bin/kvtier" --version)" = "kvtier $version" ] || fail "kvtier --version is not '$version'"
[ -s "$prefix/share/man/man1/kvtier.1" ] || fail "no man page"
for sub in bench stat verify ls gc clear; do
  grep -q "^\.SS \"kvtier $sub\"" "$prefix/share/man/man1/kvtier.1" || fail "the man page lacks kvtier $sub"
done
grep -q 'quiet' "$prefix/share/man/man1/kvtier.1" || fail "the man page lacks the subcommands' options"
completion=$prefix/share/bash-completion/completions/kvtier
[ -s "$completion" ] || fail "no bash completion"
# Completing as bash would, with the installed CLI first on PATH.
complete_line() {
  PATH=$prefix/bin:$PATH bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
    _kvtier; echo "${COMPREPLY[*]}"' _ "$completion" "$@"
}
[ "$(complete_line kvtier ve)" = verify ] || fail "completing 'kvtier ve': $(complete_line kvtier ve)"
[ "$(complete_line kvtier bench --pa)" = "--page-bytes --pages" ] ||
  fail "completing 'kvtier bench --pa': $(complete_line kvtier bench --pa)"
[ "$(complete_line kvtier gc /tmp --q)" = "--quiet" ] || fail "completing 'kvtier gc /tmp --q'"
[ "$(complete_line kvtier bench --model deep)" = deepseek-v3 ] || fail "completing --model values"

# find_package(kvtier)
cmake -S "$here" -B "$scratch/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/cmake-build" >/dev/null
mkdir "$scratch/store-cmake"
LD_LIBRARY_PATH=$libdir "$scratch/cmake-build/consumer" "$scratch/store-cmake"
loaded=$(LD_LIBRARY_PATH=$libdir ldd "$scratch/cmake-build/consumer")
grep -qF "$libdir/$soname" <<<"$loaded" ||
  fail "the find_package consumer does not load $libdir/$soname"

# pkg-config --cflags --libs kvtier
export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --modversion kvtier)" = "$version" ] || fail "kvtier.pc has the wrong version"
# shellcheck disable=SC2046
g++ -o "$scratch/consumer-pc" "$here/consumer.cc" $(pkg-config --cflags --libs kvtier)
mkdir "$scratch/store-pc"
LD_LIBRARY_PATH=$libdir "$scratch/consumer-pc" "$scratch/store-pc"
loaded=$(LD_LIBRARY_PATH=$libdir ldd "$scratch/consumer-pc")
grep -qF "$libdir/$soname" <<<"$loaded" ||
  fail "the pkg-config consumer does not load $libdir/$soname"
echo "PASS: find_package and pkg-config consumers built against $prefix"

# Sourced by the package tests: `build` (the built tree given as $1), `here` (this folder),
# `src` (the source tree), `scratch` (a temporary folder removed on exit) and fail().
#   . "$(dirname "$0")/common.sh" BUILD_DIR kind
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-$2-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
